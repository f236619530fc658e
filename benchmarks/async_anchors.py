"""Synchronous against asynchronous anchors: the trainer on small fake parts, with real sandboxed executions whose
latency follows a latency model (docs/scaling.md).

    PYTHONPATH=. python benchmarks/async_anchors.py [--steps 20] [--slots 16] [--k 0 9] [--at-bound wait calibration]
                                                   [--executor local|ray] [--out DIR]

What runs: :func:`wmrl.training.run.run_training` with the fake policy, scaffold and world model of
:mod:`tests.support.fakes` (a categorical policy over 5 tokens; a biased noisy world model) and the
real executor (:class:`~wmrl.execution.pool.LocalExecutor` or :class:`~wmrl.execution.ray_pool.RayExecutor`,
bubblewrap sandbox, ``slots`` executions at once). Each anchor program is a real sandboxed Python process
that sleeps for a latency drawn from :data:`wmrl.core.staleness.PAPER_LATENCY` scaled by ``--scale`` (default
1/100: median 1.2 s, cap 6 s; seeded) and writes the fake reward into ``submission.csv``; the grader reads it
back. The language model's time per step is emulated by sleeping (``--gen-s`` in generation, ``--wm-s`` in
world-model scoring; an accelerator's time, not the local CPUs'), so that the execution latency is
``latency / LM`` times the per-step LM time.

Printed per staleness bound k (one row each): mean step time (s), per-step LM time (generation + world model +
update, s), executions, executor utilisation = sum of the consumed executions' wall seconds / (slots x loop
wall seconds), the consumed anchors' staleness (mean, max; steps), the time generation waited at the bound
(s, total), the anchor groups that reached the bound still running (waited for with ``wait``, left running and
later fed to the calibration only with ``calibration``, discarded with ``drop``:
``wmrl.asynchronous.over_bound_anchors``), the updates skipped because a step's anchors were all in flight and none
arrived (``wmrl.asynchronous.steps_without_anchors``) and the true reward of the anchors consumed in the last
quarter of steps (the fake task's reward). Every k > 0
runs once per ``--at-bound`` mode; k = 0 (synchronous) once. The last column is the fake task's true reward of
every sample the policy drew in the last quarter of steps (what it
learned, whether or not its anchors arrived). The table also goes to ``results_<executor>.json``
/ ``.md`` in ``--out``, with the date and the machine it was run on.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from wmrl.report.machine import machine_line
from wmrl.training.run import run_training
from wmrl.runs.rundir import RunDir, read_jsonl
from wmrl.training.config import load_config
from wmrl.training.components import Components
from wmrl.execution.ray_pool import RayExecutor
from wmrl.execution.pool import LocalExecutor
from wmrl.execution.sandbox import SandboxConfig

from wmrl.core.staleness import PAPER_LATENCY

ROOT = Path(__file__).resolve().parents[1]

try:
    from tests.support.fakes import FakePolicy, FakeScaffold, FakeWorldModel, fake_task, true_reward
except ModuleNotFoundError as e:  # the repository root is not on sys.path (or another `tests` package is)
    raise SystemExit(f"benchmarks/async_anchors.py imports the test fakes of tests/support ({e}): run it from the "
                     "repository root as `PYTHONPATH=. python benchmarks/async_anchors.py ...`") from None



class LatencyScaffold(FakeScaffold):
    """The fake scaffold whose programs sleep for a latency drawn from ``model`` (seconds; seeded, in render
    order) and then write the completion's fake reward as ``submission.csv``."""

    name = "latency"

    def __init__(self, model, seed: int):
        self.model, self.rng = model, np.random.default_rng([seed, 15])

    def render(self, task, completion: str) -> str:
        lat = float(self.model.sample(self.rng, 1)[0])
        return (f"# {task.id}\n# {completion}\nimport time\ntime.sleep({lat:.3f})\n"
                f"open('submission.csv', 'w').write('reward\\n{true_reward(completion):.6f}\\n')\n")


def grade_fake_reward(task, path: Path):
    """Grader of the benchmark: the reward the program wrote (the fake task's true reward)."""
    r = float(Path(path).read_text().splitlines()[1])
    return SimpleNamespace(score=r, reward=r, medal=None, above_median=r > 0.5)


class SlowPolicy(FakePolicy):
    """The fake policy, taking ``gen_s`` seconds per sampling call (the emulated LM generation)."""

    def __init__(self, seed: int, gen_s: float):
        super().__init__(seed)
        self.gen_s = gen_s

    def sample(self, *a, **kw):
        time.sleep(self.gen_s)
        return super().sample(*a, **kw)


class SlowWorldModel(FakeWorldModel):
    """The fake world model, taking ``wm_s`` seconds per scoring call."""

    def __init__(self, wm_s: float):
        self.wm_s = wm_s

    def predict(self, prompts, completions):
        time.sleep(self.wm_s)
        return super().predict(prompts, completions)


def make_executor(kind: str, slots: int):
    sb = SandboxConfig(threads=1)
    if kind == "local":
        return LocalExecutor(max_workers=slots, sandbox=sb, grader=grade_fake_reward)
    import ray  # noqa: PLC0415 - optional dependency


    if not ray.is_initialized():  # logical CPUs = slots: the sandboxes sleep, Ray schedules them
        ray.init(num_cpus=slots, include_dashboard=False, log_to_driver=False)
    return RayExecutor(max_concurrency=slots, sandbox=sb, grader=grade_fake_reward)


def run_one(k: int, a: argparse.Namespace, out: Path, at_bound: str = "wait") -> dict:
    """One training run with staleness bound ``k`` and ``wmrl.asynchronous.over_bound_anchors=at_bound``; returns its
    row."""

    pub = out / "task" / "public"
    pub.mkdir(parents=True, exist_ok=True)
    tasks = []
    for i in range(a.tasks):
        t = fake_task(i)
        tasks.append(dataclasses.replace(t, public_dir=pub, root=pub.parent, time_limit_s=60.0))
    ex = make_executor(a.executor, a.slots)
    comps = Components(train_tasks=tasks, heldout_tasks=[],
                       scaffold=LatencyScaffold(PAPER_LATENCY.scaled(a.scale), a.seed),
                       policy=SlowPolicy(a.seed, a.gen_s), executor=ex, world_model=SlowWorldModel(a.wm_s))
    cfg = load_config(None, [
        "method=wmrl", f"run_dir={out / (f'k{k}' if at_bound == 'wait' else f'k{k}-{at_bound}')}",
        f"optim.steps={a.steps}", f"rollout.tasks_per_step={a.tasks}",
        f"rollout.group_size={a.group}", "optim.lr=0.2", f"wmrl.routing.anchor_fraction={a.rho}",
        "wmrl.calibration.min_anchors=8", "progress=false", "eval.every_k=0", "eval.at_end=false",
        "eval.at_start=false", f"wmrl.asynchronous.staleness={k}", f"seed={a.seed}", "checkpoint_every=1000",
        f"wmrl.asynchronous.over_bound_anchors={at_bound}"])
    t0 = time.perf_counter()
    try:
        run_training(cfg, components=comps)
    finally:
        ex.close()
    wall = time.perf_counter() - t0
    m = read_jsonl(RunDir(cfg.run_dir).metrics)
    led = json.loads(RunDir(cfg.run_dir).ledger.read_text())
    step = np.array([r["step_wall_s"] for r in m])
    lm = np.array([sum(r.get(f"wall_s.{s}", 0.0) for s in ("generate", "wm_predict", "update")) for r in m])
    loop = float(step.sum())
    exec_wall = led["executions"]["anchor"]["wall_s"]
    st_mean = [r["anchor_staleness_mean"] for r in m if r.get("anchor_staleness_mean") is not None]
    st_max = [r["anchor_staleness_max"] for r in m if r.get("anchor_staleness_max") is not None]
    first = m[-max(1, len(m) // 4)]["step"]  # anchors consumed in the last quarter of steps (own and late)
    samples = read_jsonl(RunDir(cfg.run_dir).samples)
    rt = [x["reward_true"] for x in samples
          if x["step"] >= first and x["stream"] in ("anchor", "anchor_late") and x["reward_true"] is not None]
    # the policy's own reward: the fake task's true reward of every sample drawn in the last quarter of steps
    pol = [true_reward(x["completion"]) for x in samples if x["step"] >= first and x["stream"] != "anchor_late"]
    return dict(k=k, at_bound=at_bound if k else "-", executor=a.executor, slots=a.slots, steps=len(m),
                step_s=float(step.mean()),
                step_s_median=float(np.median(step)), lm_s=float(lm.mean()),
                executions=led["executions"]["anchor"]["count"], exec_wall_s=exec_wall,
                exec_mean_s=exec_wall / max(1, led["executions"]["anchor"]["count"]),
                utilisation=exec_wall / (a.slots * loop), staleness_mean=float(np.mean(st_mean)) if st_mean else 0.0,
                staleness_max=int(max(st_max)) if st_max else 0,
                wait_s=float(sum(r.get("wall_s.anchor_wait", 0.0) for r in m)),
                over_bound_groups=int(m[-1].get("anchor_groups_over_bound_total", 0)),
                over_bound_samples=int(sum(r.get("anchor_over_bound_samples", 0) for r in m)),
                updates_skipped=int(m[-1].get("updates_skipped_without_anchors_total", 0)),
                in_flight_at_end=int(m[-1].get("anchors_in_flight", 0)),
                reward_last_quarter=float(np.mean(rt)) if rt else None,
                policy_reward_last_quarter=float(np.mean(pol)) if pol else None, run_wall_s=wall)


def table(rows: list[dict]) -> str:
    head = ("| executor | k | at bound | slots | steps | step s (mean / median) | LM s per step | latency / LM "
            "| executions | utilisation | staleness mean / max | waited s | groups over the bound | updates skipped "
            "| speed-up | anchor reward (last quarter) | policy reward (last quarter) |")
    lines = [head, "|" + "---|" * 17]
    base = {r["executor"]: r["step_s"] for r in rows if r["k"] == 0}
    for r in rows:
        sp = base.get(r["executor"], float("nan")) / r["step_s"]
        rw = "" if r["reward_last_quarter"] is None else f"{r['reward_last_quarter']:.3f}"
        pr = "" if r.get("policy_reward_last_quarter") is None else f"{r['policy_reward_last_quarter']:.3f}"
        lat = f"{r['exec_mean_s'] / r['lm_s']:.1f}" if r["executions"] else ""
        lines.append(f"| {r['executor']} | {r['k']} | {r.get('at_bound', '-')} | {r['slots']} | {r['steps']} | "
                     f"{r['step_s']:.3f} / {r['step_s_median']:.3f} | {r['lm_s']:.3f} | "
                     f"{lat} | {r['executions']} | {r['utilisation']:.2f} | "
                     f"{r['staleness_mean']:.2f} / {r['staleness_max']} | {r['wait_s']:.2f} | "
                     f"{r.get('over_bound_groups', 0)} | {r.get('updates_skipped', 0)} | {sp:.2f}x | {rw} | {pr} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--k", type=int, nargs="+", default=[0, 9], help="staleness bounds (0 = synchronous)")
    p.add_argument("--at-bound", nargs="+", default=["wait"], choices=("wait", "calibration", "drop"),
                   help="wmrl.asynchronous.over_bound_anchors modes, each run at every k > 0")
    p.add_argument("--slots", type=int, default=16, help="concurrent executions")
    p.add_argument("--executor", choices=("local", "ray"), default="local")
    p.add_argument("--tasks", type=int, default=8, help="groups per step (M)")
    p.add_argument("--group", type=int, default=4, help="samples per group (G)")
    p.add_argument("--rho", type=float, default=0.125, help="anchor fraction")
    p.add_argument("--scale", type=float, default=0.01, help="latency scale against PAPER_LATENCY (600 s cap)")
    p.add_argument("--gen-s", type=float, default=0.08, help="emulated generation seconds per step")
    p.add_argument("--wm-s", type=float, default=0.04, help="emulated world-model seconds per step")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="folder for the runs and results.json (default: temp)")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        out = a.out or Path(d)
        rows = []
        for k in a.k:
            for mode in (a.at_bound if k else ["wait"]):
                rows.append(run_one(k, a, out / a.executor, mode))
                print(json.dumps(rows[-1]), flush=True)
        out.mkdir(parents=True, exist_ok=True)

        date = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d")
        machine = machine_line()
        for r in rows:
            r["date"], r["machine"] = date, machine
        (out / f"results_{a.executor}.json").write_text(json.dumps(rows, indent=1))
        (out / f"results_{a.executor}.md").write_text(
            f"Run {date} on {machine}: `PYTHONPATH=. python benchmarks/async_anchors.py "
            f"{' '.join(argv or sys.argv[1:])}`\n\n"
            + table(rows) + "\n")
        print(table(rows))


if __name__ == "__main__":
    main()

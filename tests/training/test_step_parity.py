"""The text trainer's runs on the fake parts, line for line: metrics.jsonl, samples.jsonl and calibration.jsonl of
fixed-seed runs equal the lines recorded in ``tests/training/golden/step_parity.json`` (written by
``PYTHONPATH=. python tests/training/test_step_parity.py capture``, before the trainer's step moved onto the step
engine, and recaptured with every earlier value equal when the fidelity card gained its ranking figures and the
samples their prompts and log-probabilities), so a reorganisation of the step changes no number.

The runs: ``k0`` (the synchronous anchor stream, infrastructure failures included, evaluations every 2 steps),
``k0-grpo``, ``k4`` and ``k4-calibration`` (the asynchronous stream with staleness bound 4, the ``gradient`` and
``calibration`` late modes, on an executor whose futures finish two steps after their submission, so late groups
arrive without any clock), and ``turns2`` (``episode.max_turns: 2`` on fake tasks with real files).

Dropped before the comparison, as they are clock readings: every key starting ``wall_s.`` or ``cpu_s.`` and
``time``, ``step_wall_s``, ``step_cpu_s``, ``cum_wall_s``, ``cum_trainer_cpu_s``, ``cum_compute_cpu_s`` (the
trainer's CPU enters the compute total). Nothing else is dropped: the comparison is exact (JSON round trip).
"""
from __future__ import annotations

import dataclasses
import json
import sys
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from tests.support.fakes import FakeExecutor, FakePolicy, FakeScaffold, FakeWorldModel, fake_task

from wmrl.runs.rundir import RunDir, read_jsonl
from wmrl.training.components import Components
from wmrl.training.config import load_config
from wmrl.training.run import run_training

GOLDEN = Path(__file__).resolve().parent / "golden" / "step_parity.json"

#: clock readings (module docstring)
CLOCK_KEYS = ("time", "step_wall_s", "step_cpu_s", "cum_wall_s", "cum_trainer_cpu_s", "cum_compute_cpu_s")


class DelayedExecutor(FakeExecutor):
    """The fake executor whose futures finish when the executions of the step ``delay`` steps later are submitted
    (no thread, no clock: a request's step is read from its id ``s{step}-...``)."""

    def __init__(self, delay: int = 2) -> None:
        super().__init__()
        self.delay = delay
        self.pending: list[tuple[int, Future, Any]] = []

    def submit(self, req):
        step = int(req.request_id.split("-")[0][1:])
        for entry in [p for p in self.pending if p[0] <= step - self.delay]:
            self.pending.remove(entry)
            entry[1].set_result(self._run(entry[2]))
        f: Future = Future()
        f.set_running_or_notify_cancel()
        self.pending.append((step, f, req))
        return f


def _task_with_files(root: Path, i: int):
    """A fake task with the files a validation view and a predicted observation read (CSV data, answers, a board)."""
    d = root / f"task{i}"
    pub = d / "public"
    pub.mkdir(parents=True, exist_ok=True)
    (pub / "train.csv").write_text("id,x,y\n" + "".join(f"{j},{j % 3},{j % 2}\n" for j in range(20)))
    (pub / "test.csv").write_text("id,x\n" + "".join(f"{j},{j % 3}\n" for j in range(20, 30)))
    (pub / "sample_submission.csv").write_text("id,y\n" + "".join(f"{j},0\n" for j in range(20, 30)))
    (d / "a.csv").write_text("id,y\n" + "".join(f"{j},{j % 2}\n" for j in range(20, 30)))
    (d / "leaderboard.csv").write_text("rank,score\n1,0.9\n2,0.8\n3,0.7\n4,0.6\n5,0.5\n")
    return dataclasses.replace(fake_task(i), root=d, public_dir=pub, answers_path=d / "a.csv",
                               leaderboard_paths=(d / "leaderboard.csv",))


#: name -> (method, steps, executor kind, overrides)
RUNS: dict[str, tuple[str, int, str, tuple[str, ...]]] = {
    "k0": ("wmrl", 4, "infra", ("eval.every_k=2",)),
    "k0-grpo": ("grpo", 3, "infra", ()),
    "k4": ("wmrl", 6, "delayed", ("wmrl.asynchronous.staleness=4", "wmrl.routing.anchor_fraction=0.5")),
    "k4-calibration": ("wmrl", 6, "delayed", ("wmrl.asynchronous.staleness=4", "wmrl.routing.anchor_fraction=0.5",
                                               "wmrl.asynchronous.late_anchors=calibration")),
    "turns2": ("wmrl", 3, "files", ("episode.max_turns=2",)),
}


def _stable(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in rec.items() if k not in CLOCK_KEYS and not k.startswith(("wall_s.", "cpu_s."))}


def run_one(name: str, tmp: Path) -> dict[str, list[dict[str, Any]]]:
    """Run ``name`` of :data:`RUNS` in ``tmp``; returns its metrics, samples and calibration lines (stable keys)."""
    method, steps, kind, extra = RUNS[name]
    executor = {"infra": lambda: FakeExecutor(infra_every=5), "delayed": DelayedExecutor,
                "files": FakeExecutor}[kind]()
    train = [_task_with_files(tmp / "tasks", i) if kind == "files" else fake_task(i) for i in range(3)]
    comps = Components(train_tasks=train, heldout_tasks=[fake_task(9, "heldout")] if kind == "infra" else [],
                       scaffold=FakeScaffold(), policy=FakePolicy(0), executor=executor,
                       world_model=None if method == "grpo" else FakeWorldModel())
    cfg = load_config(None, [f"method={method}", f"run_dir={tmp / name}", f"optim.steps={steps}",
                             "rollout.tasks_per_step=4", "rollout.group_size=4", "optim.lr=0.05",
                             "wmrl.routing.anchor_fraction=0.25", "wmrl.calibration.min_anchors=4",
                             "wmrl.fusion.min_pairs=2",
                             "progress=false", "eval.every_k=0", "eval.at_end=false", "eval.samples_per_task=2",
                             *extra])
    run_training(cfg, components=comps)
    rd = RunDir(cfg.run_dir)
    return {f: [_stable(r) for r in read_jsonl(getattr(rd, f))] if getattr(rd, f).exists() else []
            for f in ("metrics", "samples", "calibration")}


@pytest.fixture(autouse=True)
def _own_home(tmp_path, monkeypatch):
    monkeypatch.setenv("WMRL_HOME", str(tmp_path / "home"))  # validation views of the fake tasks


@pytest.mark.parametrize("name", list(RUNS))
def test_the_run_writes_the_recorded_lines(name, tmp_path):
    got = json.loads(json.dumps(run_one(name, tmp_path)))
    want = json.loads(GOLDEN.read_text())[name]
    for f in ("metrics", "samples", "calibration"):
        assert len(got[f]) == len(want[f]), f
        for i, (a, b) in enumerate(zip(got[f], want[f])):
            assert a == b, (f, i, {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)})
    if name.startswith("k4"):  # the asynchronous runs do consume late groups
        assert any(s["stream"] == "anchor_late" for s in got["samples"]) == (name == "k4")
        assert sum(len(c.get("late_true", [])) for c in got["calibration"]) > 0
    if name == "turns2":
        assert all(s["n_turns"] == 2 for s in got["samples"])


def capture() -> None:
    """Record every run of :data:`RUNS` into :data:`GOLDEN`."""
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        os.environ["WMRL_HOME"] = str(Path(d) / "home")
        out = {name: run_one(name, Path(d)) for name in RUNS}
    GOLDEN.write_text(json.dumps(out, indent=0, sort_keys=True) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] != ["capture"]:
        sys.exit("usage: PYTHONPATH=. python tests/training/test_step_parity.py capture")
    capture()

"""The embodied training loop: SFT artefacts, GRPO over episodes on the step engine, evaluation, checkpoints and
resume, in the text track's run-directory layout (docs/run-directory.md, docs/embodied.md).

One step (``EmbodiedTrainer.train_step``) is the step engine's (:meth:`wmrl.step.engine.StepEngine.step`) on the
Meta-World environment (:class:`wmrl.embodied.environment.MetaWorldEnvironment`): generate (M initial states, G
episodes each), route (rho for wmrl*, all for grpo, none for wm), execute (the simulator's success, read for
anchors only) || wm_predict (the progress predictor's episode score r_hat), recipe (the registered recipe of
:mod:`wmrl.core.recipe`); then what is embodied: ``update``, ``epochs_per_step`` Adam steps on
:func:`wmrl.core.losses.grpo_loss` with per-step log-probs [B, T] of the Gaussian policy, the episode mask and
``seq_mean`` aggregation (each episode is one sample, so the fusion weights are per-episode weights exactly). The
run loop (evaluations, checkpoints, stop and resume) is the run kit's (:func:`wmrl.runs.loop.run_steps`), and so is
the run's lifecycle (:func:`wmrl.runs.lifecycle.run_track`: the owner lock, the saved config, resume, the trackers,
the summary's files), with the embodied track's part in :class:`EmbodiedTrack`.

Compute: the trainer's CPU-seconds (process time; the simulator runs in this process) and wall seconds
per stage; ``executions.anchor`` counts the success labels the run consumed (what needs a human or a
trusted check on a real robot); ``env_steps`` counts simulator steps.
"""
from __future__ import annotations

import json
import math
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from wmrl.console import fmt as _fmt
from wmrl.core.recipe import calibration_record
from wmrl.embodied.config import EmbodiedConfig, artefact_key, config_to_dict, environment_factory, load_config
from wmrl.embodied.env import Suite, expert_rollout, rollout, shared_pool
from wmrl.embodied.policy import Demos, GaussianPolicy, PolicyConfig, behaviour_clone
from wmrl.embodied.progress import ProgressPredictor, fit_progress
from wmrl.runs.config import ConfigError
from wmrl.runs.ledger import Ledger
from wmrl.runs.lifecycle import RESUME_MUTABLE, RunRequest, check_resumable, run_track
from wmrl.runs.loop import Schedule, evaluated_at, run_steps
from wmrl.runs.checkpoint import engine_state
from wmrl.runs.rundir import RunDir, RunDirError, json_safe, now_iso, read_jsonl, rng_state, set_rng_state, \
    write_json_atomic
from wmrl.runs.tracking import TrackerSet
from wmrl.step.engine import StepEngine
from wmrl.core.losses import grpo_loss
from wmrl.paths import wmrl_home

__all__ = ["EMBODIED_RESUME", "EmbodiedTrack", "EmbodiedTrainer", "RunDirError", "build_artefacts", "make_suite",
           "run_embodied"]
_now = now_iso

#: The embodied track's command that continues a run (followed by the run directory; ``wmrl embodied train``).
EMBODIED_RESUME = "wmrl embodied train --resume"


def make_suite(cfg: EmbodiedConfig) -> Suite:
    s = cfg.suite
    return Suite(tasks=list(s.tasks), heldout_tasks=list(s.heldout_tasks), n_train_states=s.n_train_states,
                 n_heldout_states=s.n_heldout_states, max_steps=s.max_steps, state_seed=s.state_seed)


# ---------------------------------------------------------------------------------------------- artefacts
def artefacts_dir(cfg: EmbodiedConfig, root: Path | None = None) -> Path:
    return (root or wmrl_home() / "embodied") / f"sft-{artefact_key(cfg)}"


def build_artefacts(cfg: EmbodiedConfig, root: Path | None = None, log: Any = None) -> Path:
    """The SFT checkpoint and the progress predictor shared by every RL run of this suite/sft/world-model
    config, built once (demos -> BC -> warm-up roll-outs -> predictor fit) and cached; returns the folder
    (``policy/``, ``progress/``, ``report.json``). Written to a temp folder and renamed (atomic)."""
    out = artefacts_dir(cfg, root)
    if (out / "report.json").is_file():
        return out
    t0w, t0c = time.perf_counter(), time.process_time()
    suite = make_suite(cfg)
    pool = shared_pool(suite)
    pool.env_steps = 0
    sc, wc = cfg.sft, cfg.world_model
    torch.manual_seed(sc.seed)
    instructions = suite.all_instructions()
    policy = GaussianPolicy(instructions, PolicyConfig(sc.hidden, sc.layers, sc.lang_dim, sc.init_std))
    rng = np.random.default_rng(sc.seed)
    obs, acts, ins, episodes = [], [], [], []
    n_demo_ok = 0
    for st in suite.states("train"):
        ii = policy.index(suite.instruction(st.task))
        for _ in range(sc.demos_per_state):
            o, a, ok = expert_rollout(pool, st, sc.demo_noise_std, rng)
            obs.append(o[:-1])
            acts.append(a)
            ins.append(np.full(a.shape[0], ii, np.int64))
            episodes.append((o, ii, ok))
            n_demo_ok += int(ok)
    demos = Demos(np.concatenate(obs), np.concatenate(acts), np.concatenate(ins), episodes)
    bc = behaviour_clone(policy, demos, epochs=sc.epochs, lr=sc.lr, batch_size=sc.batch_size, seed=sc.seed)
    # warm-up roll-outs of the SFT policy (their success labels are paid for: counted in the report)
    gen = torch.Generator().manual_seed(sc.seed + 1)
    warm: list[tuple[np.ndarray, int, bool]] = []
    n_warm_labels = 0
    if wc.warmup_rollouts_per_state:
        states = [s for s in suite.states("train") for _ in range(wc.warmup_rollouts_per_state)]
        eb = rollout(pool, states, policy.act, lambda t: policy.index(suite.instruction(t)), gen)
        for i, s in enumerate(states):
            warm.append((eb.visited(i), policy.index(suite.instruction(s.task)), bool(eb.success[i])))
        n_warm_labels = len(states)
    wm = ProgressPredictor(instructions, hidden=wc.hidden, lang_dim=sc.lang_dim)
    fit = fit_progress(wm, episodes + warm, epochs=wc.epochs, lr=wc.lr, batch_size=sc.batch_size, seed=sc.seed)
    report = {
        "key": artefact_key(cfg), "suite": config_to_dict(cfg)["suite"], "sft": config_to_dict(cfg)["sft"],
        "world_model": config_to_dict(cfg)["world_model"], "n_demos": len(episodes),
        "demo_success_rate": n_demo_ok / max(len(episodes), 1), "bc": bc, "wm_fit": fit,
        "warmup_rollouts": n_warm_labels,
        "warmup_success_rate": float(np.mean([w[2] for w in warm])) if warm else None,
        "env_steps": pool.env_steps, "cpu_s": time.process_time() - t0c, "wall_s": time.perf_counter() - t0w,
        "created": _now(),
    }
    tmp = out.with_name(out.name + f".tmp-{int(time.time() * 1e6)}")
    policy.save(tmp / "policy")
    wm.save(tmp / "progress")
    write_json_atomic(tmp / "report.json", report)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp.rename(out)
    except OSError:  # built concurrently by another process: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
    if log:
        log(f"built SFT + progress predictor in {report['wall_s']:.0f} s: {out}")
    return out


# ---------------------------------------------------------------------------------------------- trainer
class EmbodiedTrainer:
    """Runs one embodied run in ``rd`` (create through :func:`run_embodied`)."""

    def __init__(self, cfg: EmbodiedConfig, rd: RunDir, art: Path):
        torch.set_num_threads(cfg.threads)
        self.cfg, self.rd, self.art = cfg, rd, art
        self.suite = make_suite(cfg)
        self.pool = shared_pool(self.suite)
        self.pool.env_steps = 0
        self.policy = GaussianPolicy.load(art / "policy")
        self.wm = ProgressPredictor.load(art / "progress")
        self.sft = cfg.method == "sft"
        self.engine = StepEngine.from_config(self.spec_name, cfg.wmrl, seed=cfg.seed,
                                             normalize_std=cfg.optim.normalize_std,
                                             always_predict=True)  # r_hat of every step: the wm_anchor_corr diagnostic
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=cfg.optim.lr)
        self.ledger = Ledger(method=cfg.method, anchor_fraction_configured=self.engine.anchor_fraction)
        self.step = 0
        self.last_eval: dict[str, Any] = {}
        self.trackers = TrackerSet()  # the experiment trackers (wmrl.runs.tracking), opened by run_embodied
        self.train_states = self.suite.states("train")
        self.env = environment_factory(cfg.environment)(  # ``environment`` of the config, from the registry
            pool=self.pool, train_states=self.train_states, instruction_index=self._instr, world_model=self.wm,
            wm_instruction_index=lambda task: self.wm.instructions.index(self.suite.instruction(task)),
            groups_per_step=cfg.rollout.groups_per_step, group_size=cfg.rollout.group_size, seed=cfg.seed,
            collapse=cfg.world_model.collapse, k=cfg.world_model.k)

    def _instr(self, task: str) -> int:
        return self.policy.index(self.suite.instruction(task))

    # ---------------------------------------------------------------- state
    def save_checkpoint(self) -> None:
        """Write ``checkpoints/step_NNNNNN`` atomically (policy, optimizer, RNG, the engine's state, counters)."""
        self.rd.sync_logs()
        with self.rd.write_checkpoint(self.step, keep=self.cfg.keep_checkpoints) as tmp:
            self.policy.save(tmp / "policy")
            torch.save(self.optimizer.state_dict(), tmp / "optimizer.pt")
            torch.save(rng_state(), tmp / "rng.pt")
            eng = self.engine.state_dict()
            st = {"step": self.step, "method": self.cfg.method, **eng, "ledger": self.ledger.state_dict(),
                  "line_counts": dict(self.rd.line_counts()), "last_eval": self.last_eval,
                  "env_steps": self.pool.env_steps, "artefacts": str(self.art), "time": time.time()}
            (tmp / "trainer_state.json").write_text(json.dumps(json_safe(st), indent=1))

    def load_checkpoint(self, path: Path) -> None:
        st = json.loads((path / "trainer_state.json").read_text())
        policy = GaussianPolicy.load(path / "policy")
        opt = torch.load(path / "optimizer.pt", weights_only=False)
        rng = torch.load(path / "rng.pt", weights_only=False)
        self.policy.load_state_dict(policy.state_dict())
        self.optimizer.load_state_dict(opt)
        self.engine.load_state_dict(engine_state(st))
        self.ledger.load_state_dict(st["ledger"])
        self.step, self.last_eval, self.pool.env_steps = int(st["step"]), st["last_eval"], int(st["env_steps"])
        dropped = self.rd.truncate_logs(self.step, st.get("line_counts"))
        set_rng_state(rng)
        self.rd.log_line(f"{_now()} resumed from {path.name} (step {self.step}); dropped records after it: {dropped}")

    # ---------------------------------------------------------------- one step
    def train_step(self) -> dict[str, Any]:
        """Run step ``self.step + 1`` (module docstring); returns its metrics.jsonl record."""
        cfg, L, step = self.cfg, self.ledger, self.step + 1
        L.begin_step()
        env0 = self.pool.env_steps
        sb = self.engine.step(self.env, self.policy, step, L)  # generate, route, execute || wm_predict, recipe
        eb, out, a = sb.batch, sb.out, sb.is_anchor
        with L.stage("update"):
            upd = self._update(eb, out.advantages, out.weights)
        self.step = step
        rec: dict[str, Any] = {
            "step": step, "time": time.time(), "method": cfg.method, "n_groups": sb.M, "n_episodes": sb.B,
            "n_anchor_groups": int(sb.anchor_groups.sum()), "n_anchor_episodes": int(a.sum()),
            "success_anchor_mean": float(eb.success[a].mean()) if a.any() else None,
            "success_rollout_mean_diagnostic": float(eb.success.mean()),  # simulator diagnostic, never trained on
            "wm_states_scored": sb.env_stats.get("wm_states_scored", 0),
            "wm_episodes_scored": sb.env_stats.get("wm_episodes_scored", 0),
            "reward_wm_mean": _mean(sb.reward_wm), "reward_wm_calibrated_mean": _mean(out.reward_wm_calibrated),
            "reward_used_mean": float(np.nanmean(out.reward_used)),
            "wm_anchor_corr": _corr(sb.reward_wm[a], eb.success[a]),
            "episode_length_mean": float(eb.length.mean()), "env_steps": self.pool.env_steps - env0,
            "cum_env_steps": self.pool.env_steps, "policy_std": float(self.policy.log_std.detach().exp().mean()),
        }
        rec.update(out.stats)
        rec.update(upd)
        rec.update(L.end_step())
        samples = [{"step": step, "group": int(sb.gid[i]), "state": eb.states[i].key,
                    "stream": "anchor" if a[i] else "wm", "success_observed": float(eb.success[i]) if a[i] else None,
                    "reward_wm": _float(sb.reward_wm[i]), "reward_wm_calibrated": _float(out.reward_wm_calibrated[i]),
                    "reward_used": _float(out.reward_used[i]), "advantage": float(out.advantages[i]),
                    "weight": float(out.weights[i]), "length": int(eb.length[i])} for i in range(sb.B)]
        with L.stage("log"):
            self.rd.append("metrics", rec)
            self.trackers.log_metrics(step, rec)
            self.rd.append_many("samples", samples)
            cal = calibration_record(step, out, sb.reward_wm, eb.success, a) if out.calibration is not None else None
            if cal is not None and a.any():
                self.rd.append("calibration", cal)
            self.rd.log_line(f"{_now()} step {step}: anchors {rec['n_anchor_groups']}/{sb.M} "
                             f"success(anchors) {_fmt(rec['success_anchor_mean'])} r_wm {_fmt(rec['reward_wm_mean'])} "
                             f"alpha {_fmt(rec.get('alpha'))} loss {_fmt(upd['loss'], 4)} "
                             f"wall {rec['step_wall_s']:.1f}s")
        return rec

    @property
    def spec_name(self) -> str:
        return "grpo" if self.sft else self.cfg.method

    def _update(self, eb: Any, adv: np.ndarray, weights: np.ndarray) -> dict[str, Any]:
        """``epochs_per_step`` Adam steps on the weighted clipped surrogate (:func:`wmrl.core.losses.grpo_loss`)."""

        o = self.cfg.optim
        rows = np.flatnonzero((weights != 0) & (adv != 0))
        out = {"loss": 0.0, "clip_frac": None, "grad_norm": None, "update_rows": int(rows.size)}
        if rows.size == 0:
            return out
        obs = torch.as_tensor(eb.obs[rows, :-1])
        act = torch.as_tensor(eb.actions[rows])
        instr = torch.as_tensor(np.asarray([self._instr(eb.states[i].task) for i in rows]))[:, None].expand(
            -1, eb.mask.shape[1])
        old = torch.as_tensor(eb.logprobs[rows])
        mask = torch.as_tensor(eb.mask[rows])
        A = torch.as_tensor(adv[rows], dtype=torch.float32)
        W = torch.as_tensor(weights[rows], dtype=torch.float32)
        for _ in range(o.epochs_per_step):
            lp = self.policy.log_prob(obs, instr, act)
            loss, st = grpo_loss(lp, old, A, mask, sample_weights=W, clip_low=o.clip_low, clip_high=o.clip_high,
                                 aggregation="seq_mean")
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            params = [p for p in self.policy.parameters() if p.grad is not None]
            gn = (torch.nn.utils.clip_grad_norm_(params, o.grad_clip) if o.grad_clip > 0
                  else torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params if p.grad is not None])))
            self.optimizer.step()
            out.update(loss=float(loss.detach()), clip_frac=st["clip_frac"], grad_norm=float(gn))
        return out

    # ---------------------------------------------------------------- evaluation
    def evaluate(self, *, in_step: bool = False) -> dict[str, Any]:
        """Success rate on every split (train and held-out initial states; held-out tasks if any), with the
        same evaluation noise (``eval.seed``) for every method and step; appends eval.jsonl. Its time is the
        ``eval`` phase of the ledger, inside a step or not (``in_step`` is the run loop's and changes nothing)."""
        cfg = self.cfg
        splits = ["train"] + (["heldout"] if cfg.suite.n_heldout_states else []) + (
            ["heldout_tasks"] if cfg.suite.heldout_tasks else [])
        res = {}
        with self.ledger.phase("eval"):
            for k, split in enumerate(splits):
                states = [s for s in self.suite.states(split) for _ in range(cfg.eval.samples_per_state)]
                gen = torch.Generator().manual_seed(eval_seed(cfg.eval.seed, cfg.seed, k))
                eb = rollout(self.pool, states, self.policy.act, self._instr, gen)
                p, n = float(eb.success.mean()), eb.B
                per_task = {t: float(eb.success[[s.task == t for s in states]].mean())
                            for t in dict.fromkeys(s.task for s in states)}
                rec = {"step": self.step, "split": split, "success_rate": p, "n_episodes": n,
                       "se": math.sqrt(p * (1 - p) / n) if n else None, "per_task": per_task,
                       "episode_length_mean": float(eb.length.mean()), "time": time.time()}
                self.rd.append("eval", rec)
                self.trackers.log_eval(self.step, split, rec)
                self.rd.log_line(f"{_now()} eval step {self.step} {split}: success {p:.3f} ({n} episodes)")
                res[split] = rec
        self.last_eval = res
        return res


def eval_seed(base: int, run_seed: int, split_index: int) -> int:
    """Evaluation noise seed: the same for every method and step of one run seed (paired comparison),
    different between run seeds (so the SFT row's standard error reflects evaluation noise)."""
    return int(np.random.default_rng([base, run_seed, split_index]).integers(2**62))


def _corr(x: np.ndarray, y: np.ndarray) -> float | None:
    if x.size < 3 or np.std(x) == 0 or np.std(y) == 0:
        return None
    return float(np.corrcoef(x, y)[0, 1])


def _mean(x: np.ndarray) -> float | None:
    x = np.asarray(x, np.float64)
    return float(np.mean(x)) if x.size and np.all(np.isfinite(x)) else None


def _float(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


# ---------------------------------------------------------------------------------------------- runs
@dataclass
class EmbodiedTrack:
    """The embodied track in the run lifecycle (:class:`wmrl.runs.lifecycle.Track`).

    Attributes:
        progress: a line on stderr per step (and for the SFT artefacts when they are built).
        artefacts_root: where the SFT artefacts are cached (default ``$WMRL_HOME/embodied``).
        resume_command, run_dir_prefix, resume_mutable: the :class:`~wmrl.runs.lifecycle.Track`'s
            (:data:`EMBODIED_RESUME`; default run directories ``runs/embodied-<name or method>-<time>``; a resume may
            change the keys of :data:`wmrl.runs.lifecycle.RESUME_MUTABLE`, those every track's resume may).
    """

    progress: bool = True
    artefacts_root: Path | None = None
    resume_command: str = EMBODIED_RESUME
    run_dir_prefix: str = "embodied-"
    resume_mutable: tuple[str, ...] = RESUME_MUTABLE

    def say(self, message: str) -> None:
        """One line on stderr when ``progress``."""
        if self.progress:
            print(message, file=sys.stderr, flush=True)

    def check(self, cfg: EmbodiedConfig) -> None:
        """A bad task list or split, or an environment of the text track, is refused before the run folder exists."""
        make_suite(cfg)
        environment_factory(cfg.environment)

    def saved_config(self, rd: RunDir, cfg: EmbodiedConfig) -> EmbodiedConfig:
        """``config.yaml`` read back (ConfigError when it does not)."""
        return load_config(rd.config)

    def total_steps(self, cfg: EmbodiedConfig) -> int:
        """``optim.steps``; 0 for ``sft`` (no RL: the SFT policy evaluated)."""
        return 0 if cfg.method == "sft" else cfg.optim.steps

    def build(self, cfg: EmbodiedConfig, rd: RunDir, *, from_checkpoint: bool) -> EmbodiedTrainer:
        """The trainer from the SFT artefacts (built and cached once per suite/sft/world-model config)."""
        return EmbodiedTrainer(cfg, rd, build_artefacts(cfg, self.artefacts_root, log=self.say))

    def train(self, tr: EmbodiedTrainer, stop_after_step: int | None) -> None:
        """The step-0 evaluation (``eval.at_start``; always for ``sft``) and the steps."""
        cfg, steps = tr.cfg, self.total_steps(tr.cfg)
        if tr.step == 0 and (cfg.eval.at_start or tr.sft) and not evaluated_at(tr.rd, 0):
            self.say(f"[{cfg.method} seed {cfg.seed}] evaluating the SFT policy")
            tr.evaluate()
            if tr.sft:
                tr.save_checkpoint()

        def on_step(rec: dict[str, Any]) -> None:
            self.say(f"[{cfg.method} seed {cfg.seed}] step {tr.step}/{steps} success(anchors) "
                     f"{_fmt(rec['success_anchor_mean'])} r_wm {_fmt(rec['reward_wm_mean'])} "
                     f"alpha {_fmt(rec.get('alpha'))} {rec['step_wall_s']:.1f}s")

        run_steps(tr, Schedule(total_steps=steps, eval_every=cfg.eval.every_k, checkpoint_every=cfg.checkpoint_every,
                               stop_after_step=stop_after_step), on_step=on_step)

    def finish(self, tr: EmbodiedTrainer) -> None:
        """The final evaluation (unless the last step has one)."""
        if tr.step and not evaluated_at(tr.rd, tr.step):
            tr.evaluate()

    def summary(self, tr: EmbodiedTrainer, ledger: dict[str, Any], *, completed: bool) -> dict[str, Any]:
        """Success rates (final, initial, their standard errors), compute, labels and simulator steps."""
        if not completed:
            return {"status": "stopped", "stopped_at": tr.step, "run_dir": str(tr.rd.root)}
        ev = read_jsonl(tr.rd.eval)
        first = {r["split"]: r for r in ev if r["step"] == 0}
        final = {r["split"]: r for r in ev if r["step"] == tr.step}
        tot = ledger["totals"]
        art = json.loads((tr.art / "report.json").read_text())
        return {
            "method": tr.cfg.method, "status": "completed", "seed": tr.cfg.seed, "steps": tr.step,
            "run_dir": str(tr.rd.root), "final": {k: v["success_rate"] for k, v in final.items()},
            "final_se": {k: v["se"] for k, v in final.items()},
            "initial": {k: v["success_rate"] for k, v in first.items()},
            "train_compute_cpu_s": tot["train_compute_cpu_s"], "eval_compute_cpu_s": tot["eval_compute_cpu_s"],
            "wall_s": tot["wall_s"], "success_labels": tr.ledger.executions["anchor"].count,
            "env_steps": tr.pool.env_steps, "artefacts": str(tr.art), "artefacts_cpu_s": art["cpu_s"],
            "artefacts_success_labels": art["warmup_rollouts"], "finished": _now(),
        }

    def close(self, tr: EmbodiedTrainer) -> None:
        """Nothing to release: the simulator pool is shared by the process."""


def run_embodied(cfg: EmbodiedConfig | None = None, *, resume_dir: str | Path | None = None,
                 overrides: list[str] | None = None, stop_after_step: int | None = None, progress: bool = True,
                 artefacts_root: Path | None = None, accept_edited_config: bool = False) -> dict[str, Any]:
    """Train (or resume) one run; returns its summary (also ``summary.json`` once the run completes; stopped at
    ``stop_after_step``: ``{"status": "stopped", "stopped_at": step, "run_dir": ...}``). The lifecycle is the run
    kit's (:func:`wmrl.runs.lifecycle.run_track`), the same as the text track's.

    With ``resume_dir`` the config is RUN_DIR/config.yaml (refused if edited, unless accepted) with ``overrides``
    (``key.sub=value``; only the keys of :data:`wmrl.runs.lifecycle.RESUME_MUTABLE` may change: ``optim.steps``,
    ``eval.*``, ``threads``, ``checkpoint_every``, ``keep_checkpoints``, ``trackers``, ``tracking.*``) and the run
    continues from its newest complete checkpoint; logs are cut back to that step.

    Raises:
        RunDirError: a fresh run into a folder that already holds a run, or nothing to resume; no complete
            checkpoint although the run has done work; another live trainer holds the run directory (its lock
            file ``.owner.lock``, held for the whole run); a run_dir that names a file.
        ValueError: a bad suite (unknown task, overlapping task lists, splits over 50 states), raised
            before a fresh run's folder is made.
        ConfigError: no config and no ``resume_dir``; ``overrides`` without ``resume_dir``; an override of a key a
            resume may not change, or an unknown key or bad value; an environment of the text track.
        TrackerUnavailable: a tracker of ``cfg.trackers`` whose package is not installed, refused before a fresh
            run's folder is made (the message names the ``pip install``).
    """
    if resume_dir is not None:
        rd = RunDir(resume_dir)
        check_resumable(rd, accept_edited_config)  # a clear refusal before the config is read
        # an unknown key or a bad value is refused here; a frozen key that changes is refused by run_track
        cfg = load_config(rd.config, overrides)
        cfg.run_dir = str(rd.root)
    elif cfg is None:
        raise ConfigError("give a config or resume_dir")
    elif overrides:
        raise ConfigError("overrides are for a resume (resume_dir); apply them to the config of a new run")
    track = EmbodiedTrack(progress=progress, artefacts_root=artefacts_root)
    return run_track(track, RunRequest(cfg, resume=resume_dir is not None, accept_edited_config=accept_edited_config,
                                       stop_after_step=stop_after_step))

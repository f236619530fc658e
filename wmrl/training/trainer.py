"""The WMRL training loop: a short linear pipeline of timed stages (issue 6; DESIGN.md §3).

One step ``t`` (M groups of G trajectories)::

    generate    policy samples G trajectories for each of M train tasks
    route       router marks anchor groups (grpo: all, wm: none, wmrl: fraction rho)
    execute  || wm_predict
                anchor programs go to the executor (futures) while the world model scores every
                trajectory; the two overlap in time
    calibrate   r_tilde = f_hat(r_hat) with f_hat fitted on anchors of steps < t, then the
                calibrator learns this step's anchors
    advantages  group-relative advantages per stream (true reward on anchors, r_tilde elsewhere)
    fuse        IVW weights alpha/n_A, (1-alpha)/n_W, or PPI++ (lambda)
    update      micro-batched log-probs, grpo_loss with sample weights, one AdamW step
    log         metrics.jsonl, samples.jsonl, calibration.jsonl, TensorBoard, progress bar
    eval        every ``eval.every_k`` steps: held-out (and train) tasks executed for real
    checkpoint  atomic, every ``checkpoint_every`` steps

Infrastructure failures (:attr:`ExecutionStatus.INFRA_ERROR`, or an executor future that raised) are
dropped from the gradient, the baselines and the calibration, and counted.

The trainer talks to its parts only through :class:`Components` (task source, scaffold, policy,
world model, executor), built by :func:`wmrl.training.parts.build_components` from the config, or
injected by tests.

Why one long file (about 1,100 lines): the step pipeline, checkpoints, resume and the run's
lifecycle share the Trainer's state; the method recipe is the part to move out (issue 14).
"""
from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from wmrl.core.recipe import CALIBRATION_GRID, Recipe, RecipeSettings, StepInputs, StepOutputs, get_recipe
from wmrl.interfaces import Executor, Policy, Scaffold, WorldModel
from wmrl.tasks.spec import Task
from wmrl.training.config import ConfigError, TrainConfig, config_to_dict, load_config, save_config, validate
from wmrl.training.ledger import Ledger, format_ledger
from wmrl.training.rundir import RunDir, read_jsonl, rng_state, seed_everything, set_rng_state, \
    write_json_atomic

log = logging.getLogger(__name__)

class RunDirError(RuntimeError):
    """The run directory is not usable as asked (exists already, nothing to resume, ...)."""


@dataclass
class Components:
    """The parts the trainer drives, typed by the protocols of :mod:`wmrl.interfaces`.

    Attributes:
        train_tasks: tasks used for RL (non-empty). heldout_tasks: evaluation-only tasks.
        scaffold: the :class:`~wmrl.interfaces.Scaffold`.
        policy: the :class:`~wmrl.interfaces.Policy`.
        executor: the :class:`~wmrl.interfaces.Executor`.
        world_model: the :class:`~wmrl.interfaces.WorldModel` (None when the method uses none).
        close: called when training ends (stops executors, ...).
        refit_world_model: optional ``f(step) -> dict`` that refits the world model on the warm-up corpus
            plus anchors so far (``world_model.refresh_every_k``).
        info: what the builder reports about the parts (model name, corpus size, ...), for the run's log.
    """

    train_tasks: list[Task]
    heldout_tasks: list[Task]
    scaffold: Scaffold
    policy: Policy
    executor: Executor
    world_model: WorldModel | None = None
    close: Callable[[], None] | None = None
    refit_world_model: Callable[[int], dict[str, Any]] | None = None
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunSummary:
    """What :func:`run_training` returns (also written to ``summary.json``).

    Attributes:
        run_dir: the run directory. method: ``grpo``/``wm``/``wmrl``. status: ``completed``.
        steps: steps completed. wall_s: wall seconds of the whole run (across resumes).
        ledger: the ``ledger.json`` document. final_eval: ``{split: eval record}`` of the last evaluation.
        initial_eval: ``{split: eval record}`` of the step-0 evaluation (the policy before training,
            ``eval.at_start``), the same sampling seeds as the final one; empty when not evaluated.
        last_metrics: the last metrics.jsonl record. anchor_fraction: realised anchor fraction of groups.
        reward_true_mean_last: mean anchor reward over the last quarter of steps (None without anchors).
    """

    run_dir: Path
    method: str
    status: str
    steps: int
    wall_s: float
    ledger: dict[str, Any]
    final_eval: dict[str, Any]
    last_metrics: dict[str, Any]
    anchor_fraction: float | None
    reward_true_mean_last: float | None
    started_at: str = ""
    finished_at: str = ""
    initial_eval: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["run_dir"] = str(self.run_dir)
        d["ledger_totals"] = self.ledger.get("totals", {})
        return d


def select_tasks(task_ids: Sequence[str], m: int, step: int, seed: int) -> list[int]:
    """Indices of the M tasks of ``step`` (1-based): the task list is cycled through in a seeded
    shuffled order, reshuffled every pass (epoch). Pure function of its arguments, so a resumed run
    picks the same tasks."""
    n = len(task_ids)
    if n == 0:
        raise ValueError("no train tasks")
    out = []
    for j in range(m):
        k = (step - 1) * m + j
        epoch, pos = divmod(k, n)
        perm = np.random.default_rng([seed, epoch, 7919]).permutation(n)
        out.append(int(perm[pos]))
    return out


def sampling_seed(seed: int, step: int, stream: int = 0) -> int:
    """Seed of the policy's sampling at ``step`` (stream 0 = training, 1 = evaluation): a pure function,
    so a resumed run draws the same trajectories as an uninterrupted one."""
    return int(np.random.SeedSequence([seed, step, stream]).generate_state(1)[0])


def eval_sampling_seed(seed: int, step: int, split: str, has_heldout: bool) -> int:
    """Sampling seed of an evaluation at ``step``: stream 1 for the held-out tasks, and for the train
    tasks stream 2 when the run has held-out tasks (evaluated first) else 1; any other split (custom
    task lists) stream 1. One function for the trainer and ``wmrl eval``, so re-evaluating a checkpoint
    reproduces the trainer's own evaluation of that step."""
    return sampling_seed(seed, step, 2 if split == "train" and has_heldout else 1)


def anchor_fraction(cfg: TrainConfig) -> float:
    """The router's long-run fraction of anchor groups: 1 for ``grpo``, 0 for ``wm``, rho otherwise
    (:meth:`wmrl.core.recipe.Recipe.anchor_fraction`)."""
    return get_recipe(cfg.method).anchor_fraction(cfg.wmrl.anchor_fraction)


def recipe_settings(cfg: TrainConfig) -> RecipeSettings:
    """The recipe's hyper-parameters from the config (``optim`` advantages, ``wmrl`` calibration and fusion);
    the anchor window holds the same number of pairs as the calibrator."""
    w, o = cfg.wmrl, cfg.optim
    return RecipeSettings(normalize_std=o.normalize_std, adv_eps=o.adv_eps, calibrator_window=w.calibrator_window,
                          calibrator_min_anchors=w.calibrator_min_anchors, calibrator_fallback=w.calibrator_fallback,
                          window_pairs=w.calibrator_window, alpha_floor=w.alpha_floor, alpha_ceiling=w.alpha_ceiling,
                          fusion_min_pairs=w.fusion_min_pairs)


def _now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _status(r: Any) -> str:
    return str(getattr(r.status, "value", r.status))


def _mean(x: np.ndarray) -> float | None:
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else None


def _var(x: np.ndarray) -> float | None:
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    return float(x.var(ddof=1)) if x.size >= 2 else None


@dataclass
class StepBatch:
    """What one training step carries from stage to stage: B trajectories in M groups (arrays [B]
    unless said otherwise). Each stage fills its part:

    - generate: ``step``, ``tasks`` ([M]), ``batch`` (the policy's ``RolloutBatch``), ``gid`` (group ids).
    - route: ``anchor_groups`` ([M] bool), ``is_anchor``.
    - execute: ``r_true`` (NaN off anchors and on infrastructure failures), ``status`` (execution
      status or None), ``error`` (the execution's error message, or None), ``valid`` (False:
      infrastructure failure or no reward; dropped everywhere).
    - wm_predict: ``reward_wm`` (raw prediction r_hat; NaN when the world model is not used).
    - recipe: ``out`` (:class:`~wmrl.core.recipe.StepOutputs`: calibrated world-model reward, reward used,
      advantages, weights, statistics), ``cal_rec`` (the calibration.jsonl line, or None).
    - update: ``update`` (loss stats); wm_refresh: ``refresh`` (the refit's report, or None).
    """

    step: int
    tasks: list[Any]
    batch: Any
    gid: np.ndarray
    anchor_groups: np.ndarray = field(init=False)
    is_anchor: np.ndarray = field(init=False)
    reward_wm: np.ndarray = field(init=False)
    reward_true: np.ndarray = field(init=False)
    status: list[str | None] = field(init=False)
    error: list[str | None] = field(init=False)
    valid: np.ndarray = field(init=False)
    out: StepOutputs | None = None
    cal_rec: dict[str, Any] | None = None
    update: dict[str, Any] = field(default_factory=dict)
    refresh: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        B = self.B
        self.reward_wm = np.full(B, np.nan)
        self.reward_true = np.full(B, np.nan)
        self.status = [None] * B
        self.error = [None] * B
        self.valid = np.ones(B, dtype=bool)

    @property
    def B(self) -> int:
        return len(self.batch.completions)

    @property
    def M(self) -> int:
        return len(self.tasks)

    @property
    def anchor_idx(self) -> np.ndarray:
        """Indices of the anchor trajectories (executed)."""
        return np.flatnonzero(self.is_anchor)

    @property
    def a_ok(self) -> np.ndarray:
        """Anchor trajectories with a true reward (calibration pairs)."""
        return self.is_anchor & self.valid

    @property
    def n_infra(self) -> int:
        """Executions of this step dropped as infrastructure failures (or without a reward)."""
        return int((~self.valid).sum())

    @cached_property
    def completion_tokens(self) -> np.ndarray:
        """Completion length (tokens) per trajectory."""
        return self.batch.completion_mask.sum(dim=1).cpu().numpy()


@dataclass
class _AnchorRuns:
    """Anchor executions in flight: ``(future, request)`` by sample index, when each finished
    (``perf_counter``), the submission's start (``w0``) and trainer CPU (``submit_cpu``)."""

    w0: float
    futures: dict[int, tuple[Future, Any]] = field(default_factory=dict)
    done_at: dict[int, float] = field(default_factory=dict)
    submit_cpu: float = 0.0


class Trainer:
    """Runs the steps of one training run (create with :func:`run_training` / :func:`resume_training`)."""

    def __init__(self, cfg: TrainConfig, rd: RunDir, comps: Components, ledger: Ledger):
        import torch

        from wmrl.core.routing import make_router

        self.cfg, self.rd, self.c, self.ledger = cfg, rd, comps, ledger
        self.method = cfg.method
        self.recipe: Recipe = get_recipe(cfg.method)
        self.settings = recipe_settings(cfg)
        self.recipe_state = self.recipe.init_state(self.settings)
        w = cfg.wmrl
        self.router = make_router(w.router, fraction=anchor_fraction(cfg),
                                  min_every=(w.min_anchor_every or None) if self.recipe.anchors == "fraction" else None,
                                  seed=cfg.seed)
        self.params = list(comps.policy.trainable_parameters())
        if not self.params:
            raise RuntimeError("the policy has no trainable parameters (LoRA adapter missing?)")
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
        self.step = 0
        self.n_infra_total = 0
        self.started_at = _now_iso()
        self.wm_refreshed = False
        self.tb = None
        self._last_eval: dict[str, dict[str, Any]] = {}
        self._live: dict[str, Any] = {}

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The JSON part of a checkpoint (``trainer_state.json``)."""
        return {
            "step": self.step,
            "method": self.method,
            "recipe": self.recipe_state.state_dict(),
            "router": self.router.state_dict(),
            "ledger": self.ledger.state_dict(),
            "n_infra_total": self.n_infra_total,
            "line_counts": dict(self.rd.line_counts()),
            "started_at": self.started_at,
            "last_eval": self._last_eval,
            "world_model_in_checkpoint": self.wm_refreshed,
            "time": time.time(),
        }

    def save_checkpoint(self) -> Path:
        """Write ``checkpoints/step_NNNNNN`` atomically (policy adapter, optimizer, RNG, trainer state)."""
        import torch

        self.rd.sync_logs()
        with self.rd.write_checkpoint(self.step, keep=self.cfg.keep_checkpoints) as tmp:
            self.c.policy.save(tmp / "policy")
            torch.save(self.optimizer.state_dict(), tmp / "optimizer.pt")
            torch.save(rng_state(), tmp / "rng.pt")
            if self.wm_refreshed and self.c.world_model is not None:
                self.c.world_model.save(tmp / "world_model")
            (tmp / "trainer_state.json").write_text(json.dumps(_json_safe(self.state_dict()), indent=1))
        return self.rd.checkpoints / self.rd.checkpoint_name(self.step)

    def load_checkpoint(self, path: Path) -> None:
        """Restore everything :meth:`save_checkpoint` wrote (the policy, optimizer, RNG, calibrator,
        router, ledger, counters), then cut ``metrics.jsonl`` & co. and ``executions.sqlite`` back to
        the checkpoint's step, so that no step appears twice once the run continues.

        Every file is read before any counter changes, so a checkpoint that fails to load (a damaged
        file) can be followed by an earlier one.

        Raises:
            Exception: whatever reading a damaged file raises (the caller falls back).
        """
        import torch

        st = json.loads((path / "trainer_state.json").read_text())
        self.c.policy.load(path / "policy")
        opt_state = torch.load(path / "optimizer.pt", weights_only=False)
        rng = torch.load(path / "rng.pt", weights_only=False)
        wm_in_ckpt = bool(st.get("world_model_in_checkpoint"))
        if wm_in_ckpt and self.c.world_model is not None:
            self.c.world_model.load(path / "world_model")
        self.optimizer.load_state_dict(opt_state)
        # checkpoints written before the recipe object kept "calibrator" and "window" at the top level
        self.recipe_state.load_state_dict(st["recipe"] if "recipe" in st else
                                          {"calibrator": st["calibrator"], "window": st["window"]})
        self.router.load_state_dict(st["router"])
        self.ledger.load_state_dict(st["ledger"])
        self.n_infra_total = int(st["n_infra_total"])
        self.step = int(st["step"])
        self.started_at = st.get("started_at", self.started_at)
        self._last_eval = st.get("last_eval", {})
        self.wm_refreshed = wm_in_ckpt
        dropped = self.rd.truncate_logs(self.step, st.get("line_counts"))
        dropped["executions"] = truncate_execution_log(self.rd, self.step)
        set_rng_state(rng)
        self.rd.log_line(f"{_now_iso()} resumed from {path.name} (step {self.step}); dropped records "
                         f"after it: {dropped}")

    # ------------------------------------------------------------------ one step
    def train_step(self) -> dict[str, Any]:
        """Run step ``self.step + 1`` end to end (the pipeline of the module docstring); returns its
        metrics record. Each stage is timed under its ledger stage name."""
        L = self.ledger
        L.begin_step()
        with L.stage("generate"):
            sb = self._generate(self.step + 1)
        with L.stage("route"):
            self._route(sb)
        self._execute_and_predict(sb)  # stages execute || wm_predict (they overlap in time)
        with L.stage("recipe"):
            self._recipe(sb)
        with L.stage("update"):
            sb.update = self._update(sb.batch, sb.out.advantages, sb.out.weights, sb.valid)
        sb.refresh = self._refresh_world_model(sb.step)  # stage wm_refresh, every K steps (off by default)
        self.step = sb.step
        rec = self._metrics(sb)
        rec.update(L.end_step())
        samples = self._samples(sb)
        with L.stage("log"):
            self._log(rec, samples, sb.cal_rec)
        return rec

    # ------------------------------------------------------------------ the stages
    @property
    def _predicts(self) -> bool:
        """Whether the world model scores trajectories (a recipe that uses one, and a world model)."""
        return self.c.world_model is not None and self.recipe.uses_world_model

    def _generate(self, step: int) -> StepBatch:
        """Stage generate: M train tasks of ``step`` (:func:`select_tasks`), G programs each, sampled
        with the seed :func:`sampling_seed` (``step``) so a resumed run draws the same ones."""
        import torch

        cfg, c, ro = self.cfg, self.c, self.cfg.rollout
        idx = select_tasks([t.id for t in c.train_tasks], ro.tasks_per_step, step, cfg.seed)
        tasks = [c.train_tasks[i] for i in idx]
        with torch.no_grad():
            batch = c.policy.sample(tasks, c.scaffold, group_size=ro.group_size,
                                    max_new_tokens=ro.max_new_tokens, temperature=ro.temperature,
                                    top_p=ro.top_p, generator_seed=sampling_seed(cfg.seed, step))
        return StepBatch(step=step, tasks=tasks, batch=batch, gid=np.asarray(batch.group_ids, dtype=np.int64))

    def _route(self, sb: StepBatch) -> None:
        """Stage route: the router marks the anchor groups (``sb.anchor_groups``, ``sb.is_anchor``)."""
        sb.anchor_groups = np.asarray(self.router.route([t.id for t in sb.tasks], sb.step), dtype=bool)
        sb.is_anchor = sb.anchor_groups[sb.gid]
        self.ledger.add_groups(sb.M, int(sb.anchor_groups.sum()))

    def _execute_and_predict(self, sb: StepBatch) -> None:
        """Stages execute || wm_predict: the anchor programs run in the executor (futures) while the
        world model scores every trajectory; then the anchors' results are collected."""
        runs = self._submit_anchors(sb)
        if self._predicts:
            with self.ledger.stage("wm_predict"):
                sb.reward_wm = self._predict(sb)
        self._collect_anchors(sb, runs)

    def _submit_anchors(self, sb: StepBatch) -> _AnchorRuns:
        """Submit every anchor trajectory's program to the executor; returns the futures in flight."""
        from wmrl.execution.types import ExecutionRequest
        from wmrl.trajectory import Trajectory

        cfg, c, batch, gid, step = self.cfg, self.c, sb.batch, sb.gid, sb.step
        by_id = {t.id: t for t in sb.tasks}
        programs = list(batch.programs) if len(getattr(batch, "programs", []) or []) == sb.B else [
            c.scaffold.render(by_id[t], comp) for t, comp in zip(batch.task_ids, batch.completions)]
        runs = _AnchorRuns(w0=time.perf_counter())
        c0 = time.process_time()
        for i in sb.anchor_idx:
            req = ExecutionRequest(
                task=by_id[batch.task_ids[i]], program=programs[i], request_id=f"s{step}-g{gid[i]}-i{i}",
                time_limit_s=cfg.executor.time_limit_s,
                trajectory=Trajectory(
                    stream="anchor", run=cfg.name or cfg.method, step=step, group_id=int(gid[i]), sample=int(i),
                    task_id=batch.task_ids[i], prompt=batch.prompts[i], completion=batch.completions[i],
                    scaffold=c.scaffold.name, completion_tokens=int(sb.completion_tokens[i])))
            fut = c.executor.submit(req)
            fut.add_done_callback(lambda _f, _i=int(i): runs.done_at.__setitem__(_i, time.perf_counter()))
            runs.futures[int(i)] = (fut, req)
        runs.submit_cpu = time.process_time() - c0
        return runs

    def _predict(self, sb: StepBatch) -> np.ndarray:
        """The world model's raw predictions r_hat [B] (checked: right shape, finite)."""
        import torch

        B = sb.B
        with torch.no_grad():
            r_hat = np.asarray(self.c.world_model.predict(sb.batch.prompts, sb.batch.completions), dtype=np.float64)
        if r_hat.shape != (B,):
            raise RuntimeError(f"world model returned shape {r_hat.shape}, expected ({B},)")
        if not np.all(np.isfinite(r_hat)):
            raise RuntimeError(f"world model returned {int((~np.isfinite(r_hat)).sum())} non-finite "
                               f"predictions of {B}: was it fitted on rewards (see world_model_fit.json)?")
        return r_hat

    def _collect_anchors(self, sb: StepBatch, runs: _AnchorRuns) -> None:
        """Wait for the anchor executions (stage execute: from submission to the last one done) and set
        ``sb.reward_true``, ``sb.status``, ``sb.valid``. A future that raised is an infrastructure failure;
        infrastructure failures and reward-less results are not valid (no reward, counted)."""
        from wmrl.execution.pool import result_or_infra

        c2 = time.process_time()
        results: dict[int, Any] = {}
        for i, (fut, req) in runs.futures.items():
            results[i] = result_or_infra(fut, req)  # cancelled or failed executor: infrastructure error
            runs.done_at.setdefault(i, time.perf_counter())
        if runs.futures:
            self.ledger.add_stage("execute", max(runs.done_at.values(), default=runs.w0) - runs.w0,
                                  runs.submit_cpu + time.process_time() - c2)
            self.ledger.add_executions("anchor", results.values())
        for i, r in results.items():
            sb.status[i] = _status(r)
            sb.error[i] = (r.error or "")[-500:] or None
            if sb.status[i] == "infra_error" or r.reward is None:
                sb.valid[i] = False
            else:
                sb.reward_true[i] = float(r.reward)
        self.n_infra_total += sb.n_infra

    def _recipe(self, sb: StepBatch) -> None:
        """Stage recipe: the registered recipe maps the step's rewards to rewards used, advantages and
        weights (:meth:`wmrl.core.recipe.Recipe.step`) and learns this step's anchors; ``sb.cal_rec`` is the
        calibration.jsonl line (None without a world model)."""
        x = StepInputs(step=sb.step, group_ids=sb.gid, is_anchor=sb.is_anchor, valid=sb.valid,
                       reward_true=sb.reward_true, reward_wm=sb.reward_wm)
        sb.out = out = self.recipe.step(x, self.recipe_state, self.settings)
        cal, a_ok = out.calibration, sb.a_ok
        if cal is None:
            return
        r_hat, r_tilde, r_true = sb.reward_wm, out.reward_wm_calibrated, sb.reward_true
        sb.cal_rec = {
            "step": sb.step, "mode": cal["mode"], "n_window": cal["n_window"],
            "map_x": CALIBRATION_GRID.tolist(), "map_y": np.asarray(cal["map_y"]).tolist(),
            "anchor_wm": r_hat[a_ok].tolist(), "anchor_wm_calibrated": r_tilde[a_ok].tolist(),
            "anchor_true": r_true[a_ok].tolist(),
            "anchor_task_ids": [sb.batch.task_ids[i] for i in np.flatnonzero(a_ok)],
            "residual_var_raw": _var(r_true[a_ok] - r_hat[a_ok]),
            "residual_var_calibrated": _var(r_true[a_ok] - r_tilde[a_ok]),
            "diagnostics": cal["diagnostics"],
        }

    def _refresh_world_model(self, step: int) -> dict[str, Any] | None:
        """Stage wm_refresh: refit the world model on the anchors so far every
        ``world_model.refresh_every_k`` steps (off by default); returns the refit's report or None."""
        k = self.cfg.world_model.refresh_every_k
        if not (k and self.c.refit_world_model is not None and step % k == 0):
            return None
        with self.ledger.stage("wm_refresh"):
            refresh = self.c.refit_world_model(step)
        self.wm_refreshed = True
        return refresh

    def _metrics(self, sb: StepBatch) -> dict[str, Any]:
        """The step's metrics.jsonl record, without the ledger keys (docs/run-directory.md)."""
        r_hat, r_true, a_ok, out = sb.reward_wm, sb.reward_true, sb.a_ok, sb.out
        r_tilde = out.reward_wm_calibrated
        rec: dict[str, Any] = {
            "step": sb.step, "time": time.time(), "method": self.method,
            "n_groups": sb.M, "n_samples": sb.B,
            "n_anchor_groups": int(sb.anchor_groups.sum()), "n_wm_groups": int((~sb.anchor_groups).sum()),
            "n_infra_errors": sb.n_infra, "n_infra_errors_total": self.n_infra_total,
            "reward_true_mean": _mean(r_true[a_ok]),
            "valid_rate_anchor": (float(np.mean([s == "ok" for s in (sb.status[i] for i in sb.anchor_idx)]))
                                  if sb.anchor_idx.size else None),
            "reward_wm_mean": _mean(r_hat),
            "reward_wm_calibrated_mean": _mean(r_tilde),
            "reward_wm_anchor_mean": _mean(r_hat[a_ok]),
            "reward_used_mean": _mean(out.reward_used),
            "wm_bias": _mean(r_hat[a_ok] - r_true[a_ok]) if a_ok.any() else None,
            "wm_bias_calibrated": _mean(r_tilde[a_ok] - r_true[a_ok]) if a_ok.any() else None,
            "completion_tokens_mean": float(sb.completion_tokens.mean()) if sb.B else None,
            "scaffold_valid_rate": (float(np.mean(sb.batch.valid)) if getattr(sb.batch, "valid", None) else None),
        }
        rec.update(out.stats)
        rec.update(sb.update)
        if sb.refresh is not None:
            rec["wm_refresh_records"] = sb.refresh.get("n_records")
        return rec

    def _samples(self, sb: StepBatch) -> list[dict[str, Any]]:
        """The step's samples.jsonl lines (one per trajectory)."""
        batch, out, tokens = sb.batch, sb.out, sb.completion_tokens
        return [
            {"step": sb.step, "group": int(sb.gid[i]), "task_id": batch.task_ids[i],
             "stream": "anchor" if sb.is_anchor[i] else "wm",
             "reward_true": sb.reward_true[i], "status": sb.status[i], "error": sb.error[i],
             "reward_wm": sb.reward_wm[i], "reward_wm_calibrated": out.reward_wm_calibrated[i],
             "reward_used": out.reward_used[i], "advantage": out.advantages[i], "weight": out.weights[i], "dropped": not bool(sb.valid[i]), "completion_tokens": int(tokens[i]),
             "completion": batch.completions[i][:2000]}
            for i in range(sb.B)
        ]

    def _log(self, rec: dict[str, Any], samples: list[dict[str, Any]], cal_rec: dict[str, Any] | None) -> None:
        """Stage log: metrics.jsonl, samples.jsonl, calibration.jsonl, TensorBoard, train.log."""
        self.rd.append("metrics", rec)
        self.rd.append_many("samples", samples)
        if cal_rec is not None:
            self.rd.append("calibration", cal_rec)
        self._tb_scalars(rec)
        self.rd.log_line(_step_line(rec))

    # ------------------------------------------------------------------ stage update
    def _update(self, batch: Any, adv: np.ndarray, weights: np.ndarray, valid: np.ndarray) -> dict[str, Any]:
        """One AdamW step on the fused GRPO loss, micro-batched with exact token-mean rescaling.

        Rows with weight 0, or with advantage 0 when beta = 0, contribute exactly nothing to the
        gradient and are skipped. For ``token_mean`` the core loss divides by the micro-batch's mean
        loss-token count nbar_mb; each micro-batch loss is rescaled by nbar_mb / nbar (nbar over all
        valid rows of the step), so the accumulated gradient equals the full-batch one.
        """
        import torch

        from wmrl.core.losses import grpo_loss

        o = self.cfg.optim
        lens = batch.loss_mask.sum(dim=1).to(torch.float64).cpu().numpy()
        nbar = float(lens[valid].mean()) if valid.any() else 1.0
        rows = np.flatnonzero(valid & (weights != 0) & ((adv != 0) | (o.beta > 0)))
        out = {"loss": 0.0, "kl": None, "clip_frac": None, "grad_norm": None, "lr": o.lr,
               "update_rows": int(rows.size), "update_skipped": bool(rows.size == 0)}
        if rows.size == 0:
            return out
        self.optimizer.zero_grad(set_to_none=True)
        tot_tokens, clip_tok, kl_tok, loss_sum = 0.0, 0.0, 0.0, 0.0
        for s in range(0, rows.size, o.micro_batch):
            mb = rows[s:s + o.micro_batch].tolist()
            sub = batch.slice(mb)
            lp = self.c.policy.logprobs(sub)
            ref = None
            if o.beta > 0:
                with torch.no_grad():
                    ref = self.c.policy.ref_logprobs(sub)
            mask = sub.loss_mask.bool()
            loss, st = grpo_loss(
                lp, sub.old_logprobs.to(lp.dtype), torch.as_tensor(adv[mb], dtype=lp.dtype), mask,
                sample_weights=torch.as_tensor(weights[mb], dtype=lp.dtype), ref_logprobs=ref,
                clip_low=o.clip_low, clip_high=o.clip_high, beta=o.beta, aggregation=o.aggregation)
            if o.aggregation == "token_mean":
                nbar_mb = float(lens[mb].mean())
                loss = loss * (nbar_mb / max(nbar, 1e-12))
            loss.backward()
            n_tok = st["n_tokens"]
            tot_tokens += n_tok
            clip_tok += st["clip_frac"] * n_tok
            if math.isfinite(st["kl_mean"]):
                kl_tok += st["kl_mean"] * n_tok
            loss_sum += float(loss.detach())
        if o.grad_clip > 0:
            gn = torch.nn.utils.clip_grad_norm_(self.params, o.grad_clip)
        else:
            gn = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in self.params if p.grad is not None]))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        out.update(loss=loss_sum, clip_frac=clip_tok / max(tot_tokens, 1.0),
                   kl=(kl_tok / max(tot_tokens, 1.0)) if o.beta > 0 else None, grad_norm=float(gn))
        return out

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, *, in_step: bool) -> dict[str, dict[str, Any]]:
        """Real-execution evaluation of the current policy on held-out (and train) tasks; appends to
        ``eval.jsonl``. Time goes to the ``eval`` stage (inside a step) or phase (at the end)."""
        from wmrl.training.evaluation import evaluate_policy

        cfg, c, L = self.cfg, self.c, self.ledger
        splits = []
        if c.heldout_tasks:
            splits.append(("heldout", c.heldout_tasks))
        if cfg.eval.train_tasks:
            splits.append(("train", c.train_tasks))
        out = {}
        ctx = L.stage("eval") if in_step else L.phase("eval")
        with ctx:
            for split, tasks in splits:
                rec, results = evaluate_policy(
                    c.policy, c.scaffold, tasks, c.executor, step=self.step, split=split,
                    samples_per_task=cfg.eval.samples_per_task, max_new_tokens=cfg.rollout.max_new_tokens,
                    temperature=cfg.eval.temperature, top_p=cfg.rollout.top_p, run_name=cfg.name or cfg.method,
                    seed=eval_sampling_seed(cfg.seed, self.step, split, bool(c.heldout_tasks)))
                L.add_executions("eval", results)
                self.rd.append("eval", rec)
                out[split] = rec
                if self.tb is not None:
                    for k in ("mean_percentile", "valid_rate", "medal_rate", "best_percentile_mean"):
                        if rec.get(k) is not None:
                            self.tb.add_scalar(f"eval_{split}/{k}", rec[k], self.step)
                self.rd.log_line(f"{_now_iso()} eval step {self.step} {split}: percentile "
                                 f"{_fmt(rec['mean_percentile'])} valid {_fmt(rec['valid_rate'])} "
                                 f"medals {rec['medals']}")
        self._last_eval.update(out)
        return out

    # ------------------------------------------------------------------ logging helpers
    def _tb_scalars(self, rec: dict[str, Any]) -> None:
        if self.tb is None:
            return
        for k, v in rec.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("step", "time") \
                    and math.isfinite(float(v)):
                self.tb.add_scalar(k.replace(".", "/"), float(v), rec["step"])


def _fmt(x: Any, nd: int = 3) -> str:
    return "-" if x is None else (f"{x:.{nd}f}" if isinstance(x, float) else str(x))


def _step_line(rec: dict[str, Any]) -> str:
    return (f"{_now_iso()} step {rec['step']}: anchors {rec['n_anchor_groups']}/{rec['n_groups']} "
            f"r_true {_fmt(rec.get('reward_true_mean'))} r_wm {_fmt(rec.get('reward_wm_mean'))} "
            f"r_cal {_fmt(rec.get('reward_wm_calibrated_mean'))} alpha {_fmt(rec.get('alpha'))} "
            f"loss {_fmt(rec.get('loss'), 4)} infra {rec['n_infra_errors']} "
            f"wall {rec['step_wall_s']:.1f}s")


def _json_safe(obj: Any) -> Any:
    from wmrl.training.rundir import _clean

    return _clean(obj)


# ----------------------------------------------------------------------------------------------
# entry points


def _open_tb(rd: RunDir, purge_step: int | None) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except Exception as e:  # tensorboard missing: keep training, say so once
        log.warning("TensorBoard events disabled: %s", e)
        return None
    return SummaryWriter(log_dir=str(rd.tb), purge_step=purge_step)


def _default_run_dir(cfg: TrainConfig) -> str:
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return str(Path("runs") / f"{cfg.name or cfg.method}-{stamp}")


def run_training(config: TrainConfig, *, resume: bool = False,
                 components: Components | None = None,
                 stop_after_step: int | None = None,
                 progress: bool | None = None,
                 accept_edited_config: bool = False) -> RunSummary:
    """Train (or resume) one run and return its summary (the main API; ``wmrl train`` calls it).

    Args:
        config: the resolved config; ``config.run_dir`` None means ``runs/<method>-<timestamp>``.
        resume: continue the run in ``config.run_dir`` from its newest complete checkpoint (the one
            ``checkpoints/latest`` names, else the newest that is complete and loads, saying so); the
            config must match the saved one except the fields of :data:`RESUME_MUTABLE`. Logs and
            ``executions.sqlite`` are cut back to that step.
        components: parts to use instead of building them from the config (tests, benchmarks).
        stop_after_step: stop (as if killed) after this step's checkpoint; for tests and benchmarks.
        progress: override ``config.progress``.
        accept_edited_config: resume although ``config.yaml`` was edited since the run saved it.

    Returns:
        :class:`RunSummary` (also written to ``summary.json``).

    Raises:
        RunDirError: the run directory holds another run (without ``resume``); nothing to resume; no
            complete checkpoint although the run has done work; an edited ``config.yaml``.
        ConfigError, FileNotFoundError: an invalid config (checked here too), a config that differs
            from the saved one in a frozen field, or from the parts. A start (not a resume) that fails
            before its step-0 checkpoint removes the run directory it made.
    """
    import torch

    cfg = validate(config)  # also a config built in Python: finite numbers within their ranges
    if cfg.run_dir is None:
        cfg.run_dir = _default_run_dir(cfg)
    rd = RunDir(cfg.run_dir)
    candidates, passed_over = rd.resume_candidates() if rd.root.exists() else ([], [])
    latest = candidates[0] if candidates else None
    if resume:
        if not rd.config.is_file():
            raise RunDirError(f"{rd.root} has no config.yaml: nothing to resume (start it with --config)")
        edited = rd.config_edited()
        if edited and not accept_edited_config:
            raise RunDirError(f"{edited}: resuming with it would change the run's past; restore it, or resume "
                              f"with --accept-edited-config (accept_edited_config=True) to use the edited file")
        if edited:
            log.warning("%s; resuming with the edited file as asked", edited)
            rd.log_line(f"{_now_iso()} {edited}; resumed with it (--accept-edited-config)")
        try:
            changed = frozen_changes(load_config(rd.config), cfg)
        except ConfigError as e:
            raise RunDirError(f"{rd.config} cannot be read back: {e}") from None
        if changed:
            raise ConfigError(f"resume: the config differs from the run's saved config.yaml in {', '.join(changed)}, "
                              f"which would change the run's past; only {', '.join(RESUME_MUTABLE)} may change")
        if latest is None and _has_progress(rd):
            raise RunDirError(f"{rd.root} has no complete checkpoint to resume from ({'; '.join(passed_over)}); "
                              "continuing would repeat its steps: start a new run in another run_dir")
        if rd.summary.is_file() and latest is not None:
            done = json.loads(rd.summary.read_text())
            if done.get("status") == "completed" and done.get("steps", 0) >= cfg.optim.steps:
                log.info("run %s already completed %s steps", rd.root, done.get("steps"))
                return _summary_from_file(rd, done)
    else:
        if rd.root.exists() and (candidates or passed_over or rd.metrics.is_file() or rd.config.is_file()):
            raise RunDirError(f"{rd.root} already holds a run; continue it with `wmrl train --resume {rd.root}` "
                              f"or choose another run_dir")
    existed = set(os.listdir(rd.root)) if rd.root.is_dir() else None  # what a failed start must not remove
    fresh_start = latest is None
    try:
        rd.create()
        if not resume:
            save_config(cfg, rd.config)
            rd.save_config_hash()
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        seed_everything(cfg.seed)
        ledger = Ledger(method=cfg.method, anchor_fraction_configured=anchor_fraction(cfg))
        rd.log_line(f"{_now_iso()} {'resume' if resume else 'start'} method={cfg.method} run_dir={rd.root}")
        if resume and passed_over:
            msg = (f"resuming from {latest.name}, the newest complete checkpoint, because "
                   f"{'; '.join(passed_over)}") if latest is not None else (
                   "no checkpoint and nothing done yet: starting the run from step 0")
            log.warning("%s: %s", rd.root, msg)
            rd.log_line(f"{_now_iso()} {msg}")

        own_components = components is None
        if components is None:
            from wmrl.training.parts import build_components

            with ledger.phase("setup"):
                components = build_components(cfg, rd, ledger, resume=resume and latest is not None)
        trainer = Trainer(cfg, rd, components, ledger)
        if resume:
            # Only now that the parts are built does a resume touch the run: a resume that fails before
            # (a bad edited config, a missing model) leaves a finished run as it was.
            if rd.summary.is_file():
                rd.summary.unlink()
            save_config(cfg, rd.config)
            rd.save_config_hash()
    except BaseException:
        if fresh_start and not resume:
            _remove_fresh(rd, existed)
        raise
    try:
        if latest is not None:
            _load_newest(trainer, candidates, passed_over)
        else:
            try:
                rd.truncate_logs(0, {w: 0 for w in RunDir.JSONL})
                # step-0 checkpoint: warm-up and world-model fit (and their ledger) survive a kill
                trainer.save_checkpoint()
            except BaseException:
                if not resume:  # a start that never reached its first checkpoint leaves nothing behind
                    _remove_fresh(rd, existed)
                raise
        write_json_atomic(rd.ledger, ledger.to_json())
        trainer.tb = _open_tb(rd, purge_step=trainer.step + 1 if trainer.step > 0 else None)
        show = cfg.progress if progress is None else progress
        _loop(trainer, show, stop_after_step)
        if stop_after_step is not None and trainer.step < cfg.optim.steps:
            return _partial_summary(trainer)
        if cfg.eval.at_end and (trainer.c.heldout_tasks or cfg.eval.train_tasks):
            if not _evaluated_at(rd, trainer.step):
                trainer.evaluate(in_step=False)
        summary = _finish(trainer)
    finally:
        if trainer.tb is not None:
            trainer.tb.close()
        if own_components and components.close is not None:
            components.close()
    return summary


def truncate_execution_log(rd: RunDir, step: int) -> int:
    """Delete the executions of steps after ``step`` from ``executions.sqlite`` (see
    :meth:`wmrl.execution.log.ExecutionLog.truncate_after_step`); returns how many."""
    if not rd.executions.is_file():
        return 0
    from wmrl.execution.log import ExecutionLog

    with ExecutionLog(rd.executions) as lg:
        return lg.truncate_after_step(step)


def _has_progress(rd: RunDir) -> bool:
    """Whether the run directory holds any work: a checkpoint folder, a metrics record, an execution."""
    if rd.checkpoints.is_dir() and any(rd.checkpoints.glob("step_*")):
        return True
    if read_jsonl(rd.metrics):
        return True
    if rd.executions.is_file():
        from wmrl.execution.log import ExecutionLog

        with ExecutionLog(rd.executions) as lg:
            return lg.count() > 0
    return False


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            out.update(_flat(v, key))
        else:
            out[key] = v
    return out


def frozen_changes(saved: TrainConfig, new: TrainConfig) -> list[str]:
    """Keys whose value differs between the saved config of a run and ``new``, except those a resume
    may change (:data:`RESUME_MUTABLE`) and ``run_dir``."""
    a, b = _flat(config_to_dict(saved)), _flat(config_to_dict(new))
    return [k for k in sorted(set(a) | set(b))
            if k != "run_dir" and a.get(k) != b.get(k)
            and not any(k == m or (m.endswith(".") and k.startswith(m)) for m in RESUME_MUTABLE)]


def _remove_fresh(rd: RunDir, before: set[str] | None) -> None:
    """Undo a start that failed before its step-0 checkpoint: remove the folder it made, or, in a
    folder that existed already, only the entries it added (``before``: the names that were there)."""
    import shutil

    if before is None:
        shutil.rmtree(rd.root, ignore_errors=True)
        return
    for p in list(rd.root.iterdir()) if rd.root.is_dir() else []:
        if p.name in before:
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


def _load_newest(trainer: "Trainer", candidates: list[Path], notes: list[str]) -> Path:
    """Load the first of ``candidates`` that loads; a damaged one is passed over (said in the log).

    Raises:
        RunDirError: none loads (one line naming each and why).
    """
    tried = list(notes)
    for i, ck in enumerate(candidates):
        try:
            trainer.load_checkpoint(ck)
        except Exception as e:  # noqa: BLE001 - a damaged file in a checkpoint: try the one before
            why = " ".join(f"{type(e).__name__}: {e}".split())[:200]
            tried.append(f"{ck.name} does not load ({why})")
            log.warning("%s: checkpoint %s does not load (%s)", trainer.rd.root, ck.name, why)
            continue
        if i > 0:
            msg = f"resumed from {ck.name} because {'; '.join(tried[len(notes):])}"
            log.warning("%s: %s", trainer.rd.root, msg)
            trainer.rd.log_line(f"{_now_iso()} {msg}")
        return ck
    raise RunDirError(f"{trainer.rd.root} has no checkpoint that loads ({'; '.join(tried)}); continuing would "
                      "repeat its steps: start a new run in another run_dir")


def _evaluated_at(rd: RunDir, step: int) -> bool:
    return any(r.get("step") == step and r.get("checkpoint") is None for r in read_jsonl(rd.eval))


def _loop(trainer: Trainer, show: bool, stop_after_step: int | None) -> None:
    cfg = trainer.cfg
    total = cfg.optim.steps
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn

    console = Console(stderr=True)
    live = show and console.is_terminal
    prog = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                    TextColumn("{task.fields[info]}"), console=console, disable=not live)
    with prog:
        task = prog.add_task(f"{cfg.method} train", total=total, completed=trainer.step, info="")
        if cfg.eval.at_start and trainer.step == 0 and not _evaluated_at(trainer.rd, 0):
            trainer.evaluate(in_step=False)
        while trainer.step < total:
            rec = trainer.train_step()
            s = trainer.step
            if cfg.eval.every_k and s % cfg.eval.every_k == 0 and s < total:
                trainer.evaluate(in_step=True)
            if s % cfg.checkpoint_every == 0 or s == total or s == stop_after_step:
                with trainer.ledger.stage("checkpoint"):
                    trainer.save_checkpoint()
                write_json_atomic(trainer.rd.ledger, trainer.ledger.to_json())
            held = trainer._last_eval.get("heldout", {}).get("mean_percentile")
            info = (f"r_true {_fmt(rec.get('reward_true_mean'))} r_wm {_fmt(rec.get('reward_wm_calibrated_mean'))} "
                    f"alpha {_fmt(rec.get('alpha'), 2)} held-out {_fmt(held)}")
            prog.update(task, completed=s, info=info)
            if show and not live:
                console.print(_step_line(rec), highlight=False)
            if stop_after_step is not None and s >= stop_after_step:
                break


def _partial_summary(trainer: Trainer) -> RunSummary:
    return RunSummary(run_dir=trainer.rd.root, method=trainer.method, status="stopped", steps=trainer.step,
                      wall_s=trainer.ledger.wall_s(), ledger=trainer.ledger.to_json(), final_eval={},
                      last_metrics=(read_jsonl(trainer.rd.metrics) or [{}])[-1], anchor_fraction=None,
                      reward_true_mean_last=None, started_at=trainer.started_at)


def _finish(trainer: Trainer) -> RunSummary:
    rd, L = trainer.rd, trainer.ledger
    metrics = read_jsonl(rd.metrics)
    last_q = metrics[-max(1, len(metrics) // 4):] if metrics else []
    rt = [m["reward_true_mean"] for m in last_q if m.get("reward_true_mean") is not None]
    led = L.to_json()
    evals = read_jsonl(rd.eval)
    final_eval: dict[str, Any] = {}
    initial_eval: dict[str, Any] = {}
    for r in evals:
        if r.get("checkpoint") is None:
            final_eval[r["split"]] = r
            if r.get("step") == 0:
                initial_eval.setdefault(r["split"], r)
    summary = RunSummary(
        run_dir=rd.root, method=trainer.method, status="completed", steps=trainer.step, wall_s=L.wall_s(),
        ledger=led, final_eval=final_eval, last_metrics=metrics[-1] if metrics else {},
        anchor_fraction=led["groups"]["anchor_fraction"], reward_true_mean_last=float(np.mean(rt)) if rt else None,
        started_at=trainer.started_at, finished_at=_now_iso(), initial_eval=initial_eval)
    write_json_atomic(rd.ledger, led)
    write_json_atomic(rd.summary, summary.to_dict())
    rd.log_line(f"{_now_iso()} finished: {trainer.step} steps, wall {L.wall_s():.1f}s")
    return summary


def _summary_from_file(rd: RunDir, d: dict[str, Any]) -> RunSummary:
    return RunSummary(run_dir=rd.root, method=d["method"], status=d["status"], steps=d["steps"], wall_s=d["wall_s"],
                      ledger=d["ledger"], final_eval=d.get("final_eval", {}), last_metrics=d.get("last_metrics", {}),
                      anchor_fraction=d.get("anchor_fraction"), reward_true_mean_last=d.get("reward_true_mean_last"),
                      started_at=d.get("started_at", ""), finished_at=d.get("finished_at", ""),
                      initial_eval=d.get("initial_eval", {}))


RESUME_MUTABLE = ("optim.steps", "progress", "threads", "eval.", "executor.", "checkpoint_every",
                  "keep_checkpoints")


def resume_training(run_dir: str | Path, overrides: list[str] | None = None,
                    accept_edited_config: bool = False, **kw: Any) -> RunSummary:
    """Continue the run in ``run_dir`` from its latest checkpoint (``wmrl train --resume RUN_DIR``).

    The config is read back from ``run_dir/config.yaml``; ``overrides`` may change only fields that do
    not alter the trajectory so far (``optim.steps``, ``eval.*``, ``executor.*``, ``progress``, ``threads``,
    ``checkpoint_every``, ``keep_checkpoints``).

    ``config.yaml`` must be the file the run saved (its SHA-256 is kept in ``config.yaml.sha256``);
    an edited one is refused unless ``accept_edited_config`` (CLI ``--accept-edited-config``).

    Raises:
        RunDirError: no config.yaml in ``run_dir``, an edited one, or no checkpoint to continue from.
        ConfigError: an override of a frozen field.
    """
    rd = RunDir(run_dir)
    if not rd.config.is_file():
        raise RunDirError(f"{rd.root} does not exist: nothing to resume (pass the run directory of a run)"
                          if not rd.root.exists() else
                          f"{rd.root} has no config.yaml: not a run directory (nothing to resume)")
    edited = rd.config_edited()
    if edited and not accept_edited_config:
        raise RunDirError(f"{edited}: resuming with it would change the run's past; restore it, or resume "
                          f"with --accept-edited-config to use the edited file")
    for ov in overrides or []:
        key = ov.split("=", 1)[0].strip()
        if not any(key == m or (m.endswith(".") and key.startswith(m)) for m in RESUME_MUTABLE):
            raise ConfigError(f"--set {key} cannot change on --resume (it would change the run's past); allowed: "
                              f"{', '.join(RESUME_MUTABLE)}")
    cfg = load_config(rd.config, overrides)
    cfg.run_dir = str(rd.root)
    return run_training(cfg, resume=True, accept_edited_config=accept_edited_config, **kw)


def print_summary(summary: RunSummary, console: Any = None) -> None:
    """A clean end-of-run table (rich) plus the compute ledger."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    t = Table(title=f"wmrl train: {summary.method} ({summary.status})", show_header=True)
    t.add_column("quantity")
    t.add_column("value", justify="right")
    led = summary.ledger
    tot = led.get("totals", {})
    ex = led.get("executions", {})
    t.add_row("run dir", str(summary.run_dir))
    t.add_row("steps", str(summary.steps))
    t.add_row("wall time", f"{summary.wall_s:.1f} s")
    t.add_row("train compute", f"{tot.get('train_compute_cpu_s', 0):.1f} CPU-s")
    t.add_row("eval compute", f"{tot.get('eval_compute_cpu_s', 0):.1f} CPU-s")
    g = led.get("groups", {})
    t.add_row("groups (anchor / total)", f"{g.get('anchor')} / {g.get('total')}")
    t.add_row("anchor fraction (realised / configured)",
              f"{_fmt(g.get('anchor_fraction'))} / {_fmt(g.get('anchor_fraction_configured'))}")
    for k in ("warmup", "anchor", "eval"):
        e = ex.get(k, {})
        t.add_row(f"{k} executions", f"{e.get('count', 0)} ({e.get('infra_errors', 0)} infra errors, "
                                     f"{e.get('sandbox_cpu_s', 0):.1f} sandbox CPU-s)")
    m = summary.last_metrics
    t.add_row("last step: true reward (anchors)", _fmt(m.get("reward_true_mean")))
    t.add_row("last step: world-model reward (calibrated)", _fmt(m.get("reward_wm_calibrated_mean")))
    t.add_row("last step: alpha", _fmt(m.get("alpha")))
    for split, r in summary.final_eval.items():
        r0 = summary.initial_eval.get(split)
        if r0 is not None and r.get("step") != 0:
            p0, p1 = r0.get("mean_percentile"), r.get("mean_percentile")
            change = f" ({p1 - p0:+.3f})" if p0 is not None and p1 is not None else ""
            t.add_row(f"{split}: mean percentile, step 0 -> step {r.get('step')}",
                      f"{_fmt(p0)} -> {_fmt(p1)}{change}")
        else:
            t.add_row(f"{split} (step {r.get('step')}): mean percentile", _fmt(r.get("mean_percentile")))
        t.add_row(f"{split}: valid-submission rate", _fmt(r.get("valid_rate")))
        t.add_row(f"{split}: medals", " ".join(f"{k} {v}" for k, v in (r.get("medals") or {}).items()))
    console.print(t)
    console.print(format_ledger(led), highlight=False)


__all__ = ["Components", "RunSummary", "Trainer", "run_training", "resume_training", "print_summary",
           "select_tasks", "RunDirError", "config_to_dict"]

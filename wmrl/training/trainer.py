"""The text track's training loop on the step engine: a short linear pipeline of timed stages.

This file is over 500 lines because it holds each stage's method beside the checkpoint state and the per-step
logging that read the same batch; the step's algorithms are the engine's and the recipes'.

One step ``t`` (M groups of G trajectories; docs/architecture.md, "One step", says what each stage does)::

    generate -> route -> execute || wm_predict -> recipe -> update -> wm_refresh -> log   (-> eval, checkpoint)

Sampling, the anchors' execution requests and the world model's predictions are the Kaggle-task environment's
(:class:`wmrl.step.kaggle.KaggleEnvironment`); routing, execute || wm_predict (the engine's anchor stream,
synchronous or asynchronous with a staleness bound: :class:`wmrl.step.anchors.AnchorStream`) and the recipe are the
step engine's (:class:`wmrl.step.engine.StepEngine`), which writes the step's outcomes and predictions into its
batch.

With multi-turn episodes (``episode.max_turns`` K > 1) the environment is the multi-turn one
(:class:`wmrl.step.multiturn.MultiTurnKaggleEnvironment`): the groups are routed after turn 1 is generated, and the
engine lets the environment run turns 2..K (each turn's programs executed on the task's validation view for anchor
episodes || scored by the world model, the feedback in the next turn's prompt); the recipe then sees one trajectory
per episode (its final submission) and the update trains every turn's tokens with the episode's advantage
(:mod:`wmrl.training.multiturn`).

Infrastructure failures (:attr:`ExecutionStatus.INFRA_ERROR`, or an executor future that raised) are
dropped from the gradient, the baselines and the calibration, and counted.

The trainer talks to its parts only through :class:`Components` (task source, scaffold, policy,
world model, executor), built by :func:`wmrl.training.parts.build_components` from the config, or
injected by tests.

The run's lifecycle (start, resume, the loop, the summary) is the run kit's :mod:`wmrl.runs.lifecycle`, with the
text track's part in :mod:`wmrl.training.run`; the GRPO update is
:mod:`wmrl.training.update` and the run loop :mod:`wmrl.runs.loop`; the method (calibration, advantages, fusion
weights) is the registered recipe of
:mod:`wmrl.core.recipe`, called in stage ``recipe``; what a run prints is :mod:`wmrl.training.console`.
This file is the step pipeline and the state a checkpoint holds (about 600 lines: the stages share the
Trainer's state).
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from wmrl.core.episodes import finite_mean
from wmrl.core.ranking import policy_concentration
from wmrl.core.recipe import StepOutputs, calibration_record
from wmrl.core.staleness import UnanchoredSteps, late_clip
from wmrl.training.alarm import ExploitationWatch
from wmrl.training.config import SANDBOX_ENVIRONMENT, TrainConfig
from wmrl.step.anchors import AnchorStream, late_sample_lines, late_update_parts, recipe_inputs
from wmrl.runs.checkpoint import engine_state, environment_state
from wmrl.runs.ledger import Ledger
from wmrl.runs.rundir import RunDir, json_safe, rng_state, set_rng_state
from wmrl.runs.tracking import TrackerSet
from wmrl.step.batch import StepBatch
from wmrl.step.engine import StepEngine
from wmrl.step.environment import Rollouts, StatefulEnvironment
from wmrl.step.kaggle import KaggleEnvironment
from wmrl.training.components import Components, build_environment, eval_sampling_seed, now_iso
from wmrl.training.console import _fmt, _step_line
from wmrl.training.multiturn import add_turns, earlier_anchor_pairs, episode_metrics, update_parts
from wmrl.training.update import grpo_update
from wmrl.world_model.fidelity import FidelityRows
from wmrl.world_model.outcome import outcome_class, predicted_outcome_fields
from wmrl.execution.log import ExecutionLog
from wmrl.execution.types import program_hash
from wmrl.program_text import text_sha256
from wmrl.training.evaluation import episode_eval_kwargs, evaluate_policy, infra_fields
from wmrl.core.infra import check_infra
from wmrl.core.infra import group_alarms
from wmrl.core.recall import MeasuredRewards
from wmrl.step.verify import Verified, verify_favourites

log = logging.getLogger(__name__)


def _demoted(gid: np.ndarray, reward_wm: np.ndarray, v: Verified) -> int:
    """How many verified favourites scored, for real, below their group's mean world-model score: the
    favourites the verification took the world model's word away from."""
    n = 0
    for i in v.favourites:
        if np.isfinite(v.reward[i]) and v.reward[i] < float(np.mean(reward_wm[gid == gid[i]])):
            n += 1
    return n


def _var(x: np.ndarray) -> float | None:
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    return float(x.var(ddof=1)) if x.size >= 2 else None


class Trainer:
    """Runs the steps of one training run (create with :func:`run_training` / :func:`resume_training`)."""

    def __init__(self, cfg: TrainConfig, rd: RunDir, comps: Components, ledger: Ledger):
        import torch  # noqa: PLC0415 - heavy

        self.cfg, self.rd, self.c, self.ledger = cfg, rd, comps, ledger
        self.method = cfg.method
        self.engine = StepEngine.from_config(cfg.method, cfg.wmrl, seed=cfg.seed, normalize_std=cfg.optim.normalize_std,
                                             adv_eps=cfg.optim.adv_eps)
        # ``environment`` of the config, from the registry (multi-turn: run times of the run's and the warm-up
        # corpus's executions for the world model's observations)
        self.env = build_environment(cfg, comps, [rd.executions] + ([cfg.world_model.warmup_corpus]
                                                                   if cfg.world_model.warmup_corpus else []))
        self.params = list(comps.policy.trainable_parameters())
        if not self.params:
            raise RuntimeError("the policy has no trainable parameters (LoRA adapter missing?)")
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
        self.anchors: AnchorStream = self.engine.anchors
        self.step = 0
        self.n_infra_total = 0
        self.n_infra_alarms = 0  # steps whose infra errors raised the alarm
        # updates skipped without anchors
        a, alarm = cfg.wmrl.asynchronous, cfg.wmrl.alarm
        self.unanchored = UnanchoredSteps(a.steps_without_anchors, a.staleness, a.late_anchors)
        self.exploit = ExploitationWatch(alarm.response, alarm.threshold, alarm.drift, alarm.max_anchor_fraction,
                                         self.engine.fuses)
        self.started_at = now_iso()
        self.wm_refreshed = False
        self.fidelity = FidelityRows()  # the world model's predictions and the true outcomes of the anchors so far
        self.trackers = TrackerSet()  # the experiment trackers (wmrl.runs.tracking), opened by the run
        self._last_eval: dict[str, dict[str, Any]] = {}
        self._live: dict[str, Any] = {}

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The JSON part of a checkpoint (``trainer_state.json``)."""
        return {
            "step": self.step,
            "method": self.method,
            **self.engine.state_dict(),  # "recipe" (calibrator, window) and "router"
            "ledger": self.ledger.state_dict(),
            "n_infra_total": self.n_infra_total,
            "n_infra_alarms": self.n_infra_alarms,
            "exploit_alarm": self.exploit.state_dict(),
            "n_skipped_without_anchors": self.unanchored.total,
            "line_counts": dict(self.rd.line_counts()),
            "started_at": self.started_at,
            "last_eval": self._last_eval,
            "environment": self.env.state_dict() if isinstance(self.env, StatefulEnvironment) else {},
            "world_model_in_checkpoint": self.wm_refreshed,
            "fidelity": self.fidelity.state_dict(),
            "time": time.time(),
        }

    def save_checkpoint(self) -> Path:
        """Write ``checkpoints/step_NNNNNN`` atomically (policy adapter, optimizer, RNG, trainer state)."""
        import torch  # noqa: PLC0415 - heavy

        self.rd.sync_logs()
        with self.rd.write_checkpoint(self.step, keep=self.cfg.keep_checkpoints) as tmp:
            self.c.policy.save(tmp / "policy")
            torch.save(self.optimizer.state_dict(), tmp / "optimizer.pt")
            torch.save(rng_state(), tmp / "rng.pt")
            if self.wm_refreshed and self.c.world_model is not None:
                self.c.world_model.save(tmp / "world_model")
            (tmp / "trainer_state.json").write_text(json.dumps(json_safe(self.state_dict()), indent=1))
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
        import torch  # noqa: PLC0415 - heavy

        st = json.loads((path / "trainer_state.json").read_text())
        self.c.policy.load(path / "policy")
        opt_state = torch.load(path / "optimizer.pt", weights_only=False)
        rng = torch.load(path / "rng.pt", weights_only=False)
        wm_in_ckpt = bool(st.get("world_model_in_checkpoint"))
        if wm_in_ckpt and self.c.world_model is not None:
            self.c.world_model.load(path / "world_model")
        self.optimizer.load_state_dict(opt_state)
        self.engine.load_state_dict(engine_state(st))  # every saved shape (wmrl.runs.checkpoint)
        self.ledger.load_state_dict(st["ledger"])
        self.n_infra_total = int(st["n_infra_total"])
        self.n_infra_alarms = int(st.get("n_infra_alarms", 0))  # absent from runs saved before the alarm
        self.exploit.load_state_dict(st.get("exploit_alarm"))
        # the anchors in flight at the checkpoint are lost (anchors_lost): a new fill, in_a_row from 0
        self.unanchored.total, self.unanchored.in_a_row = int(st.get("n_skipped_without_anchors", 0)), 0
        self.step = int(st["step"])
        self.started_at = st.get("started_at", self.started_at)
        self._last_eval = st.get("last_eval", {})
        env_state = environment_state(st)
        if env_state and isinstance(self.env, StatefulEnvironment):
            self.env.load_state_dict(env_state)
        self.wm_refreshed = wm_in_ckpt
        self.fidelity.load_state_dict(st.get("fidelity"))  # absent from runs saved before the fidelity card
        dropped = self.rd.truncate_logs(self.step, st.get("line_counts"))
        dropped["executions"] = truncate_execution_log(self.rd, self.step)
        set_rng_state(rng)
        self.rd.log_line(f"{now_iso()} resumed from {path.name} (step {self.step}); dropped records "
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
        self._execute_and_predict(sb)  # stages execute || wm_predict (they overlap in time); multi-turn: turns 2..K
        if self.cfg.wmrl.routing.verify_favourites and self._predicts:
            with L.stage("verify"):
                self._verify(sb)
        with L.stage("recipe"):
            self._recipe(sb)
        with L.stage("update"):
            sb.update = self._update(sb)
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
        return self.c.world_model is not None and self.engine.uses_world_model

    def _generate(self, step: int) -> StepBatch:
        """Stage generate: M train tasks of ``step``, G programs each (:meth:`KaggleEnvironment.sample`: seeded by
        ``step``, so a resumed run draws the same ones)."""
        ro = self.env.sample(self.c.policy, step)
        return StepBatch(step=step, tasks=ro.tasks, batch=ro.data, gid=ro.group_ids, group_keys=ro.group_keys)

    @staticmethod
    def _rollouts(sb: StepBatch) -> Rollouts:
        """The step's trajectories as the environment's :class:`~wmrl.step.environment.Rollouts`."""
        return Rollouts(step=sb.step, group_keys=sb.group_keys, group_ids=sb.gid, data=sb.batch, tasks=sb.tasks)

    def _route(self, sb: StepBatch) -> None:
        """Stage route: the router marks the anchor groups (``sb.anchor_groups``, ``sb.is_anchor``)."""
        sb.anchor_groups = self.engine.route(sb.group_keys, sb.step)
        sb.is_anchor = sb.anchor_groups[sb.gid]
        self.ledger.add_groups(sb.M, int(sb.anchor_groups.sum()))

    def _execute_and_predict(self, sb: StepBatch) -> None:
        """Stages execute || wm_predict (:meth:`StepEngine.measure`: the anchor programs run in the executor while
        the world model scores every trajectory; then the anchor stream consumes what the staleness bound allows;
        an environment with later turns runs them, :meth:`StepEngine.extend`) and count the infrastructure
        failures."""
        n_late_infra = self.anchors.n_late_infra
        sb.late = self.engine.measure(self.env, self._rollouts(sb), sb, self.ledger, predict=self._predicts,
                                      policy=self.c.policy)
        self.n_infra_total += sb.n_infra + self.anchors.n_late_infra - n_late_infra
        if sb.episodes is None:  # multi-turn steps measure their feedback's fidelity instead (episode_metrics)
            self._track_fidelity(sb)

    def _programs(self, sb: StepBatch) -> list[str]:
        """The step's B programs (the batch's, else the scaffold's rendering of each completion)."""
        return self.env.programs(self._rollouts(sb))

    def _track_fidelity(self, sb: StepBatch) -> None:
        """The step's anchors consumed now join :attr:`fidelity`: the world model's prediction, the true reward, the
        true class (:func:`outcome_class` of the executed program, so a program that cannot compile is a syntax
        error whatever the scaffold; None for an infrastructure error or a missing reward), groups
        ``(step, group)``. Late anchors of earlier steps (``wmrl.asynchronous.staleness`` > 0) are not added."""
        idx = [int(i) for i in sb.anchor_idx if sb.status[i] is not None]
        if not (self._predicts and idx):
            return
        programs = self._programs(sb)
        cls = [outcome_class(programs[i], sb.status[i]) if sb.valid[i] else None for i in idx]
        pred = sb.outcome_wm.take(idx) if sb.outcome_wm is not None else sb.reward_wm[idx]
        self.fidelity.add(pred, sb.reward_true[idx], cls, [(sb.step, int(sb.gid[i])) for i in idx])

    def _update(self, sb: StepBatch) -> dict[str, Any]:
        """Stage update: :func:`grpo_update` on the step's rows (multi-turn: every turn's rows with their episode's
        advantage, :func:`wmrl.training.multiturn.update_parts`; asynchronous anchors: the late groups' rows)."""
        o, out = self.cfg.optim, sb.out
        if sb.skip_update:  # anchors in flight and none arrived: no row, so no optimiser step (docs/scaling.md)
            return grpo_update(self.c.policy, self.optimizer, self.params, sb.batch, out.advantages, np.zeros(sb.B),
                               sb.valid, o)
        if sb.episodes is not None:
            batch, adv, w, valid, extra = update_parts(sb.episodes, out.advantages, out.weights, sb.valid,
                                                       o.aggregation)
            return grpo_update(self.c.policy, self.optimizer, self.params, batch, adv, w, valid, o, extra)
        lo = sb.late_out
        assert lo is not None, "stage recipe sets the late rows' outputs"
        return grpo_update(self.c.policy, self.optimizer, self.params, sb.batch, out.advantages, out.weights, sb.valid,
                           o, late_update_parts(sb.late, lo.advantages, lo.weights),
                           late_clip(self.cfg.wmrl.asynchronous.late_ratio_max))

    def _recipe(self, sb: StepBatch) -> None:
        """Stage recipe: the registered recipe maps the step's rewards to rewards used, advantages and
        weights (:meth:`wmrl.core.recipe.Recipe.step`) and learns this step's anchors; ``sb.cal_rec`` is the
        calibration.jsonl line (None without a world model)."""
        late, mode, B = sb.late, self.cfg.wmrl.asynchronous.late_anchors, sb.B
        recalled = self._recalled(sb) if sb.verified is None else sb.verified
        sb.recalled = None if recalled is None else ~sb.is_anchor & np.isfinite(recalled)
        full = self.engine.run_recipe(recipe_inputs(sb, late, mode, recalled))
        def rows(sl: slice, stats: dict[str, Any], calibration: dict[str, Any] | None) -> StepOutputs:
            return StepOutputs(full.reward_wm_calibrated[sl], full.reward_used[sl], full.advantages[sl],
                               full.weights[sl], stats, calibration)

        sb.out = out = rows(slice(None, B), full.stats, full.calibration)
        sb.late_out = late_out = rows(slice(B, None), {}, None)  # late anchor rows in this step's loss (gradient)
        own_in_flight = int((sb.anchor_groups & ~np.isin(np.arange(sb.M), sb.gid[sb.is_anchor])).sum())
        sb.skip_update = self.unanchored.decide(own_in_flight, int(full.stats["n_anchor_samples"]))
        late_tilde = None
        if late is not None and late.n:  # gradient mode: calibrated with the step; calibration mode: learned now
            late_tilde = (late_out.reward_wm_calibrated if mode == "gradient" else self.engine.learn_late(
                sb.step, late.origin_steps, late.group_ids, late.reward_true, late.reward_wm))
        # over the bound: calibration only
        over = self.anchors.learn_over_bound(self.engine.recipe, self.engine.state, sb.step)
        a_ok = sb.a_ok
        sb.exploit = self.exploit.observe(sb.step, sb.gid[a_ok], sb.reward_true[a_ok], out.reward_wm_calibrated[a_ok],
                                          sb.reward_wm[a_ok], self.engine.router,
                                          None if self.c.refit_world_model is None else self._refit_now,
                                          lambda m: self.rd.log_line(f"{now_iso()} {m}"))
        sb.cal_rec = calibration_record(sb.step, out, sb.reward_wm, sb.reward_true, a_ok)
        if sb.cal_rec is None:
            return
        r_hat, r_tilde, r_true = sb.reward_wm, out.reward_wm_calibrated, sb.reward_true
        sb.cal_rec.update(anchor_task_ids=[sb.batch.task_ids[i] for i in np.flatnonzero(a_ok)],
                          residual_var_raw=_var(r_true[a_ok] - r_hat[a_ok]),
                          residual_var_calibrated=_var(r_true[a_ok] - r_tilde[a_ok]))
        sb.cal_rec.update(over)
        if late is not None and late_tilde is not None:  # asynchronous anchors: earlier steps' pairs, after the map
            sb.cal_rec.update(late_wm=late.reward_wm.tolist(), late_wm_calibrated=late_tilde.tolist(),
                              late_true=late.reward_true.tolist(), late_origin_steps=late.origin_steps.tolist())
        if sb.episodes is not None and self.engine.fuses:  # multi-turn: the earlier anchor turns' pairs, learned last
            g, rt, rw = earlier_anchor_pairs(sb, sb.episodes)
            if g.size:
                self.engine.learn_late(sb.step, np.full(g.size, sb.step), g, rt, rw)
                sb.cal_rec.update(earlier_turns_wm=rw.tolist(), earlier_turns_true=rt.tolist())

    def _recalled(self, sb: StepBatch) -> np.ndarray | None:
        """[B] the measured rewards of the step's programs executed before step t (a recipe with ``recall``,
        :mod:`wmrl.core.recall`: the warm-up corpus and the anchors of earlier steps in the execution log), NaN
        elsewhere. None for a recipe without recall or without a world model, for multi-turn episodes (whose
        final program depends on the feedback of earlier turns), and for an environment other than the sandbox's
        (the execution log holds the sandbox's rewards, not that environment's)."""
        if not (self.engine.recipe.recall and self._predicts and self.cfg.episode.max_turns == 1
                and self.c.executed_records is not None and self.cfg.environment == SANDBOX_ENVIRONMENT):
            return None

        measured = MeasuredRewards()
        measured.add_records(r for r in self.c.executed_records() if r["trajectory"].step < sb.step)
        return measured.lookup(sb.batch.task_ids, sb.batch.completions)

    def _verify(self, sb: StepBatch) -> None:
        """Stage verify (``wmrl.routing.verify_favourites``, :mod:`wmrl.step.verify`): the favourite of every
        world-model group is executed unless the run executed it before; ``sb.verified`` becomes the recalled rewards
        with the verified ones filled in, and the metrics record the count."""
        recalled = self._recalled(sb)
        env = self.env
        assert isinstance(env, KaggleEnvironment), "the config allows wmrl.routing.verify_favourites with 'kaggle' only"
        v = verify_favourites(sb.gid, sb.reward_wm, np.flatnonzero(~sb.anchor_groups), sb.batch.task_ids,
                              sb.batch.completions, recalled,
                              lambda idx: env.requests(self._rollouts(sb), idx, sb.completion_tokens),
                              self.c.executor)
        self.ledger.add_executions("verify", v.results)
        base = np.full(sb.B, np.nan) if recalled is None else recalled
        sb.verified = np.where(np.isfinite(v.reward), v.reward, base)
        sb.env_stats.update(verify_favourites=int(v.favourites.size), verify_executed=int(v.executed.size),
                            verify_demoted=_demoted(sb.gid, sb.reward_wm, v))

    def _refit_now(self, step: int) -> None:
        """Refit the world model at once (the exploitation alarm's ``refit`` response, timed within stage
        recipe); checkpoints keep it."""
        assert self.c.refit_world_model is not None, "the alarm refits only with a refit_world_model part"
        self.c.refit_world_model(step)
        self.wm_refreshed = True

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
            "reward_true_mean": finite_mean(r_true[a_ok]),
            "valid_rate_anchor": (float(np.mean([s == "ok" for s in (sb.status[i] for i in sb.anchor_idx)]))
                                  if sb.anchor_idx.size else None),
            "reward_wm_mean": finite_mean(r_hat),
            "reward_wm_calibrated_mean": finite_mean(r_tilde),
            "reward_wm_anchor_mean": finite_mean(r_hat[a_ok]),
            "reward_used_mean": finite_mean(out.reward_used),
            "wm_bias": finite_mean(r_hat[a_ok] - r_true[a_ok]) if a_ok.any() else None,
            "wm_bias_calibrated": finite_mean(r_tilde[a_ok] - r_true[a_ok]) if a_ok.any() else None,
            "completion_tokens_mean": float(sb.completion_tokens.mean()) if sb.B else None,
            "scaffold_valid_rate": (float(np.mean(sb.batch.valid)) if getattr(sb.batch, "valid", None) else None),
        }
        rec.update(out.stats)
        rec.update(self._concentration(sb))
        rec.update(self._infra_alarm(sb))
        rec.update(sb.exploit)
        rec.update(sb.env_stats)  # favourite verification's counts (stage verify)
        if self.anchors.k:  # asynchronous anchors (docs/scaling.md): what was consumed, how stale, what still runs
            st: np.ndarray = (np.concatenate([np.zeros(int(a_ok.sum())), sb.late.staleness]) if sb.late is not None
                              else np.zeros(0))
            rec.update(anchor_samples_consumed=int(len(st)), anchor_late_samples=int(sb.late.n) if sb.late else 0,
                       anchor_staleness_mean=float(np.mean(st)) if len(st) else None,
                       anchor_staleness_max=int(np.max(st)) if len(st) else None,
                       anchors_in_flight=self.anchors.n_in_flight, **self.anchors.step_counts,
                       update_skipped_without_anchors=sb.skip_update,
                       updates_skipped_without_anchors_total=self.unanchored.total)
        if sb.episodes is not None:
            assert sb.feedback is not None, "multi-turn steps keep their feedback"
            rec.update(episode_metrics(sb, sb.episodes, sb.feedback.observations_wm))
        rec.update(sb.update)
        if sb.refresh is not None:
            rec["wm_refresh_records"] = sb.refresh.get("n_records")
        card = self.fidelity.card() if len(self.fidelity) else None  # cumulative, point values only
        if card is not None:
            rec.update({f"wm_fidelity.{k}": v for k, v in card.point_values().items()},
                       **{"wm_fidelity.n": card.n, "wm_fidelity.n_groups": card.n_groups})
        return rec

    @staticmethod
    def _concentration(sb: StepBatch) -> dict[str, Any]:
        """The policy's concentration this step (:func:`wmrl.core.ranking.policy_concentration`): distinct
        completions per group and the sequence-entropy estimate from the sampling log-probabilities."""
        batch = sb.batch
        lp = getattr(batch, "old_logprobs", None)
        mask = getattr(batch, "completion_mask", None)
        seq = None if lp is None or mask is None else (lp.float() * mask).sum(dim=1).double().numpy()
        return policy_concentration(sb.gid, list(batch.completions), seq)

    def _infra_alarm(self, sb: StepBatch) -> dict[str, Any]:
        """The infra alarm of the step's own executions (:mod:`wmrl.core.infra`): ``infra_rate``, ``infra_p_value``,
        ``infra_alarm`` over the step, ``infra_alarm_groups`` (groups whose infra errors alone are improbable) and
        ``infra_alarm_steps_total``; an alarm is logged (train.log and the console) as a warning."""

        e = self.cfg.executor
        idx = sb.anchor_idx
        bad = [sb.status[i] == "infra_error" for i in idx]
        check = check_infra(int(sum(bad)), int(idx.size), e.infra_background_rate, e.infra_alarm_alpha)
        groups = group_alarms(bad, sb.gid[idx].tolist(), e.infra_background_rate, e.infra_alarm_alpha)
        alarm = check.alarm or bool(groups)
        self.n_infra_alarms += int(alarm)
        if alarm:
            msg = (f"infra alarm at step {sb.step}: {check.n_infra} infra errors in {check.n} executions "
                   f"(p = {check.p_value:.2g} under the background rate {e.infra_background_rate:g}; groups {groups}): "
                   "more than the executor's faults explain; these outcomes are left out of the update, so a policy "
                   "that triggers them would censor its own grades. Inspect them with 'wmrl ledger' and the "
                   "execution log")
            log.warning(msg)
            self.rd.log_line(f"{now_iso()} WARNING {msg}")
        return {**infra_fields(check), "infra_alarm": alarm, "infra_alarm_groups": groups,
                "infra_alarm_steps_total": self.n_infra_alarms}

    def _samples(self, sb: StepBatch) -> list[dict[str, Any]]:
        """The step's samples.jsonl lines (one per trajectory; multi-turn: one per episode, with its turns)."""
        batch, out, tokens = sb.batch, sb.out, sb.completion_tokens
        programs = self._programs(sb)
        wm = predicted_outcome_fields(sb.outcome_wm if sb.episodes is None else None, sb.B)
        recalled = sb.recalled if sb.recalled is not None else np.zeros(sb.B, dtype=bool)
        first = {int(g): i for i, g in reversed(list(enumerate(sb.gid)))}  # a group's prompt is written once a step
        lines = [
            {"step": sb.step, "group": int(sb.gid[i]), "sample": i, "task_id": batch.task_ids[i],
             "stream": "anchor" if sb.is_anchor[i] else "wm", "recalled": bool(recalled[i]),
             "reward_true": sb.reward_true[i], "status": sb.status[i], "error": sb.error[i],
             "reward_wm": sb.reward_wm[i], **wm[i], "reward_wm_calibrated": out.reward_wm_calibrated[i],
             "reward_used": out.reward_used[i], "advantage": out.advantages[i],
             "weight": 0.0 if sb.skip_update else out.weights[i], "dropped": not bool(sb.valid[i]),
             "completion_tokens": int(tokens[i]), "program_sha256": program_hash(programs[i]),
             "prompt_sha256": text_sha256(batch.prompts[i]),
             "prompt": batch.prompts[i] if first[int(sb.gid[i])] == i else None,
             "completion": batch.completions[i][:2000],
             "logprobs": batch.token_logprobs(i) if sb.episodes is None else None}
            for i in range(sb.B)
        ]
        lo = sb.late_out
        if sb.late is not None and lo is not None and lo.weights.size:
            lines += late_sample_lines(sb.step, sb.late, lo.reward_wm_calibrated, lo.reward_used, lo.advantages,
                                       lo.weights)
        if sb.episodes is not None:
            add_turns(sb, lines)
        return lines

    def _log(self, rec: dict[str, Any], samples: list[dict[str, Any]], cal_rec: dict[str, Any] | None) -> None:
        """Stage log: metrics.jsonl, samples.jsonl, calibration.jsonl, the trackers (TensorBoard, ...), train.log."""
        self.rd.append("metrics", rec)
        self.rd.append_many("samples", samples)
        if cal_rec is not None:
            self.rd.append("calibration", cal_rec)
        self.trackers.log_metrics(rec["step"], rec)
        self.rd.log_line(_step_line(rec))

    # ------------------------------------------------------------------ stage update
    # ------------------------------------------------------------------ evaluation
    def evaluate(self, *, in_step: bool) -> dict[str, dict[str, Any]]:
        """Real-execution evaluation of the current policy on held-out (and train) tasks; appends to
        ``eval.jsonl``. Time goes to the ``eval`` stage (inside a step) or phase (at the end)."""

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
                    seed=eval_sampling_seed(cfg.seed, self.step, split, bool(c.heldout_tasks)),
                    **episode_eval_kwargs(cfg))
                L.add_executions("eval", results)
                e = cfg.executor
                rec.update(infra_fields(check_infra(rec["n_infra_errors"], rec["n_samples"], e.infra_background_rate,
                                                    e.infra_alarm_alpha)))
                if rec["infra_alarm"]:
                    msg = (f"infra alarm in the {split} evaluation at step {self.step}: {rec['n_infra_errors']} infra "
                           f"errors in {rec['n_samples']} executions (p = {rec['infra_p_value']:.2g}); the means leave "
                           "them out, so they may be censored")
                    log.warning(msg)
                    self.rd.log_line(f"{now_iso()} WARNING {msg}")
                self.rd.append("eval", rec)
                out[split] = rec
                self.trackers.log_eval(self.step, split, rec)
                self.rd.log_line(f"{now_iso()} eval step {self.step} {split}: percentile "
                                 f"{_fmt(rec['mean_percentile'])} valid {_fmt(rec['valid_rate'])} "
                                 f"medals {rec['medals']}")
        self._last_eval.update(out)
        return out


def truncate_execution_log(rd: RunDir, step: int) -> int:
    """Delete the executions of steps after ``step`` from ``executions.sqlite`` (see
    :meth:`wmrl.execution.log.ExecutionLog.truncate_after_step`); returns how many."""
    if not rd.executions.is_file():
        return 0

    with ExecutionLog(rd.executions) as lg:
        return lg.truncate_after_step(step)

"""The trainer's multi-turn episodes (``episode.max_turns`` K > 1; docs/multiturn.md).

One step with K > 1 replaces the single-turn stages generate / execute || wm_predict by the episode rollout of
:func:`wmrl.episodes.rollout.run_episodes`, whose feedback function is :class:`StepFeedback`:

- anchor episodes: every turn's program is executed for real on the task's validation view
  (:func:`wmrl.tasks.validation.validation_view`: fitted on the harness's split of train.csv, predicting the
  validation rows and the test rows at once); the observation holds the validation score, the run time and the
  error tail (:func:`wmrl.episodes.observation.observation_from_result`); the grade of the test rows is the turn's
  reward. Executions are counted per turn in the ledger.
- world-model episodes: nothing is executed; the world model scores the program (r_hat) and the observation is
  the template of :func:`wmrl.episodes.observation.observation_from_prediction` (a predicted validation score, or
  a failed run). The feedback uses the raw r_hat, not the calibrated r_tilde: measured on held-out programs
  (studies/multiturn/feedback_fidelity.py) the isotonic map left the validation score's error unchanged (0.111 raw,
  0.107-0.112 calibrated) but its flat steps tied programs, so revisions were ordered right less often (0.676
  raw, 0.53-0.56 calibrated). The episode's reward still goes through the recipe's calibration.
- every scored anchor turn also gets the world model's would-be observation, kept in ``samples.jsonl`` for the
  feedback's fidelity (:mod:`wmrl.episodes.fidelity`).

The recipe then runs on episodes unchanged (an episode's reward: its final submission; its groups: turn 1's);
the calibrator and the window also learn every earlier anchor turn's pair (r_hat, r) after the step
(:meth:`wmrl.core.recipe.Recipe.learn_late` at the same step). The update trains every turn's tokens with its
episode's advantage (:func:`update_parts`).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from wmrl.core.episodes import best_turn, finite_mean, reward_after_turn, turn_row_weights
from wmrl.episodes.observation import observation_from_prediction, observation_from_result
from wmrl.episodes.rollout import Episodes, TurnFeedback
from wmrl.step.anchors import anchor_request
from wmrl.step.batch import StepBatch
from wmrl.step.environment import Outcomes
from wmrl.execution.log import ExecutionLog
from pathlib import Path
from wmrl.episodes.fidelity import feedback_fidelity
from wmrl.episodes.rollout import run_episodes
from wmrl.tasks.validation import validation_view
from wmrl.execution.pool import result_or_infra
from wmrl.execution.types import program_hash


def _status(r: Any) -> str:
    return str(getattr(r.status, "value", r.status))


class StepFeedback:
    """The :data:`~wmrl.episodes.rollout.FeedbackFn` of one training step (module docstring).

    Args:
        trainer: the :class:`~wmrl.training.trainer.Trainer` (config, components, ledger, recipe state).
        sb: the step's :class:`~wmrl.training.trainer.StepBatch` after stage route (``is_anchor`` per episode).
    """

    def __init__(self, trainer: Any, sb: StepBatch) -> None:
        self.t, self.sb = trainer, sb
        self.cfg = trainer.cfg
        self.base_prompts = {t.id: trainer.c.scaffold.prompt(t) for t in sb.tasks}
        self.observations_wm: dict[tuple[int, int], Any] = {}  # (episode, turn) -> the world model's observation

    def __call__(self, turn: int, eps: Sequence[int], batch: Any) -> list[TurnFeedback]:
        t, sb, cfg, L = self.t, self.sb, self.cfg, self.t.ledger
        ec = cfg.episode
        by_id = {x.id: x for x in sb.tasks}
        tasks = [by_id[tid] for tid in batch.task_ids]
        views = {x.id: validation_view(x, ec.validation_fraction) for x in {x.id: x for x in tasks}.values()}
        anchor_rows = [r for r, e in enumerate(eps) if sb.is_anchor[e]]
        with L.stage("execute"):
            futures = {}
            for r in anchor_rows:
                e = eps[r]
                req = anchor_request(
                    views[tasks[r].id], batch.programs[r], step=sb.step, group=int(sb.gid[e]), sample=int(e),
                    run=cfg.name or cfg.method, prompt=self.base_prompts[tasks[r].id], completion=batch.completions[r],
                    scaffold=t.c.scaffold.name, completion_tokens=int(batch.completion_mask[r].sum()),
                    time_limit_s=cfg.executor.time_limit_s, turn=turn,
                    extra={"episode_prompt_chars": len(batch.prompts[r])})
                futures[r] = (t.c.executor.submit(req), req)
        r_hat = np.full(len(eps), np.nan)
        if t._predicts:
            with L.stage("wm_predict"):
                r_hat = t.predict_programs([x.id for x in tasks], [self.base_prompts[x.id] for x in tasks],
                                           list(batch.completions))
        with L.stage("execute"):
            results = {r: result_or_infra(f, req) for r, (f, req) in futures.items()}
        if results:
            L.add_executions("anchor", results.values(), turn=turn)
        out = []
        for r, e in enumerate(eps):
            task = views[tasks[r].id]  # the view: the observation states its validation fraction
            wm_obs = None
            if math.isfinite(r_hat[r]):  # the raw r_hat: the isotonic map's flat steps would tie revisions (module doc)
                wm_obs = observation_from_prediction(task, turn, float(r_hat[r]), t.wall_times.typical(task.id),
                                                     ec.wm_error_threshold)
                self.observations_wm[(int(e), turn)] = wm_obs
            if r in results:
                res = results[r]
                st = _status(res)
                ok = res.usable
                if st != "infra_error":
                    t.wall_times.record(task.id, float(res.wall_s))
                out.append(TurnFeedback(
                    observation=observation_from_result(res, task, turn, ec.error_chars),
                    reward_true=float(res.reward) if ok and res.reward is not None else math.nan,
                    reward_wm=float(r_hat[r]), status=st,
                    error=(res.error or "")[-500:] or None, valid=ok, executed=True, result=res))
            elif wm_obs is None:  # a recipe without a world model (anchor-only): its world-model groups end at turn 1
                out.append(TurnFeedback(observation=None))
            else:
                out.append(TurnFeedback(observation=wm_obs, reward_wm=float(r_hat[r]), status=wm_obs.status))
        return out


class TimedPolicy:
    """A policy whose ``sample`` is timed as the ledger's stage ``generate`` (the later turns of an episode)."""

    def __init__(self, policy: Any, ledger: Any) -> None:
        self._p, self._L = policy, ledger

    def sample(self, *args: Any, **kwargs: Any) -> Any:
        import torch  # noqa: PLC0415 - heavy

        with self._L.stage("generate"), torch.no_grad():
            return self._p.sample(*args, **kwargs)


def rollout_step(trainer: Any, sb: StepBatch, seed: int) -> Episodes:
    """Turns 2..K of the step's episodes (turn 1 is ``sb.batch``): :func:`wmrl.episodes.rollout.run_episodes` with
    the step's :class:`StepFeedback`; then :func:`fill_step`. Returns the episodes (also ``sb.episodes``)."""

    ro, wmc = trainer.cfg.rollout, trainer.cfg.world_model
    if not trainer.wall_times.seeded:  # the warm-up corpus's run times, so the first world-model feedback has one
        trainer.wall_times.seed_from_logs([trainer.rd.executions] + ([wmc.warmup_corpus] if wmc.warmup_corpus else []))
    sb.feedback = StepFeedback(trainer, sb)
    ep = run_episodes(TimedPolicy(trainer.c.policy, trainer.ledger), trainer.c.scaffold, sb.tasks, ro.group_size,
                      trainer.cfg.episode.max_turns, sb.feedback, max_new_tokens=ro.max_new_tokens,
                      temperature=ro.temperature, top_p=ro.top_p, seed=seed, first_turn=sb.batch)
    fill_step(sb, ep)
    return ep


def add_turns(sb: StepBatch, lines: list[dict[str, Any]]) -> None:
    """Complete the step's ``samples.jsonl`` lines (one per episode): the final submission's completion, the
    turns, whether the episode submitted early, and every turn (:func:`turn_records`)."""
    ep, fb = sb.episodes, sb.feedback
    assert ep is not None and fb is not None, "add_turns is for the steps of multi-turn episodes"
    turns = turn_records(sb, ep, fb.observations_wm)
    for i, line in enumerate(lines[:ep.B]):
        line.update(completion=ep.completion(i, int(ep.final_turn[i]))[:2000], n_turns=int(ep.n_turns[i]),
                    program_sha256=program_hash(ep.program(i, int(ep.final_turn[i]))),
                    final_turn=int(ep.final_turn[i]), submitted=bool(ep.submitted[i]),
                    turns=[{k: v for k, v in t.items() if k != "episode"} for t in turns if t["episode"] == i])


def fill_step(sb: StepBatch, ep: Episodes) -> None:
    """Set the step's per-episode arrays from the episodes: the real outcome of each executed final submission
    (:meth:`StepBatch.apply_outcomes`: ``reward_true``, ``status``, ``error``; not valid after an infrastructure
    failure), ``reward_wm`` of each final submission, and ``valid`` (False after an infrastructure failure)."""
    sb.episodes = ep
    finals = [ep.final(e) for e in range(ep.B)]
    ex = [e for e in range(ep.B) if finals[e].executed]
    sb.apply_outcomes(Outcomes(idx=np.asarray(ex, dtype=np.int64),
                               reward_true=np.asarray([finals[e].reward_true for e in ex], dtype=np.float64),
                               valid=np.asarray([bool(ep.valid[e]) for e in ex], dtype=bool),
                               status=[finals[e].status for e in ex], error=[finals[e].error for e in ex]))
    for e in range(ep.B):
        sb.reward_wm[e] = finals[e].reward_wm
        if not finals[e].executed:
            sb.error[e], sb.valid[e] = finals[e].error, bool(ep.valid[e])


def earlier_anchor_pairs(sb: StepBatch, ep: Episodes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (group ids, r, r_hat) of every valid anchor turn that is not its episode's final submission: the
    calibration pairs of the turns before the last ([N] arrays)."""
    g, rt, rw = [], [], []
    for e in range(ep.B):
        if not (sb.is_anchor[e] and ep.valid[e]):
            continue
        for j, fb in enumerate(ep.feedback[e]):
            if fb is None or j + 1 == ep.final_turn[e]:
                continue
            if fb.executed and math.isfinite(fb.reward_true) and math.isfinite(fb.reward_wm):
                g.append(int(sb.gid[e]))
                rt.append(fb.reward_true)
                rw.append(fb.reward_wm)
    return np.asarray(g, dtype=np.int64), np.asarray(rt, dtype=np.float64), np.asarray(rw, dtype=np.float64)


def update_parts(ep: Episodes, adv: np.ndarray, weights: np.ndarray, valid: np.ndarray, aggregation: str
                 ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[tuple[Any, np.ndarray, np.ndarray]]]:
    """The update's rows: ``(turn-1 batch, adv [R_1], weights [R_1], valid [R_1], extra parts)``, where each later
    turn is an extra part of its valid rows; every row has its episode's advantage and the row weight of
    :func:`wmrl.core.episodes.turn_row_weights` (so the loss is the episodes' loss with observations masked)."""
    rows = np.concatenate(ep.rows)
    tokens = np.concatenate([b.loss_mask.sum(dim=1).cpu().numpy() for b in ep.turns])
    w_rows = turn_row_weights(weights, rows, tokens, aggregation, row_valid=valid[rows])
    parts, start = [], 0
    for b, r in zip(ep.turns, ep.rows):
        sl = slice(start, start + r.size)
        parts.append((b, adv[r], w_rows[sl], valid[r]))
        start += r.size
    first, extra = parts[0], []
    for b, a, w, v in parts[1:]:
        keep = np.flatnonzero(v)
        if keep.size:
            extra.append((b.slice(keep.tolist()), a[keep], w[keep]))
    return first[0], first[1], first[2], first[3], extra


def episode_metrics(sb: StepBatch, ep: Episodes, observations_wm: dict[tuple[int, int], Any]) -> dict[str, Any]:
    """The step's multi-turn keys of ``metrics.jsonl`` (docs/run-directory.md): turns and submissions, the anchor
    episodes' grade after each turn (``reward_true_turn<j>_mean``, carried forward after a submission), the best
    of their turns, the world model's score after each turn, and the feedback's fidelity on this step's anchors."""

    K = ep.max_turns
    a_ok = sb.is_anchor & ep.valid
    after_true = reward_after_turn(ep.turn_array("reward_true"), ep.final_turn)
    after_wm = reward_after_turn(ep.turn_array("reward_wm"), ep.final_turn)
    rec: dict[str, Any] = {"episode_turns_mean": float(ep.n_turns.mean()) if ep.B else None,
                           "episode_submitted_rate": float(ep.submitted.mean()) if ep.B else None}
    for j in range(K):
        rec[f"reward_true_turn{j + 1}_mean"] = finite_mean(after_true[a_ok, j])
        rec[f"reward_wm_turn{j + 1}_mean"] = finite_mean(after_wm[ep.valid, j])
    rec["reward_true_best_turn_mean"] = finite_mean(best_turn(after_true)[a_ok])
    rec["reward_true_turn_gain"] = (None if rec[f"reward_true_turn{K}_mean"] is None else
                                    rec[f"reward_true_turn{K}_mean"] - rec["reward_true_turn1_mean"])
    fid = feedback_fidelity(turn_records(sb, ep, observations_wm))
    rec.update({f"feedback_{k}": v for k, v in fid.items() if k != "n_pairs_pairwise"})
    return rec


def turn_records(sb: StepBatch, ep: Episodes, observations_wm: dict[tuple[int, int], Any]) -> list[dict[str, Any]]:
    """One record per (episode, turn) with a program: its stream, the real and the world model's observations
    (dicts), the rewards. These are ``samples.jsonl``'s ``turns`` and the input of the fidelity."""
    out = []
    for e in range(ep.B):
        for j, fb in enumerate(ep.feedback[e]):
            if fb is None:
                continue
            wm = observations_wm.get((e, j + 1))
            out.append({"episode": e, "turn": j + 1, "stream": "anchor" if sb.is_anchor[e] else "wm",
                        "executed": fb.executed, "status": fb.status, "reward_true": fb.reward_true,
                        "reward_wm": fb.reward_wm, "final": j + 1 == int(ep.final_turn[e]),
                        "completion": ep.completion(e, j + 1)[:2000],
                        "program_sha256": program_hash(ep.program(e, j + 1)),
                        "observation": None if fb.observation is None else fb.observation.to_dict(),
                        "observation_wm": None if wm is None or not fb.executed else wm.to_dict(),
                        "prompt": ep.prompt(e, j + 1), "logprobs": ep.logprobs(e, j + 1)})
    return out


class WallTimes:
    """Median wall seconds of each task's real executions so far (the last 64): the run time the world model's
    observation shows, since a simulated observation should look like a real one. Seeded from the warm-up
    corpus's executions (:meth:`seed_from_logs`); None for a task that never ran."""

    def __init__(self) -> None:
        self._t: dict[str, list[float]] = {}
        self.seeded = False

    def seed_from_logs(self, paths: Sequence[Any]) -> None:
        """Add the wall seconds of the ``ok`` executions in the execution logs at ``paths`` (missing ones skipped)."""


        for p in paths:
            if Path(p).is_file():
                with ExecutionLog(Path(p)) as lg:
                    for r in lg.records({"status": "ok"}):
                        if r.get("wall_s") is not None:
                            self.record(str(r["task_id"]), float(r["wall_s"]))
        self.seeded = True

    def record(self, task_id: str, wall_s: float) -> None:
        self._t.setdefault(task_id, []).append(float(wall_s))
        del self._t[task_id][:-64]

    def typical(self, task_id: str) -> float | None:
        v = self._t.get(task_id)
        return float(np.median(v)) if v else None

    def state_dict(self) -> dict[str, list[float]]:
        return {k: list(v) for k, v in self._t.items()}

    def load_state_dict(self, d: dict[str, list[float]]) -> None:
        self._t = {k: [float(x) for x in v] for k, v in d.items()}
        self.seeded = self.seeded or bool(self._t)

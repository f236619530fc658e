"""Evaluation with real execution: sample the current policy on tasks, run every program, aggregate.

The aggregate (:func:`summarize_eval`) is a pure function of the execution results; its keys are
the ``eval.jsonl`` keys of docs/run-directory.md:

- ``mean_percentile``: mean leaderboard percentile (MLE-Dojo position score, docs/tasks.md) over all
  samples; program failures count with the task's failure reward; infrastructure failures are
  left out (and counted in ``n_infra_errors``); ``infra_alarm`` says when they are more than the executor's
  background rate explains (:mod:`wmrl.core.infra`), i.e. when the means may be censored.
- ``best_percentile_mean``: mean over tasks of the best sample's percentile (pass@k-style).
- ``valid_rate``: fraction of samples whose submission could be graded (status ``ok``).
- ``medals``: Kaggle medals (MLE-bench thresholds) counted over samples; ``medal_rate``,
  ``above_median_rate``: fractions of samples.
- ``mean_rpg``: mean DSBench relative performance gap over the samples of tasks rewarded by RPG
  (tasks without a leaderboard); ``mean_percentile`` then covers only the percentile tasks, and
  ``mean_reward`` all samples. Each ``per_task`` entry names its ``reward_kind`` and ``mean_reward``.
- ``mean_rpg_tasks``: DSBench's RPG ``max(0, (p - b) / (g - b))`` (``b`` the task's baseline score, ``g`` its
  gold score; :func:`wmrl.tasks.leaderboard.relative_performance_gap`) of every task that has both, whatever
  its reward kind: each task's mean over its samples (a failed program scores 0), averaged over the tasks as
  DSBench averages it; ``rpg_n_tasks`` says over how many, ``rpg_missing`` names each other task and why RPG
  is undefined there; ``per_task`` entries get ``rpg``. None when no task has both scores.
- ``sample_outcomes``: ``{task id: {"status": [G], "reward": [G], "best_valid_reward": [G]}}``, every sample
  of the task in sample order (infrastructure failures included, with ``reward`` None): the final submission's
  execution status and reward, and the best reward over the sample's turns whose submission was graded
  (status ``ok``; None when none was). Single-turn: ``best_valid_reward`` is the reward of a graded sample.
  What an evaluation protocol (:mod:`wmrl.training.protocol`) aggregates.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from wmrl.core.episodes import best_turn, finite_mean, reward_after_turn
from wmrl.core.infra import DEFAULT_ALPHA, DEFAULT_BACKGROUND_RATE, InfraCheck, check_infra
from wmrl.episodes.observation import observation_from_result
from wmrl.episodes.rollout import TurnFeedback, run_episodes
from wmrl.execution.types import ExecutionRequest
from wmrl.tasks.leaderboard import relative_performance_gap
from wmrl.tasks.validation import validation_view
from wmrl.trajectory import Trajectory

MEDALS = ("gold", "silver", "bronze")


def infra_fields(check: InfraCheck) -> dict[str, Any]:
    """The metrics keys of one infra-alarm verdict: ``infra_rate``, ``infra_p_value``, ``infra_alarm``."""
    return {"infra_rate": check.rate, "infra_p_value": check.p_value, "infra_alarm": check.alarm}


def _status(r: Any) -> str:
    return str(getattr(r.status, "value", r.status))


def _rpg_undefined(baseline: float | None, gold: float | None) -> str:
    """Why RPG is undefined for a task with these scores ('' when it is defined)."""
    if baseline is None and gold is None:
        return "no baseline and no gold score"
    if baseline is None:
        return "no baseline score"
    if gold is None:
        return "no gold score"
    if baseline == gold:
        return "its baseline and gold scores are equal"
    return ""


def rpg_bounds(tasks: Sequence[Any]) -> dict[str, tuple[float | None, float | None]]:
    """``{task id: (baseline_score, gold_score)}`` of ``tasks`` (None where a task gives none), for
    :func:`summarize_eval`."""
    return {t.id: (getattr(t, "baseline_score", None), getattr(t, "gold_score", None)) for t in tasks}


def summarize_eval(task_ids: Sequence[str], results: Sequence[Any], *, step: int, split: str,
                   checkpoint: str | None = None, reward_kinds: dict[str, str] | None = None,
                   rpg_scores: dict[str, tuple[float | None, float | None]] | None = None,
                   infra_background_rate: float = DEFAULT_BACKGROUND_RATE,
                   infra_alpha: float = DEFAULT_ALPHA) -> dict[str, Any]:
    """Aggregate execution results of one evaluation into an ``eval.jsonl`` record.

    Args:
        task_ids: [N] task id of each sample.
        results: [N] :class:`~wmrl.execution.types.ExecutionResult` (``status``, ``reward``,
            ``medal``, ``above_median``, ``cpu_s``, ``wall_s``), same order as ``task_ids``.
        step: the policy step evaluated (0 = initial policy).
        split: ``heldout`` or ``train``.
        checkpoint: checkpoint folder name, or None for the live policy.
        reward_kinds: ``{task id: "percentile" | "rpg"}`` (default: every task ``percentile``).
        rpg_scores: ``{task id: (baseline score, gold score)}`` (:func:`rpg_bounds`), raw metric values;
            a task missing here, or with either None, has no RPG (default: no task has one).
        infra_background_rate, infra_alpha: the infra alarm's background rate and false-alarm probability
            (:func:`wmrl.core.infra.check_infra`).

    Returns:
        dict with the keys listed in the module docstring plus ``step``, ``split``, ``checkpoint``,
        ``n_tasks``, ``n_samples``, ``n_infra_errors``, ``per_task``, ``sandbox_cpu_s``, and the infra alarm
        (``infra_rate``, ``infra_p_value``, ``infra_alarm``: more infra errors than the background explains,
        so the means may be censored).
        Means over zero samples are None.

    Raises:
        ValueError: ``task_ids`` and ``results`` differ in length.
    """
    if len(task_ids) != len(results):
        raise ValueError(f"task_ids ({len(task_ids)}) and results ({len(results)}) must have the same length")
    per_task: dict[str, dict[str, Any]] = {}
    kinds = reward_kinds or {}
    rewards, valid, medal_any, above = [], [], [], []
    pct: list[float] = []
    rpg: list[float] = []
    medals = {m: 0 for m in MEDALS}
    n_infra = 0
    cpu = 0.0
    for tid, r in zip(task_ids, results):
        cpu += float(r.cpu_s or 0.0)
        st = _status(r)
        if st == "infra_error" or r.reward is None:
            n_infra += 1
            continue
        rew = float(r.reward)
        ok = st == "ok"
        rewards.append(rew)
        (rpg if kinds.get(tid, "percentile") == "rpg" else pct).append(rew)
        valid.append(ok)
        medal = r.medal if ok else None
        if medal in medals:
            medals[medal] += 1
        medal_any.append(medal in medals)
        above.append(bool(r.above_median) if ok and r.above_median is not None else False)
        t = per_task.setdefault(tid, {"rewards": [], "valid": [], "scores": [], "medals": {m: 0 for m in MEDALS}})
        t["rewards"].append(rew)
        t["valid"].append(ok)
        t["scores"].append(float(r.score) if ok and r.score is not None else float("nan"))  # NaN: RPG 0
        if medal in medals:
            t["medals"][medal] += 1

    def _mean(x: list[float] | list[bool]) -> float | None:
        return float(np.mean(x)) if len(x) else None

    bounds = rpg_scores or {}
    rpg_task: dict[str, float] = {}
    rpg_missing: dict[str, str] = {}
    for tid in sorted(set(task_ids)):
        b, g = bounds.get(tid, (None, None))
        why = _rpg_undefined(b, g)
        if not why and tid not in per_task:
            why = "no graded sample (infrastructure errors only)"
        if why or b is None or g is None:  # why is empty only when both scores are there
            rpg_missing[tid] = why
            continue
        n = len(per_task[tid]["scores"])
        rpg_task[tid] = relative_performance_gap(per_task[tid]["scores"], [b] * n, [g] * n)
    pt = {
        tid: {"reward_kind": kinds.get(tid, "percentile"), "mean_reward": _mean(v["rewards"]),
              **({"rpg": rpg_task[tid]} if tid in rpg_task else {}),
              **({"mean_rpg": _mean(v["rewards"])} if kinds.get(tid) == "rpg" else
                 {"mean_percentile": _mean(v["rewards"])}),
              "best_percentile": float(max(v["rewards"])),
              "valid_rate": _mean(v["valid"]), "medals": v["medals"], "n": len(v["rewards"])}
        for tid, v in sorted(per_task.items())
    }
    return {
        "step": int(step),
        "split": split,
        "checkpoint": checkpoint,
        "n_tasks": len(set(task_ids)),
        "n_samples": len(results),
        "mean_percentile": _mean(pct),
        "mean_rpg": _mean(rpg),
        "mean_reward": _mean(rewards),
        "mean_rpg_tasks": _mean(list(rpg_task.values())),
        "rpg_n_tasks": len(rpg_task),
        "rpg_missing": rpg_missing,
        "best_percentile_mean": _mean([v["best_percentile"] for v in pt.values()]),
        "valid_rate": _mean(valid),
        "medals": medals,
        "medal_rate": _mean(medal_any),
        "above_median_rate": _mean(above),
        "n_infra_errors": n_infra,
        **infra_fields(check_infra(n_infra, len(results), infra_background_rate, infra_alpha)),
        "per_task": pt,
        "sandbox_cpu_s": cpu,
    }


def sample_outcomes(task_ids: Sequence[str], statuses: Sequence[str], rewards: Sequence[float | None],
                    best_valid: Sequence[float | None]) -> dict[str, dict[str, list[Any]]]:
    """The ``sample_outcomes`` record key (module docstring): the per-sample lists grouped by task.

    Args:
        task_ids: [N] task id of each sample (sample order).
        statuses: [N] execution status of each sample's final submission (``ok``, ``runtime_error``, ...,
            ``infra_error``).
        rewards: [N] reward of each final submission (None or NaN: not graded, an infrastructure failure).
        best_valid: [N] best reward over the sample's graded (status ``ok``) turns, None when there is none.

    Returns:
        ``{task id: {"status": [...], "reward": [...], "best_valid_reward": [...]}}``, tasks sorted, samples in
        their order; NaN rewards are stored as None.

    Raises:
        ValueError: the four sequences differ in length.
    """
    n = len(task_ids)
    if not len(statuses) == len(rewards) == len(best_valid) == n:
        raise ValueError(f"task_ids, statuses, rewards and best_valid must have one entry per sample; got {n}, "
                         f"{len(statuses)}, {len(rewards)}, {len(best_valid)}")

    def _num(x: float | None) -> float | None:
        return None if x is None or not np.isfinite(float(x)) else float(x)

    out: dict[str, dict[str, list[Any]]] = {}
    for tid, st, r, b in zip(task_ids, statuses, rewards, best_valid):
        t = out.setdefault(tid, {"status": [], "reward": [], "best_valid_reward": []})
        t["status"].append(str(st))
        t["reward"].append(_num(r))
        t["best_valid_reward"].append(_num(b))
    return dict(sorted(out.items()))


def evaluate_policy(policy: Any, scaffold: Any, tasks: Sequence[Any], executor: Any, *, step: int, split: str,
                    samples_per_task: int, max_new_tokens: int, temperature: float, top_p: float = 1.0,
                    checkpoint: str | None = None, run_name: str = "",
                    seed: int | None = None, max_turns: int = 1, validation_fraction: float = 0.2,
                    error_chars: int = 400, time_limit_s: float | None = None) -> tuple[dict[str, Any], list[Any]]:
    """Sample ``samples_per_task`` programs per task from ``policy`` and execute them all for real.

    With ``max_turns`` K > 1 each sample is a multi-turn episode (:func:`evaluate_episodes`): every turn is
    executed for real on the task's validation view and its honest feedback goes into the next turn's prompt.

    Args:
        policy: a :class:`wmrl.models.policy.Policy` (``sample(...) -> RolloutBatch`` with ``programs``).
        scaffold: the scaffold the policy was trained with.
        tasks: the tasks to evaluate on (one group each).
        executor: a :class:`wmrl.interfaces.Executor`.
        step, split, checkpoint: recorded in the result.
        samples_per_task, max_new_tokens, temperature, top_p: sampling settings.
        run_name: stored in each execution request's ``meta``.
        seed: sampling seed (None = the policy's default RNG).
        max_turns, validation_fraction, error_chars: multi-turn episodes (the config's ``episode`` section).
        time_limit_s: wall-clock limit of every execution, seconds (None: each task's own ``time_limit_s``).

    Returns:
        (record, results): the :func:`summarize_eval` record (plus ``sample_outcomes``, ``wall_s`` and ``time``) and
        the raw execution results in sample order (multi-turn: every turn's execution).
    """
    t0 = time.perf_counter()
    if not tasks:
        raise ValueError(f"no tasks to evaluate for split {split!r}")
    if max_turns > 1:
        return evaluate_episodes(policy, scaffold, tasks, executor, step=step, split=split,
                                 samples_per_task=samples_per_task, max_new_tokens=max_new_tokens,
                                 temperature=temperature, top_p=top_p, checkpoint=checkpoint, run_name=run_name,
                                 seed=seed, max_turns=max_turns, validation_fraction=validation_fraction,
                                 error_chars=error_chars, time_limit_s=time_limit_s)

    with torch.no_grad():
        batch = policy.sample(list(tasks), scaffold, group_size=samples_per_task, max_new_tokens=max_new_tokens,
                              temperature=temperature, top_p=top_p, generator_seed=seed)
    by_id = {t.id: t for t in tasks}
    programs = _programs(batch, scaffold, by_id)
    reqs = [
        ExecutionRequest(task=by_id[tid], program=prog, request_id=f"eval-{split}-s{step}-{i}",
                         time_limit_s=time_limit_s,
                         trajectory=Trajectory(stream="eval", run=run_name, step=step, group_id=int(g), sample=i,
                                               task_id=tid, prompt=p, completion=c, scaffold=scaffold.name,
                                               split=split, extra={"checkpoint": checkpoint}))
        for i, (tid, prog, g, p, c) in enumerate(zip(batch.task_ids, programs, batch.group_ids,
                                                    batch.prompts, batch.completions))
    ]
    results = executor.run_batch(reqs)
    rec = summarize_eval(batch.task_ids, results, step=step, split=split, checkpoint=checkpoint,
                         reward_kinds={t.id: getattr(t, "reward_kind", "percentile") for t in tasks},
                         rpg_scores=rpg_bounds(tasks))
    statuses = [_status(r) for r in results]
    rec["sample_outcomes"] = sample_outcomes(
        batch.task_ids, statuses, [r.reward for r in results],
        [r.reward if st == "ok" else None for r, st in zip(results, statuses)])
    rec["wall_s"] = time.perf_counter() - t0
    rec["time"] = time.time()
    return rec, results


def _programs(batch: Any, scaffold: Any, tasks_by_id: dict[str, Any]) -> list[str]:
    """The programs of a rollout batch: ``batch.programs`` when the policy rendered them, else rendered
    here with the scaffold."""
    progs = getattr(batch, "programs", None)
    if progs is not None and len(progs) == len(batch.completions):
        return list(progs)
    return [scaffold.render(tasks_by_id[t], c) for t, c in zip(batch.task_ids, batch.completions)]


def episode_eval_kwargs(cfg: Any) -> dict[str, Any]:
    """The multi-turn keyword arguments of :func:`evaluate_policy` from a ``TrainConfig``'s ``episode`` section."""
    e = cfg.episode
    return {"max_turns": e.max_turns, "validation_fraction": e.validation_fraction, "error_chars": e.error_chars}


def evaluate_episodes(policy: Any, scaffold: Any, tasks: Sequence[Any], executor: Any, *, step: int, split: str,
                      samples_per_task: int, max_new_tokens: int, temperature: float, top_p: float = 1.0,
                      checkpoint: str | None = None, run_name: str = "", seed: int | None = None,
                      max_turns: int = 2, validation_fraction: float = 0.2,
                      error_chars: int = 400, time_limit_s: float | None = None) -> tuple[dict[str, Any], list[Any]]:
    """Multi-turn evaluation: ``samples_per_task`` episodes of up to ``max_turns`` turns per task, every turn
    executed for real on the task's validation view (:func:`wmrl.tasks.validation.validation_view`), its
    observation (validation score, run time, error tail) shown to the next turn.

    Returns:
        (record, results): the :func:`summarize_eval` record of the final submissions, plus
        ``sample_outcomes`` (one entry per episode: its final submission, and its best graded turn),
        ``mean_percentile_turn`` ([K] mean grade of each episode's current submission after each turn; a
        submission carries forward), ``turn_gain`` (turn K minus turn 1), ``best_turn_mean`` (mean over
        episodes of their best turn), ``episode_turns_mean``, ``submitted_rate``, ``exec_count_turn`` ([K]),
        ``wall_s`` and ``time``; and every execution result (all turns).
    """
    t0 = time.perf_counter()
    all_results: list[Any] = []
    per_turn = [0] * max_turns

    def feedback(turn: int, eps: Sequence[int], batch: Any) -> list[Any]:
        by_id = {t.id: t for t in tasks}
        views = {tid: validation_view(by_id[tid], validation_fraction) for tid in set(batch.task_ids)}
        reqs = [ExecutionRequest(
            task=views[tid], program=prog, time_limit_s=time_limit_s,
            request_id=f"eval-{split}-s{step}-{e}-t{turn}",
            trajectory=Trajectory(stream="eval", run=run_name, step=step, group_id=int(g), sample=int(e), task_id=tid,
                                  prompt=scaffold.prompt(by_id[tid]), completion=c, scaffold=scaffold.name, split=split,
                                  extra={"checkpoint": checkpoint, "turn": turn}))
            for e, tid, prog, g, c in zip(eps, batch.task_ids, _programs(batch, scaffold, by_id), batch.group_ids,
                                          batch.completions)]
        res = executor.run_batch(reqs)
        all_results.extend(res)
        per_turn[turn - 1] += len(res)
        out = []
        for r, tid in zip(res, batch.task_ids):
            ok = _status(r) != "infra_error" and r.reward is not None
            out.append(TurnFeedback(observation=observation_from_result(r, views[tid], turn, error_chars),
                                    reward_true=float(r.reward) if ok else float("nan"), status=_status(r),
                                    valid=ok, executed=True, result=r))
        return out

    with torch.no_grad():
        ep = run_episodes(policy, scaffold, list(tasks), samples_per_task, max_turns, feedback,
                          max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, seed=seed)
    finals = [ep.final(e).result for e in range(ep.B)]
    task_ids = [ep.tasks[i].id for i in ep.task_index]
    rec = summarize_eval(task_ids, finals, step=step, split=split, checkpoint=checkpoint,
                         reward_kinds={t.id: getattr(t, "reward_kind", "percentile") for t in tasks},
                         rpg_scores=rpg_bounds(tasks))
    after = reward_after_turn(ep.turn_array("reward_true"), ep.final_turn)[ep.valid]
    best_valid = []
    for fbs in ep.feedback:
        graded = [fb.reward_true for fb in fbs if fb is not None and fb.status == "ok" and np.isfinite(fb.reward_true)]
        best_valid.append(max(graded) if graded else None)
    rec["sample_outcomes"] = sample_outcomes(task_ids, [_status(r) for r in finals], [r.reward for r in finals],
                                             best_valid)

    turn_means = [finite_mean(after[:, j]) for j in range(max_turns)]
    rec.update(
        max_turns=max_turns, mean_percentile_turn=turn_means,
        turn_gain=None if turn_means[0] is None or turn_means[-1] is None else turn_means[-1] - turn_means[0],
        best_turn_mean=finite_mean(best_turn(after)),
        episode_turns_mean=float(ep.n_turns.mean()), submitted_rate=float(ep.submitted.mean()),
        exec_count_turn=per_turn, sandbox_cpu_s=float(sum(float(r.cpu_s or 0.0) for r in all_results)),
        wall_s=time.perf_counter() - t0, time=time.time())
    return rec, all_results

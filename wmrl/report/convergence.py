"""Where a run converged: to what the world model likes, or to what is truly best (pure functions).

For each train task of a run the final policy's **modal program** (its most frequent completion in the
final evaluation) is set against the **best program found** for the task (the highest mean executed
reward over every program any run of the bench or the shared corpus executed) and against the run's
final world model's ranking of every **candidate** (every distinct executed completion of the task with a
reward). :func:`convergence_rows` computes the rows from three inputs, with no file I/O and no torch:

* ``candidates``: :func:`candidate_programs` of every execution with a reward (mean over repeats),
* ``modal``: :func:`modal_programs` of the run's final evaluation samples,
* ``score``: the world model's raw prediction r_hat of (task, completion) pairs (None without one).

Verdict of one (run, task), with ``tol`` = :data:`TOLERANCE` (0.02 reward units, i.e. leaderboard
percentile points / 100), r the true reward and r_hat the world model's raw prediction:

* ``best``: the modal program is the best program found, or its true reward (mean over its final
  evaluation samples) is within ``tol`` of the best found: ``r(modal) >= r(best) - tol``.
* ``wm-led``: not ``best`` (so ``r(modal) < r(best) - tol``), and the world model scores the modal
  program strictly above the best program: ``r_hat(modal) > r_hat(best)``. The run converged to what its
  world model likes, not to what is truly best.
* ``other``: neither: the run stopped short of the best program although its world model ranks the best
  program at least as high as the modal one, or the run has no world model predictions (``grpo``; a
  world model that could not be loaded), where only ``best`` / ``other`` can be told.
* ``n/a``: the modal program has no true reward (none of its samples got one) or the task has no
  candidate with a reward.

Ranks: ``rank(x) = 1 + #{candidates c of the task: r_hat(c) > r_hat(x)}`` (1 = the world model's
favourite; ties share the better rank), also for a modal program that is not a candidate itself.

:mod:`wmrl.bench.convergence` reads the execution logs, loads each run's final world model and writes
``convergence.json`` per run; :mod:`wmrl.report.convergence_page` shows them.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, TypeGuard

import numpy as np
import pandas as pd

#: Reward units within which a modal program counts as the best found (verdict ``best``).
TOLERANCE = 0.02
#: The verdicts, in the order tables count them.
VERDICTS = ("best", "wm-led", "other", "n/a")

#: ``score(task_ids [N], completions [N]) -> r_hat [N] float64``: a world model's raw predictions.
Scorer = Callable[[Sequence[str], Sequence[str]], np.ndarray]
#: ``calibrate(r_hat [N]) -> f_hat(r_hat) [N] float64``: the run's final calibration map.
Calibrator = Callable[[np.ndarray], np.ndarray]

#: The columns of :func:`convergence_rows`, in order.
ROW_COLUMNS = (
    "task_id", "verdict", "modal_program", "modal_share", "modal_n", "n_samples", "modal_true", "modal_pred",
    "modal_pred_calibrated", "modal_rank", "best_program", "best_true", "best_n_executions", "best_found_in",
    "best_pred", "best_pred_calibrated", "best_rank", "wm_favourite_program", "wm_favourite_true",
    "wm_favourite_pred", "n_candidates", "shortfall",
)


def _finite(x: Any) -> TypeGuard[float]:
    return isinstance(x, (int, float, np.floating, np.integer)) and not isinstance(x, bool) and math.isfinite(float(x))


def candidate_programs(executions: pd.DataFrame) -> pd.DataFrame:
    """Every distinct executed completion of each task with its mean true reward.

    Args:
        executions: one row per execution, columns ``task_id`` (str), ``completion`` (str) and ``reward``
            (float, leaderboard percentile in [0, 1]; None/NaN when the execution got none), optionally
            ``source`` (str: who executed it, e.g. ``corpus`` or ``grpo seed 0``).

    Returns:
        One row per (``task_id``, ``completion``) with a reward: ``true_reward`` (float64, mean over the
        executions of that completion that got a reward), ``n_executions`` (int64, how many) and
        ``found_in`` (the distinct sources of those executions, sorted and comma-separated; ``""`` without a
        ``source`` column), sorted by task and completion. Executions without a reward are left out.

    Raises:
        KeyError: a column is missing.
    """
    df = executions[["task_id", "completion", "reward"]].copy()
    df["source"] = executions["source"].astype(str) if "source" in executions else ""
    df["reward"] = pd.to_numeric(df["reward"], errors="coerce")
    df = df[np.isfinite(df["reward"].to_numpy(dtype=np.float64))]
    if df.empty:
        return pd.DataFrame({"task_id": pd.Series(dtype=object), "completion": pd.Series(dtype=object),
                             "true_reward": pd.Series(dtype=np.float64), "n_executions": pd.Series(dtype=np.int64),
                             "found_in": pd.Series(dtype=object)})
    g = df.groupby(["task_id", "completion"], sort=True)
    out = pd.DataFrame({"true_reward": g["reward"].mean().astype(np.float64),
                        "n_executions": g["reward"].size().astype(np.int64),
                        "found_in": g["source"].agg(lambda x: ", ".join(sorted(set(x) - {""})))})
    return out.reset_index()


def modal_programs(samples: pd.DataFrame) -> pd.DataFrame:
    """The most frequent completion per task among a policy's evaluation samples.

    Args:
        samples: one row per sample, columns ``task_id``, ``completion`` and ``reward`` (float, None/NaN
            when the sample's execution got no reward).

    Returns:
        One row per task (sorted): ``modal_program``, ``modal_n`` (int, its samples), ``n_samples`` (int,
        the task's samples), ``modal_share`` (float, ``modal_n / n_samples``) and ``modal_true`` (float64,
        mean reward of the modal program's samples that got one; NaN when none did). Ties in frequency go
        to the completion first in lexicographic order (deterministic whatever the sample order).

    Raises:
        KeyError: a column is missing.
    """
    rows = []
    for task, g in samples.groupby("task_id", sort=True):
        counts = g["completion"].value_counts()
        top = int(counts.max())
        modal = sorted(str(c) for c in counts.index[counts == top])[0]
        r = pd.to_numeric(g.loc[g["completion"] == modal, "reward"], errors="coerce").to_numpy(dtype=np.float64)
        r = r[np.isfinite(r)]
        rows.append({"task_id": task, "modal_program": modal, "modal_n": top, "n_samples": int(len(g)),
                     "modal_share": top / len(g), "modal_true": float(r.mean()) if r.size else math.nan})
    return pd.DataFrame(rows, columns=["task_id", "modal_program", "modal_n", "n_samples", "modal_share", "modal_true"])


def rank_of(pred: float, candidate_preds: np.ndarray) -> int:
    """``1 + #{candidate_preds > pred}``: 1 = the favourite; ties share the better rank."""
    return 1 + int(np.sum(np.asarray(candidate_preds, dtype=np.float64) > pred))


def verdict(modal_true: float, best_true: float, modal_is_best: bool, modal_pred: float | None,
            best_pred: float | None, tol: float = TOLERANCE) -> str:
    """The verdict of one (run, task); see the module docstring for the rule.

    Args:
        modal_true, best_true: true rewards of the modal and the best program (NaN: unknown).
        modal_is_best: the modal program is the best program found.
        modal_pred, best_pred: the world model's raw predictions of both, or None without a world model.
        tol: the tolerance of ``best``, reward units.
    """
    if not (_finite(modal_true) and _finite(best_true)):
        return "n/a"
    if modal_is_best or modal_true >= best_true - tol - 1e-12:
        return "best"
    if _finite(modal_pred) and _finite(best_pred) and modal_pred > best_pred:
        return "wm-led"
    return "other"


def convergence_rows(candidates: pd.DataFrame, modal: pd.DataFrame, score: Scorer | None = None,
                     calibrate: Calibrator | None = None, tol: float = TOLERANCE) -> pd.DataFrame:
    """Where one run converged, one row per task of ``modal`` (the columns of :data:`ROW_COLUMNS`).

    Args:
        candidates: :func:`candidate_programs` (``task_id``, ``completion``, ``true_reward``,
            ``n_executions``) of every execution of the bench and its corpus.
        modal: :func:`modal_programs` of the run's final evaluation.
        score: the run's world model (see :data:`Scorer`), called once with every candidate of the tasks
            of ``modal`` and the modal programs that are not candidates; None without a world model (the
            prediction and rank columns are then None and the verdict is ``best`` / ``other`` / ``n/a``).
        calibrate: the run's final calibration map f_hat (see :data:`Calibrator`), applied to the
            predictions for the ``*_pred_calibrated`` columns; None to leave them None.
        tol: the tolerance of the verdict ``best``, reward units.

    Returns:
        A DataFrame, one row per task of ``modal`` in its order: the modal program (``modal_share``,
        ``modal_n``, ``n_samples``, ``modal_true``), its raw and calibrated predictions and ``modal_rank``;
        the best program found (``best_true``, ``best_n_executions``, ``best_found_in``, predictions,
        ``best_rank``); the world
        model's favourite candidate (``wm_favourite_*``); ``n_candidates``; ``shortfall`` = ``best_true -
        modal_true`` (>= 0 up to noise) and ``verdict``. Ties for the best program go to the one executed
        most often, then to the first in lexicographic order; ties for the favourite to the higher true
        reward, then the same. Rewards and predictions are float (NaN / None when unknown), ranks int.

    Raises:
        KeyError: a column is missing from ``candidates`` or ``modal``.
        ValueError: ``score`` returned an array of another shape or non-finite values.
    """
    tasks = list(modal["task_id"])
    cand = candidates[candidates["task_id"].isin(tasks)]
    by_task = {t: g.sort_values("completion", kind="stable").reset_index(drop=True)
               for t, g in cand.groupby("task_id", sort=False)}
    preds: dict[tuple[str, str], float] = {}
    if score is not None:
        pairs = list(dict.fromkeys([(t, c) for t, g in by_task.items() for c in g["completion"]]
                                   + [(t, c) for t, c in zip(modal["task_id"], modal["modal_program"])]))
        if pairs:
            r_hat = np.asarray(score([t for t, _ in pairs], [c for _, c in pairs]), dtype=np.float64)
            if r_hat.shape != (len(pairs),):
                raise ValueError(f"score returned shape {r_hat.shape} for {len(pairs)} programs")
            if not np.all(np.isfinite(r_hat)):
                raise ValueError(f"score returned {int((~np.isfinite(r_hat)).sum())} non-finite predictions")
            preds = dict(zip(pairs, r_hat.tolist()))
    cal: dict[tuple[str, str], float] = {}
    if calibrate is not None and preds:
        keys = list(preds)
        cal = dict(zip(keys, np.asarray(calibrate(np.array([preds[k] for k in keys])), dtype=np.float64).tolist()))

    rows = []
    for m in modal.itertuples(index=False):
        t, prog = m.task_id, m.modal_program
        g = by_task.get(t)
        row: dict[str, Any] = dict.fromkeys(ROW_COLUMNS)
        row.update(task_id=t, modal_program=prog, modal_share=float(m.modal_share), modal_n=int(m.modal_n),
                   n_samples=int(m.n_samples), modal_true=float(m.modal_true),
                   n_candidates=0 if g is None else int(len(g)))
        if g is None or g.empty:
            row["verdict"] = "n/a"
            rows.append(row)
            continue
        best_i = sorted(range(len(g)), key=lambda i: (-g.at[i, "true_reward"], -g.at[i, "n_executions"],
                                                       g.at[i, "completion"]))[0]
        best = g.at[best_i, "completion"]
        row.update(best_program=best, best_true=float(g.at[best_i, "true_reward"]),
                   best_n_executions=int(g.at[best_i, "n_executions"]),
                   best_found_in=str(g.at[best_i, "found_in"]) if "found_in" in g else "")
        if preds:
            cp = np.array([preds[(t, c)] for c in g["completion"]])
            fav_i = sorted(range(len(g)), key=lambda i: (-cp[i], -g.at[i, "true_reward"], g.at[i, "completion"]))[0]
            row.update(modal_pred=preds[(t, prog)], best_pred=preds[(t, best)],
                       modal_rank=rank_of(preds[(t, prog)], cp), best_rank=rank_of(preds[(t, best)], cp),
                       wm_favourite_program=g.at[fav_i, "completion"],
                       wm_favourite_true=float(g.at[fav_i, "true_reward"]), wm_favourite_pred=float(cp[fav_i]))
            if cal:
                row.update(modal_pred_calibrated=cal[(t, prog)], best_pred_calibrated=cal[(t, best)])
        if _finite(row["modal_true"]):
            row["shortfall"] = round(row["best_true"] - row["modal_true"], 12)  # no -1e-16 from averaging
        row["verdict"] = verdict(row["modal_true"], row["best_true"], prog == best, row["modal_pred"],
                                 row["best_pred"], tol)
        rows.append(row)
    return pd.DataFrame(rows, columns=list(ROW_COLUMNS))


def verdict_counts(rows: pd.DataFrame) -> pd.DataFrame:
    """Per method, how many (seed, task) rows got each verdict.

    Args:
        rows: rows of :func:`convergence_rows` with a ``method`` and a ``seed`` column (several runs).

    Returns:
        One row per method (first-seen order): ``method``, ``runs`` (distinct seeds), ``tasks`` (rows),
        one int column per verdict of :data:`VERDICTS`, ``mean_shortfall`` (mean ``shortfall`` over the rows
        that have one, NaN if none) and ``modal_is_favourite`` (rows whose modal program is the world
        model's favourite, rank 1; float, NaN for a method without predictions).
    """
    out = []
    for method, g in rows.groupby("method", sort=False):
        sf = pd.to_numeric(g["shortfall"], errors="coerce")
        ranks = pd.to_numeric(g["modal_rank"], errors="coerce")
        rec: dict[str, Any] = {"method": method, "runs": int(g["seed"].nunique()), "tasks": int(len(g))}
        for v in VERDICTS:
            rec[v] = int((g["verdict"] == v).sum())
        rec["mean_shortfall"] = float(sf.mean()) if sf.notna().any() else math.nan
        rec["modal_is_favourite"] = float((ranks == 1).sum()) if ranks.notna().any() else math.nan
        out.append(rec)
    return pd.DataFrame(out, columns=["method", "runs", "tasks", *VERDICTS, "mean_shortfall", "modal_is_favourite"])

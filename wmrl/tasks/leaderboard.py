"""Leaderboards and the scores derived from them: position score, medals, above-median, RPG.

A leaderboard is a list of scores sorted best-first (``rank,score`` CSV, or any CSV with a
``score`` column in best-first order, such as MLE-bench's ``leaderboard.csv``). The metric's direction
is read off the order: a board whose first score is below its last is lower-is-better.

Formulas (MLE-Dojo, MLE-bench, DSBench; docs/tasks.md):

Scores within a relative 1e-9 (:data:`TIE_RTOL`) of a board entry count as ties.

* **Position score** (MLE-Dojo, the "leaderboard percentile" reward): with N scores sorted best-first,
  ``position`` = the first 1-based index whose score the submission is at least as good as
  (N + 1 if it is worse than all); position score = (N - position + 1) / N, in [0, 1].
* **Medals** (MLE-bench, Kaggle's thresholds): a medal needs a score at least as good as the
  leaderboard score at the 1-based positions (gold, silver, bronze):
  N < 100: max(1, int(0.1N)), int(0.2N), int(0.4N);
  100 <= N < 250: 10, int(0.2N), int(0.4N);
  250 <= N < 1000: 10 + int(0.002N), 50, 100;
  N >= 1000: 10 + int(0.002N), int(0.05N), int(0.1N).
  Medals are exclusive, gold first; a position of 0 awards no medal of that kind.
* **Above median** (MLE-bench): strictly better than the median of the leaderboard scores.
* **Relative performance gap** (DSBench): RPG = mean_i max(0, (p_i - b_i) / (g_i - b_i)) with p the
  submission's score, b a baseline score and g a gold (best) score; works for either direction.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TypeAlias

import numpy as np
import pandas as pd

#: A leaderboard's scores (best first): a sequence or a 1-D float array.
Board: TypeAlias = Sequence[float] | np.ndarray


class LeaderboardError(ValueError):
    """A leaderboard file that cannot be used; the message names the file and the problem."""


#: The first bytes of a Git LFS pointer: what a checkout cloned without its Git LFS files holds in place of a
#: large file (MLE-bench keeps its ``leaderboard.csv`` files in Git LFS).
LFS_POINTER_PREFIX = b"version https://git-lfs.github.com/spec/v1"


def lfs_pointer(path: Path) -> bool:
    """Whether the file at ``path`` is a Git LFS pointer rather than the file itself; False when it is not a
    readable file."""
    try:
        with open(path, "rb") as f:
            return f.read(len(LFS_POINTER_PREFIX)) == LFS_POINTER_PREFIX
    except OSError:
        return False


def lfs_pointer_problem(path: Path) -> str:
    """The one line that refuses a Git LFS pointer at ``path``: the cause and the fix."""
    return (f"{path} is a Git LFS pointer, not the file itself (the checkout that holds it was cloned without its "
            "Git LFS files); run `git lfs pull` in that checkout")


def read_leaderboard(path: Path) -> np.ndarray:
    """Scores of one leaderboard, best-first, as float64 array of shape ``[N]``.

    Accepts ``rank,score`` CSVs (sorted by ``rank`` when present) and MLE-bench/Kaggle leaderboards
    (a ``score`` column in best-first order; rows with a missing score are dropped). The column names
    are matched without regard to case (``Score``, ``Rank``).

    Raises:
        LeaderboardError: missing file, a Git LFS pointer in its place, no ``score`` column, or no numeric
            scores.
    """
    path = Path(path)
    if not path.is_file():
        raise LeaderboardError(f"leaderboard file {path} does not exist")
    if lfs_pointer(path):
        raise LeaderboardError(f"leaderboard {lfs_pointer_problem(path)}")
    try:
        df = pd.read_csv(path)
    except Exception as exc:  # pandas raises several parser errors
        raise LeaderboardError(f"leaderboard {path} is not a readable CSV: {exc}") from exc
    lowered = {str(c).strip().lower(): c for c in df.columns}
    df = df.rename(columns={orig: low for low, orig in lowered.items() if low in ("score", "rank")})
    if "score" not in df.columns:
        raise LeaderboardError(f"leaderboard {path} has no 'score' column (columns: {list(df.columns)}); "
                               "a leaderboard needs a score column (any capitalisation), best first or with a rank")
    if "rank" in df.columns:
        df = df.sort_values("rank", kind="stable")
    scores = pd.to_numeric(df["score"], errors="coerce").to_numpy(dtype=np.float64)
    scores = scores[np.isfinite(scores)]
    if scores.size == 0:
        raise LeaderboardError(f"leaderboard {path} has no numeric scores")
    return scores


def write_leaderboard(path: Path, scores: Sequence[float], lower_is_better: bool) -> np.ndarray:
    """Write ``rank,score`` CSV sorted best-first (ties share the order they come in).

    Returns the sorted scores (float64, shape ``[N]``). Raises ``ValueError`` on NaN/inf or no scores.
    """
    arr = np.asarray(list(scores), dtype=np.float64)
    if arr.size == 0 or not np.all(np.isfinite(arr)):
        raise ValueError("a leaderboard needs at least one score and only finite scores")
    order = np.argsort(arr if lower_is_better else -arr, kind="stable")
    arr = arr[order]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"rank": np.arange(1, arr.size + 1), "score": arr}).to_csv(path, index=False)
    return arr


def infer_lower_is_better(board: Board, default: bool) -> bool:
    """Direction read off a best-first board: first < last means lower is better; ties -> ``default``."""
    b = np.asarray(board, dtype=np.float64)
    if b.size < 2 or b[0] == b[-1]:
        return default
    return bool(b[0] < b[-1])


#: Relative tolerance under which two scores count as tied (a board written with 10 significant
#: digits must still rank a re-graded identical solution at its own position).
TIE_RTOL = 1e-9


def _at_least_as_good(score: float, other: np.ndarray, lower_is_better: bool) -> np.ndarray:
    tol = TIE_RTOL * np.maximum(1.0, np.abs(other))
    return score <= other + tol if lower_is_better else score >= other - tol


def position(score: float, board: Board, lower_is_better: bool) -> int:
    """1-based first position of the best-first ``board`` that ``score`` is at least as good as (N+1 if none)."""
    b = np.asarray(board, dtype=np.float64)
    hits = np.nonzero(_at_least_as_good(score, b, lower_is_better))[0]
    return int(hits[0]) + 1 if hits.size else b.size + 1


def position_score(score: float, board: Board, lower_is_better: bool) -> float:
    """MLE-Dojo position score (N - position + 1) / N in [0, 1]; NaN/inf ``score`` -> 0.0.

    Raises ``ValueError`` for an empty board.
    """
    b = np.asarray(board, dtype=np.float64)
    if b.size == 0:
        raise ValueError("an empty leaderboard has no position score")
    if not math.isfinite(score):
        return 0.0
    n = b.size
    return (n - position(score, b, lower_is_better) + 1) / n


def score_at_position_score(board: Board, p: float, lower_is_better: bool) -> float:
    """The inverse of :func:`position_score`: a score whose position score on ``board`` is about ``p``.

    With N entries sorted best-first (b_1 .. b_N), the float position ``x = N + 1 - p * N`` is clipped to
    [1, N] and the score interpolated linearly between b_floor(x) and b_ceil(x); the exact entry b_k is
    returned at ``p = (N - k + 1) / N``. ``position_score(result, board) - p`` lies in (-1/N, 1/N] for
    p in [1/N, 1] on a board without ties; where T entries tie, a score equal to them takes the first
    tied position, so the error can reach T/N. Below 1/N the board's worst entry is returned (the value
    is clipped to the board's range). Monotone in ``p`` (better scores for larger ``p``).

    Raises:
        ValueError: an empty board, or ``p`` NaN.
    """
    b = np.asarray(board, dtype=np.float64)
    if b.size == 0:
        raise ValueError("an empty leaderboard has no score at a position")
    if math.isnan(p):
        raise ValueError("p must be a number in [0, 1], got NaN")
    b = np.sort(b) if lower_is_better else np.sort(b)[::-1]  # best-first, monotone
    n = b.size
    x = min(float(n), max(1.0, n + 1 - min(1.0, max(0.0, float(p))) * n))
    i = int(math.floor(x))
    frac = x - i
    lo, hi = b[i - 1], b[min(i, n - 1)]
    return float(lo + frac * (hi - lo))


def medal_positions(n: int) -> tuple[int, int, int]:
    """1-based leaderboard positions of the gold, silver and bronze thresholds for ``n`` entries."""
    if n < 1:
        raise ValueError("medal thresholds need at least one leaderboard entry")
    if n < 100:
        return max(1, int(0.1 * n)), int(0.2 * n), int(0.4 * n)
    if n < 250:
        return 10, int(0.2 * n), int(0.4 * n)
    if n < 1000:
        return 10 + int(0.002 * n), 50, 100
    return 10 + int(0.002 * n), int(0.05 * n), int(0.1 * n)


def medal(score: float, board: Board, lower_is_better: bool) -> str | None:
    """``"gold"``, ``"silver"``, ``"bronze"`` or ``None`` by Kaggle's thresholds (exclusive, gold first)."""
    b = np.asarray(board, dtype=np.float64)
    if b.size == 0 or not math.isfinite(score):
        return None
    for name, pos in zip(("gold", "silver", "bronze"), medal_positions(b.size)):
        if pos >= 1 and bool(_at_least_as_good(score, b[pos - 1], lower_is_better)):
            return name
    return None


def above_median(score: float, board: Board, lower_is_better: bool) -> bool:
    """Strictly better than the median of the board's scores (False for NaN/inf)."""
    b = np.asarray(board, dtype=np.float64)
    if b.size == 0 or not math.isfinite(score):
        return False
    med = float(np.median(b))
    return bool(score < med) if lower_is_better else bool(score > med)


def relative_performance_gap(scores: Sequence[float], baselines: Sequence[float], golds: Sequence[float]) -> float:
    """DSBench RPG = mean_i max(0, (p_i - b_i) / (g_i - b_i)).

    Args:
        scores, baselines, golds: equal-length sequences (one entry per task).

    Raises:
        ValueError: different lengths, empty input, or a task with g_i == b_i.
    """
    p = np.asarray(scores, dtype=np.float64)
    b = np.asarray(baselines, dtype=np.float64)
    g = np.asarray(golds, dtype=np.float64)
    if not (p.shape == b.shape == g.shape) or p.size == 0:
        raise ValueError("scores, baselines and golds must be non-empty and of equal length")
    if np.any(g == b):
        raise ValueError("RPG is undefined when a gold score equals its baseline")
    gaps = np.where(np.isfinite(p), (p - b) / (g - b), 0.0)
    return float(np.mean(np.maximum(0.0, gaps)))

"""Metrics and the calibration plot of a world model's reward predictions.

All functions are pure (numpy in, Python numbers out) except :func:`calibration_plot`, which
writes a PNG.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def pairwise_ranking_accuracy(pred: np.ndarray, true: np.ndarray, group_ids: Sequence[Hashable]) -> tuple[float, int]:
    """Fraction of within-group pairs whose predicted order matches the true order.

    Only pairs with different true rewards count (GRPO advantages depend only on the order and
    spread inside a group). A tie in the prediction counts one half.

    Args:
        pred, true: [N] float arrays.
        group_ids: N hashable group keys (one group = one task's G samples at one step).

    Returns:
        ``(accuracy, n_pairs)``; accuracy is NaN when there is no informative pair.
    """
    groups: dict[Hashable, list[int]] = defaultdict(list)
    for i, g in enumerate(group_ids):
        groups[g].append(i)
    agree = 0.0
    n = 0
    for idx in groups.values():
        if len(idx) < 2:
            continue
        p = pred[idx]
        t = true[idx]
        dp = np.sign(p[:, None] - p[None, :])
        dt = np.sign(t[:, None] - t[None, :])
        upper = np.triu(np.ones_like(dt, dtype=bool), k=1) & (dt != 0)
        n += int(upper.sum())
        agree += float((dp[upper] == dt[upper]).sum()) + 0.5 * float((dp[upper] == 0).sum())
    return (agree / n if n else float("nan")), n


def bias_by_decile(pred: np.ndarray, true: np.ndarray, n_bins: int = 10) -> list[dict[str, float]]:
    """Mean prediction, mean truth and bias (mean of pred - true) in bins of the predicted score.

    Bins are quantiles of ``pred`` (deciles by default; fewer when there are fewer distinct
    predictions). Returns one dict per bin with ``bin``, ``n``, ``pred_mean``, ``true_mean``,
    ``bias``, ``pred_lo``, ``pred_hi``.
    """
    order = np.argsort(pred, kind="stable")
    bins = np.array_split(order, min(n_bins, len(pred))) if len(pred) else []
    out = []
    for b, idx in enumerate(bins):
        if len(idx) == 0:
            continue
        out.append(
            {
                "bin": b,
                "n": int(len(idx)),
                "pred_mean": float(pred[idx].mean()),
                "true_mean": float(true[idx].mean()),
                "bias": float((pred[idx] - true[idx]).mean()),
                "pred_lo": float(pred[idx].min()),
                "pred_hi": float(pred[idx].max()),
            }
        )
    return out


def world_model_metrics(pred: Sequence[float] | np.ndarray, true: Sequence[float] | np.ndarray,
                        group_ids: Sequence[Hashable] | None = None) -> dict[str, Any]:
    """Accuracy of predicted rewards against executed rewards.

    Args:
        pred: [N] predicted rewards (leaderboard percentile, [0, 1]).
        true: [N] executed rewards.
        group_ids: N group keys for the within-group ranking accuracy (None: one group each,
            so no pairs).

    Returns:
        dict with ``n``, ``mae``, ``rmse``, ``bias`` (mean pred - true), ``spearman`` and
        ``pearson`` (NaN when either side is constant), ``pairwise_accuracy`` and ``n_pairs``
        (within groups), ``residual_std`` (std of true - pred: the noise sigma_xi of docs/architecture.md
        before debiasing), and ``bias_by_decile`` (list of dicts, see :func:`bias_by_decile`).

    Raises:
        ValueError: lengths differ, or no samples.
    """
    from scipy.stats import pearsonr, spearmanr  # noqa: PLC0415 - heavy (scipy)

    p = np.asarray(pred, dtype=np.float64)
    t = np.asarray(true, dtype=np.float64)
    if p.shape != t.shape or p.ndim != 1:
        raise ValueError(f"pred and true must be 1-D of equal length, got {p.shape} and {t.shape}")
    if len(p) == 0:
        raise ValueError("world_model_metrics needs at least one sample")
    if group_ids is None:
        group_ids = list(range(len(p)))
    if len(group_ids) != len(p):
        raise ValueError(f"{len(group_ids)} group ids for {len(p)} predictions")
    const = len(p) < 2 or np.ptp(p) == 0 or np.ptp(t) == 0
    acc, n_pairs = pairwise_ranking_accuracy(p, t, group_ids)
    return {
        "n": int(len(p)),
        "mae": float(np.abs(p - t).mean()),
        "rmse": float(np.sqrt(((p - t) ** 2).mean())),
        "bias": float((p - t).mean()),
        "spearman": float("nan") if const else float(spearmanr(p, t).statistic),
        "pearson": float("nan") if const else float(pearsonr(p, t).statistic),
        "pairwise_accuracy": acc,
        "n_pairs": n_pairs,
        "residual_std": float(np.std(t - p)),
        "bias_by_decile": bias_by_decile(p, t),
    }


def calibration_plot(pred: Sequence[float] | np.ndarray, true: Sequence[float] | np.ndarray, path: str | Path,
                     title: str = "World model calibration") -> Path:
    """Write a PNG: executed reward against predicted reward (points), decile means (line), y = x.

    Returns:
        The written path (parent folders are created).
    """
    import matplotlib  # noqa: PLC0415 - heavy (matplotlib)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 - heavy (matplotlib)

    p = np.asarray(pred, dtype=np.float64)
    t = np.asarray(true, dtype=np.float64)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(5, 5), dpi=120)
    ax.scatter(p, t, s=10, alpha=0.35, label="held-out trajectories")
    dec = bias_by_decile(p, t)
    if dec:
        ax.plot([d["pred_mean"] for d in dec], [d["true_mean"] for d in dec], "o-", color="C3", label="decile means")
    ax.plot([0, 1], [0, 1], "--", color="gray", label="perfect calibration")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("predicted reward (leaderboard percentile)")
    ax.set_ylabel("executed reward")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path

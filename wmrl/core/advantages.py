"""Group-relative advantages (GRPO; Shao et al. 2024, DeepSeekMath).

For a group g of trajectories sampled from one prompt (task), with rewards r_i:

    A_i = r_i - mean_g(r)                           (normalize_std=False, Dr. GRPO, Liu et al. 2025)
    A_i = (r_i - mean_g(r)) / (std_g(r) + eps)      (normalize_std=True, DeepSeekMath GRPO, Shao et al. 2024)

Documented choices (peers differ; each is tested in ``tests/core/test_advantages.py``):

- ``std="unbiased"`` (default): sample standard deviation with Bessel's correction (divide by n-1).
  This is what ``torch.std`` computes and what TRL's ``GRPOTrainer`` and verl's
  ``compute_grpo_outcome_advantage`` use. ``std="population"`` divides by n (``np.std``).
- ``eps=1e-6`` (default) as in verl; TRL uses 1e-4. It is added to the std, not under a square root.
- A group of size 1 gets advantage 0 (it carries no relative information). verl instead sets
  mean=0, std=1 there, which turns the raw reward into the advantage; we do not, because that
  would make a lone sample's advantage depend on the reward's offset.
- A group whose rewards are all equal gets advantage exactly 0 (not 0/eps noise).
- Invalid samples (``valid=False``: infrastructure failures, not the policy's doing) get advantage 0 and do
  not enter their group's mean, std or size.
"""
from __future__ import annotations

from typing import Any, Literal

import numpy as np

StdKind = Literal["unbiased", "population"]


def _check_inputs(rewards: Any, group_ids: Any, valid: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r = np.asarray(rewards)
    if r.ndim != 1:
        raise ValueError(f"rewards must be 1-D [B], got shape {r.shape}; flatten the groups first")
    g = np.asarray(group_ids)
    if g.ndim != 1 or g.shape[0] != r.shape[0]:
        raise ValueError(f"group_ids must be 1-D with the same length as rewards ({r.shape[0]}), got shape {g.shape}")
    if g.size and not np.issubdtype(g.dtype, np.integer):
        raise ValueError(f"group_ids must be an integer array (int64), got {g.dtype}")
    if valid is None:
        v = np.ones(r.shape, dtype=bool)
    else:
        v = np.asarray(valid)
        if v.dtype != np.bool_ or v.shape != r.shape:
            raise ValueError(f"valid must be a bool array of shape {r.shape}, got dtype {v.dtype} shape {v.shape}")
    r = r.astype(np.float64)
    bad = ~np.isfinite(r) & v
    if bad.any():
        raise ValueError(
            f"rewards contain NaN/inf at valid positions {np.flatnonzero(bad)[:5].tolist()}; give failed programs "
            "the task's failure reward and mark infrastructure failures with valid=False")
    return r, g.astype(np.int64), v


def group_stats(
    rewards: np.ndarray,
    group_ids: np.ndarray,
    valid: np.ndarray | None = None,
    std: StdKind = "unbiased",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-sample group mean, group std and group size (over valid samples only).

    Args:
        rewards: [B] float rewards (NaN allowed where ``valid`` is False).
        group_ids: [B] int group index of each sample (any integers; need not be contiguous).
        valid: [B] bool or None (all valid). Invalid samples are excluded from the statistics.
        std: ``"unbiased"`` (divide by n-1) or ``"population"`` (divide by n).

    Returns:
        (mean [B] float64, std [B] float64, count [B] int64) of each sample's group. For groups with
        fewer than 2 valid samples the unbiased std is reported as 0.

    Raises:
        ValueError: on shape/dtype mismatches, non-finite valid rewards or an unknown ``std``.
    """
    r, g, v = _check_inputs(rewards, group_ids, valid)
    if std not in ("unbiased", "population"):
        raise ValueError(f"std must be 'unbiased' or 'population', got {std!r}")
    r = np.where(v, r, 0.0)
    _, inverse = np.unique(g, return_inverse=True)
    n_groups = int(inverse.max()) + 1 if inverse.size else 0
    vf = v.astype(np.float64)
    count = np.bincount(inverse, weights=vf, minlength=n_groups)
    total = np.bincount(inverse, weights=r * vf, minlength=n_groups)
    mean_g = total / np.maximum(count, 1.0)
    dev = np.where(v, r - mean_g[inverse], 0.0)
    ss = np.bincount(inverse, weights=dev * dev, minlength=n_groups)
    denom = (count - 1.0) if std == "unbiased" else count
    var_g = np.where(denom > 0, ss / np.maximum(denom, 1.0), 0.0)
    std_g = np.sqrt(np.maximum(var_g, 0.0))
    return mean_g[inverse], std_g[inverse], count[inverse].astype(np.int64)


def group_advantages(
    rewards: np.ndarray,
    group_ids: np.ndarray,
    normalize_std: bool = True,
    eps: float = 1e-6,
    std: StdKind = "unbiased",
    valid: np.ndarray | None = None,
) -> np.ndarray:
    """GRPO group-relative advantages, one per trajectory.

    Formula (Shao et al. 2024 eq. for outcome supervision; TRL ``GRPOTrainer``; verl
    ``compute_grpo_outcome_advantage``)::

        A_i = (r_i - mean_g) / (std_g + eps)   if normalize_std
        A_i =  r_i - mean_g                    otherwise (Dr. GRPO)

    with mean and std over the *valid* samples of sample i's group g. Size-1 groups, all-equal
    groups and invalid samples get exactly 0.

    Args:
        rewards: [B] float rewards, e.g. leaderboard percentiles in [0, 1] (NaN allowed where invalid).
        group_ids: [B] int group index per sample (one group = G samples of one prompt).
        normalize_std: divide by the group std (+eps).
        eps: added to the std; must be > 0 when normalize_std.
        std: ``"unbiased"`` (default, n-1, as torch/TRL/verl) or ``"population"`` (n).
        valid: [B] bool or None; False marks infrastructure failures (advantage 0, left out of stats).

    Returns:
        [B] float64 numpy array (the array type of :mod:`wmrl.core.recipe`; the update converts it to a
        tensor once).

    Raises:
        ValueError: on bad shapes/dtypes, non-finite valid rewards, eps <= 0 with normalisation.
    """
    if normalize_std and not eps > 0:
        raise ValueError(f"eps must be > 0 when normalize_std=True, got {eps}")
    mean, sd, count = group_stats(rewards, group_ids, valid=valid, std=std)
    r, g, v = _check_inputs(rewards, group_ids, valid)
    adv = np.where(v, r, 0.0) - mean
    if normalize_std:
        adv = adv / (sd + eps)
    # All-equal groups: the deviation is exactly 0 in exact arithmetic, but float rounding of the mean leaves
    # about 1e-17 (and a std of that size), which /eps would amplify. They are found exactly, by their valid
    # rewards' range, and zeroed.
    _, inverse = np.unique(g, return_inverse=True)
    n_groups = int(inverse.max()) + 1 if inverse.size else 0
    lo, hi = np.full(n_groups, np.inf), np.full(n_groups, -np.inf)
    np.minimum.at(lo, inverse[v], r[v])
    np.maximum.at(hi, inverse[v], r[v])
    keep = (count >= 2) & (hi > lo)[inverse] & v
    return np.where(keep, adv, 0.0)

"""Group-relative advantages (GRPO; DESIGN.md §4).

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
- Invalid samples (``valid=False``: infrastructure failures, DESIGN.md §4) get advantage 0 and do
  not enter their group's mean, std or size.
"""
from __future__ import annotations

from typing import Literal

import torch

StdKind = Literal["unbiased", "population"]


def _check_inputs(rewards: torch.Tensor, group_ids: torch.Tensor, valid: torch.Tensor | None) -> None:
    if rewards.ndim != 1:
        raise ValueError(f"rewards must be 1-D [B], got shape {tuple(rewards.shape)}; flatten the groups first")
    if group_ids.ndim != 1 or group_ids.shape[0] != rewards.shape[0]:
        raise ValueError(
            f"group_ids must be 1-D with the same length as rewards ({rewards.shape[0]}), "
            f"got shape {tuple(group_ids.shape)}"
        )
    if group_ids.dtype.is_floating_point or group_ids.dtype == torch.bool:
        raise ValueError(f"group_ids must be an integer tensor (int64), got {group_ids.dtype}")
    if valid is not None:
        if valid.dtype != torch.bool or valid.shape != rewards.shape:
            raise ValueError(
                f"valid must be a bool tensor of shape {tuple(rewards.shape)}, "
                f"got dtype {valid.dtype} shape {tuple(valid.shape)}"
            )
    finite = torch.isfinite(rewards)
    if valid is not None:
        finite = finite | ~valid
    if not bool(finite.all()):
        bad = torch.nonzero(~finite).flatten().tolist()[:5]
        raise ValueError(
            f"rewards contain NaN/inf at valid positions {bad}; give failed programs the task's failure "
            "reward and mark infrastructure failures with valid=False"
        )


def group_stats(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    valid: torch.Tensor | None = None,
    std: StdKind = "unbiased",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sample group mean, group std and group size (over valid samples only).

    Args:
        rewards: [B] float rewards.
        group_ids: [B] int64 group index of each sample (any integers; need not be contiguous).
        valid: [B] bool or None (all valid). Invalid samples are excluded from the statistics.
        std: ``"unbiased"`` (divide by n-1) or ``"population"`` (divide by n).

    Returns:
        (mean [B], std [B], count [B]) broadcast back to each sample, float64 for mean/std and int64
        for count. For groups with fewer than 2 valid samples the unbiased std is reported as 0.

    Raises:
        ValueError: on shape/dtype mismatches, non-finite valid rewards or an unknown ``std``.
    """
    _check_inputs(rewards, group_ids, valid)
    if std not in ("unbiased", "population"):
        raise ValueError(f"std must be 'unbiased' or 'population', got {std!r}")
    r = rewards.detach().to(torch.float64)
    v = torch.ones_like(r, dtype=torch.bool) if valid is None else valid
    r = torch.where(v, r, torch.zeros_like(r))
    _, inverse = torch.unique(group_ids, return_inverse=True)
    n_groups = int(inverse.max().item()) + 1 if inverse.numel() else 0
    vf = v.to(torch.float64)
    count = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, inverse, vf)
    total = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, inverse, r * vf)
    mean_g = total / count.clamp(min=1.0)
    dev = torch.where(v, r - mean_g[inverse], torch.zeros_like(r))
    ss = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, inverse, dev * dev)
    denom = (count - 1.0) if std == "unbiased" else count
    var_g = torch.where(denom > 0, ss / denom.clamp(min=1.0), torch.zeros_like(ss))
    std_g = var_g.clamp(min=0.0).sqrt()
    return mean_g[inverse], std_g[inverse], count[inverse].to(torch.int64)


def group_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    normalize_std: bool = True,
    eps: float = 1e-6,
    std: StdKind = "unbiased",
    valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """GRPO group-relative advantages, one per trajectory.

    Formula (DESIGN.md §4; Shao et al. 2024 eq. for outcome supervision; TRL ``GRPOTrainer``; verl
    ``compute_grpo_outcome_advantage``)::

        A_i = (r_i - mean_g) / (std_g + eps)   if normalize_std
        A_i =  r_i - mean_g                    otherwise (Dr. GRPO)

    with mean and std over the *valid* samples of sample i's group g. Size-1 groups, all-equal
    groups and invalid samples get exactly 0.

    Args:
        rewards: [B] float (float32 typical) rewards, e.g. leaderboard percentiles in [0, 1].
        group_ids: [B] int64 group index per sample (one group = G samples of one prompt).
        normalize_std: divide by the group std (+eps).
        eps: added to the std; must be > 0 when normalize_std.
        std: ``"unbiased"`` (default, n-1, as torch/TRL/verl) or ``"population"`` (n).
        valid: [B] bool or None; False marks infrastructure failures (advantage 0, left out of stats).

    Returns:
        [B] tensor with ``rewards``' dtype (float32 for float32 input); no gradient flows to rewards.

    Raises:
        ValueError: on bad shapes/dtypes, non-finite valid rewards, eps <= 0 with normalisation.
    """
    if normalize_std and not eps > 0:
        raise ValueError(f"eps must be > 0 when normalize_std=True, got {eps}")
    mean, sd, count = group_stats(rewards, group_ids, valid=valid, std=std)
    r = rewards.detach().to(torch.float64)
    adv = r - mean
    if normalize_std:
        adv = adv / (sd + eps)
    keep = count >= 2
    # All-equal groups: the deviation is exactly 0 in exact arithmetic; float rounding of the mean
    # can leave ~1e-17, which /eps would amplify. Zero them explicitly.
    keep = keep & (sd > 0)
    if valid is not None:
        keep = keep & valid
    adv = torch.where(keep, adv, torch.zeros_like(adv))
    out_dtype = rewards.dtype if rewards.dtype.is_floating_point else torch.float32
    return adv.to(out_dtype)

"""The world model's ranking error and the policy's collapse, per step: what a monotone correction cannot see.

GRPO standardises advantages inside each group, so an increasing map of the world model's score (the isotonic
debiasing) keeps the world model's order inside every world-model group: bias and noise of the scale are not
what decides where a run ends, the order is. Two figures measure the order on the anchor groups (the groups
that have both the executed reward r and the world model's score r_hat):

- ``wm_kendall_tau``: Kendall's tau-b between r_hat and r inside each anchor group, averaged over the groups
  where it is defined (at least two distinct r and two distinct r_hat); 1 = the world model orders the group as
  execution does, 0 = no better than chance, -1 = reversed.
- ``wm_favourite_regret``: per anchor group, max r minus the mean r of the programs the world model rates
  highest (ties share), averaged over groups: the true reward a run loses by following the world model's
  favourite; 0 when the favourite is the best.

And two figures of the policy's concentration per task (group), from the step's samples:

- ``policy_distinct_programs``: the number of distinct programs among a task's G samples, averaged over the
  step's groups (1 = every sample the same program).
- ``policy_entropy``: the Monte-Carlo estimate of the sequence entropy, minus the mean log-probability of the
  sampled completions (nats); near 0 when the policy has collapsed onto one completion.

Arrays are numpy (float64 rewards, int64 group ids); pure functions, no I/O.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["RankingErrors", "policy_concentration", "ranking_errors"]


@dataclass(frozen=True)
class RankingErrors:
    """The world model's ranking error on one step's anchor groups (module docstring).

    Attributes:
        kendall_tau: mean within-group Kendall tau-b of r_hat against r, or None (no group where it is defined).
        favourite_regret: mean over groups of max r - r of the world model's favourite, or None (no group with
            two or more samples).
        n_groups: groups that entered ``favourite_regret``.
    """

    kendall_tau: float | None
    favourite_regret: float | None
    n_groups: int


def _tau_b(x: np.ndarray, y: np.ndarray) -> float | None:
    """Kendall's tau-b of two [n] float64 arrays (ties counted as in tau-b); None when either is constant."""
    i, j = np.triu_indices(x.size, k=1)
    sx, sy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
    n0 = i.size
    tx, ty = int((sx == 0).sum()), int((sy == 0).sum())
    if tx == n0 or ty == n0:
        return None
    return float((sx * sy).sum() / np.sqrt((n0 - tx) * (n0 - ty)))


def ranking_errors(group_ids: np.ndarray, reward_true: np.ndarray, reward_wm: np.ndarray) -> RankingErrors:
    """Kendall tau-b and favourite regret of the world model inside groups (module docstring).

    Args:
        group_ids: [N] int64 group of each sample (the anchor samples of a step).
        reward_true: [N] float64 executed rewards r.
        reward_wm: [N] float64 world-model scores r_hat of the same samples (raw or calibrated: a monotone map
            changes neither figure, except that ties it creates lower tau-b).

    Returns:
        :class:`RankingErrors`; samples with a non-finite r or r_hat are left out.

    Raises:
        ValueError: arrays of different lengths.
    """
    g = np.asarray(group_ids).reshape(-1)
    r = np.asarray(reward_true, dtype=np.float64).reshape(-1)
    w = np.asarray(reward_wm, dtype=np.float64).reshape(-1)
    if not (g.size == r.size == w.size):
        raise ValueError(f"group_ids, reward_true and reward_wm must have one length, got {g.size}, {r.size}, "
                         f"{w.size}")
    ok = np.isfinite(r) & np.isfinite(w)
    taus: list[float] = []
    regrets: list[float] = []
    for k in np.unique(g[ok]):
        sel = ok & (g == k)
        if sel.sum() < 2:
            continue
        rk, wk = r[sel], w[sel]
        regrets.append(float(rk.max() - rk[wk == wk.max()].mean()))
        t = _tau_b(wk, rk)
        if t is not None:
            taus.append(t)
    return RankingErrors(float(np.mean(taus)) if taus else None, float(np.mean(regrets)) if regrets else None,
                         len(regrets))


def policy_concentration(group_ids: np.ndarray, programs: Sequence[str],
                         sequence_logprobs: np.ndarray | None = None) -> dict[str, float | None]:
    """How concentrated the policy's samples are (module docstring).

    Args:
        group_ids: [B] int64 group (task) of each sample.
        programs: B program texts (equal strings = one program).
        sequence_logprobs: [B] float64 log-probability of each sampled completion under the sampling policy
            (the sum of its tokens' log-probabilities), or None.

    Returns:
        ``policy_distinct_programs`` (mean over groups of the distinct programs among the group's samples) and
        ``policy_entropy`` (nats, - mean of ``sequence_logprobs``; None without them); both None for B = 0.

    Raises:
        ValueError: arrays of different lengths.
    """
    g = np.asarray(group_ids).reshape(-1)
    if len(programs) != g.size or (sequence_logprobs is not None and np.asarray(sequence_logprobs).size != g.size):
        raise ValueError(f"group_ids, programs and sequence_logprobs must have one length B={g.size}")
    if not g.size:
        return {"policy_distinct_programs": None, "policy_entropy": None}
    distinct = [len({programs[int(i)] for i in np.flatnonzero(g == k)}) for k in np.unique(g)]
    ent = None if sequence_logprobs is None else float(-np.mean(np.asarray(sequence_logprobs, dtype=np.float64)))
    return {"policy_distinct_programs": float(np.mean(distinct)), "policy_entropy": ent}

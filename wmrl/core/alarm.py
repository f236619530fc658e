"""The exploitation alarm: a sequential test on the anchors for a policy that moves onto programs the
world model over-rates.

The anchor groups are an unbiased sample of what the policy writes now, each with its true reward r,
its raw world-model score r_hat and its out-of-sample calibrated score r_tilde = f_hat(r_hat) (f_hat fitted
on earlier steps only). While the world model's errors stay where they were when f_hat learned them,
r - r_tilde has mean 0 and r_hat orders a group no worse than chance. A policy that climbs the world
model's errors breaks both: it concentrates on programs with r < r_tilde, and inside a group the programs
the world model ranks first are the over-rated ones. Two one-sided CUSUM statistics (Page, 1954,
"Continuous inspection schemes", Biometrika 41) watch for that, one anchor group at a time:

    residual   z_g = -mean_g(r - r_tilde) / s        s: the in-control scale of the group means
    order      z_g = -tau_g / s_tau(n_g)             tau_g: Kendall's tau-a of (r_hat, r) in group g,
                                                     s_tau(n) = sqrt(2 (2n + 5) / (9 n (n - 1))), its
                                                     standard deviation under no association
    CUSUM      S <- max(0, S + z_g - k)              fires when S > h; both statistics reset then

``k`` (the drift allowance, in standard deviations) and ``h`` (the threshold) set the trade-off between the
detection delay and the false-alarm rate; :mod:`wmrl.sim.alarm` measures both on the simulated bandit.
The residual scale ``s`` is the root mean square of the group-mean residuals seen while the residual
statistic was at 0 (in control), floored at ``scale_floor``; until ``min_groups`` groups are in it, no
alarm fires. Arrays are numpy float64; the monitor's state is a JSON-able dict (:meth:`state_dict`) for
checkpoints.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["AlarmCheck", "ExploitationMonitor", "kendall_tau_a", "raised_anchor_fraction", "tau_null_sd"]


def raised_anchor_fraction(fraction: float, ceiling: float) -> float:
    """The ``raise_anchors`` response: the anchor fraction doubled, at most ``ceiling`` (both in [0, 1])."""
    return min(float(ceiling), 2.0 * float(fraction))


def kendall_tau_a(x: np.ndarray, y: np.ndarray) -> tuple[float, int]:
    """Kendall's tau-a of ``x`` against ``y`` over the pairs with ``y_i != y_j``: (tau in [-1, 1], n pairs).

    A pair tied in ``x`` but not in ``y`` counts as half concordant, half discordant (0). Returns
    ``(0.0, 0)`` when no pair differs in ``y``.

    Raises:
        ValueError: ``x`` and ``y`` differ in length.
    """
    x, y = np.asarray(x, dtype=np.float64).ravel(), np.asarray(y, dtype=np.float64).ravel()
    if x.size != y.size:
        raise ValueError(f"x and y must have the same length, got {x.size} and {y.size}")
    i, j = np.triu_indices(x.size, k=1)
    dy = np.sign(y[i] - y[j])
    keep = dy != 0
    if not keep.any():
        return 0.0, 0
    s = np.sign(x[i] - x[j])[keep] * dy[keep]
    return float(s.mean()), int(keep.sum())


def tau_null_sd(n: int) -> float:
    """Standard deviation of Kendall's tau for n untied observations under no association (n >= 2)."""
    if n < 2:
        raise ValueError(f"need n >= 2 observations, got {n}")
    return math.sqrt(2.0 * (2 * n + 5) / (9.0 * n * (n - 1)))


@dataclass(frozen=True)
class AlarmCheck:
    """What :meth:`ExploitationMonitor.update` saw at one step.

    Attributes:
        fired: whether the alarm fired at this step.
        reason: ``"residual"``, ``"order"``, ``"residual+order"`` when fired, else ``""``.
        residual_cusum, order_cusum: the two statistics after this step (before the reset that follows
            an alarm).
        n_groups: anchor groups that entered the test at this step.
        mean_residual: mean of r - r_tilde over this step's anchor samples (NaN when none).
        tau: mean Kendall tau-a of (r_hat, r) over this step's anchor groups (NaN when none had a pair).
        scale: the residual scale s in use.
    """

    fired: bool
    reason: str
    residual_cusum: float
    order_cusum: float
    n_groups: int
    mean_residual: float
    tau: float
    scale: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (NaN -> None) for metrics.jsonl."""
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in self.__dict__.items()}


@dataclass
class ExploitationMonitor:
    """Two one-sided CUSUM tests on the anchor groups (module docstring).

    Attributes:
        threshold: h, in standard deviations. drift: k, in standard deviations per group.
        min_groups: in-control groups the residual scale needs before an alarm may fire.
        scale_floor: the smallest residual scale s (reward units), so that a near-perfect world model does
            not turn rounding into alarms.
    """

    threshold: float = 5.0
    drift: float = 0.5
    min_groups: int = 4
    scale_floor: float = 0.02
    residual_cusum: float = 0.0
    order_cusum: float = 0.0
    n_scale: int = 0
    sum_sq: float = 0.0
    n_alarms: int = 0
    alarm_steps: list[int] = field(default_factory=list)
    alarm_reasons: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not (self.threshold > 0 and self.drift >= 0 and self.min_groups >= 1 and self.scale_floor > 0):
            raise ValueError(f"alarm settings out of range: threshold {self.threshold} (> 0), drift {self.drift} "
                             f"(>= 0), min_groups {self.min_groups} (>= 1), scale_floor {self.scale_floor} (> 0)")

    @property
    def scale(self) -> float:
        """The residual scale s (reward units)."""
        rms = math.sqrt(self.sum_sq / self.n_scale) if self.n_scale else 0.0
        return max(rms, self.scale_floor)

    def update(self, step: int, group_ids: np.ndarray, reward_true: np.ndarray, reward_wm_calibrated: np.ndarray,
               reward_wm: np.ndarray) -> AlarmCheck:
        """Feed one step's valid anchor samples (any order; infrastructure failures removed).

        Args:
            step: the training step. group_ids: [N] int64 group of each anchor sample.
            reward_true: [N] float64 r. reward_wm_calibrated: [N] float64 out-of-sample r_tilde.
            reward_wm: [N] float64 raw r_hat.

        Returns:
            :class:`AlarmCheck`; after an alarm both statistics restart from 0.

        Raises:
            ValueError: arrays of different lengths or non-finite values.
        """
        g = np.asarray(group_ids).ravel()
        arrs = [np.asarray(a, dtype=np.float64).ravel() for a in (reward_true, reward_wm_calibrated, reward_wm)]
        if {a.size for a in arrs} | {g.size} != {g.size}:
            raise ValueError("group_ids, reward_true, reward_wm_calibrated and reward_wm must all have length N, got "
                             f"{g.size}, {arrs[0].size}, {arrs[1].size}, {arrs[2].size}")
        if not all(np.all(np.isfinite(a)) for a in arrs):
            raise ValueError("the alarm needs finite rewards and scores (drop infrastructure failures first)")
        r, rt, rh = arrs
        taus, n_groups = [], 0
        for gid in np.unique(g):
            sel = g == gid
            n_groups += 1
            e = float(np.mean(r[sel] - rt[sel]))
            ready = self.n_scale >= self.min_groups
            z = -e / self.scale
            self.residual_cusum = max(0.0, self.residual_cusum + z - self.drift) if ready else 0.0
            if self.residual_cusum == 0.0:  # in control: the group informs the scale
                self.n_scale += 1
                self.sum_sq += e * e
            if sel.sum() >= 2:
                tau, pairs = kendall_tau_a(rh[sel], r[sel])
                if pairs:
                    taus.append(tau)
                    zt = -tau / tau_null_sd(int(sel.sum()))
                    self.order_cusum = max(0.0, self.order_cusum + zt - self.drift) if ready else 0.0
        res_hit, ord_hit = self.residual_cusum > self.threshold, self.order_cusum > self.threshold
        reason = "+".join(n for n, hit in (("residual", res_hit), ("order", ord_hit)) if hit)
        check = AlarmCheck(bool(reason), reason, self.residual_cusum, self.order_cusum, n_groups,
                           float(np.mean(r - rt)) if r.size else math.nan,
                           float(np.mean(taus)) if taus else math.nan, self.scale)
        if reason:
            self.n_alarms += 1
            self.alarm_steps.append(int(step))
            self.alarm_reasons.append(reason)
            self.residual_cusum = self.order_cusum = 0.0
        return check

    def state_dict(self) -> dict[str, Any]:
        """Everything :meth:`load_state_dict` needs (JSON-able)."""
        return dict(self.__dict__, alarm_steps=list(self.alarm_steps), alarm_reasons=list(self.alarm_reasons))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (settings included)."""
        for k, v in state.items():
            if k in self.__dict__:
                setattr(self, k, list(v) if isinstance(v, (list, tuple)) else v)

"""The asynchronous anchor stream: execution latency, arrival steps and the staleness bound k.

Anchor groups routed at step s are executed while training goes on. A group *arrives* at the first step
whose collection finds all of its executions finished, and is *consumed* there: its pairs (r, r_hat) reach
the calibrator and the anchor window (:meth:`wmrl.core.recipe.Recipe.learn_late`), and, in the ``gradient``
mode of the simulation, its samples enter that step's loss. The staleness of a group is (consuming step -
routing step). The bound k: at step s + k the trainer waits for whatever of the group is still running, so no
group is ever consumed later than s + k (k = 0 is the synchronous stream: every group is waited for at its own
step). Waiting is counted (stage ``anchor_wait`` of the ledger); with k larger
than the latency in steps there is none.

Importance correction of a late group in the gradient (simulation, ``late="gradient"``): its samples were
drawn from the behaviour policy pi_s of step s, and the clipped surrogate is evaluated with the behaviour
log-probabilities as the "old" ones,

    L = -(1/n) sum_i min(ratio_i A_i, clip(ratio_i, 1 - eps_low, 1 + eps_high) A_i),   ratio_i = pi_t(a_i) / pi_s(a_i),

whose gradient is the importance-sampled policy gradient E_{pi_s}[ratio grad log pi_t A] (Kakade & Langford 2002;
PPO, Schulman et al. 2017, eq. 7) where the ratio stays inside the clip range, and 0 where it has left it in
the direction the advantage pushes (the truncation that bounds the variance; the role of IMPALA's truncated
importance weights, Espeholt et al. 2018, and of AReaL's decoupled objective for stale rollouts, Fu et al. 2025).
Late rows get their own range (:func:`late_clip`): [1 - 0.999, ratio_max], ratio_max = 2 by default, because the
simulation's staleness axis measured that PPO's [0.8, 1.2] cuts off too much of a stale sample when steps
without anchors update (docs/scaling.md: with an exploitable world model at k = 9 it lost 0.013 of final reward to
the synchronous run against 0.011 with ratio_max = 2 and 0.015 untruncated; with them skipped, the default, the
three are within noise of each other). A sample's ratio is the product of its token ratios; in the bandit a
completion is one token. Fresh rows keep the configured range (their ratio is 1: one update per batch).

Latency model (:class:`LatencyModel`): a log-normal in seconds, clipped to [floor_s, cap_s], so that nothing
runs longer than the cap (the WMRL paper's sandboxes cap an execution at 600 s). :data:`PAPER_LATENCY` is an
assumption for data-science programs (median 120 s, a heavy right tail cut at 600 s), not a measurement.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LatencyModel:
    """Execution latency L = clip(median_s * exp(sigma * z), floor_s, cap_s), z ~ N(0, 1) (seconds).

    Attributes:
        median_s: median of the unclipped log-normal (seconds, > 0).
        sigma: standard deviation of log L (>= 0; 0 = every execution takes ``median_s``).
        floor_s: shortest execution (seconds, >= 0).
        cap_s: longest execution, the sandbox's wall cap (seconds, >= floor_s and >= median_s).

    Raises:
        ValueError: a parameter out of range (the message names it).
    """

    median_s: float = 120.0
    sigma: float = 0.9
    floor_s: float = 10.0
    cap_s: float = 600.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.median_s) and self.median_s > 0):
            raise ValueError(f"median_s must be a positive number of seconds, got {self.median_s!r}")
        if not (math.isfinite(self.sigma) and self.sigma >= 0):
            raise ValueError(f"sigma must be >= 0, got {self.sigma!r}")
        if not (0 <= self.floor_s <= self.median_s <= self.cap_s and math.isfinite(self.cap_s)):
            raise ValueError(f"need 0 <= floor_s <= median_s <= cap_s (finite), got floor_s={self.floor_s}, "
                             f"median_s={self.median_s}, cap_s={self.cap_s}")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """[n] float64 latencies in seconds, drawn with ``rng``."""
        z = rng.standard_normal(int(n))
        return np.clip(self.median_s * np.exp(self.sigma * z), self.floor_s, self.cap_s)

    def scaled(self, factor: float) -> LatencyModel:
        """The same shape with every time multiplied by ``factor`` (> 0), e.g. 1/100 for a benchmark."""
        if not (math.isfinite(factor) and factor > 0):
            raise ValueError(f"factor must be > 0, got {factor!r}")
        return LatencyModel(self.median_s * factor, self.sigma, self.floor_s * factor, self.cap_s * factor)

    def moments(self, n: int = 200_000, seed: int = 0, group: int = 8) -> dict[str, float]:
        """Monte-Carlo ``mean_s``, ``p50_s``, ``p90_s``, ``max_s`` and the expected maximum of ``group``
        executions, ``group_max_s`` (seconds; seeded, so the figures are reproducible)."""
        x = self.sample(np.random.default_rng(seed), n)
        g = x[: (n // group) * group].reshape(-1, group).max(axis=1)
        return {"mean_s": float(x.mean()), "p50_s": float(np.median(x)), "p90_s": float(np.quantile(x, 0.9)),
                "max_s": float(x.max()), "group_max_s": float(g.mean())}


#: The latency the projections of docs/scaling.md assume for one sandboxed data-science program.
PAPER_LATENCY = LatencyModel(median_s=120.0, sigma=0.9, floor_s=10.0, cap_s=600.0)


def late_clip(ratio_max: float) -> tuple[float, float]:
    """``(clip_low, clip_high)`` of :func:`wmrl.core.losses.grpo_loss` for late rows: the ratio is kept in
    [0.001, ratio_max] (ratio_max > 1; ``inf`` = no upper truncation).

    Raises:
        ValueError: ``ratio_max`` <= 1 or NaN.
    """
    if not ratio_max > 1.0:
        raise ValueError(f"the late rows' ratio_max must be > 1 (e.g. 2.0), got {ratio_max!r}")
    return 0.999, (1e12 if math.isinf(ratio_max) else float(ratio_max) - 1.0)


def check_staleness(k: int) -> int:
    """``k`` as an int, or ValueError unless it is an integer >= 0 (steps)."""
    if isinstance(k, bool) or int(k) != k or k < 0:
        raise ValueError(f"the staleness bound k must be an integer number of steps >= 0, got {k!r}")
    return int(k)


#: What happens to an anchor group still running when its staleness reaches the bound k
#: (``wmrl.asynchronous.over_bound_anchors``): ``wait`` (the trainer blocks until it is done and consumes it at
#: s + k; the default), ``calibration`` (not waited for: it keeps running, and when it
#: arrives, later than s + k, its pairs feed only the calibrator and the fusion window, no gradient: beyond the
#: bound the importance ratio is not trusted) or ``drop`` (not waited for, and its results are discarded when
#: they arrive). With ``calibration`` and ``drop`` generation never waits on executions.
AT_BOUND_MODES = ("wait", "calibration", "drop")


def check_at_bound(mode: str) -> str:
    """``mode`` if it is one of :data:`AT_BOUND_MODES`, else ValueError naming them."""
    if mode not in AT_BOUND_MODES:
        raise ValueError(f"what to do with an anchor group still running at the staleness bound must be one of "
                         f"{AT_BOUND_MODES}, got {mode!r}")
    return mode


#: What a step of the asynchronous stream does when its own anchor groups are all still in flight and no other
#: anchor group arrives at it (``wmrl.asynchronous.steps_without_anchors``): ``skip`` its policy update (the default) or
#: ``update`` on the world-model groups alone.
UNANCHORED_MODES = ("skip", "update")


def skips_update(mode: str, k: int, late_mode: str, own_in_flight_groups: int, anchor_rows: int,
                 skipped_in_a_row: int) -> bool:
    """Whether a step's policy update is skipped because its anchors are late (``mode`` = ``skip``).

    In the synchronous stream (k = 0) a step that routed anchor groups trains on them. In the asynchronous one
    (k >= 1) with late groups in the gradient (``late_mode="gradient"``) such a step has them out of its loss
    while they run; if no other anchor group arrives at it either, its loss would be the world-model groups
    alone: the pure world-model update (recipe ``wm``) that an exploitable world model feeds, which the
    synchronous stream never makes at that step. This happens on the first steps of every run (the pipeline
    fill: no anchor has had the time to finish) and on steps where arrivals happen to leave a gap. ``skip``
    makes no update at such a step (its samples are scored and logged, its anchors stay in flight and enter the
    loss when they arrive); ``update`` trains on the world-model groups, as before.

    At most k steps in a row are skipped: a group routed k steps ago has either arrived or is over the bound
    (``wmrl.asynchronous.over_bound_anchors``), so beyond k a stream that delivers nothing into the gradient (a
    bound smaller than the latency with a non-blocking mode) would freeze the run; from there on such steps update as
    with ``update`` until an anchor row arrives again.

    Decided by measurement: docs/scaling.md, "Why asynchrony cost reward" and "The regime of the criterion".

    Args:
        mode: one of :data:`UNANCHORED_MODES`.
        k: the staleness bound (steps). late_mode: ``gradient`` or ``calibration`` (in ``calibration`` the
            in-flight groups train as world-model groups at their own step: the step is never without them).
        own_in_flight_groups: the step's own anchor groups still running at its collection point.
        anchor_rows: valid anchor rows in the step's loss (its own that arrived in time, plus late ones).
        skipped_in_a_row: updates skipped by this rule since the last step with anchor rows (or since a resume,
            which starts a new pipeline fill: the trainer does not restore it).

    Returns:
        True: make no policy update at this step (the caller adds 1 to ``skipped_in_a_row``; a step with anchor
        rows resets it to 0).

    Raises:
        ValueError: ``mode`` or ``late_mode`` unknown, k not an integer >= 0, or counts < 0.
    """
    if mode not in UNANCHORED_MODES:
        raise ValueError(f"what a step without anchors does must be one of {UNANCHORED_MODES}, got {mode!r}")
    if late_mode not in ("gradient", "calibration"):
        raise ValueError(f"late_mode must be 'gradient' or 'calibration' (wmrl.asynchronous.late_anchors), "
                         f"got {late_mode!r}")
    if min(own_in_flight_groups, anchor_rows, skipped_in_a_row) < 0:
        raise ValueError(f"counts must be >= 0, got {own_in_flight_groups}, {anchor_rows}, {skipped_in_a_row}")
    k = check_staleness(k)
    return (mode == "skip" and k > 0 and late_mode == "gradient" and own_in_flight_groups > 0 and anchor_rows == 0
            and skipped_in_a_row < k)


@dataclass
class UnanchoredSteps:
    """The bookkeeping of :func:`skips_update` over a run (the trainer's and the simulation's one counter).

    Attributes:
        mode, k, late_mode: as in :func:`skips_update` (``wmrl.asynchronous.steps_without_anchors``, the bound,
            ``late_anchors``).
        in_a_row: updates skipped since the last step with anchor rows (a new object, e.g. at a resume, starts a
            new pipeline fill at 0).
        total: updates skipped over the run (restore it from a checkpoint).
    """

    mode: str
    k: int
    late_mode: str
    in_a_row: int = 0
    total: int = 0

    def decide(self, own_in_flight_groups: int, anchor_rows: int) -> bool:
        """Whether this step skips its update (:func:`skips_update`); updates the counters.

        Raises:
            ValueError: as :func:`skips_update`.
        """
        skip = skips_update(self.mode, self.k, self.late_mode, own_in_flight_groups, anchor_rows, self.in_a_row)
        self.in_a_row = 0 if anchor_rows else self.in_a_row + skip
        self.total += skip
        return skip


def arrival_steps(submit_step: int, latency_steps: np.ndarray, k: int, wait: bool = True) -> np.ndarray:
    """[N] int64 step at which each of N groups routed at ``submit_step`` is consumed.

    A group whose executions take ``latency_steps`` steps (float >= 0; the time from submission to the last
    one done, divided by the step time) arrives at ``submit_step + ceil(latency_steps)``; with ``wait`` (the
    ``wait`` mode of :data:`AT_BOUND_MODES`) at the bound ``submit_step + k`` at the latest (the trainer waits
    there), without it later (a group arriving after ``submit_step + k`` is *over the bound*). k = 0: every
    group at its own step (the synchronous stream always waits).
    """
    k = check_staleness(k)
    lat = np.asarray(latency_steps, dtype=np.float64)
    if not np.all(np.isfinite(lat) & (lat >= 0)):
        raise ValueError("latency_steps must be finite and >= 0")
    steps = np.ceil(lat)
    return int(submit_step) + (np.minimum(steps, k) if wait or not k else steps).astype(np.int64)


def is_due(submit_step: int, now_step: int, k: int) -> bool:
    """Whether a group routed at ``submit_step`` must be consumed (waited for) at ``now_step``: its staleness
    ``now_step - submit_step`` has reached k."""
    return now_step - submit_step >= check_staleness(k)


def project_step_times(t_gen: float, t_wm: float, t_update: float, n_exec: int, group: int, slots: int,
                       latency: LatencyModel, k: int, n: int = 20_000, seed: int = 0) -> dict[str, float]:
    """Projected mean step times (seconds) of the synchronous and the asynchronous anchor stream.

    The model (docs/scaling.md), with T_LM = t_gen + t_wm + t_update the language model's time per step and
    n_exec = anchor executions per step (anchor groups x ``group``) on ``slots`` sandboxes:

        T_sync  = t_gen + max(t_wm, M) + t_update,  M = makespan of the step's n_exec executions on the slots
                  (list scheduling; the world model scores while they run)
        T_async = max(T_LM, n_exec * E[L] / slots) + W,   W = E[max over the step's groups of
                  max(0, L_group - k * T_async)]: the wait at the bound for a group (the maximum of its
                  ``group`` latencies) that outlasts k steps (solved as a fixed point in T_async)

    Queueing inside the executor (utilisation near 1) is not modelled: keep n_exec * E[L] / slots below T_LM,
    or read T_async as a lower bound.

    Returns:
        ``t_lm``, ``t_sync``, ``t_async``, ``wait`` (W), ``speedup`` (T_sync / T_async), ``utilisation_sync``,
        ``utilisation_async`` (n_exec * E[L] / (slots * T)), ``staleness_mean`` (E[ceil(L_group / T)] capped at
        k), all seconds or ratios; Monte Carlo over ``n`` steps, seeded.

    Raises:
        ValueError: a non-positive count or a negative time.
    """
    if min(n_exec, group, slots, n) < 1 or n_exec % group or min(t_gen, t_wm, t_update) < 0:
        raise ValueError(f"need n_exec a positive multiple of group, slots >= 1, times >= 0; got n_exec={n_exec}, "
                         f"group={group}, slots={slots}, times={t_gen}, {t_wm}, {t_update}")
    k = check_staleness(k)
    rng = np.random.default_rng(seed)
    lat = latency.sample(rng, n * n_exec).reshape(n, n_exec)
    if n_exec <= slots:
        make = lat.max(axis=1)
    else:  # list scheduling in submission order: each job takes the slot that frees first
        free = np.zeros((n, slots))
        for j in range(n_exec):
            s = free.argmin(axis=1)
            free[np.arange(n), s] += lat[:, j]
        make = free.max(axis=1)
    t_lm = t_gen + t_wm + t_update
    t_sync = float(np.mean(t_gen + np.maximum(t_wm, make) + t_update))
    mean_l = float(lat.mean())
    t0 = max(t_lm, n_exec * mean_l / slots)
    gmax = lat.reshape(n, n_exec // group, group).max(axis=2)

    def w(t: float) -> float:
        return float(np.mean(np.maximum(0.0, gmax - k * t).max(axis=1)))

    lo, hi = t0, t0 + w(t0)  # T - t0 - W(T) is increasing in T: bisection for the fixed point
    for _ in range(60):  # waiting lengthens the steps, so k steps last longer
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if mid - t0 - w(mid) < 0 else (lo, mid)
    t = t_async = hi
    wait = t_async - t0
    return {"t_lm": t_lm, "t_sync": t_sync, "t_async": t_async, "wait": wait, "speedup": t_sync / t_async,
            "utilisation_sync": n_exec * mean_l / (slots * t_sync),
            "utilisation_async": n_exec * mean_l / (slots * t_async),
            "staleness_mean": float(np.mean(np.minimum(np.ceil(gmax / t), k))) if k else 0.0}

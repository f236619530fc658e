"""The infrastructure-error alarm: is a count of ``infra_error`` outcomes more than the executor's background?

An ``infra_error`` is left out of the gradient, the group baselines, the calibration and every evaluation
mean, so a policy that could trigger one at will could censor its own bad outcomes. The grader locates
faults so that no submission can (``wmrl.execution.runner``); this alarm is the defence in depth for routes
not yet closed: under the background rate ``p0`` of the executor (infrastructure faults that no program
causes), the number ``X`` of infra errors among ``n`` executions is Binomial(n, p0), and a count whose
upper tail ``P(X >= k)`` is below ``alpha`` is a rise no flaky machine explains.

Pure functions: no I/O, nothing else of wmrl.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

#: Default background rate of infrastructure errors per execution (probability). An upper bound of what the
#: local sandboxed executor shows on healthy hosts; set your executor's own measured rate in the config.
DEFAULT_BACKGROUND_RATE = 0.01
#: Default false-alarm probability of one test (per step, per group, per evaluation).
DEFAULT_ALPHA = 1e-3


def usable_outcome(status: object, reward: float | None) -> bool:
    """The one rule of what a real outcome is worth to training: not an infrastructure error (``status``, a string
    or an enum whose ``value`` is one, is not ``infra_error``) and a finite reward. An unusable outcome is left
    out of the gradient, the group baselines and the calibration, and counted."""
    if str(getattr(status, "value", status)) == "infra_error" or reward is None:
        return False
    return math.isfinite(float(reward))


def binomial_upper_tail(k: int, n: int, p: float) -> float:
    """``P(X >= k)`` for ``X ~ Binomial(n, p)``, summed exactly in log space (float64).

    Raises:
        ValueError: ``n < 0``, ``k`` not an integer count, or ``p`` outside [0, 1].
    """
    if n < 0 or not 0.0 <= p <= 1.0:
        raise ValueError(f"binomial_upper_tail needs n >= 0 and p in [0, 1], got n={n}, p={p}")
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if p == 0.0:
        return 0.0
    if p == 1.0:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq
             for i in range(k, n + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


@dataclass(frozen=True)
class InfraCheck:
    """The verdict on one count of infrastructure errors.

    Attributes:
        n_infra: infra errors counted.
        n: executions they are counted among.
        rate: ``n_infra / n`` (None when ``n == 0``).
        p_value: ``P(X >= n_infra)`` under Binomial(n, background_rate).
        alarm: ``p_value < alpha`` (and at least one infra error).
    """

    n_infra: int
    n: int
    rate: float | None
    p_value: float
    alarm: bool


def check_infra(n_infra: int, n: int, background_rate: float = DEFAULT_BACKGROUND_RATE,
                alpha: float = DEFAULT_ALPHA) -> InfraCheck:
    """One-sided binomial test of ``n_infra`` infra errors among ``n`` executions against the background rate.

    Args:
        n_infra: infra errors counted (``0 <= n_infra <= n``).
        n: executions.
        background_rate: the executor's infra-error probability per execution when nothing is wrong.
        alpha: the false-alarm probability of this test.

    Raises:
        ValueError: counts out of range, ``background_rate`` outside [0, 1), ``alpha`` outside (0, 1).
    """
    if not 0 <= n_infra <= n:
        raise ValueError(f"check_infra needs 0 <= n_infra <= n, got n_infra={n_infra}, n={n}")
    if not 0.0 <= background_rate < 1.0:
        raise ValueError(f"background_rate must be in [0, 1), got {background_rate}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    p = binomial_upper_tail(int(n_infra), int(n), float(background_rate))
    return InfraCheck(n_infra=int(n_infra), n=int(n), rate=(n_infra / n) if n else None, p_value=p,
                      alarm=bool(n_infra > 0 and p < alpha))


def group_alarms(is_infra: Sequence[bool], group_ids: Sequence[int], background_rate: float = DEFAULT_BACKGROUND_RATE,
                 alpha: float = DEFAULT_ALPHA) -> list[int]:
    """The groups whose infra errors alone raise the alarm (:func:`check_infra` on each group's executions).

    Args:
        is_infra: [N] bool, one per execution.
        group_ids: [N] int group id of each execution.

    Returns:
        The alarming group ids, ascending.

    Raises:
        ValueError: the two sequences differ in length, or as :func:`check_infra`.
    """
    if len(is_infra) != len(group_ids):
        raise ValueError(f"is_infra ({len(is_infra)}) and group_ids ({len(group_ids)}) must have the same length")
    counts: dict[int, list[int]] = {}
    for bad, g in zip(is_infra, group_ids):
        c = counts.setdefault(int(g), [0, 0])
        c[0] += int(bool(bad))
        c[1] += 1
    return sorted(g for g, (k, n) in counts.items() if check_infra(k, n, background_rate, alpha).alarm)

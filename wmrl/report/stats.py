"""Small statistics for comparing methods over seeds: mean, standard error, paired differences.

Pure functions on plain sequences; no I/O. Standard error is the sample standard deviation
(``ddof=1``) divided by ``sqrt(n)``; it is ``nan`` for fewer than two values.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class MeanSE:
    """Mean and standard error of ``n`` finite values (``se`` is ``nan`` when ``n < 2``)."""

    mean: float
    se: float
    n: int

    def interval(self) -> tuple[float, float]:
        """``(mean - se, mean + se)``; with an undefined SE the interval is the point itself."""
        se = 0.0 if math.isnan(self.se) else self.se
        return (self.mean - se, self.mean + se)

    def fmt(self, digits: int = 3) -> str:
        """``"0.512 ± 0.031"``, ``"0.512"`` when the SE is undefined, ``"n/a"`` when empty."""
        if self.n == 0 or math.isnan(self.mean):
            return "n/a"
        if math.isnan(self.se):
            return f"{self.mean:.{digits}f}"
        return f"{self.mean:.{digits}f} ± {self.se:.{digits}f}"


def _finite(values: Sequence[float | None]) -> list[float]:
    out = []
    for v in values:
        if v is None:
            continue
        f = float(v)
        if math.isfinite(f):
            out.append(f)
    return out


def mean_se(values: Sequence[float | None]) -> MeanSE:
    """Mean and standard error (``std(ddof=1)/sqrt(n)``) of the finite values; ``None``/nan dropped.

    Returns ``MeanSE(nan, nan, 0)`` for no values and ``MeanSE(x, nan, 1)`` for one.
    """
    xs = _finite(values)
    n = len(xs)
    if n == 0:
        return MeanSE(math.nan, math.nan, 0)
    m = sum(xs) / n
    if n < 2:
        return MeanSE(m, math.nan, 1)
    var = sum((x - m) ** 2 for x in xs) / (n - 1)
    return MeanSE(m, math.sqrt(var / n), n)


def paired_difference(
    values: Mapping[int, float | None], reference: Mapping[int, float | None]
) -> MeanSE:
    """Mean and SE over seeds of ``values[seed] - reference[seed]`` on the seeds both have.

    A paired comparison removes the between-seed variance that both methods share (same train
    tasks, same seed, same initial policy), so its SE is usually smaller than either method's own.
    Seeds missing from either side, or with a ``None``/nan value, are left out.
    """
    diffs = []
    for seed, v in values.items():
        r = reference.get(seed)
        if v is None or r is None:
            continue
        fv, fr = float(v), float(r)
        if math.isfinite(fv) and math.isfinite(fr):
            diffs.append(fv - fr)
    return mean_se(diffs)


def intervals_overlap(a: MeanSE, b: MeanSE) -> bool:
    """True when the ``mean ± SE`` intervals of ``a`` and ``b`` overlap (or either SE is undefined).

    An undefined SE (one seed) cannot separate anything, so it counts as overlapping.
    """
    if a.n < 2 or b.n < 2 or math.isnan(a.se) or math.isnan(b.se):
        return True
    lo_a, hi_a = a.interval()
    lo_b, hi_b = b.interval()
    return lo_a <= hi_b and lo_b <= hi_a

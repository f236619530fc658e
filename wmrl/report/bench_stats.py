"""Statistics of a bench: per-method aggregates over seeds with standard errors, paired differences to
a reference method and to the initial policy, and plain-language notes on what the seeds resolve.

Input is :func:`wmrl.report.bench_results.collect`'s frame (one row per finished run); the numbers
are :mod:`wmrl.report.stats`'s ``mean ± SE`` over seeds.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import pandas as pd

from wmrl.report.bench_results import REFERENCE
from wmrl.report.stats import MeanSE, intervals_overlap, mean_se, paired_difference


@dataclass
class MethodRow:
    """Aggregated numbers of one method over seeds (see :func:`wmrl.report.bench_page.bench_table`)."""

    method: str
    n: int
    percentile: MeanSE
    paired: MeanSE | None
    valid_rate: MeanSE
    executions: float
    sandbox_cpu_h: float
    train_cpu_h: float
    total_cpu_h: float
    wall_h: float
    compute_ratio: float | None
    train_percentile: MeanSE | None = None
    train_paired: MeanSE | None = None
    train_gain: MeanSE | None = None
    compute_ratio_corpus: float | None = None
    compute_ratio_cached: float | None = None
    notes: list[str] = field(default_factory=list)


def aggregate(results: pd.DataFrame, reference: str = REFERENCE) -> list[MethodRow]:
    """Per-method aggregates over seeds of :func:`wmrl.report.bench_results.collect`'s rows.

    ``percentile``: mean ± SE (over seeds) of the final held-out mean leaderboard percentile.
    ``paired``: mean ± SE over seeds of (method - reference) on the seeds both finished.
    ``train_percentile``, ``train_paired``: the same on the train tasks; ``train_gain``: mean ± SE over
    seeds of (final - initial) train-task percentile, paired by seed (the initial policy is the seed's).
    ``compute_ratio``: mean training compute of the method / that of the reference (CPU-seconds of
    trainer + training sandbox; < 1 means cheaper); ``compute_ratio_corpus``: the same with the shared
    warm-up corpus (``corpus_cpu_s``) charged in full to every run that used it; ``compute_ratio_cached``: the
    method's training compute, corpus charged, over the reference's with the exact execution cache (its training
    compute less ``train_repeat_sandbox_cpu_s``; None when the reference's runs have no execution log). Resource
    columns are means per seed (hours).
    """
    if results.empty:
        return []
    ref = results[results["method"] == reference]
    ref_pct = dict(zip(ref["seed"], ref["heldout_percentile"]))
    ref_train = dict(zip(ref["seed"], ref["train_percentile"]))
    train_gains = gains_vs_initial(results, "train_percentile", "initial_train_percentile")
    ref_compute = float(pd.to_numeric(ref["train_compute_cpu_s"],
                                      errors="coerce").mean()) if not ref.empty else math.nan
    ref_repeats = (pd.to_numeric(ref["train_repeat_sandbox_cpu_s"], errors="coerce")
                   if not ref.empty and "train_repeat_sandbox_cpu_s" in ref else pd.Series(dtype=float))
    # every reference run needs its log: a mean over some of them would compare other seeds
    ref_cached = (ref_compute - float(ref_repeats.mean())
                  if len(ref_repeats) and ref_repeats.notna().all() else math.nan)
    rows = []
    for method, g in results.groupby("method", sort=False):
        pct = mean_se(list(g["heldout_percentile"]))
        paired = None
        if method != reference and ref_pct:
            paired = paired_difference(dict(zip(g["seed"], g["heldout_percentile"])), ref_pct)

        def mean(col: str, scale: float = 1.0, *, g: pd.DataFrame = g) -> float:
            v = pd.to_numeric(g[col], errors="coerce")
            return float(v.mean()) / scale if v.notna().any() else math.nan

        tc = mean("train_compute_cpu_s")
        ok_ref = bool(ref_compute and math.isfinite(ref_compute) and ref_compute > 0)
        ratio = tc / ref_compute if ok_ref else None
        corpus = mean("corpus_cpu_s") if "corpus_cpu_s" in g else 0.0
        ratio_corpus = (tc + corpus) / ref_compute if ok_ref and math.isfinite(corpus) else None
        ratio_cached = ((tc + corpus) / ref_cached if math.isfinite(ref_cached) and ref_cached > 0
                        and math.isfinite(corpus) else None)
        train_by_seed = dict(zip(g["seed"], g["train_percentile"]))
        train_paired = (paired_difference(train_by_seed, ref_train) if method != reference and ref_train
                        else None)
        train_gain = train_gains.get(method)
        rows.append(MethodRow(
            method=str(method), n=len(g), percentile=pct, paired=paired,
            valid_rate=mean_se(list(g["heldout_valid_rate"])),
            executions=mean("train_executions"), sandbox_cpu_h=mean("train_sandbox_cpu_s", 3600.0),
            train_cpu_h=tc / 3600.0, total_cpu_h=mean("total_cpu_s", 3600.0), wall_h=mean("wall_s", 3600.0),
            compute_ratio=ratio, train_percentile=mean_se(list(g["train_percentile"])),
            train_paired=train_paired if train_paired is not None and train_paired.n else None,
            train_gain=train_gain if train_gain is not None and train_gain.n else None,
            compute_ratio_corpus=ratio_corpus, compute_ratio_cached=ratio_cached,
        ))
    return rows


INITIAL = "initial policy (step 0)"


def initial_row(results: pd.DataFrame, reference: str = REFERENCE) -> MethodRow | None:
    """The held-out percentile of the initial policy (step-0 evaluations), one value per seed, and
    its paired difference to the reference's final policy (initial - reference, so a negative value
    means the reference improved on the initial policy). ``None`` when no run evaluated step 0."""
    if results.empty or "initial_percentile" not in results:
        return None
    per_seed = results.dropna(subset=["initial_percentile"]).groupby("seed")["initial_percentile"].first()
    if per_seed.empty:
        return None
    ref = results[results["method"] == reference]
    paired = paired_difference(per_seed.to_dict(), dict(zip(ref["seed"], ref["heldout_percentile"])))
    nan = math.nan
    train0 = results.dropna(subset=["initial_train_percentile"]).groupby("seed")["initial_train_percentile"].first()
    return MethodRow(method=INITIAL, n=len(per_seed), percentile=mean_se(list(per_seed)),
                     paired=paired if paired.n else None, valid_rate=mean_se([]), executions=nan,
                     sandbox_cpu_h=nan, train_cpu_h=nan, total_cpu_h=nan, wall_h=nan, compute_ratio=None,
                     train_percentile=mean_se(list(train0)))


def overlap_notes(rows: Sequence[MethodRow], reference: str = REFERENCE,
                  methods: Sequence[str] | None = None) -> list[str]:
    """Plain-language notes comparing each method's held-out percentile with the reference's.

    Says whether the ``mean ± SE`` intervals overlap (then the bench does not separate the two
    methods at this number of seeds) and whether the paired difference is more than two paired
    SEs from zero.
    """
    ref = next((r for r in rows if r.method == reference), None)
    if ref is None:
        return [f"No finished {reference} run: the relative columns are empty."]
    notes = []
    for r in rows:
        if r.method == reference or (methods is not None and r.method not in methods):
            continue
        ov = intervals_overlap(r.percentile, ref.percentile)
        s = (f"{r.method} vs {reference}: held-out percentile {r.percentile.fmt(3)} vs {ref.percentile.fmt(3)}; "
             + ("standard errors OVERLAP, so this bench does not separate them" if ov
                else "standard errors do not overlap"))
        if r.paired is not None and r.paired.n >= 2 and math.isfinite(r.paired.se):
            z = r.paired.mean / r.paired.se if r.paired.se > 0 else (math.inf if r.paired.mean != 0 else 0.0)
            s += (f"; paired difference {r.paired.fmt(3)} over {r.paired.n} seeds "
                  + ("is more than 2 SE from zero" if abs(z) > 2 else "is within 2 SE of zero"))
        elif r.paired is not None:
            s += f"; paired difference {r.paired.fmt(3)} from {r.paired.n} seed(s), SE undefined"
        notes.append(s + ".")
    return notes


def train_paired_notes(results: pd.DataFrame, reference: str, methods: Sequence[str]) -> list[str]:
    """The train-task comparison of each of ``methods`` with ``reference``: the paired difference over seeds of
    the final train-task percentile (method - reference, same seed) and whether it is more than two paired SEs
    from zero, in which direction. Empty without train-task evaluations or a ``reference`` run."""
    if "train_percentile" not in results or results["train_percentile"].isna().all():
        return []
    ref = results[results["method"] == reference]
    if ref.empty:
        return []
    base = dict(zip(ref["seed"], ref["train_percentile"]))
    notes = []
    for m in methods:
        g = results[results["method"] == m]
        if g.empty or m == reference:
            continue
        d = paired_difference(dict(zip(g["seed"], g["train_percentile"])), base)
        if d.n == 0:
            continue
        if d.n >= 2 and math.isfinite(d.se):
            resolved = d.se == 0 and d.mean != 0 or d.se > 0 and abs(d.mean / d.se) > 2
            verdict = (f"more than 2 SE {'above' if d.mean > 0 else 'below'} {reference}" if resolved
                       else "within 2 SE of zero: not separated")
        else:
            verdict = "one seed, SE undefined"
        notes.append(f"{m} vs {reference}: train-task percentile, paired difference {d.fmt(3)} over {d.n} seed(s), "
                     f"{verdict}.")
    return notes


def gains_vs_initial(results: pd.DataFrame, final: str, initial: str) -> dict[str, MeanSE]:
    """Per method, the paired difference over seeds of (column ``final`` - the seed's ``initial``
    percentile; the step-0 evaluation is made once per seed and shared by its methods), as
    :func:`wmrl.report.stats.paired_difference` (mean ± SE); ``{}`` when no run evaluated step 0."""
    if results.empty or results[initial].isna().all():
        return {}
    init = results.dropna(subset=[initial]).groupby("seed")[initial].first().to_dict()
    return {str(m): paired_difference(dict(zip(g["seed"], g[final])), init)
            for m, g in results.groupby("method", sort=False)}


def learning_notes(results: pd.DataFrame) -> list[str]:
    """Did each method improve on the initial policy? Per method and evaluation (held-out tasks, and the
    train tasks when evaluated), the paired difference over seeds of (final percentile - the seed's
    step-0 percentile), and whether it is more than two SEs from zero, in which direction. Empty when no
    step-0 evaluation exists."""
    notes = []
    for where, final, initial in (("held-out", "heldout_percentile", "initial_percentile"),
                                  ("train-task", "train_percentile", "initial_train_percentile")):
        for method, d in gains_vs_initial(results, final, initial).items():
            if d.n == 0:
                continue
            if d.n >= 2 and math.isfinite(d.se):
                resolved = d.se == 0 and d.mean != 0 or d.se > 0 and abs(d.mean / d.se) > 2
                verdict = ((f"more than 2 SE {'above' if d.mean > 0 else 'below'} zero: the policy got "
                            f"{'better' if d.mean > 0 else 'worse'}") if resolved
                           else "within 2 SE of zero: no change resolved")
            else:
                verdict = "one seed, SE undefined"
            notes.append(f"{method} vs the initial policy: {where} change {d.fmt(3)} over {d.n} seed(s), {verdict}.")
    return notes


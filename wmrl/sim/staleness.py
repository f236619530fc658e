"""The staleness axis of the simulation: does an asynchronous anchor stream lose reward, and should a
late anchor group enter the gradient (importance-corrected) or only the calibration?

Every run is the registered recipe on the contextual bandit (:mod:`wmrl.sim.engine`) with anchor groups that
arrive ``ceil(latency)`` steps after they were routed, at most k (the latency model of :class:`RunSpec`: a
log-normal in steps per execution, a group taking the maximum of its G). k = 0 is the synchronous stream of
the study of record. For each world model, method, k and late mode the table gives the final true reward J
(mean over seeds), its paired difference to the synchronous run of the same seed (mean and standard error
over seeds), the staleness of the anchor groups consumed within the bound (mean, max; steps) and the share of
anchor groups still running at the bound. The ``at bound`` column is ``wmrl.asynchronous.over_bound_anchors``:
``wait`` (the group is waited for at s + k), ``calibration`` or ``drop`` (not waited for: its pairs feed only the
calibration when they arrive, or are discarded; :data:`wmrl.core.staleness.AT_BOUND_MODES`). The ``without
anchors`` column is ``wmrl.asynchronous.steps_without_anchors`` (:func:`wmrl.core.staleness.skips_update`): ``skip``
(the default) or ``update``, compared on every gradient row with ratio <= 2.

``wmrl simulate-staleness`` runs it and writes ``staleness.csv`` and ``staleness.md``.

:func:`run_regime_study` (``wmrl simulate-async``) is the long-latency study: the chosen setting (late
groups in the gradient, ratio <= 2, ``over_bound_anchors: calibration``, k = the latency's cap in steps, steps
without anchors skipped) against the synchronous stream where one execution lasts 10 steps on average
(:func:`regime_latency`: at least 10x the per-step LM time when a step is the LM's time), at the study's
200-step horizon and at longer ones with the learning rate scaled so that the policy moves as far in all
(lr x steps fixed), since the cost of a staleness of s steps depends on how far the policy moves in s steps.
"""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from wmrl.core.recipe import BASELINE, WMRL
from wmrl.core.staleness import AT_BOUND_MODES, PAPER_LATENCY, UNANCHORED_MODES, LatencyModel
from wmrl.sim.bandit import WorldModelSpec
from wmrl.sim.engine import RunSpec, SimConfig, simulate

#: The world models of the axis: a monotone distortion, a group offset, an exploitable error (r_hat = r + b + xi).
WORLD_MODELS = (WorldModelSpec("monotone", 0.5, 0.1), WorldModelSpec("offset", 0.5, 0.1),
                WorldModelSpec("exploit", 0.5, 0.1))


#: Upper truncations of the late rows' importance ratio compared in the gradient mode: PPO's 1 + 0.2, the
#: default 2, none.
RATIO_MAXES = (1.2, 2.0, math.inf)

#: The bounds at which the non-blocking modes are compared with ``wait`` beyond the study's ``ks`` (the
#: k = 9 of the WMRL paper is not enough when a group's latency is often longer than 9 steps).
EXTRA_KS = (15, 25)


def build_runs(ks: tuple[int, ...], seeds: int, methods: tuple[str, ...] = (WMRL,),
               latency_steps: float = 3.0, latency_sigma: float = 0.6, rho: float = 0.1,
               ratio_maxes: tuple[float, ...] = RATIO_MAXES, extra_ks: tuple[int, ...] = EXTRA_KS) -> list[RunSpec]:
    """Every (world model, method, k, late mode, ratio truncation, at-bound mode, seed) run; k = 0 once per
    (world model, method, seed), plus GRPO with every group executed synchronously as the reference. At each
    k > 0 of ``ks``: the late modes with ``wait`` (calibration; gradient at each ratio truncation) and the
    gradient with ratio <= 2 under each non-blocking mode; at each k of ``extra_ks`` the gradient with ratio
    <= 2 under every at-bound mode."""
    runs = []
    for wm in WORLD_MODELS:
        for seed in range(seeds):
            runs.append(RunSpec(BASELINE, wm, 1.0, seed))
            for m in methods:
                for k in sorted(set(ks) | set(extra_ks)):
                    if not k:
                        modes = [("calibration", 2.0, "wait")]
                    elif k in ks:
                        modes = ([("calibration", 2.0, "wait")] + [("gradient", c, "wait") for c in ratio_maxes]
                                 + [("gradient", 2.0, b) for b in AT_BOUND_MODES if b != "wait"])
                    else:
                        modes = [("gradient", 2.0, b) for b in AT_BOUND_MODES]
                    with_skip = [(*mo, "skip") for mo in modes] + [(*mo, "update") for mo in modes
                                                                    if k and mo[0] == "gradient" and mo[1] == 2.0]
                    for late, c, b, sw in with_skip:
                        runs.append(RunSpec(m, wm, rho, seed, recall=False, staleness=k, late=late,
                                            latency_steps=latency_steps,
                                            latency_sigma=latency_sigma, late_ratio_max=c, at_bound=b,
                                            steps_without_anchors=sw))
    return runs


def summarise(finals: pd.DataFrame) -> pd.DataFrame:
    """One row per (shape, method, staleness, late, at_bound, without anchors): J_final mean, the paired difference
    to k = 0 (mean, se), staleness mean and max, the share of anchor groups over the bound, updates skipped, seeds."""
    f = finals.copy()
    sync = f[f["staleness"] == 0].set_index(["shape", "method", "seed"])["J_final"]
    f["dJ"] = [r.J_final - sync.get((r.shape, r.method, r.seed), math.nan) for r in f.itertuples()]
    rows = []
    f["late_label"] = [("-" if r.staleness == 0 else r.late if r.late == "calibration" else
                        f"gradient, ratio <= {r.late_ratio_max:g}") for r in f.itertuples()]
    if "at_bound" not in f:
        f["at_bound"] = "wait"
    f["at_bound"] = ["-" if r.staleness == 0 else r.at_bound for r in f.itertuples()]
    f["steps_without_anchors"] = ["-" if r.staleness == 0 or r.late != "gradient" else r.steps_without_anchors
                                  for r in f.itertuples()]
    order = {b: i for i, b in enumerate(("-",) + AT_BOUND_MODES)}
    for (shape, method, k, late, _, at_bound, sw), g in f.groupby(
            ["shape", "method", "staleness", "late_label", f["at_bound"].map(order), "at_bound",
             "steps_without_anchors"], sort=True):
        n = len(g)
        rows.append(dict(shape=shape, method=method, staleness=int(k), late=late, at_bound=at_bound,
                         steps_without_anchors=sw, updates_skipped=float(g["updates_skipped"].mean()), seeds=n,
                         J_final=float(g["J_final"].mean()), dJ_vs_sync=float(g["dJ"].mean()),
                         dJ_se=float(g["dJ"].std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan,
                         staleness_mean=float(g["staleness_mean"].mean()),
                         staleness_max=float(g["staleness_max"].max()),
                         over_bound=float(g["over_bound_frac"].mean()) if "over_bound_frac" in g else math.nan))
    return pd.DataFrame(rows)


def markdown(summary, cfg: SimConfig, wall_s: float, latency_steps: float, latency_sigma: float) -> str:
    """The table of :func:`summarise` as Markdown, with the settings it was run with."""
    lines = [f"Staleness axis: {cfg.n_tasks} tasks x {cfg.group_size} samples, {cfg.steps} steps, rho 0.1, "
             f"latency log-normal median {latency_steps:g} steps (log-sd {latency_sigma:g}, a group = max of its "
             f"{cfg.group_size}); {wall_s:.0f} s wall.", "",
             "| world model | method | k | late groups | at bound | without anchors | J final | dJ vs k=0 (se) "
             "| staleness mean / max | groups over the bound | updates skipped |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in summary.itertuples():
        d = "" if r.method == BASELINE or r.staleness == 0 else f"{r.dJ_vs_sync:+.4f} ({r.dJ_se:.4f})"
        st = "" if not np.isfinite(r.staleness_mean) else f"{r.staleness_mean:.2f} / {r.staleness_max:.0f}"
        ob = "" if not np.isfinite(r.over_bound) else f"{100 * r.over_bound:.0f} %"
        lines.append(f"| {r.shape} | {r.method} | {r.staleness} | {r.late} | {r.at_bound} | {r.steps_without_anchors} "
                     f"| {r.J_final:.4f} | {d} | {st} | {ob} | {r.updates_skipped:.1f} |")
    return "\n".join(lines) + "\n"


def run_staleness_study(out: Path, ks: tuple[int, ...] = (0, 1, 3, 9), seeds: int = 6, steps: int = 200,
                        methods: tuple[str, ...] = (WMRL,), latency_steps: float = 3.0,
                        latency_sigma: float = 0.6, extra_ks: tuple[int, ...] = EXTRA_KS, progress=None) -> dict:
    """Simulate :func:`build_runs`, write ``staleness.csv`` / ``staleness.md`` / ``staleness_finals.csv`` into
    ``out``; returns ``{"summary": DataFrame, "markdown": str, "wall_s": float}``.

    Raises:
        ValueError: ``ks`` without 0 (the paired comparison needs the synchronous run), seeds or steps < 1.
    """
    if 0 not in ks:
        raise ValueError(f"the staleness bounds must include 0 (the synchronous reference), got {ks}")
    if seeds < 1 or steps < 1:
        raise ValueError(f"need seeds >= 1 and steps >= 1, got {seeds}, {steps}")
    cfg = replace(SimConfig(), steps=steps)
    runs = build_runs(tuple(ks), seeds, methods, latency_steps, latency_sigma, extra_ks=tuple(extra_ks))
    finals: pd.DataFrame
    _, finals = simulate(runs, cfg, progress=progress)
    summary = summarise(finals)
    md = markdown(summary, cfg, finals.attrs["wall_s"], latency_steps, latency_sigma)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summary.to_csv(out / "staleness.csv", index=False)
    finals.to_csv(out / "staleness_finals.csv", index=False)
    (out / "staleness.md").write_text(md)
    return {"summary": summary, "markdown": md, "wall_s": finals.attrs["wall_s"]}


# ------------------------------------------------------------------------------------------------ the regime
#: Mean latency of one execution in the long-latency regime, in steps (>= 10x the per-step LM time).
REGIME_MEAN_STEPS = 10.0

#: The horizons of the regime study (steps): the study of record's, and longer ones (the WMRL paper trains 3,200 steps).
REGIME_HORIZONS = (200, 1600, 3200)


def regime_latency(mean_steps: float = REGIME_MEAN_STEPS) -> LatencyModel:
    """:data:`~wmrl.core.staleness.PAPER_LATENCY`'s shape (log-normal, log-sd 0.9, floor and cap) scaled so that
    one execution lasts ``mean_steps`` steps on average (units: steps; the cap is 3.6 x the mean).

    Raises:
        ValueError: ``mean_steps`` <= 0.
    """
    if not (math.isfinite(mean_steps) and mean_steps > 0):
        raise ValueError(f"mean_steps must be a positive number of steps, got {mean_steps!r}")
    return PAPER_LATENCY.scaled(mean_steps / PAPER_LATENCY.moments()["mean_s"])


def build_regime_runs(seeds: int, shapes: tuple[str, ...] = ("exploit",), methods: tuple[str, ...] = (WMRL,),
                      mean_steps: float = REGIME_MEAN_STEPS, rho: float = 0.1) -> list[RunSpec]:
    """Per (world model of ``shapes``, method, seed): the synchronous run, and the asynchronous one at the chosen
    setting (k = ceil(cap), ``over_bound_anchors: calibration``, late groups in the gradient with ratio <= 2) with
    ``steps_without_anchors`` ``skip`` (chosen) and ``update`` (before). A shape or method named twice counts once
    (the paired differences need one synchronous run per (shape, method, seed)).

    Args:
        seeds: seeds 0..seeds-1 per (shape, method). shapes: :data:`WORLD_MODELS` shapes. methods: recipes with both
            streams. mean_steps: mean latency of one execution (steps, :func:`regime_latency`). rho: anchor fraction.

    Raises:
        ValueError: an unknown shape, no method, or a method without both streams (:class:`RunSpec`).
    """
    lat = regime_latency(mean_steps)
    k = int(math.ceil(lat.cap_s))
    wms = [w for w in WORLD_MODELS if w.shape in shapes]
    if len(wms) != len(set(shapes)):
        raise ValueError(f"unknown world-model shapes in {shapes}; choose from {[w.shape for w in WORLD_MODELS]}")
    if not methods:
        raise ValueError("need at least one method")
    runs = []
    for wm in wms:
        for seed in range(seeds):
            for m in dict.fromkeys(methods):
                runs.append(RunSpec(m, wm, rho, seed, recall=False))
                for sw in UNANCHORED_MODES:
                    runs.append(RunSpec(m, wm, rho, seed, recall=False, staleness=k, late="gradient",
                                        late_ratio_max=2.0,
                                        at_bound="calibration", latency_steps=lat.median_s, latency_sigma=lat.sigma,
                                        latency_floor_steps=lat.floor_s, latency_cap_steps=lat.cap_s,
                                        steps_without_anchors=sw))
    return runs


def horizon_config(steps: int, base: SimConfig = SimConfig()) -> SimConfig:
    """The study's configuration over ``steps`` steps with the learning rate scaled by base.steps / steps (lr x steps
    fixed: the policy moves as far in all horizons) and about 40 curve points.

    Raises:
        ValueError: steps < 1.
    """
    if steps < 1:
        raise ValueError(f"need steps >= 1, got {steps}")
    return replace(base, steps=steps, lr=base.lr * base.steps / steps, log_every=max(base.log_every, steps // 40))


def run_regime_study(out: Path, seeds: int = 24, shapes: tuple[str, ...] = ("exploit",),
                     methods: tuple[str, ...] = (WMRL, "wmrl-ppi"), horizons: tuple[int, ...] = REGIME_HORIZONS,
                     mean_steps: float = REGIME_MEAN_STEPS, progress=None) -> dict:
    """Simulate :func:`build_regime_runs` at each horizon (:func:`horizon_config`); write ``regime.csv``,
    ``regime_finals.csv`` and ``regime.md`` into ``out``. Returns ``{"summary"`` (:func:`summarise` per horizon, with
    a ``horizon`` column), ``"markdown"``, ``"wall_s"`` (seconds, all horizons)``}``. ``progress(step, steps)`` is
    called as in :func:`~wmrl.sim.engine.simulate`, once per horizon; the rest as :func:`build_regime_runs`.

    A horizon named twice is simulated once.

    Raises:
        ValueError: seeds < 1, no horizon or one < 1 step, or what :func:`build_regime_runs` refuses (all before
            anything is simulated).
    """
    horizons = tuple(dict.fromkeys(horizons))
    if seeds < 1 or not horizons or min(horizons) < 1:
        raise ValueError(f"need seeds >= 1 and at least one horizon, each >= 1 step, got {seeds}, {horizons}")
    runs = build_regime_runs(seeds, tuple(shapes), tuple(methods), mean_steps)
    parts: list[pd.DataFrame] = []
    wall = 0.0
    for h in horizons:
        f: pd.DataFrame
        _, f = simulate(runs, horizon_config(h), progress=progress)
        wall += f.attrs["wall_s"]
        f["horizon"] = h
        parts.append(f)
    finals = pd.concat(parts, ignore_index=True)
    rows = []
    for h, fh in finals.groupby("horizon"):
        s = summarise(fh)
        s.insert(0, "horizon", h)
        rows.append(s)
    summary = pd.concat(rows, ignore_index=True)
    lat = regime_latency(mean_steps)
    mo = lat.moments()
    lines = [f"Long-latency regime: one execution lasts {mo['mean_s']:.1f} steps on average (PAPER_LATENCY's shape "
             f"scaled: median {lat.median_s:.2f}, cap {lat.cap_s:.1f} steps, a group of 8 takes "
             f"{mo['group_max_s']:.1f} steps on average); k = {int(math.ceil(lat.cap_s))} (the cap in steps), "
             f"over_bound_anchors calibration, late groups in the gradient (ratio <= 2); {seeds} seeds; "
             f"lr x steps fixed; {wall:.0f} s wall.", "",
             "| horizon (steps) | world model | method | without anchors | J sync | J async | dJ (se) "
             "| staleness mean / max | groups over the bound | updates skipped |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in summary[summary["staleness"] > 0].itertuples():
        sync = summary[(summary["horizon"] == r.horizon) & (summary["shape"] == r.shape)
                       & (summary["method"] == r.method) & (summary["staleness"] == 0)]["J_final"].iloc[0]
        lines.append(f"| {r.horizon} | {r.shape} | {r.method} | {r.steps_without_anchors} | {sync:.4f} | "
                     f"{r.J_final:.4f} | {r.dJ_vs_sync:+.4f} ({r.dJ_se:.4f}) | {r.staleness_mean:.1f} / "
                     f"{r.staleness_max:.0f} | {100 * r.over_bound:.1f} % | {r.updates_skipped:.0f} "
                     f"({100 * r.updates_skipped / r.horizon:.0f} %) |")
    md = "\n".join(lines) + "\n"
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summary.to_csv(out / "regime.csv", index=False)
    finals.to_csv(out / "regime_finals.csv", index=False)
    (out / "regime.md").write_text(md)
    return {"summary": summary, "markdown": md, "wall_s": wall}

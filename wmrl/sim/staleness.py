"""The staleness axis of the simulation (issue 15): does an asynchronous anchor stream lose reward, and should a
late anchor group enter the gradient (importance-corrected) or only the calibration?

Every run is the registered recipe on the contextual bandit (:mod:`wmrl.sim.engine`) with anchor groups that
arrive ``ceil(latency)`` steps after they were routed, at most k (the latency model of :class:`RunSpec`: a
log-normal in steps per execution, a group taking the maximum of its G). k = 0 is the synchronous stream of
the study of record. For each world model, method, k and late mode the table gives the final true reward J
(mean over seeds), its paired difference to the synchronous run of the same seed (mean and standard error
over seeds), the staleness of the anchor groups consumed within the bound (mean, max; steps) and the share of
anchor groups still running at the bound. The ``at bound`` column is ``wmrl.over_bound_anchors``: ``wait`` (the
group is waited for at s + k), ``calibration`` or ``drop`` (not waited for: its pairs feed only the calibration
when they arrive, or are discarded; :data:`wmrl.core.staleness.AT_BOUND_MODES`).

``wmrl simulate-staleness`` runs it and writes ``staleness.csv`` and ``staleness.md``.
"""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np

from wmrl.core.staleness import AT_BOUND_MODES
from wmrl.sim.bandit import WorldModelSpec
from wmrl.sim.engine import LATE_MODES, RunSpec, SimConfig, simulate

#: The world models of the axis: a monotone distortion, a group offset, an exploitable error (DESIGN.md §2).
WORLD_MODELS = (WorldModelSpec("monotone", 0.5, 0.1), WorldModelSpec("offset", 0.5, 0.1),
                WorldModelSpec("exploit", 0.5, 0.1))


#: Upper truncations of the late rows' importance ratio compared in the gradient mode: PPO's 1 + 0.2, the
#: default 2, none.
RATIO_MAXES = (1.2, 2.0, math.inf)

#: The bounds at which the non-blocking modes are compared with ``wait`` beyond the study's ``ks`` (the
#: k = 9 of the paper is not enough when a group's latency is often longer than 9 steps).
EXTRA_KS = (15, 25)


def build_runs(ks: tuple[int, ...], seeds: int, methods: tuple[str, ...] = ("wmrl",),
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
            runs.append(RunSpec("grpo", wm, 1.0, seed))
            for m in methods:
                for k in sorted(set(ks) | set(extra_ks)):
                    if not k:
                        modes = [("calibration", 2.0, "wait")]
                    elif k in ks:
                        modes = ([("calibration", 2.0, "wait")] + [("gradient", c, "wait") for c in ratio_maxes]
                                 + [("gradient", 2.0, b) for b in AT_BOUND_MODES if b != "wait"])
                    else:
                        modes = [("gradient", 2.0, b) for b in AT_BOUND_MODES]
                    for late, c, b in modes:
                        runs.append(RunSpec(m, wm, rho, seed, staleness=k, late=late, latency_steps=latency_steps,
                                            latency_sigma=latency_sigma, late_ratio_max=c, at_bound=b))
    return runs


def summarise(finals) -> "object":
    """One row per (shape, method, staleness, late, at_bound): J_final mean, the paired difference to k = 0
    (mean, se), staleness mean and max, the share of anchor groups over the bound, seeds."""
    import pandas as pd

    f = finals.copy()
    sync = f[f["staleness"] == 0].set_index(["shape", "method", "seed"])["J_final"]
    f["dJ"] = [r.J_final - sync.get((r.shape, r.method, r.seed), math.nan) for r in f.itertuples()]
    rows = []
    f["late_label"] = [("-" if r.staleness == 0 else r.late if r.late == "calibration" else
                        f"gradient, ratio <= {r.late_ratio_max:g}") for r in f.itertuples()]
    if "at_bound" not in f:
        f["at_bound"] = "wait"
    f["at_bound"] = ["-" if r.staleness == 0 else r.at_bound for r in f.itertuples()]
    order = {b: i for i, b in enumerate(("-",) + AT_BOUND_MODES)}
    for (shape, method, k, late, _, at_bound), g in f.groupby(
            ["shape", "method", "staleness", "late_label", f["at_bound"].map(order), "at_bound"], sort=True):
        n = len(g)
        rows.append(dict(shape=shape, method=method, staleness=int(k), late=late, at_bound=at_bound, seeds=n,
                         J_final=float(g["J_final"].mean()), dJ_vs_sync=float(g["dJ"].mean()),
                         dJ_se=float(g["dJ"].std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan,
                         staleness_mean=float(g["staleness_mean"].mean()), staleness_max=float(g["staleness_max"].max()),
                         over_bound=float(g["over_bound_frac"].mean()) if "over_bound_frac" in g else math.nan))
    return pd.DataFrame(rows)


def markdown(summary, cfg: SimConfig, wall_s: float, latency_steps: float, latency_sigma: float) -> str:
    """The table of :func:`summarise` as Markdown, with the settings it was run with."""
    lines = [f"Staleness axis: {cfg.n_tasks} tasks x {cfg.group_size} samples, {cfg.steps} steps, rho 0.1, "
             f"latency log-normal median {latency_steps:g} steps (log-sd {latency_sigma:g}, a group = max of its "
             f"{cfg.group_size}); {wall_s:.0f} s wall.", "",
             "| world model | method | k | late groups | at bound | J final | dJ vs k=0 (se) | staleness mean / max "
             "| groups over the bound |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in summary.itertuples():
        d = "" if r.method == "grpo" or r.staleness == 0 else f"{r.dJ_vs_sync:+.4f} ({r.dJ_se:.4f})"
        st = "" if not np.isfinite(r.staleness_mean) else f"{r.staleness_mean:.2f} / {r.staleness_max:.0f}"
        ob = "" if not np.isfinite(r.over_bound) else f"{100 * r.over_bound:.0f} %"
        lines.append(f"| {r.shape} | {r.method} | {r.staleness} | {r.late} | {r.at_bound} | {r.J_final:.4f} | {d} "
                     f"| {st} | {ob} |")
    return "\n".join(lines) + "\n"


def run_staleness_study(out: Path, ks: tuple[int, ...] = (0, 1, 3, 9), seeds: int = 6, steps: int = 200,
                        methods: tuple[str, ...] = ("wmrl",), latency_steps: float = 3.0,
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
    _, finals = simulate(runs, cfg, progress=progress)
    summary = summarise(finals)
    md = markdown(summary, cfg, finals.attrs["wall_s"], latency_steps, latency_sigma)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summary.to_csv(out / "staleness.csv", index=False)
    finals.to_csv(out / "staleness_finals.csv", index=False)
    (out / "staleness.md").write_text(md)
    return {"summary": summary, "markdown": md, "wall_s": finals.attrs["wall_s"]}

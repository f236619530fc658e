"""The convergence study: sweeps, summary tables, plots (``wmrl simulate``).

Presets:

- ``default``: C=20 tasks x G=8 samples, K=32 arms, d=8, 200 Adam steps, 3 seeds. Sweep A: every
  world-model error (shape x B x sigma, plus the unbiased B=0 row) at anchor fraction rho=0.1 for
  all methods. Sweep B: the ``exploit`` grid at rho=1/3 (claim (iii) of docs/simulation.md). Sweep C:
  rho in {0.05, 0.1, 0.2, 1/3} for a few errors.
- ``small``: the same code on a reduced grid (a handful of settings, 2 seeds, 150 steps); used by
  the test and for a quick look.

Outputs (in ``out``): ``curves.csv.gz`` (run, step, executions, J every ``log_every`` steps),
``finals.csv`` (per run: its setting and final numbers; join on ``run``), ``meta.json``, ``summary.csv`` (mean and std
over seeds per setting and method, with GRPO's final reward at equal steps and at equal executions), ``summary.md`` (the
tables of docs/simulation.md), and PNG plots.

Why one long file (about 500 lines): the study's grid, runs and tables share one results frame.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from wmrl.core.recipe import BASELINE, WMRL, get_recipe, recipe_names, recipes_with
from wmrl.sim.bandit import WorldModelSpec
from wmrl.sim.engine import RunSpec, SimConfig, simulate

#: The study's choice of world-model methods (sweep A), in the tables' column order: the pure world model, each
#: correction alone, WMRL and its other two fusions. Not simulated here: ``wmrl-raw`` and ``wmrl-no-recall``
#: (studies/simulation/recall_study.py; without recall, the study's setting, ``wmrl-no-recall`` is ``wmrl``).
#: Every other list of the study is derived from this one and the recipe registry.
WM_METHODS = ("wm", "wmrl-no-denoise", "wmrl-no-debias", WMRL, "wmrl-bias-aware", "wmrl-ppi")
#: The reference runs, without a world model (GRPO and anchor-only): run once per seed and rho, whatever the error.
REFERENCES = tuple(recipes_with(uses_world_model=False))
#: GRPO on the anchor groups alone: the same executions as a world-model method at its rho.
ANCHOR_ONLY = recipes_with(anchors="fraction", uses_world_model=False)[0]
#: The methods without anchors (the pure world model): they have no rho and appear in the main rho's tables.
NO_ANCHORS = tuple(recipes_with(anchors="none"))
#: The methods of WM_METHODS with both streams (the rho = 1/3 sweep and the equal-executions table).
FUSING = tuple(m for m in WM_METHODS if get_recipe(m).fuses)
#: Those with both corrections, debiasing and denoising (the rho sweep): WMRL and its other fusions.
CORRECTED = tuple(m for m in FUSING if get_recipe(m).debias and get_recipe(m).denoises)
#: WMRL's PPI++ variant (the heatmaps' last row).
PPI = next(m for m in CORRECTED if get_recipe(m).fusion == "ppi")
#: The tie-break diagnostic: a calibrator without tie-break (``flat_shapes`` of a preset).
FLAT = recipes_with(debias=True, tie_break=0.0)[0]
THIRD = 1.0 / 3.0


@dataclass(frozen=True)
class Preset:
    """A study: the simulation size, the seeds and the three sweeps."""

    cfg: SimConfig
    seeds: tuple[int, ...]
    biases: dict  # shape -> tuple of B values
    sigmas: tuple[float, ...]
    rho_main: float = 0.1
    rho_third_shapes: tuple[str, ...] = ("exploit",)
    rho_sweep: tuple[float, ...] = (0.05, 0.1, 0.2, THIRD)
    rho_sweep_errors: tuple[WorldModelSpec, ...] = ()
    flat_shapes: tuple[str, ...] = ()
    dr_errors: tuple[WorldModelSpec, ...] = ()
    recall: bool = False  # the WMRL paper's recipes: recalled executions are studied on their own (docs/simulation.md)


PRESETS: dict[str, Preset] = {
    "default": Preset(
        cfg=SimConfig(),
        seeds=(0, 1, 2),
        biases={"monotone": (0.5, 0.9), "offset": (0.3, 1.0), "exploit": (0.25, 0.5, 1.0)},
        sigmas=(0.0, 0.1, 0.3),
        rho_sweep_errors=(
            WorldModelSpec("monotone", 0.5, 0.1),
            WorldModelSpec("exploit", 0.5, 0.1),
            WorldModelSpec("exploit", 1.0, 0.1),
        ),
        flat_shapes=("monotone", "exploit"),
        dr_errors=tuple(
            [WorldModelSpec("monotone", 0.0, s) for s in (0.0, 0.1, 0.3)]
            + [WorldModelSpec("monotone", 0.9, s) for s in (0.0, 0.1, 0.3)]
            + [WorldModelSpec("offset", 1.0, 0.1)]
            + [WorldModelSpec("exploit", b, s) for b in (0.5, 1.0) for s in (0.0, 0.1, 0.3)]
        ),
    ),
    "small": Preset(
        cfg=SimConfig(steps=150),
        seeds=(0, 1),
        biases={"monotone": (0.5,), "offset": (1.0,), "exploit": (1.0,)},
        sigmas=(0.0, 0.3),
        rho_third_shapes=(),
        rho_sweep=(),
        dr_errors=(WorldModelSpec("exploit", 1.0, 0.0),),
    ),
}


def build_runs(preset: Preset) -> dict[bool, list[RunSpec]]:
    """All runs of a preset keyed by ``normalize_std`` (True: GRPO advantages, False: Dr. GRPO),
    without duplicates (the :data:`REFERENCES` do not depend on the world model)."""
    out: dict[bool, list[RunSpec]] = {True: [], False: []}
    seen: set = set()
    none = WorldModelSpec("monotone", 0.0, 0.0)

    def add(method: str, wm: WorldModelSpec, rho: float, seed: int, std: bool = True) -> None:
        if method in REFERENCES:
            wm = none
        if get_recipe(method).anchors == "all":
            rho = 1.0
        key = (method, wm, round(rho, 6), seed, std)
        if key not in seen:
            seen.add(key)
            out[std].append(RunSpec(method, wm, rho, seed, recall=preset.recall))

    errors = [WorldModelSpec("monotone", 0.0, s) for s in preset.sigmas]
    for shape, bs in preset.biases.items():
        errors += [WorldModelSpec(shape, b, s) for b in bs for s in preset.sigmas]
    for seed in preset.seeds:
        add(BASELINE, none, 1.0, seed)
        add(ANCHOR_ONLY, none, preset.rho_main, seed)
        for wm in errors:
            for m in WM_METHODS:
                add(m, wm, preset.rho_main, seed)
            if wm.shape in preset.flat_shapes and wm.bias > 0:
                add(FLAT, wm, preset.rho_main, seed)
        for wm in errors:
            if wm.shape in preset.rho_third_shapes or (wm.bias == 0.0 and preset.rho_third_shapes):
                add(ANCHOR_ONLY, none, THIRD, seed)
                for m in FUSING:
                    add(m, wm, THIRD, seed)
        for rho in preset.rho_sweep:
            add(ANCHOR_ONLY, none, rho, seed)
            for wm in preset.rho_sweep_errors:
                for m in CORRECTED:
                    add(m, wm, rho, seed)
        if preset.dr_errors:
            add(BASELINE, none, 1.0, seed, std=False)
            add(ANCHOR_ONLY, none, preset.rho_main, seed, std=False)
            for wm in preset.dr_errors:
                for m in WM_METHODS:
                    add(m, wm, preset.rho_main, seed, std=False)
    return out


def _interp_at_executions(curve, executions: float) -> float:
    """GRPO's J after a given number of executions (linear interpolation along its curve)."""
    x = curve["executions"].to_numpy(dtype=float)
    y = curve["J"].to_numpy(dtype=float)
    return float(np.interp(executions, x, y))


def executions_to_reach(curve, target: float) -> float:
    """Executions after which a run's curve first reaches ``target``: its time-to-target in executions.

    Args:
        curve: pandas DataFrame of one run with columns ``executions`` and ``J``, sorted by ``executions``.
        target: the level of J to reach (for example GRPO's final J on the same seed).

    Returns:
        Executions (float), linearly interpolated between the two logged points around the first crossing; the
        first point's executions if the curve starts at or above ``target``; ``inf`` if it never reaches it.
    """
    x = curve["executions"].to_numpy(dtype=float)
    y = curve["J"].to_numpy(dtype=float)
    hit = np.flatnonzero(y >= target)
    if hit.size == 0:
        return float("inf")
    i = int(hit[0])
    if i == 0:
        return float(x[0])
    return float(x[i - 1] + (target - y[i - 1]) / (y[i] - y[i - 1]) * (x[i] - x[i - 1]))


def summarise(curves, finals):
    """Per (setting, method) means over seeds, with GRPO references at equal steps and executions.

    Returns:
        pandas DataFrame with columns std_norm (GRPO std normalisation of advantages), shape, bias, sigma, rho, method,
        J_final (mean), J_sd, gap_final (J* - J), executions, exec_ratio (executions / GRPO's), vs_grpo_steps
        (J - J_GRPO at equal steps), vs_grpo_exec (J - J_GRPO after the same number of executions), grpo_exec_to_match
        (median over seeds of the executions GRPO needed to first reach this method's final J; inf if it never did),
        alpha_or_lambda, cal_mae_before, cal_mae_after, n_seeds.
    """
    import pandas as pd  # noqa: PLC0415 - heavy

    f = finals.copy()
    if "std_norm" not in f:
        f["std_norm"] = True
    ref = f[f.method == BASELINE].set_index(["seed", "std_norm"])
    keys_ref = list(zip(f["seed"], f["std_norm"]))
    f["grpo_J"] = [ref.loc[k, "J_final"] for k in keys_ref]
    f["exec_ratio"] = f["executions"].to_numpy() / np.array([ref.loc[k, "executions"] for k in keys_ref])
    eq = []
    for _, row in f.iterrows():
        gc = curves[curves.run == ref.loc[(row.seed, row.std_norm), "run"]].sort_values("executions")
        eq.append(_interp_at_executions(gc, row.executions) if row.executions > 0 else float(gc["J"].iloc[0]))
    f["grpo_J_eq_exec"] = eq
    match = []
    for _, row in f.iterrows():
        gc = curves[curves.run == ref.loc[(row.seed, row.std_norm), "run"]].sort_values("executions")
        match.append(executions_to_reach(gc, row.J_final))
    f["grpo_exec_to_match"] = match
    f["vs_grpo_steps"] = f["J_final"] - f["grpo_J"]
    f["vs_grpo_exec"] = f["J_final"] - f["grpo_J_eq_exec"]
    keys = ["std_norm", "shape", "bias", "sigma", "rho", "method"]
    # the references have no world model: label them so they sort first
    f.loc[f.method.isin(REFERENCES), ["shape", "bias", "sigma"]] = ["-", 0.0, 0.0]
    g = f.groupby(keys, sort=False)
    out = g.agg(
        J_final=("J_final", "mean"),
        J_sd=("J_final", "std"),
        gap_final=("gap_final", "mean"),
        executions=("executions", "mean"),
        exec_ratio=("exec_ratio", "mean"),
        vs_grpo_steps=("vs_grpo_steps", "mean"),
        vs_grpo_steps_sd=("vs_grpo_steps", "std"),
        vs_grpo_exec=("vs_grpo_exec", "mean"),
        grpo_exec_to_match=("grpo_exec_to_match", "median"),
        alpha_or_lambda=("alpha_or_lambda_mean", "mean"),
        cal_mae_before=("cal_mae_before", "mean"),
        cal_mae_after=("cal_mae_after", "mean"),
        n_seeds=("seed", "nunique"),
    ).reset_index()
    return pd.DataFrame(out)


def _fmt(x: float, plus: bool = True) -> str:
    if x != x:  # nan
        return "-"
    return f"{x:+.3f}" if plus else f"{x:.3f}"


def _cell(r, margin: float) -> str:
    v, sd = r.vs_grpo_steps, r.vs_grpo_steps_sd
    txt = f"{v:+.3f}" + ("" if sd != sd else f" ±{sd:.3f}")
    return f"**{txt}**" if v > -margin else txt


def _saving(r) -> str:
    if r.executions <= 0:
        return "-"
    x = r.grpo_exec_to_match
    if not np.isfinite(x):  # GRPO never reached it: the saving is at least GRPO's total / this method's
        return f">= {1.0 / r.exec_ratio:.0f}x"
    return f"{x / r.executions:.1f}x"


def _error_table(sub, methods: list[str], margin: float, saving_of: str | None) -> list[str]:
    last = f" | GRPO execs to match {saving_of} / its execs |" if saving_of else " |"
    lines = ["| error | B | sigma | " + " | ".join(methods) + last,
             "|---|---|---|" + "---|" * (len(methods) + (1 if saving_of else 0))]
    errs = sub[~sub.method.isin(NO_ANCHORS)][["shape", "bias", "sigma"]].drop_duplicates()
    order = {"monotone": 1, "offset": 2, "exploit": 3}
    errs = errs.assign(o=[0 if b == 0 else order.get(x, 9) for x, b in zip(errs["shape"], errs["bias"])])
    for _, e in errs.sort_values(["o", "bias", "sigma"]).iterrows():
        here = sub[(sub["shape"] == e["shape"]) & (sub.bias == e["bias"]) & (sub.sigma == e["sigma"])]
        cells = []
        for m in methods:
            r = here[here.method == m]
            cells.append(_cell(r.iloc[0], margin) if len(r) else "-")
        if saving_of:
            r = here[here.method == saving_of]
            cells.append(_saving(r.iloc[0]) if len(r) else "-")
        name = "none" if e["bias"] == 0 else e["shape"]
        lines.append(f"| {name} | {e['bias']:g} | {e['sigma']:g} | " + " | ".join(cells) + " |")
    return lines


def markdown_tables(summary, preset_name: str, cfg: SimConfig, wall_s: float, margin: float) -> str:
    """The Markdown report: reference runs, methods x errors per anchor fraction, Dr. GRPO, equal executions."""
    s = summary
    lines: list[str] = []
    base = s[s.method.isin(REFERENCES)]
    n_seeds = int(base.n_seeds.max())
    lines += [f"Preset `{preset_name}`: {cfg.n_tasks} tasks x {cfg.group_size} samples per step, {cfg.n_arms} arms, "
              f"d={cfg.dim}, {cfg.steps} steps, Adam lr {cfg.lr}, {n_seeds} seeds; simulation wall time "
              f"{wall_s:.0f} s.", "",
              "Cells: final true reward J (mean of the last 10% of the curve) minus real-execution GRPO's at equal "
              f"steps, mean ±sd over seeds (paired: same problem per seed). Bold: within the margin {margin} of "
              "GRPO.", "",
              "### Reference runs (no world model)", "",
              "| method | advantages | rho | J final | J* - J | J - J_GRPO | executions |",
              "|---|---|---|---|---|---|---|"]
    for _, r in base.sort_values(["std_norm", "method", "rho"], ascending=[False, True, True]).iterrows():
        adv = "GRPO (std)" if r.std_norm else "Dr. GRPO (no std)"
        lines.append(f"| {r.method} | {adv} | {r.rho:.2f} | {r.J_final:.3f} | {r.gap_final:.3f} | "
                     f"{_cell(r, margin) if r.method != BASELINE else '0'} | {r.executions:.0f} |")
    lines.append("")
    std = s[s.std_norm.astype(bool)]
    for rho in sorted(set(np.round(std.rho, 6)) - {0.0, 1.0}):
        sub = std[(np.isclose(std.rho, rho) | (std.method.isin(NO_ANCHORS) & np.isclose(rho, 0.1)))
                  & ~std.method.isin(REFERENCES)]
        if sub[~sub.method.isin(NO_ANCHORS)].empty:
            continue
        methods = [m for m in (*WM_METHODS, FLAT) if m in set(sub.method)]
        ao = base[(base.method == ANCHOR_ONLY) & np.isclose(base.rho, rho) & base.std_norm.astype(bool)]
        lines += [f"### Anchor fraction rho = {rho:.2f} (executions {rho:.2f} of GRPO's), GRPO advantages", ""]
        if len(ao):
            lines += [f"Anchor-only at this rho (the same executions, world model unused): "
                      f"{_cell(ao.iloc[0], margin)}.", ""]
        lines += _error_table(sub, methods, margin, WMRL if WMRL in methods else None)
        lines.append("")
    dr = s[~s.std_norm.astype(bool) & ~s.method.isin(REFERENCES)]
    if len(dr):
        ao = base[(base.method == ANCHOR_ONLY) & ~base.std_norm.astype(bool)]
        lines += ["### Dr. GRPO advantages (no std normalisation), rho = 0.10", ""]
        if len(ao):
            lines += [f"Anchor-only: {_cell(ao.iloc[0], margin)}.", ""]
        methods = [m for m in WM_METHODS if m in set(dr.method)]
        lines += _error_table(dr, methods, margin, WMRL)
        lines.append("")
    lines += ["### Equal executions", "",
              "J at the end minus GRPO's J after the same number of executions (GRPO's curve interpolated), "
              "rho = 0.10, GRPO advantages, mean over the errors of each shape.", ""]
    sub = std[np.isclose(std.rho, 0.1) & ~std.method.isin((BASELINE, *NO_ANCHORS))]
    methods = [m for m in (ANCHOR_ONLY, *FUSING) if m in set(sub.method)]
    lines += ["| error | " + " | ".join(methods) + " |", "|---|" + "---|" * len(methods)]
    for sh in ("none", "monotone", "offset", "exploit"):
        cells = []
        for m in methods:
            if m == ANCHOR_ONLY:
                r = sub[sub.method == m]
            elif sh == "none":
                r = sub[(sub.method == m) & (sub.bias == 0)]
            else:
                r = sub[(sub.method == m) & (sub["shape"] == sh) & (sub.bias > 0)]
            cells.append(_fmt(r.vs_grpo_exec.mean()) if len(r) else "-")
        lines.append(f"| {sh} | " + " | ".join(cells) + " |")
    lines.append("")
    return "\n".join(lines)


def make_plots(curves, summary, out: Path, preset: Preset) -> list[Path]:
    """PNG plots: curves vs steps and vs executions for representative errors, pure-WM gap heatmaps,
    WMRL - GRPO heatmaps, and the rho sweep."""
    import matplotlib  # noqa: PLC0415 - heavy

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 - heavy

    paths: list[Path] = []
    colors = {**dict(zip(REFERENCES, ("k", "0.55"))), **dict(zip(
        (*WM_METHODS, FLAT),
        ("tab:red", "tab:orange", "tab:purple", "tab:blue", "tab:cyan", "tab:green", "tab:brown")))}
    c = curves[curves["std_norm"].astype(bool)].copy() if "std_norm" in curves else curves.copy()
    summary = summary[summary["std_norm"].astype(bool)]
    c["rho_r"] = c["rho"].round(3)
    reps = []
    for shape, bs in preset.biases.items():
        b = bs[len(bs) // 2] if len(bs) > 1 else bs[0]
        sg = preset.sigmas[len(preset.sigmas) // 2] if len(preset.sigmas) > 2 else preset.sigmas[-1]
        reps.append((shape, b, sg))
    for xaxis in ("step", "executions"):
        fig, axes = plt.subplots(1, len(reps), figsize=(5 * len(reps), 4), squeeze=False)
        for ax, (shape, b, sg) in zip(axes[0], reps):
            for m in recipe_names():
                if m in REFERENCES:
                    sel = c[(c.method == m) & ((c.rho_r == round(preset.rho_main, 3)) | (m == BASELINE))]
                else:
                    sel = c[(c.method == m) & (c["shape"] == shape) & (c.bias == b) & (c.sigma == sg)
                            & ((c.rho_r == round(preset.rho_main, 3)) | (m in NO_ANCHORS))]
                if sel.empty:
                    continue
                mean = sel.groupby("step")[["J", "executions"]].mean()
                lw = 2 if m in (BASELINE, WMRL) else 1.2
                if xaxis == "step":
                    ax.plot(mean.index, mean["J"], color=colors[m], label=m, lw=lw)
                elif m in NO_ANCHORS:  # no executions at all: its final J as a level
                    ax.axhline(mean["J"].iloc[-1], color=colors[m], ls="--", lw=lw, label=f"{m} (0 executions), final")
                else:
                    pos = mean[mean["executions"] > 0]
                    ax.plot(pos["executions"], pos["J"], color=colors[m], label=m, lw=lw)
            if xaxis == "executions":
                ax.set_xscale("log")
            ax.set_title(f"{shape}, B={b:g}, sigma={sg:g}, rho={preset.rho_main:g}")
            ax.set_xlabel("training step" if xaxis == "step" else "cumulative executions (log scale)")
            ax.set_ylabel("true expected reward J")
            ax.grid(alpha=0.3)
        axes[0][0].legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        p = out / f"curves_vs_{'steps' if xaxis == 'step' else 'executions'}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)

    # heatmaps over (B, sigma) per shape: pure WM gap and WMRL - GRPO at rho 0.1 and 1/3
    panels = [(NO_ANCHORS[0], 0.0, "pure world model: J - J_GRPO"), (WMRL, 0.1, "WMRL rho=0.1: J - J_GRPO"),
              (WMRL, THIRD, "WMRL rho=1/3: J - J_GRPO"), (PPI, THIRD, "PPI rho=1/3: J - J_GRPO")]
    shapes = list(preset.biases)
    panels = [p_ for p_ in panels if ((summary.method == p_[0]) & np.isclose(summary.rho, p_[1])).any()]
    fig, axes = plt.subplots(len(panels), len(shapes), figsize=(4.2 * len(shapes), 3.6 * len(panels)), squeeze=False,
                             constrained_layout=True)
    for i, (m, rho, title) in enumerate(panels):
        for j, shape in enumerate(shapes):
            ax = axes[i][j]
            sub = summary[(summary.method == m) & np.isclose(summary.rho, rho)
                          & ((summary["shape"] == shape) | (summary.bias == 0))]
            if sub.empty:
                ax.axis("off")
                continue
            bs = sorted(set(sub.bias))
            ss = sorted(set(sub.sigma))
            grid = np.full((len(bs), len(ss)), np.nan)
            for _, r in sub.iterrows():
                grid[bs.index(r.bias), ss.index(r.sigma)] = r.vs_grpo_steps
            im = ax.imshow(grid, origin="lower", cmap="RdYlGn", vmin=-0.05, vmax=0.005, aspect="auto")
            for a_ in range(len(bs)):
                for b_ in range(len(ss)):
                    if grid[a_, b_] == grid[a_, b_]:
                        ax.text(b_, a_, f"{grid[a_, b_]:+.3f}", ha="center", va="center", fontsize=8)
            ax.set_xticks(range(len(ss)), [f"{x:g}" for x in ss])
            ax.set_yticks(range(len(bs)), [f"{x:g}" for x in bs])
            ax.set_xlabel("sigma")
            ax.set_ylabel("B")
            ax.set_title(f"{title}\n{shape}", fontsize=9)
    fig.colorbar(im, ax=axes, shrink=0.6, label="J - J_GRPO at equal steps (clipped at -0.05)")
    p = out / "heatmaps_vs_grpo.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)

    if preset.rho_sweep:
        fig, axes = plt.subplots(1, len(preset.rho_sweep_errors), figsize=(5 * len(preset.rho_sweep_errors), 4),
                                 squeeze=False)
        for ax, wm in zip(axes[0], preset.rho_sweep_errors):
            for m in (ANCHOR_ONLY, *CORRECTED):
                if m == ANCHOR_ONLY:
                    sub = summary[summary.method == m]
                else:
                    sub = summary[(summary.method == m) & (summary["shape"] == wm.shape) & (summary.bias == wm.bias)
                                  & (summary.sigma == wm.sigma)]
                sub = sub.sort_values("rho")
                ax.plot(sub.rho, sub.vs_grpo_steps, "o-", color=colors[m], label=m)
            ax.axhline(0, color="k", lw=1)
            ax.set_xlabel("anchor fraction rho (executions / GRPO's)")
            ax.set_ylabel("J - J_GRPO at equal steps")
            ax.set_title(wm.label)
            ax.grid(alpha=0.3)
        axes[0][0].legend(fontsize=8)
        fig.tight_layout()
        p = out / "rho_sweep.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    return paths


def _render(curves, finals, out: Path, preset_name: str, preset: Preset, wall: float, margin: float):
    summary = summarise(curves, finals)
    summary.to_csv(out / "summary.csv", index=False, float_format="%.5f")
    md = markdown_tables(summary, preset_name, preset.cfg, wall, margin)
    (out / "summary.md").write_text(md + "\n")
    plots = make_plots(curves, summary, out, preset)
    return summary, plots


def render(out: Path | str, margin: float | None = None) -> dict:
    """Rebuild summary.csv, summary.md and the plots from a finished study's curves.csv/finals.csv/meta.json."""
    import pandas as pd  # noqa: PLC0415 - heavy

    out = Path(out)
    meta = json.loads((out / "meta.json").read_text())
    if meta["preset"] not in PRESETS:
        raise ValueError(f"render needs a study of a named preset ({sorted(PRESETS)}), got {meta['preset']!r}")
    preset = replace(PRESETS[meta["preset"]], seeds=tuple(meta["seeds"]))
    finals = pd.read_csv(out / "finals.csv")
    curves = pd.read_csv(out / "curves.csv.gz").merge(finals.drop(columns=["executions"]), on="run")
    m = meta["margin"] if margin is None else margin
    summary, plots = _render(curves, finals, out, meta["preset"], preset, meta["wall_s"], m)
    return {"out": str(out), "summary": summary, "plots": [str(p) for p in plots]}


def run_study(
    preset_name: str | Preset = "default",
    out: Path | str = "sim-out",
    seeds: int | None = None,
    margin: float = 0.01,
    progress=None,
) -> dict:
    """Run a preset, write CSV/Markdown/PNG into ``out`` and return a small dict of paths and timings.

    Args:
        preset_name: ``"default"`` or ``"small"`` (or a :class:`Preset`, reported as "custom").
        out: output folder (created).
        seeds: number of seeds (overrides the preset's; seeds are 0..seeds-1).
        margin: J margin below GRPO that still counts as a match in the tables (reward units).
        progress: optional callable(step, steps).

    Raises:
        ValueError: unknown preset, seeds < 1, or a margin that is negative or not finite.
    """
    if isinstance(preset_name, Preset):
        preset, preset_name = preset_name, "custom"
    elif preset_name not in PRESETS:
        raise ValueError(f"unknown preset {preset_name!r}; choose one of {sorted(PRESETS)}")
    else:
        preset = PRESETS[preset_name]
    if not (math.isfinite(margin) and margin >= 0):
        raise ValueError(f"margin must be a finite reward margin >= 0, got {margin!r}")
    if seeds is not None:
        if seeds < 1:
            raise ValueError(f"seeds must be >= 1, got {seeds}")
        preset = replace(preset, seeds=tuple(range(seeds)))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    import pandas as pd  # noqa: PLC0415 - heavy

    by_std = build_runs(preset)
    t0 = time.perf_counter()
    parts_c, parts_f, offset = [], [], 0
    for std in (True, False):
        if not by_std[std]:
            continue
        c: pd.DataFrame
        f: pd.DataFrame
        c, f = simulate(by_std[std], replace(preset.cfg, normalize_std=std), progress=progress)
        for df in (c, f):
            df["run"] += offset
            df["std_norm"] = std
        offset += len(by_std[std])
        parts_c.append(c)
        parts_f.append(f)
    curves, finals = pd.concat(parts_c, ignore_index=True), pd.concat(parts_f, ignore_index=True)
    runs = by_std[True] + by_std[False]
    wall = time.perf_counter() - t0
    summary = summarise(curves, finals)
    # curves are stored slim (run, step, executions, J): the run's setting is in finals.csv
    curves[["run", "step", "executions", "J"]].to_csv(out / "curves.csv.gz", index=False, float_format="%.5f")
    finals.to_csv(out / "finals.csv", index=False, float_format="%.5f")
    meta = {"preset": preset_name, "runs": len(runs), "wall_s": wall, "config": asdict(preset.cfg),
            "seeds": list(preset.seeds), "margin": margin}
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    # tables and plots are built from the files just written, so that `render(out)` reproduces them exactly
    finals = pd.read_csv(out / "finals.csv")
    curves = pd.read_csv(out / "curves.csv.gz").merge(finals.drop(columns=["executions"]), on="run")
    summary, plots = _render(curves, finals, out, preset_name, preset, wall, margin)
    return {"out": str(out), "runs": len(runs), "wall_s": wall, "plots": [str(p) for p in plots],
            "summary": summary}

"""The convergence study: sweeps, summary tables, plots (``wmrl simulate``).

Presets:

- ``default``: C=20 tasks x G=8 samples, K=32 arms, d=8, 200 Adam steps, 3 seeds. Sweep A: every
  world-model error (shape x B x sigma, plus the unbiased B=0 row) at anchor fraction rho=0.1 for
  all methods. Sweep B: the ``exploit`` grid at rho=1/3 (the question of issue 4 (iii)). Sweep C:
  rho in {0.05, 0.1, 0.2, 1/3} for a few errors.
- ``small``: the same code on a reduced grid (a handful of settings, 2 seeds, 150 steps); used by
  the test and for a quick look.

Outputs (in ``out``): ``curves.csv`` (every run's J every ``log_every`` steps), ``finals.csv``
(per run), ``summary.csv`` (mean and std over seeds per setting and method, with GRPO's final
reward at equal steps and at equal executions), ``summary.md`` (the tables of docs/simulation.md),
and PNG plots.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from wmrl.sim.bandit import WorldModelSpec
from wmrl.sim.engine import METHODS, RunSpec, SimConfig, simulate

WM_METHODS = ("wm", "debias", "denoise", "wmrl", "wmrl_ba", "ppi")
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
    ),
    "small": Preset(
        cfg=SimConfig(steps=150),
        seeds=(0, 1),
        biases={"monotone": (0.5,), "offset": (1.0,), "exploit": (1.0,)},
        sigmas=(0.0, 0.3),
        rho_third_shapes=(),
        rho_sweep=(),
    ),
}


def build_runs(preset: Preset) -> list[RunSpec]:
    """All runs of a preset, without duplicates (GRPO and anchor-only do not depend on the world model)."""
    runs: list[RunSpec] = []
    seen: set = set()
    none = WorldModelSpec("monotone", 0.0, 0.0)

    def add(method: str, wm: WorldModelSpec, rho: float, seed: int) -> None:
        if method in ("grpo", "anchor_only"):
            wm = none
        if method == "grpo":
            rho = 1.0
        key = (method, wm, round(rho, 6), seed)
        if key not in seen:
            seen.add(key)
            runs.append(RunSpec(method, wm, rho, seed))

    errors = [WorldModelSpec("monotone", 0.0, s) for s in preset.sigmas]
    for shape, bs in preset.biases.items():
        errors += [WorldModelSpec(shape, b, s) for b in bs for s in preset.sigmas]
    for seed in preset.seeds:
        add("grpo", none, 1.0, seed)
        add("anchor_only", none, preset.rho_main, seed)
        for wm in errors:
            for m in WM_METHODS:
                add(m, wm, preset.rho_main, seed)
        for wm in errors:
            if wm.shape in preset.rho_third_shapes or (wm.bias == 0.0 and preset.rho_third_shapes):
                add("anchor_only", none, THIRD, seed)
                for m in ("debias", "denoise", "wmrl", "wmrl_ba", "ppi"):
                    add(m, wm, THIRD, seed)
        for rho in preset.rho_sweep:
            add("anchor_only", none, rho, seed)
            for wm in preset.rho_sweep_errors:
                for m in ("wmrl", "wmrl_ba", "ppi"):
                    add(m, wm, rho, seed)
    return runs


def _interp_at_executions(curve, executions: float) -> float:
    """GRPO's J after a given number of executions (linear interpolation along its curve)."""
    x = curve["executions"].to_numpy(dtype=float)
    y = curve["J"].to_numpy(dtype=float)
    return float(np.interp(executions, x, y))


def summarise(curves, finals):
    """Per (setting, method) means over seeds, with GRPO references at equal steps and executions.

    Returns:
        pandas DataFrame with columns shape, bias, sigma, rho, method, J_final (mean), J_sd,
        gap_final (J* - J), executions, exec_ratio (executions / GRPO's), vs_grpo_steps
        (J - J_GRPO at equal steps), vs_grpo_exec (J - J_GRPO after the same number of executions),
        alpha_or_lambda, cal_mae_before, cal_mae_after, n_seeds.
    """
    import pandas as pd

    f = finals.copy()
    grpo_final = f[f.method == "grpo"].set_index("seed")["J_final"]
    grpo_exec = f[f.method == "grpo"].set_index("seed")["executions"]
    grpo_runs = f[f.method == "grpo"].set_index("seed")["run"]
    f["grpo_J"] = f["seed"].map(grpo_final)
    f["exec_ratio"] = f["executions"] / f["seed"].map(grpo_exec)
    eq = []
    for _, row in f.iterrows():
        gc = curves[curves.run == grpo_runs[row.seed]].sort_values("executions")
        eq.append(_interp_at_executions(gc, row.executions) if row.executions > 0 else float(gc["J"].iloc[0]))
    f["grpo_J_eq_exec"] = eq
    f["vs_grpo_steps"] = f["J_final"] - f["grpo_J"]
    f["vs_grpo_exec"] = f["J_final"] - f["grpo_J_eq_exec"]
    keys = ["shape", "bias", "sigma", "rho", "method"]
    # GRPO / anchor-only have no world model: label them so they sort first
    f.loc[f.method.isin(["grpo", "anchor_only"]), ["shape", "bias", "sigma"]] = ["-", 0.0, 0.0]
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


def markdown_tables(summary, preset_name: str, cfg: SimConfig, wall_s: float, margin: float) -> str:
    """The Markdown report: methods x errors at rho=0.1, pure-WM gaps, rho=1/3 region, rho sweep."""
    s = summary
    lines: list[str] = []
    base = s[s.method.isin(["grpo", "anchor_only"])]
    g = base[base.method == "grpo"].iloc[0]
    lines.append(f"Preset `{preset_name}`: {cfg.n_tasks} tasks x {cfg.group_size} samples per step, "
                 f"{cfg.n_arms} arms, d={cfg.dim}, {cfg.steps} steps, Adam lr {cfg.lr}, "
                 f"{int(g.n_seeds)} seeds; wall {wall_s:.0f} s.")
    lines.append("")
    lines.append("Reference runs (no world model): final true reward J (mean of the last 10% of the curve), "
                 "gap to the optimum J* - J, executions.")
    lines.append("")
    lines.append("| method | rho | J final | J* - J | executions |")
    lines.append("|---|---|---|---|---|")
    for _, r in base.sort_values(["method", "rho"]).iterrows():
        lines.append(f"| {r.method} | {r.rho:.2f} | {r.J_final:.3f} ± {0 if r.J_sd != r.J_sd else r.J_sd:.3f} | "
                     f"{r.gap_final:.3f} | {r.executions:.0f} |")
    lines.append("")
    for rho in sorted(set(s.rho) - {0.0, 1.0}):
        sub = s[(np.isclose(s.rho, rho) | (s.method == "wm")) & ~s.method.isin(["grpo", "anchor_only"])]
        methods = [m for m in WM_METHODS if m in set(sub.method) and (m != "wm" or np.isclose(rho, 0.1))]
        errs = sub[["shape", "bias", "sigma"]].drop_duplicates().sort_values(["shape", "bias", "sigma"])
        sub_nowm = sub[sub.method != "wm"]
        if sub_nowm.empty:
            continue
        errs = sub_nowm[["shape", "bias", "sigma"]].drop_duplicates().sort_values(["shape", "bias", "sigma"])
        if len(errs) < 2:
            continue
        ao = base[(base.method == "anchor_only") & np.isclose(base.rho, rho)]
        ao_txt = f"; anchor-only at this rho: {ao.iloc[0].vs_grpo_steps:+.3f}" if len(ao) else ""
        lines.append(f"### J - J_GRPO at equal steps, anchor fraction rho = {rho:.2f}")
        lines.append("")
        lines.append(f"Final true reward minus real-execution GRPO's (mean over seeds; > -{margin} "
                     f"counts as a match, in bold){ao_txt}. Executions: {rho:.2f} of GRPO's "
                     "(pure world model: 0).")
        lines.append("")
        lines.append("| shape | B | sigma | " + " | ".join(methods) + " |")
        lines.append("|---|---|---|" + "---|" * len(methods))
        for _, e in errs.iterrows():
            cells = []
            for m in methods:
                r = sub[(sub["shape"] == e["shape"]) & (sub.bias == e["bias"]) & (sub.sigma == e["sigma"]) & (sub.method == m)]
                if not len(r):
                    cells.append("-")
                    continue
                v = r.iloc[0].vs_grpo_steps
                cells.append(f"**{v:+.3f}**" if v > -margin else f"{v:+.3f}")
            shape = "none" if e["bias"] == 0 else e["shape"]
            lines.append(f"| {shape} | {e['bias']:g} | {e['sigma']:g} | " + " | ".join(cells) + " |")
        lines.append("")
    # equal executions
    lines.append("### Equal executions")
    lines.append("")
    lines.append("J of each method at the end minus GRPO's J after the same number of executions "
                 "(GRPO's curve interpolated), rho = 0.10, averaged over all errors of each shape.")
    lines.append("")
    sub = s[np.isclose(s.rho, 0.1) & ~s.method.isin(["grpo", "wm"])]
    methods = [m for m in ("anchor_only", "debias", "denoise", "wmrl", "wmrl_ba", "ppi") if m in set(sub.method)]
    lines.append("| shape | " + " | ".join(methods) + " |")
    lines.append("|---|" + "---|" * len(methods))
    shapes = [x for x in ("monotone", "offset", "exploit") if x in set(sub["shape"])]
    for sh in shapes:
        cells = []
        for m in methods:
            r = sub[(sub.method == m) & ((sub["shape"] == sh) | (sub.method == "anchor_only"))]
            cells.append(_fmt(r.vs_grpo_exec.mean()))
        lines.append(f"| {sh} | " + " | ".join(cells) + " |")
    lines.append("")
    return "\n".join(lines)


def make_plots(curves, summary, out: Path, preset: Preset) -> list[Path]:
    """PNG plots: curves vs steps and vs executions for representative errors, pure-WM gap heatmaps,
    WMRL - GRPO heatmaps, and the rho sweep."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths: list[Path] = []
    colors = {"grpo": "k", "anchor_only": "0.55", "wm": "tab:red", "debias": "tab:orange",
              "denoise": "tab:purple", "wmrl": "tab:blue", "wmrl_ba": "tab:cyan", "ppi": "tab:green"}
    c = curves.copy()
    c["rho_r"] = c["rho"].round(3)
    reps = []
    for shape, bs in preset.biases.items():
        b = bs[len(bs) // 2] if len(bs) > 1 else bs[0]
        sg = preset.sigmas[len(preset.sigmas) // 2] if len(preset.sigmas) > 2 else preset.sigmas[-1]
        reps.append((shape, b, sg))
    for xaxis in ("step", "executions"):
        fig, axes = plt.subplots(1, len(reps), figsize=(5 * len(reps), 4), squeeze=False)
        for ax, (shape, b, sg) in zip(axes[0], reps):
            for m in METHODS:
                if m in ("grpo", "anchor_only"):
                    sel = c[(c.method == m) & ((c.rho_r == round(preset.rho_main, 3)) | (m == "grpo"))]
                else:
                    sel = c[(c.method == m) & (c["shape"] == shape) & (c.bias == b) & (c.sigma == sg)
                            & ((c.rho_r == round(preset.rho_main, 3)) | (m == "wm"))]
                if sel.empty:
                    continue
                mean = sel.groupby("step")[["J", "executions"]].mean()
                x = mean.index if xaxis == "step" else mean["executions"].clip(lower=1)
                ax.plot(x, mean["J"], color=colors[m], label=m, lw=2 if m in ("grpo", "wmrl") else 1.2)
            if xaxis == "executions":
                ax.set_xscale("log")
            ax.set_title(f"{shape}, B={b:g}, sigma={sg:g}, rho={preset.rho_main:g}")
            ax.set_xlabel("training step" if xaxis == "step" else "executions (log)")
            ax.set_ylabel("true expected reward J")
            ax.grid(alpha=0.3)
        axes[0][0].legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        p = out / f"curves_vs_{'steps' if xaxis == 'step' else 'executions'}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)

    # heatmaps over (B, sigma) per shape: pure WM gap and WMRL - GRPO at rho 0.1 and 1/3
    panels = [("wm", 0.0, "pure world model: J - J_GRPO"), ("wmrl", 0.1, "WMRL rho=0.1: J - J_GRPO"),
              ("wmrl", THIRD, "WMRL rho=1/3: J - J_GRPO"), ("ppi", THIRD, "PPI rho=1/3: J - J_GRPO")]
    shapes = list(preset.biases)
    panels = [p_ for p_ in panels if ((summary.method == p_[0]) & np.isclose(summary.rho, p_[1])).any()]
    fig, axes = plt.subplots(len(panels), len(shapes), figsize=(4.2 * len(shapes), 3.4 * len(panels)), squeeze=False)
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
            im = ax.imshow(grid, origin="lower", cmap="RdYlGn", vmin=-0.15, vmax=0.02, aspect="auto")
            for a_ in range(len(bs)):
                for b_ in range(len(ss)):
                    if grid[a_, b_] == grid[a_, b_]:
                        ax.text(b_, a_, f"{grid[a_, b_]:+.3f}", ha="center", va="center", fontsize=8)
            ax.set_xticks(range(len(ss)), [f"{x:g}" for x in ss])
            ax.set_yticks(range(len(bs)), [f"{x:g}" for x in bs])
            ax.set_xlabel("sigma")
            ax.set_ylabel("B")
            ax.set_title(f"{title}\n{shape}", fontsize=9)
    fig.colorbar(im, ax=axes, shrink=0.6)
    p = out / "heatmaps_vs_grpo.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)

    if preset.rho_sweep:
        fig, axes = plt.subplots(1, len(preset.rho_sweep_errors), figsize=(5 * len(preset.rho_sweep_errors), 4), squeeze=False)
        for ax, wm in zip(axes[0], preset.rho_sweep_errors):
            for m in ("anchor_only", "wmrl", "wmrl_ba", "ppi"):
                if m == "anchor_only":
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


def run_study(
    preset_name: str = "default",
    out: Path | str = "sim-out",
    seeds: int | None = None,
    margin: float = 0.01,
    progress=None,
) -> dict:
    """Run a preset, write CSV/Markdown/PNG into ``out`` and return a small dict of paths and timings.

    Args:
        preset_name: ``"default"`` or ``"small"``.
        out: output folder (created).
        seeds: number of seeds (overrides the preset's; seeds are 0..seeds-1).
        margin: J margin below GRPO that still counts as a match in the tables (reward units).
        progress: optional callable(step, steps).

    Raises:
        ValueError: unknown preset or seeds < 1.
    """
    if preset_name not in PRESETS:
        raise ValueError(f"unknown preset {preset_name!r}; choose one of {sorted(PRESETS)}")
    preset = PRESETS[preset_name]
    if seeds is not None:
        if seeds < 1:
            raise ValueError(f"seeds must be >= 1, got {seeds}")
        preset = replace(preset, seeds=tuple(range(seeds)))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runs = build_runs(preset)
    t0 = time.perf_counter()
    curves, finals = simulate(runs, preset.cfg, progress=progress)
    wall = time.perf_counter() - t0
    summary = summarise(curves, finals)
    curves.to_csv(out / "curves.csv", index=False, float_format="%.5f")
    finals.to_csv(out / "finals.csv", index=False, float_format="%.5f")
    summary.to_csv(out / "summary.csv", index=False, float_format="%.5f")
    md = markdown_tables(summary, preset_name, preset.cfg, wall, margin)
    (out / "summary.md").write_text(md + "\n")
    plots = make_plots(curves, summary, out, preset)
    meta = {"preset": preset_name, "runs": len(runs), "wall_s": wall, "config": asdict(preset.cfg),
            "seeds": list(preset.seeds), "margin": margin}
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    return {"out": str(out), "runs": len(runs), "wall_s": wall, "plots": [str(p) for p in plots],
            "summary": summary}

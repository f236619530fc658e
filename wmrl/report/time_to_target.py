"""Time-to-target of a bench: how much training compute, and how many real executions, each method needs for its
policy to reach GRPO's final train-task level, and where each method stands when given the same compute as GRPO.

The paper's claim (World Model RL) is about compute: GRPO's quality for less execution compute. A final-step
table compares methods at equal *steps*; this module compares them at equal *level* and at equal *compute*. It
reads the train-task evaluations made along each run (``eval.every_k`` with ``eval.train_tasks``; the step-0
evaluation of the initial policy when the bench made one) from a bench folder (:mod:`wmrl.report.bench_results`)
and the cumulative costs of each step from ``metrics.jsonl``:

* a run's **curve**: at each evaluated step ``s``, the train-task mean leaderboard percentile of the policy after
  ``s`` steps, the training compute spent up to ``s`` (``cum_compute_cpu_s``: trainer CPU + training sandbox CPU,
  CPU-seconds) and the real training executions up to ``s`` (``cum_exec_count``); for a method that fits a world
  model on the bench's shared warm-up corpus, the corpus's whole compute and executions are charged to every run
  (as the bench table's "corpus charged" column does);
* the **targets**: the reference method's (GRPO's) final train-task percentile, mean over its seeds, and the level
  90 % of the way from the initial policy's mean to it (the simulation study's second target);
* **time-to-target** of a run: the compute and executions at its *first evaluation* at or above the target (not
  interpolated between evaluations, so it is an upper bound at the resolution of ``eval.every_k``); a run that never
  reaches it counts as not reached;
* **compute-matched level**: the reference's percentile at the compute a run of another method spent in all,
  linearly interpolated on the reference run of the same seed between its evaluations; the paired difference
  (method's final level minus that) says which method is ahead for the same compute.

Compute in CPU-seconds depends on the machine's load (several runs sharing cores take more CPU-seconds for the same
work); executions do not. Both are reported.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from wmrl.report.bench_results import METHODS, REFERENCE, corpus_dir, eval_records, step0_compute, uses_world_model
from wmrl.report.plots import color_for, finish_axes, pyplot
from wmrl.report.runs import load_run
from wmrl.report.tables import Cell, Table

#: Fraction of the reference's gain (final minus initial train-task percentile) that the second target asks for.
GAIN_FRACTION = 0.9


@dataclass
class TrainCurve:
    """One run's train-task level along training.

    Attributes:
        method, seed: the run.
        steps: [K] int, the evaluated steps, increasing (0 = the initial policy).
        percentile: [K] float, the train-task mean leaderboard percentile after each step, in [0, 1].
        compute_cpu_s: [K] float, training compute spent up to each step, CPU-seconds (corpus charged).
        executions: [K] float, real training executions up to each step (corpus charged).
        final_compute_cpu_s, final_executions: the whole run's training compute and executions (corpus charged).
    """

    method: str
    seed: int
    steps: np.ndarray
    percentile: np.ndarray
    compute_cpu_s: np.ndarray
    executions: np.ndarray
    final_compute_cpu_s: float
    final_executions: float


def _corpus_charge(out: Path) -> tuple[float, float]:
    p = corpus_dir(out) / "corpus.json"
    if not p.is_file():
        return 0.0, 0.0
    c = json.loads(p.read_text(encoding="utf-8"))
    return float(c.get("compute_cpu_s") or 0.0), float(c.get("executions") or 0.0)


def train_curves(out: str | Path) -> list[TrainCurve]:
    """The train-task curve of every finished run of the bench in ``out`` with at least one train-task evaluation.

    The step-0 point is the run's own step-0 evaluation, else the initial-policy evaluation of another run of the
    same seed (every method of a seed starts from the same policy), placed at the compute the run spent before its
    first step. Runs without ``metrics.jsonl`` costs are left out.
    """
    out = Path(out)
    corpus_cpu, corpus_exec = _corpus_charge(out)
    runs = []
    initial: dict[int, float] = {}
    for rd in sorted(out.glob("*/seed*")):
        if not (rd / "summary.json").is_file() or rd.parent.name not in METHODS:
            continue
        run = load_run(rd)
        seed = int(rd.name.removeprefix("seed"))
        pts = {int(r["step"]): float(r["mean_percentile"]) for r in eval_records(run)
               if r.get("split") == "train" and isinstance(r.get("mean_percentile"), (int, float))
               and math.isfinite(r["mean_percentile"])}
        if 0 in pts:
            initial.setdefault(seed, pts[0])
        runs.append((rd.parent.name, seed, run, pts))
    curves = []
    for method, seed, run, pts in runs:
        m = run.metrics
        if m.empty or "cum_compute_cpu_s" not in m or "cum_exec_count" not in m:
            continue
        if 0 not in pts and seed in initial:
            pts[0] = initial[seed]
        if not pts:
            continue
        cc, ce = (corpus_cpu, corpus_exec) if uses_world_model(method) else (0.0, 0.0)
        steps = m["step"].astype(int).to_numpy()
        comp = pd.to_numeric(m["cum_compute_cpu_s"], errors="coerce").to_numpy(float)
        execs = pd.to_numeric(m["cum_exec_count"], errors="coerce").to_numpy(float)
        by_step = {0: (step0_compute(m), 0.0), **{int(s): (float(c), float(e)) for s, c, e in zip(steps, comp, execs)}}
        keep = sorted(s for s in pts if s in by_step)
        curves.append(TrainCurve(
            method=method, seed=seed, steps=np.array(keep, dtype=int),
            percentile=np.array([pts[s] for s in keep], dtype=float),
            compute_cpu_s=np.array([by_step[s][0] + cc for s in keep], dtype=float),
            executions=np.array([by_step[s][1] + ce for s in keep], dtype=float),
            final_compute_cpu_s=float(comp[-1]) + cc, final_executions=float(execs[-1]) + ce))
    return curves


def targets(curves: list[TrainCurve], reference: str = REFERENCE) -> dict[str, float]:
    """``{"final": the reference's final train-task percentile (mean over its seeds), "gain90": the initial level
    plus :data:`GAIN_FRACTION` of the reference's gain}``; ``{}`` when the reference has no curve.

    The initial level is the mean step-0 percentile over the reference's seeds (the same policy for every method of
    a seed); without a step-0 evaluation only ``"final"`` is given.
    """
    ref = [c for c in curves if c.method == reference]
    if not ref:
        return {}
    final = float(np.mean([c.percentile[-1] for c in ref]))
    out = {"final": final}
    starts = [c.percentile[0] for c in ref if c.steps[0] == 0]
    if starts:
        init = float(np.mean(starts))
        out["gain90"] = init + GAIN_FRACTION * (final - init)
    return out


def first_reach(curve: TrainCurve, target: float) -> tuple[int, float, float] | None:
    """``(step, compute_cpu_s, executions)`` at the first evaluation of ``curve`` at or above ``target``, or None."""
    hit = np.flatnonzero(curve.percentile >= target - 1e-12)
    if hit.size == 0:
        return None
    i = int(hit[0])
    return int(curve.steps[i]), float(curve.compute_cpu_s[i]), float(curve.executions[i])


def level_at(curve: TrainCurve, compute_cpu_s: float) -> float | None:
    """The curve's percentile at ``compute_cpu_s``, linearly interpolated between its evaluations; None outside the
    range its evaluations cover (before the first or after the last)."""
    x, y = curve.compute_cpu_s, curve.percentile
    if x.size == 0 or not (x[0] <= compute_cpu_s <= x[-1]):
        return None
    return float(np.interp(compute_cpu_s, x, y))


def _mean_se(v: list[float]) -> tuple[float | None, float | None]:
    if not v:
        return None, None
    return float(np.mean(v)), (float(np.std(v, ddof=1) / math.sqrt(len(v))) if len(v) > 1 else None)


def time_to_target_frame(curves: list[TrainCurve], reference: str = REFERENCE) -> pd.DataFrame:
    """One row per method and target: ``method``, ``target`` (``final`` / ``gain90``), ``level`` (the target's
    percentile), ``seeds``, ``reached`` (seeds whose curve reaches it), ``step_mean``, ``executions_mean``,
    ``compute_cpu_h_mean`` and ``compute_cpu_h_se`` (over the seeds that reached it), ``compute_vs_reference``
    (ratio of those mean computes; None when either method has no seed that reached it), and the compute-matched
    columns ``final_percentile`` (mean over seeds), ``reference_at_same_compute`` and
    ``matched_diff_mean`` / ``matched_diff_se`` (paired over seeds: the method's final level minus the reference's
    level at the compute the method spent; seeds whose spend is outside the reference curve's range are left out,
    ``matched_seeds`` counts the rest). Empty when the reference has no curve."""
    tg = targets(curves, reference)
    if not tg:
        return pd.DataFrame()
    ref_by_seed = {c.seed: c for c in curves if c.method == reference}
    rows = []
    order = {m: i for i, m in enumerate(METHODS)}
    methods = sorted({c.method for c in curves}, key=lambda m: order.get(m, 99))
    ref_compute: dict[str, float | None] = {}
    for name, level in tg.items():
        ref_hits = [first_reach(c, level) for c in curves if c.method == reference]
        ref_compute[name] = _mean_se([h[1] / 3600 for h in ref_hits if h is not None])[0]
    for method in methods:
        mc = [c for c in curves if c.method == method]
        diffs, at_ref = [], []
        for c in mc:
            ref = ref_by_seed.get(c.seed)
            lvl = level_at(ref, c.final_compute_cpu_s) if ref is not None else None
            if lvl is not None:
                at_ref.append(lvl)
                diffs.append(float(c.percentile[-1]) - lvl)
        d_mean, d_se = _mean_se(diffs)
        for name, level in tg.items():
            hits = [h for h in (first_reach(c, level) for c in mc) if h is not None]
            cm, cse = _mean_se([h[1] / 3600 for h in hits])
            rc = ref_compute[name]
            rows.append({
                "method": method, "target": name, "level": level, "seeds": len(mc), "reached": len(hits),
                "step_mean": _mean_se([float(h[0]) for h in hits])[0],
                "executions_mean": _mean_se([h[2] for h in hits])[0],
                "compute_cpu_h_mean": cm, "compute_cpu_h_se": cse,
                "compute_vs_reference": (cm / rc) if cm is not None and rc else None,
                "final_percentile": _mean_se([float(c.percentile[-1]) for c in mc])[0],
                "reference_at_same_compute": _mean_se(at_ref)[0],
                "matched_diff_mean": d_mean, "matched_diff_se": d_se, "matched_seeds": len(diffs)})
    return pd.DataFrame(rows)


def fig_time_to_target(curves: list[TrainCurve], reference: str = REFERENCE) -> Any | None:
    """Train-task percentile against training compute (CPU-hours, corpus charged), one thin line per run and a
    marker per evaluation, colours fixed per method, with the targets of :func:`targets` as horizontal lines.
    None when there is no curve."""
    if not curves:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.8))
    idx = {m: i for i, m in enumerate(METHODS)}
    labelled: set[str] = set()
    for c in sorted(curves, key=lambda c: (idx.get(c.method, 99), c.seed)):
        ax.plot(c.compute_cpu_s / 3600, c.percentile, "o-", color=color_for(idx.get(c.method, 0)), lw=1.2, ms=3,
                alpha=0.8, label=None if c.method in labelled else c.method)
        labelled.add(c.method)
    for name, level in targets(curves, reference).items():
        ax.axhline(level, color="0.4", lw=0.8, ls="--" if name == "final" else ":")
        ax.annotate(f"{reference} final" if name == "final" else f"{int(GAIN_FRACTION * 100)} % of {reference}'s gain",
                    (ax.get_xlim()[1], level), fontsize=8, ha="right", va="bottom", color="0.3")
    ax.set_ylabel("train-task mean leaderboard percentile")
    ax.set_title("train-task level against training compute (world-model arms: corpus charged)", fontsize=10)
    return finish_axes(fig, (ax,), "training compute so far (CPU-hours: trainer + sandbox)")


#: What the time-to-target table's columns mean (printed under it).
HELP = (
    "Time to target: the compute each method's policy needed to reach a train-task level, read at the train-task "
    "evaluations made along each run (the first evaluation at or above the level, so an upper bound at the "
    "evaluation interval). Targets: the reference's final level (mean over its seeds) and the initial level plus "
    f"{int(GAIN_FRACTION * 100)} % of the reference's gain. Reached: seeds whose run reached the level; step, "
    "executions and compute are means over those seeds (world-model arms: the shared warm-up corpus charged in "
    "full). Compute vs reference: ratio of those mean computes. Same compute: the reference's level at the compute "
    "the method spent in all (the same seed's reference run, interpolated between its evaluations), and the paired "
    "difference of the method's final level from it (mean ± SE over seeds). Compute is CPU-time and grows with the "
    "machine's load; executions do not.")


def time_to_target_table(frame: pd.DataFrame, reference: str = REFERENCE) -> Table:
    """The bench page's table of :func:`time_to_target_frame` (one row per method and target)."""
    def num(rec: dict, key: str, fmt: str, se: str | None = None) -> Cell:
        v = rec.get(key)
        return Cell(math.nan if v is None else v, rec.get(se) if se else None, fmt, na="—")

    rows = []
    for r in frame.to_dict("records"):
        ratio = r.get("compute_vs_reference")
        rows.append({
            "method": r["method"],
            "target": (f"{reference} final" if r["target"] == "final"
                       else f"{int(GAIN_FRACTION * 100)} % of gain") + f" ({r['level']:.3f})",
            "reached": f"{r['reached']} of {r['seeds']}",
            "step": num(r, "step_mean", ".0f"),
            "executions": num(r, "executions_mean", ".0f"),
            "compute CPU-h": num(r, "compute_cpu_h_mean", ".3f", "compute_cpu_h_se"),
            f"compute vs {reference}": f"{ratio:.2f}x" if ratio is not None and math.isfinite(ratio) else "—",
            "final level": num(r, "final_percentile", ".3f"),
            f"{reference} at same compute": num(r, "reference_at_same_compute", ".3f"),
            "Δ at same compute (paired)": num(r, "matched_diff_mean", ".3f", "matched_diff_se"),
        })
    return Table.from_records(rows)


def write_time_to_target(out: str | Path, reference: str = REFERENCE) -> tuple[pd.DataFrame, dict[str, Path]]:
    """Write ``time_to_target.csv`` (:func:`time_to_target_frame`) and ``time_to_target.png``
    (:func:`fig_time_to_target`) into the bench folder ``out`` when its runs evaluated the train tasks along the
    run (some curve has a point between the first and the last step).

    Returns:
        ``(frame, {"csv", "plot"} -> path)`` of what was written; an empty frame and ``{}`` otherwise (a bench that
        evaluated only at the start and the end has no curve to read).
    """
    out = Path(out)
    curves = train_curves(out)
    if not any(len(c.steps) > 2 for c in curves):
        return pd.DataFrame(), {}
    frame = time_to_target_frame(curves, reference)
    if frame.empty:
        return frame, {}
    frame.to_csv(out / "time_to_target.csv", index=False)
    fig = fig_time_to_target(curves, reference)
    paths = {"csv": out / "time_to_target.csv"}
    if fig is not None:
        fig.savefig(out / "time_to_target.png", dpi=110, bbox_inches="tight")
        paths["plot"] = out / "time_to_target.png"
    return frame, paths

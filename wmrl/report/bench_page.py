"""The bench's outputs: the table and the world-model table (one :class:`~wmrl.report.tables.Table`
each), the reward-against-compute plot, and one :class:`BenchPage` rendered to ``bench.md`` and
``bench.html``; :func:`write_outputs` writes them with ``results.csv`` and ``table.csv``.

The numbers come from :mod:`wmrl.report.bench_results` (reading the folder),
:mod:`wmrl.report.bench_stats` (aggregates and notes) and :mod:`wmrl.report.convergence_page` (where
each run converged) and :mod:`wmrl.report.time_to_target`; nothing here runs a bench. About 500 lines: one page laid
out in two formats (Markdown and HTML) side by side, so that the two stay the same.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from wmrl.core.recipe import WMRL, get_recipe, recipes_with
from wmrl.report import convergence_page as CV
from wmrl.report import html as H
from wmrl.report.bench_results import (
    METHODS,
    REFERENCE,
    BenchError,
    collect,
    curves,
    missing_runs,
    now,
    read_bench_meta,
)
from wmrl.report.bench_stats import (
    INITIAL,
    MethodRow,
    aggregate,
    initial_row,
    learning_notes,
    overlap_notes,
    train_paired_notes,
)
from wmrl.report.machine import code_line, machine_line
from wmrl.report.plots import pyplot, color_for, finish_axes
from wmrl.report.stats import MeanSE, mean_se
from wmrl.report.tables import Cell, Table
from wmrl.report import time_to_target as TT

#: The paragraph under the bench table that says what each column is.
COLUMNS_HELP = (
    "Train-task percentile (when evaluated): the final policy's mean leaderboard percentile (MLE-Dojo position "
    "score, [0, 1]) over the tasks it was trained on and the same samples per task, executed for real; mean ± "
    "standard error over seeds. Train Δ vs initial: mean ± SE over seeds of the per-seed (final - initial) "
    "difference. Train Δ vs grpo, held-out Δ vs grpo: mean ± SE over seeds of the per-seed difference to grpo. "
    "Held-out percentile: the same on tasks never trained on. Real executions, sandbox CPU-h: training "
    "executions (anchors + a run's own world-model warm-up), per seed. Train compute: trainer-process CPU + "
    "training sandbox CPU, per seed. Total CPU-h adds evaluation. Wall h: the run's wall time including "
    "evaluation. Compute vs grpo: ratio of mean training compute; 'corpus charged' adds the shared warm-up "
    "corpus's whole cost to every run that used it; 'cached grpo' is grpo with the exact execution cache "
    "(executor.cache: true), the same runs less the sandbox CPU of re-running a program already executed on the "
    "same task. The initial-policy row (when the preset evaluates step 0) is "
    "the seeded policy before any training, the same for every method of a seed; its held-out Δ is initial - "
    "grpo final."
)

WM_TABLE_HELP = (
    "The world model on the training anchors (programs both scored and executed), per run, then mean ± SE "
    "over seeds. Spearman and pairwise accuracy (within groups, chance = 0.5) use the raw prediction r_hat. "
    "Status accuracy, failure AUC, reward ECE and MAE come from the run's fidelity card (fidelity.json; "
    "docs/models.md, 'The fidelity card'): the most likely predicted outcome class against the executed one, the "
    "ROC AUC of the predicted failure probability, the reward's calibration error over 10 equal-mass bins of r_hat, "
    "and its mean absolute error (n/a: no status probabilities, one outcome class only, or no card). "
    "Debiased / raw squared error: on each step's anchors, with the isotonic map fitted on earlier steps only "
    "(out of sample); < 1 means the debiasing helped (n/a without debiasing). Mean alpha: the fused weight "
    "of the anchor gradient. `wm` has no anchors, so it has no row."
)


def _ratio(r: float | None) -> str:
    if r is None:
        return ""
    return f"{r:.2f}x" + (f" ({1 / r:.1f}x less)" if 0 < r < 1 else "")


def _mse(x: MeanSE | None, digits: int = 3, dash: bool = False) -> Cell:
    """``—`` for the reference itself, ``n/a`` without values, else ``mean ± SE``."""
    if dash:
        return Cell("—")
    return Cell.mean_se(x, digits) if x is not None and x.n else Cell("n/a")


def bench_table(rows: Sequence[MethodRow], reference: str = REFERENCE) -> Table:
    """The bench table, one row per method.

    Columns: ``method``, ``seeds``, ``train-task percentile`` (final, mean ± SE), ``train Δ vs initial``
    (paired by seed, mean ± SE), ``train Δ vs grpo`` (paired), ``held-out percentile`` (mean ± SE),
    ``held-out Δ vs grpo (paired)``, ``valid rate``, ``real executions`` (training, per seed),
    ``sandbox CPU-h`` (training executions, per seed), ``train compute CPU-h`` (trainer + sandbox),
    ``total CPU-h`` (training + evaluation), ``wall h``, ``compute vs grpo`` (ratio of training compute)
    and, when the bench shared a warm-up corpus, ``compute vs grpo, corpus charged`` (with its cost
    charged in full to every run), and, when the reference's execution logs are there, ``compute vs cached grpo,
    corpus charged`` (against the reference with the exact execution cache, which skips its repeats). The
    train-task columns appear when the train tasks were evaluated.
    """
    blank = Cell("")
    out = []
    for r in rows:
        is_ref, is_init = r.method == reference, r.method == INITIAL

        def num(x: float, digits: int, *, is_init: bool = is_init) -> Cell:
            return blank if is_init else Cell(x, fmt=f".{digits}f")

        out.append({
            "method": Cell(r.method),
            "seeds": Cell(r.n),
            "train-task percentile": _mse(r.train_percentile),
            "train Δ vs initial": blank if is_init else _mse(r.train_gain),
            f"train Δ vs {reference}": blank if is_init else _mse(r.train_paired, dash=is_ref),
            "held-out percentile": Cell.mean_se(r.percentile, 3),
            f"held-out Δ vs {reference} (paired)": _mse(r.paired, dash=is_ref),
            "valid rate": blank if is_init else Cell.mean_se(r.valid_rate, 2),
            "real executions": Cell("0") if is_init else Cell(r.executions, fmt=".0f"),
            "sandbox CPU-h": num(r.sandbox_cpu_h, 3),
            "train compute CPU-h": num(r.train_cpu_h, 3),
            "total CPU-h": num(r.total_cpu_h, 3),
            "wall h": num(r.wall_h, 3),
            f"compute vs {reference}": blank if is_init else Cell("1.00x" if is_ref else _ratio(r.compute_ratio)),
            f"compute vs {reference}, corpus charged": blank if is_init else Cell(_ratio(r.compute_ratio_corpus)),
            f"compute vs cached {reference}, corpus charged":
                blank if is_init else Cell(_ratio(r.compute_ratio_cached)),
        })
    table = Table.from_records(out)
    if not any(r.train_percentile is not None and r.train_percentile.n for r in rows):
        table = table.drop(["train-task percentile", "train Δ vs initial", f"train Δ vs {reference}"])
    if all(r.compute_ratio_corpus is None or r.compute_ratio_corpus == r.compute_ratio for r in rows
           if r.method != INITIAL):
        table = table.drop([f"compute vs {reference}, corpus charged"])
    if all(r.compute_ratio_cached is None for r in rows):
        table = table.drop([f"compute vs cached {reference}, corpus charged"])
    return table


def _alarm_text(g: pd.DataFrame) -> str:
    """``"3 (2 of 4 runs, first at steps 12, 30)"`` from the runs' ``exploit_alarms`` / ``exploit_first_alarm``;
    ``"-"`` where no run logged the alarm."""
    n = pd.to_numeric(g.get("exploit_alarms"), errors="coerce") if "exploit_alarms" in g else pd.Series(dtype=float)
    if not n.notna().any():
        return "-"
    first = pd.to_numeric(g["exploit_first_alarm"], errors="coerce").dropna().astype(int).tolist()
    where = f", first at step{'s' if len(first) > 1 else ''} {', '.join(map(str, first))}" if first else ""
    return f"{int(n.sum())} ({int((n > 0).sum())} of {int(n.notna().sum())} runs{where})"


def world_model_table(results: pd.DataFrame) -> Table:
    """Per method with world-model data: mean ± SE over seeds of
    :func:`wmrl.report.bench_results.world_model_quality`'s columns. Empty when no run has anchors
    scored by a world model."""
    rows = []
    for method, g in results.groupby("method", sort=False):
        if not (pd.to_numeric(g.get("wm_anchor_pairs"), errors="coerce") > 0).any():
            continue
        rows.append({
            "method": Cell(method),
            "anchor pairs": Cell(float(pd.to_numeric(g["wm_anchor_pairs"]).mean()), fmt=".0f"),
            "Spearman(r_hat, r)": Cell.mean_se(mean_se(list(g["wm_spearman"])), 2),
            "pairwise accuracy in groups": Cell.mean_se(mean_se(list(g["wm_pairwise_accuracy"])), 2),
            "status accuracy": Cell.mean_se(mean_se(list(g["wm_status_acc1"])), 2),
            "failure AUC": Cell.mean_se(mean_se(list(g["wm_failure_auc"])), 2),
            "reward ECE": Cell.mean_se(mean_se(list(g["wm_ece"])), 3),
            "reward MAE": Cell.mean_se(mean_se(list(g["wm_mae"])), 3),
            "debiased / raw squared error": Cell.mean_se(mean_se(list(g["debias_sq_err_ratio"])), 2),
            "mean alpha": Cell.mean_se(mean_se(list(g["alpha_mean"])), 2),
            "exploitation alarms (runs alarmed)": Cell(_alarm_text(g)),
        })
    return Table.from_records(rows) if rows else Table([])


def multiturn_table(results: pd.DataFrame) -> Table:
    """Per method of a multi-turn bench (``max_turns`` > 1): mean ± SE over seeds of the improvement from turn 1 to
    turn K (held out and on the train tasks, for the initial and the final policy), the submission rate and the
    world model's feedback fidelity on the training anchors (:func:`wmrl.report.bench_results.multiturn_columns`).
    Empty for a single-turn bench."""
    if "max_turns" not in results or not (pd.to_numeric(results["max_turns"], errors="coerce") > 1).any():
        return Table([])
    rows = []
    for method, g in results.groupby("method", sort=False):
        def ms(col: str, digits: int = 3, *, g: pd.DataFrame = g) -> Cell:
            return Cell.mean_se(mean_se(list(g[col])), digits)
        rows.append({
            "method": Cell(method),
            "K": Cell(float(pd.to_numeric(g["max_turns"]).max()), fmt=".0f"),
            "held-out turn 1": ms("heldout_turn1_percentile"),
            "held-out gain turn 1 -> K": ms("heldout_turn_gain"),
            "initial policy: held-out gain": ms("initial_heldout_turn_gain"),
            "train gain turn 1 -> K": ms("train_turn_gain"),
            "initial policy: train gain": ms("initial_train_turn_gain"),
            "submitted before K": ms("heldout_submitted_rate", 2),
            "feedback: validation rel. error (median)": ms("feedback_validation_rel_error_median"),
            "feedback: error/no-error accuracy": ms("feedback_status_accuracy", 2),
            "feedback: revisions ordered right": ms("feedback_pairwise_agreement", 2),
        })
    return Table.from_records(rows)


MULTITURN_HELP = (
    "Multi-turn episodes (docs/multiturn.md): every evaluation turn is executed for real on the task's validation "
    "view; a gain is the mean percentile of each episode's current submission after turn K minus after turn 1, "
    "mean ± SE over seeds. Feedback columns compare the world model's observation with the real one on every "
    "executed training anchor turn (median relative error of the validation score; agreement on error vs no error; "
    "pairs of revisions of one episode ordered the same way).")


def fig_curves(train: dict[str, list], held: dict[str, list]) -> Any | None:
    """Two panels: true training reward against compute, and held-out percentile against compute.

    Colours are fixed per method (in :data:`METHODS` order); thin lines are seeds, thick lines the
    seed average with a band of ± one standard error over seeds (left: on a common compute grid, each
    seed smoothed by a centred rolling mean over a sixth of its steps; right: per evaluation, at the
    mean compute).
    """
    if not any(train.values()) and not any(held.values()):
        return None

    plt = pyplot()
    fig, (ax_t, ax_h) = plt.subplots(1, 2, figsize=(13, 4.8))
    idx = {m: i for i, m in enumerate(METHODS)}
    for method, seeds in train.items():
        c = color_for(idx[method])
        good = []
        for x, y in seeds:
            ok = np.isfinite(x) & np.isfinite(y)
            if ok.sum() == 0:
                continue
            ax_t.plot(x[ok], y[ok], color=c, alpha=0.2, lw=0.8)
            w = max(1, int(ok.sum()) // 6)
            ys = pd.Series(y[ok]).rolling(w, min_periods=1, center=True).mean().to_numpy()
            good.append((x[ok], ys))
        if not good:
            continue
        lo = max(g[0].min() for g in good)
        hi = min(g[0].max() for g in good)
        if hi > lo:
            grid = np.linspace(lo, hi, 60)
            ys_grid = np.array([np.interp(grid, gx, gy) for gx, gy in good])
            avg = ys_grid.mean(axis=0)
            ax_t.plot(grid, avg, color=c, lw=2.4, label=f"{method} ({len(good)} seeds)")
            if len(good) > 1:
                se = ys_grid.std(axis=0, ddof=1) / math.sqrt(len(good))
                ax_t.fill_between(grid, avg - se, avg + se, color=c, alpha=0.18, lw=0)
        else:
            ax_t.plot(good[0][0], good[0][1], color=c, lw=2.4, label=f"{method} ({len(good)} seeds)")
    for method, seeds in held.items():
        c = color_for(idx[method])
        for x, y in seeds:
            ax_h.plot(x, y, "o-", color=c, alpha=0.25, lw=0.8, ms=3)
        n = min(len(x) for x, _ in seeds)
        xs = np.nanmean([x[:n] for x, _ in seeds], axis=0)
        ys_all = np.array([y[:n] for _, y in seeds])
        ys = np.nanmean(ys_all, axis=0)
        ax_h.plot(xs, ys, "o-", color=c, lw=2.4, label=f"{method} ({len(seeds)} seeds)")
        if len(seeds) > 1:
            se = np.nanstd(ys_all, axis=0, ddof=1) / math.sqrt(len(seeds))
            ax_h.fill_between(xs, ys - se, ys + se, color=c, alpha=0.18, lw=0)
    ax_t.set_title("true reward of executed training trajectories\n(grpo: all groups; wmrl: anchors; wm: none)",
                   fontsize=10)
    ax_t.set_ylabel("leaderboard percentile")
    ax_h.set_title("held-out mean leaderboard percentile (real execution)", fontsize=10)
    return finish_axes(fig, (ax_t, ax_h), "training compute so far (CPU-hours: trainer + sandbox)")



@dataclass
class BenchPage:
    """Everything ``bench.md`` and ``bench.html`` show, computed once; :meth:`to_markdown` and
    :meth:`to_html` lay the same content out for each format."""

    title: str
    setting: str
    machine: str
    commands: list[str]
    table: Table
    methods: list[tuple[str, str]]
    notes: list[str]
    results: Table
    description: str = ""
    backbone_note: str = ""
    corpus: str = ""
    wm_table: Table = field(default_factory=lambda: Table([]))
    turns_table: Table = field(default_factory=lambda: Table([]))
    convergence_line: str = ""
    convergence_summary: Table = field(default_factory=lambda: Table([]))
    convergence_table: Table = field(default_factory=lambda: Table([]))
    convergence_notes: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    plot_file: str | None = None
    plot_uri: str | None = None
    ttt_table: Table = field(default_factory=lambda: Table([]))
    ttt_plot_file: str | None = None
    generated: str = ""
    code: str = ""

    def to_markdown(self) -> str:
        """The page as Markdown (``bench.md``); the plot is linked as ``plot_file``."""
        md = [f"# {self.title}", ""]
        if self.description:
            md += [self.description, ""]
        if self.backbone_note:
            md += [f"**Backbone and scaffold.** {self.backbone_note}", ""]
        md += [f"**Setting.** {self.setting}", "", f"**Machine.** {self.machine}", ""]
        if self.code:
            md += [f"**Code.** {self.code}", ""]
        if self.corpus:
            md += [f"**Shared warm-up corpus.** {self.corpus}", ""]
        md += ["**Command.**", "", "```bash", *self.commands, "```", ""]
        md += [self.table.to_markdown(), "", COLUMNS_HELP, ""]
        if self.convergence_line:
            md += [f"**Where the runs converged.** {self.convergence_line}", ""]
        md += ["**Methods.**", "", *[f"- `{m}`: {h}" for m, h in self.methods], ""]
        if not self.wm_table.empty:
            md += ["**World model on the training anchors.**", "", self.wm_table.to_markdown(), "", WM_TABLE_HELP, ""]
        if not self.turns_table.empty:
            md += ["**From turn 1 to turn K.**", "", self.turns_table.to_markdown(), "", MULTITURN_HELP, ""]
        if not self.convergence_table.empty or self.convergence_notes:
            md += ["**Where each run converged.**", ""]
            if not self.convergence_summary.empty:
                md += [self.convergence_summary.to_markdown(), ""]
            if not self.convergence_table.empty:
                md += [self.convergence_table.to_markdown(), ""]
            md += [CV.HELP, "", *[f"- {n}" for n in self.convergence_notes], ""]
        if not self.ttt_table.empty:
            md += ["**Time to target.**", "", self.ttt_table.to_markdown(), "", TT.HELP, ""]
            md += [f"![time to target]({self.ttt_plot_file})", ""] if self.ttt_plot_file else []
        md += ["**Standard errors.**", "", *[f"- {n}" for n in self.notes], ""]
        if self.missing:
            md += [f"**Not finished** (left out of the table): {', '.join(self.missing)}.", ""]
        if self.failures:
            md += ["**Failed runs:**", "", *[f"- {f}" for f in self.failures], ""]
        if self.plot_file:
            md += [f"![reward against compute]({self.plot_file})", ""]
        md += [f"Per-run numbers: `results.csv`. Generated {self.generated}."]
        return "\n".join(md) + "\n"

    def to_html(self) -> str:
        """The page as one self-contained HTML document (``bench.html``); the plot is embedded and the
        per-run numbers are a collapsible table."""
        parts = []
        if self.description:
            parts.append(H.paragraph(self.description))
        if self.backbone_note:
            parts.append(f"<p><b>Backbone and scaffold.</b> {H.esc(self.backbone_note)}</p>")
        parts.append(f"<p><b>Setting.</b> {H.esc(self.setting)}</p><p><b>Machine.</b> {H.esc(self.machine)}</p>")
        if self.code:
            parts.append(f"<p><b>Code.</b> {H.esc(self.code)}</p>")
        if self.corpus:
            parts.append(H.paragraph(f"Shared warm-up corpus. {self.corpus}"))
        parts.append("<p><b>Command.</b></p>" + H.pre("\n".join(self.commands)))
        parts.append(self.table.to_html() + H.paragraph(COLUMNS_HELP, "note"))
        if self.convergence_line:
            parts.append(f"<p><b>Where the runs converged.</b> {H.esc(self.convergence_line)}</p>")
        parts.append("<ul>" + "".join(f"<li><code>{H.esc(m)}</code>: {H.esc(h)}</li>" for m, h in self.methods)
                     + "</ul>")
        if not self.wm_table.empty:
            parts.append("<p><b>World model on the training anchors.</b></p>" + self.wm_table.to_html()
                         + H.paragraph(WM_TABLE_HELP, "note"))
        if not self.turns_table.empty:
            parts.append("<p><b>From turn 1 to turn K.</b></p>" + self.turns_table.to_html()
                         + H.paragraph(MULTITURN_HELP, "note"))
        if not self.convergence_table.empty or self.convergence_notes:
            parts.append("<p><b>Where each run converged.</b></p>" + self.convergence_summary.to_html()
                         + self.convergence_table.to_html() + H.paragraph(CV.HELP, "note")
                         + "".join(H.paragraph(n, "note") for n in self.convergence_notes))
        if not self.ttt_table.empty:
            parts.append("<p><b>Time to target.</b></p>" + self.ttt_table.to_html() + H.paragraph(TT.HELP, "note"))
        parts.append("<p><b>Standard errors.</b></p><ul>" + "".join(f"<li>{H.esc(n)}</li>" for n in self.notes)
                     + "</ul>")
        if self.missing:
            parts.append(H.paragraph(f"Not finished (left out of the table): {', '.join(self.missing)}.", "warn"))
        if self.failures:
            parts.append(H.paragraph("Failed runs: " + "; ".join(self.failures), "warn"))
        if self.plot_uri:
            parts.append(f'<img alt="reward against compute" src="{self.plot_uri}">')
        parts.append(H.details("per-run numbers", self.results.to_html()))
        return H.render_page(self.title, parts)


def _setting(meta: dict[str, Any]) -> str:
    """One sentence of what the bench ran (preset, methods, seeds, steps, tasks, model) from ``bench.json``."""
    return (
        f"preset `{meta.get('preset', '?')}`; methods {', '.join(meta.get('methods', []))}; seeds "
        f"{meta.get('seeds')}; {meta.get('steps')} steps of {meta.get('rollout', {}).get('tasks_per_step')} tasks x "
        f"{meta.get('rollout', {}).get('group_size')} samples; anchor fraction {meta.get('anchor_fraction')}; "
        f"model `{meta.get('model')}`, scaffold `{meta.get('scaffold')}`; train tasks {meta.get('train_tasks')}; "
        f"held-out tasks {meta.get('heldout_tasks')}."
    )


def _corpus_text(corpus: dict[str, Any] | None) -> str:
    """The shared warm-up corpus in one paragraph (after its lead), or ``""`` without one."""
    if not corpus:
        return ""
    return (
        f"{corpus['executions']} programs ({corpus['samples_per_task']} per train task, in "
        f"groups of {corpus['group_size']}) sampled from the initial policy of seed {corpus['seed']} and executed once "
        f"for the whole bench: {corpus['compute_cpu_s']:.0f} CPU-s ({corpus['sandbox_cpu_s']:.0f} in the sandbox), "
        f"{corpus['wall_s']:.0f} s wall. Every world-model run fits on it and refits on its own anchors; its cost is "
        f"not in a run's train compute (see 'corpus charged').")


def bench_notes(results: pd.DataFrame, rows: Sequence[MethodRow]) -> list[str]:
    """The page's notes on standard errors: each method vs the reference and the ablations vs ``wmrl`` (held-out
    percentile, then the paired train-task percentile), and each method vs the initial policy."""
    notes = overlap_notes(rows)
    notes += train_paired_notes(results, REFERENCE, [r.method for r in rows])
    if any(r.method == WMRL for r in rows):
        present = set(results["method"])  # every other method that uses a world model, in registry order
        ablations = [m for m in recipes_with(uses_world_model=True) if m in present and m != WMRL]
        if ablations:
            notes += overlap_notes(aggregate(results, reference=WMRL), reference=WMRL, methods=ablations)
            notes += train_paired_notes(results, WMRL, ablations)
    return notes + learning_notes(results)


def code_groups(results: pd.DataFrame) -> dict[str, list[str]]:
    """The runs of a bench by the code that trained them (``results.csv``'s ``commit`` and ``dirty``):
    ``{"<commit>[ with uncommitted changes]" or "not recorded": ["grpo seed 0", ...]}``."""
    groups: dict[str, list[str]] = {}
    for rec in results.to_dict("records"):
        commit = rec.get("commit")
        key = (str(commit) if isinstance(commit, str) and commit else "not recorded") + (
            " with uncommitted changes" if rec.get("dirty") is True else "")
        groups.setdefault(key, []).append(f"{rec['method']} seed {rec['seed']}")
    return groups


def write_outputs(out: str | Path, mixed_commits: bool = False) -> dict[str, Path]:
    """Write ``results.csv``, ``table.csv``, ``bench.md``, ``bench.html`` and
    ``reward_vs_compute.png`` for the bench in ``out`` from the runs finished so far, and
    ``convergence.csv`` from the runs' ``convergence.json`` when there are any (written by
    :func:`wmrl.bench.convergence.diagnose_bench`; this function reads them only). The runs must come from one
    code version (:func:`code_groups`) unless ``mixed_commits``; the page says which runs came from which.

    Returns:
        ``{"markdown", "html", "results", "table"[, "plot"][, "convergence"][, "time_to_target_csv",
        "time_to_target_plot"]}`` -> the paths written (time to target: :mod:`wmrl.report.time_to_target`, when
        the runs evaluated the train tasks along the way).

    Raises:
        BenchError: ``out`` holds no finished run, or its runs come from several code versions and
            ``mixed_commits`` is False.
    """
    out = Path(out)
    results = collect(out)
    if results.empty:
        raise BenchError(f"{out}: no finished bench run (no <method>/seed<k>/summary.json); run `wmrl bench` first")
    groups = code_groups(results)
    code_note = "Code of the runs: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in groups.items()) + "."
    if len(groups) > 1 and not mixed_commits:
        raise BenchError(f"{out}: the runs come from {len(groups)} code versions, so one table would mix them. "
                         f"{code_note} Rerun the runs of the other versions, or pass --mixed-commits to write the "
                         "table anyway (it then lists the runs of each version)")
    meta = read_bench_meta(out)
    rows = aggregate(results)
    init = initial_row(results)
    table = bench_table(rows + ([init] if init else []))
    results.to_csv(out / "results.csv", index=False)
    table.to_csv(out / "table.csv")
    fig = fig_curves(*curves(out))
    png = out / "reward_vs_compute.png"
    uri = None
    if fig is not None:
        fig.savefig(png, dpi=110, bbox_inches="tight")
        uri = H.figure_to_data_uri(fig)
    conv_docs = CV.bench_convergence(out)
    conv = CV.convergence_frame(conv_docs)
    if conv_docs:
        conv.to_csv(out / CV.CSV, index=False)
    ttt, ttt_paths = TT.write_time_to_target(out)
    machine = meta.get("machine")
    page = BenchPage(
        title=f"wmrl bench: {meta.get('preset', out.name)}",
        description=meta.get("description") or "",
        backbone_note=meta.get("backbone_note") or "",
        setting=_setting(meta),
        machine=machine_line(machine) if machine else machine_line(),
        code=code_line(meta["code_versions"]) if "code_versions" in meta else "",
        corpus=_corpus_text(meta.get("corpus")),
        commands=meta.get("commands") or ([meta["command"]] if meta.get("command") else []),
        table=table,
        methods=[(m, get_recipe(m).help) for m in meta.get("methods", []) if m in METHODS],
        wm_table=world_model_table(results),
        turns_table=multiturn_table(results),
        convergence_line=CV.wm_led_sentence(conv, conv_docs),
        convergence_summary=CV.summary_table(conv),
        convergence_table=CV.per_run_table(conv),
        convergence_notes=CV.notes(conv_docs) + [t for t in [CV.timing_text(conv_docs)] if t],
        notes=[*bench_notes(results, rows), code_note],
        missing=missing_runs(out),
        failures=list(meta.get("failures") or []),
        plot_file=png.name if fig is not None else None,
        plot_uri=uri,
        ttt_table=TT.time_to_target_table(ttt) if not ttt.empty else Table([]),
        ttt_plot_file=ttt_paths["plot"].name if "plot" in ttt_paths else None,
        results=Table.from_frame(results),
        generated=now(),
    )
    (out / "bench.md").write_text(page.to_markdown(), encoding="utf-8")
    (out / "bench.html").write_text(page.to_html(), encoding="utf-8")
    paths = {"markdown": out / "bench.md", "html": out / "bench.html", "results": out / "results.csv",
             "table": out / "table.csv"}
    if fig is not None:
        paths["plot"] = png
    if conv_docs:
        paths["convergence"] = out / CV.CSV
    paths.update({f"time_to_target_{k}": v for k, v in ttt_paths.items()})
    return paths

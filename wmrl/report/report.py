"""``wmrl report``: one self-contained HTML page for one or several run directories.

The page names each run's method and config and shows: a runs table, where each run converged (its
``convergence.json``, when the bench wrote one), true and world-model reward against steps and against
compute, held-out leaderboard percentile, the calibration map before and after debiasing, the world model's
fidelity card on the anchors (``fidelity.json``), alpha and the noise variance over time, and the compute ledger
breakdown.
"""
from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from wmrl.report import convergence_page as CV
from wmrl.report import html as H
from wmrl.report import plots as P
from wmrl.report.machine import machine_line
from wmrl.report.runs import RunData, improvement_rows, load_runs, run_overview, turn_rows
from wmrl.world_model.fidelity import FIGURES, LABELS, FidelityCard, format_figure


def _config_highlights(cfg: dict[str, Any]) -> str:
    """A one-line summary of the settings that matter most when comparing runs."""
    parts: list[str] = []

    def get(*keys: str) -> Any:
        d: Any = cfg
        for k in keys:
            if not isinstance(d, dict) or k not in d:
                return None
            d = d[k]
        return d

    for label, keys in (
        ("model", ("model", "backbone")),
        ("model", ("model", "name")),
        ("scaffold", ("scaffold", "name")),
        ("seed", ("seed",)),
        ("steps", ("optim", "steps")),
        ("steps", ("steps",)),
        ("tasks/step", ("rollout", "tasks_per_step")),
        ("group size", ("rollout", "group_size")),
        ("anchor fraction", ("wmrl", "routing", "anchor_fraction")),
        ("anchor fraction", ("wmrl", "anchor_fraction")),  # a run saved before the section had sub-sections
        ("fusion", ("wmrl", "fusion")),
        ("debias", ("wmrl", "debias")),
        ("denoise", ("wmrl", "denoise")),
    ):
        v = get(*keys)
        if isinstance(v, dict):  # a section (the recipe section's ``fusion``), not the removed switch of that name
            continue
        if v is not None and not any(p.startswith(label + "=") for p in parts):
            parts.append(f"{label}={v}")
    return ", ".join(parts)


def runs_table(runs: Sequence[RunData]) -> pd.DataFrame:
    """The page's first table: one row per run (see :func:`wmrl.report.runs.run_overview`)."""
    rows = [run_overview(r) for r in runs]
    df = pd.DataFrame(rows)
    return df.rename(
        columns={
            "heldout_percentile": "held-out percentile",
            "heldout_valid_rate": "held-out valid rate",
            "train_executions": "train executions",
            "anchor_fraction": "anchor fraction",
            "sandbox_cpu_h": "sandbox CPU-h",
            "train_compute_cpu_h": "train compute CPU-h",
            "wall_h": "wall h",
        }
    )


def ledger_table(runs: Sequence[RunData]) -> pd.DataFrame:
    """Training compute per part and run, CPU-seconds (rows: runs; columns: ledger parts + total)."""
    rows = []
    for r in runs:
        b = P.ledger_breakdown(r)
        rows.append({"run": r.name, **{k: round(v, 1) for k, v in b.items()},
                     "total (ledger)": r.totals().get("train_compute_cpu_s")})
    return pd.DataFrame(rows).fillna(0.0)


def fidelity_table(runs: Sequence[RunData]) -> pd.DataFrame:
    """The world model's fidelity card on each run's anchors (``fidelity.json``; :mod:`wmrl.world_model.fidelity`):
    one row per run that has one, each figure as ``value [95% interval]`` (``n/a`` where undefined); empty when no
    run has a card."""
    rows = []
    for r in runs:
        if r.fidelity is None:
            continue
        card = FidelityCard.from_dict(r.fidelity)
        rows.append({"run": r.name, "programs": card.n, "groups": card.n_groups,
                     **{LABELS[f]: format_figure(card.figure(f)) for f in FIGURES},
                     "true / predicted valid share": (f"{card.truth_mix['valid']:.2f} / "
                                                      + (f"{card.pred_mix['valid']:.2f}" if card.pred_mix else "n/a"))})
    return pd.DataFrame(rows)


def infra_alarm_text(run: RunData) -> str:
    """Where ``run`` raised the infra alarm (``metrics.jsonl`` steps, ``eval.jsonl`` evaluations), or ``""``."""
    parts = []
    for frame, what in ((run.metrics, "training step"), (run.evals, "evaluation")):
        if "infra_alarm" in frame.columns:
            hit = frame[frame["infra_alarm"].fillna(False).astype(bool)]
            if len(hit):
                parts.append(f"{len(hit)} {what}(s), first at step {int(hit['step'].min())}")
    return ", ".join(parts)


def render_report(runs: Sequence[RunData], title: str | None = None, command: str | None = None) -> str:
    """The whole HTML page for ``runs`` (at least one) as a string; figures embedded as base64 PNG.

    Raises:
        ValueError: when ``runs`` is empty.
    """
    if not runs:
        raise ValueError("no runs to report on: pass at least one run directory")
    title = title or ("wmrl report: " + ", ".join(r.name for r in runs))
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    out: list[str] = []
    intro = [H.paragraph(f"Generated {now} on {machine_line()}.", "note")]
    if command:
        intro.append(H.pre(command))
    unfinished = [r.name for r in runs if not r.finished]
    if unfinished:
        intro.append(H.paragraph("Not finished (no summary.json yet): " + ", ".join(unfinished), "warn"))
    alarms = [f"{r.name} ({infra_alarm_text(r)})" for r in runs if infra_alarm_text(r)]
    if alarms:
        intro.append(H.paragraph("Infra alarm: more infrastructure errors than the executor's background rate explains "
                                 "(these outcomes are left out of the means and the gradient, so they may be "
                                 "censored): " + "; ".join(alarms), "warn"))
    out.append("\n".join(intro))

    # Runs and their configs.
    cfg_html = []
    for r in runs:
        cfg_html.append(
            f"<p><b>{H.esc(r.name)}</b>: method <b>{H.esc(r.method)}</b>; {H.esc(_config_highlights(r.config))}"
            f" <span class='note'>({H.esc(str(r.path))})</span></p>"
            + H.details("full config", H.pre(yaml.safe_dump(r.config, sort_keys=False)))
        )
    out.append(H.section("Runs", H.table_html(runs_table(runs)), *cfg_html))
    gains = pd.DataFrame([row for r in runs for row in improvement_rows(r)])
    out.append(H.section(
        "Did the agent improve?",
        H.paragraph("Mean leaderboard percentile of the policy before training (step 0) and at the end, on the "
                    "tasks it trained on and on held-out tasks, executed for real with the same samples per "
                    "task and the same sampling seeds at both steps.", "note"),
        H.table_html(gains.round(3)) if not gains.empty else H.paragraph(
            "No run evaluated both step 0 and a later step (set eval.at_start: true).", "note")))

    conv = [(r, d) for r in runs if (d := CV.read_run_convergence(r.path)) is not None]
    if conv:
        frame = CV.convergence_frame([d for _, d in conv])
        frame.insert(0, "run", [r.name for r, d in conv for _ in d.get("tasks") or []])
        out.append(H.section(
            "Where each run converged",
            H.paragraph("From the run's convergence.json (written with the bench table, `wmrl bench --table-only`). "
                        + CV.HELP, "note"),
            CV.per_run_table(frame).to_html() if not frame.empty else "",
            *[H.paragraph(n, "warn") for n in CV.notes([d for _, d in conv])]))

    turns = pd.DataFrame([row for r in runs for row in turn_rows(r)])
    if not turns.empty:
        out.append(H.section(
            "Multi-turn episodes: from turn 1 to turn K",
            H.paragraph("Each evaluation episode's program is executed for real at every turn (on the task's "
                        "validation view: the feedback is a validation score on a split of train.csv, the run time "
                        "and an error tail). 'turn j' is the mean leaderboard percentile of each episode's current "
                        "submission after turn j; a submission carries forward.", "note"),
            H.table_html(turns.round(3))))

    def add_fig(heading: str, fig: Any, note: str) -> None:
        if fig is None:
            out.append(H.section(heading, H.paragraph("No data for this plot in these runs.", "note")))
        else:
            out.append(H.section(heading, H.paragraph(note, "note"), H.img_tag(fig, heading)))

    add_fig("Reward against steps", P.fig_reward_curves(runs, "step"),
            "True reward: mean leaderboard percentile of the executed (anchor) trajectories of each step; "
            "grpo executes everything, wm nothing. World-model reward: mean predicted percentile over all "
            "trajectories, raw r_hat and after isotonic debiasing f_hat(r_hat).")
    add_fig("Reward against compute", P.fig_reward_curves(runs, "compute"),
            "Same curves against the training compute spent so far: trainer CPU (generation, world model, "
            "updates, warm-up and world-model fit) plus sandbox CPU of every training execution.")
    add_fig("Evaluations: train and held-out leaderboard percentile", P.fig_evaluations(runs),
            "Each point is an evaluation of the policy with real execution: solid lines on the held-out tasks, "
            "dashed lines on the train tasks.")
    cal_figs = [(r, P.fig_calibration(r)) for r in runs]
    cal_parts = [H.img_tag(f, f"calibration {r.name}") for r, f in cal_figs if f is not None]
    out.append(H.section(
        "Calibration map before and after debiasing",
        H.paragraph("Each dot is an anchor trajectory (executed for real and scored by the world model). "
                    "The red line is the isotonic map f_hat fitted on earlier anchors; after debiasing the "
                    "dots should gather around the diagonal.", "note"),
        *(cal_parts or [H.paragraph("No run has anchor trajectories scored by a world model.", "note")]),
    ))
    fid = fidelity_table(runs)
    if not fid.empty:
        out.append(H.section(
            "World-model fidelity on the anchors",
            H.paragraph("The world model's prediction for every anchor program (executed for real at its own step) "
                        "against its execution: the outcome class (syntax error, runtime error, no submission, valid) "
                        "at 1 and 2 guesses, the ROC AUC of the predicted failure probability, the reward's "
                        "calibration error over 10 equal-mass bins of the raw prediction, its MAE, Spearman, "
                        "the pairwise accuracy and Kendall tau-b within groups, and the true reward lost by "
                        "following the world model's favourite of each group. In brackets: 95% cluster-bootstrap "
                        "intervals over groups (docs/models.md, 'The fidelity card').", "note"),
            H.table_html(fid)))
    add_fig("Ranking error and collapse", P.fig_ranking_and_collapse(runs),
            "Left: how well the world model orders the programs inside each anchor group (Kendall tau-b against "
            "the executed reward; 1 = execution's order, 0 = chance). A monotone calibration cannot change this "
            "order, so where it is low the world-model groups push the policy towards the wrong programs. Middle "
            "and right: how many distinct programs the policy writes per task and its entropy; when every sample "
            "of a group is one program all its advantages are 0 and the group teaches nothing.")
    add_fig("Alpha and noise variance over time", P.fig_alpha_noise(runs),
            "alpha = (n_A/V_A) / (n_A/V_A + n_W/V_W) with V_W = V_A + sigma_xi^2 (inverse-variance fusion).")
    led = P.fig_ledger(runs)
    if led is None:
        out.append(H.section("Compute ledger", H.paragraph("No ledger.json in these runs.", "note")))
    else:
        out.append(H.section("Compute ledger", H.img_tag(led, "compute ledger"),
                             H.paragraph("CPU-seconds per part (evaluation excluded):", "note"),
                             H.table_html(ledger_table(runs))))
    return H.render_page(title, out)


def write_report(
    run_dirs: Sequence[str | Path], out: str | Path, title: str | None = None, command: str | None = None
) -> Path:
    """Load ``run_dirs`` and write the HTML report to ``out`` (parent folders created). Returns ``out``.

    Raises:
        wmrl.report.runs.NotARunDir: when a folder is not a run directory.
        ValueError: when ``run_dirs`` is empty.
    """
    runs = load_runs(list(run_dirs))
    page = render_report(runs, title=title, command=command)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out

"""Matplotlib figures for reports and the bench (Agg backend; each function returns a Figure).

Every function takes loaded runs (:class:`wmrl.report.runs.RunData`) and returns a new
``matplotlib.figure.Figure`` (or ``None`` when the runs hold no data for it); turn it into an
embedded PNG with :func:`wmrl.report.html.img_tag`. Rewards are leaderboard percentiles in [0, 1];
compute is in CPU-hours (trainer CPU + sandbox CPU, ``cum_compute_cpu_s / 3600``).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from wmrl.report.runs import RunData

STAGES_SHOWN = ("generate", "wm_predict", "update", "execute", "recipe")


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the ``Agg`` backend (files only, no display), imported on first use."""
    import matplotlib  # noqa: PLC0415 - heavy (matplotlib)

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt  # noqa: PLC0415 - heavy (matplotlib)

    return plt


def color_for(i: int) -> Any:
    """The i-th colour of matplotlib's ``tab10`` cycle (wraps around)."""
    plt = pyplot()
    return plt.get_cmap("tab10")(i % 10)


def finish_axes(fig: Any, axes: Sequence[Any], xlabel: str, *, legend_fontsize: int = 8) -> Any:
    """Shared x-label and grid on every axis, a legend on those with labelled lines, tight layout;
    returns ``fig``."""
    for ax in axes:
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=legend_fontsize)
    fig.tight_layout()
    return fig


def _col(df: pd.DataFrame, name: str) -> pd.Series | None:
    if df.empty or name not in df:
        return None
    s = pd.to_numeric(df[name], errors="coerce")
    return None if s.notna().sum() == 0 else s


def _marker(mask: pd.Series) -> str | None:
    """Dots on short curves (at most 20 points), where a bare line hides how few points there are."""
    return "o" if int(mask.sum()) <= 20 else None


def _smooth(y: pd.Series) -> pd.Series:
    """Centred rolling mean over ~1/8 of the points (at least 1), ignoring missing values."""
    w = max(1, len(y) // 8)
    return y.rolling(w, min_periods=1, center=True).mean() if w > 1 else y


def x_values(run: RunData, x: str) -> pd.Series | None:
    """The x-axis of a training curve: ``"step"`` (step number) or ``"compute"`` (CPU-hours so far)."""
    if x == "step":
        return _col(run.metrics, "step")
    if x == "compute":
        s = _col(run.metrics, "cum_compute_cpu_s")
        return None if s is None else s / 3600.0
    raise ValueError(f"x must be 'step' or 'compute', got {x!r}")


X_LABEL = {"step": "training step", "compute": "training compute (CPU-hours, trainer + sandbox)"}


def fig_reward_curves(
    runs: Sequence[RunData], x: str = "step", labels: Sequence[str] | None = None
) -> Any | None:
    """True reward (anchor executions) and world-model reward (raw and debiased) against ``x``.

    Left panel: ``reward_true_mean`` per step (thin) and its rolling mean (thick). Right panel:
    ``reward_wm_mean`` (raw r_hat, dotted) and ``reward_wm_calibrated_mean`` (f_hat(r_hat), solid).
    Returns ``None`` when no run has any of these columns.
    """
    plt = pyplot()
    fig, (ax_t, ax_w) = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True)
    any_data = False
    for i, run in enumerate(runs):
        lab = labels[i] if labels else f"{run.name} [{run.method}]"
        xs = x_values(run, x)
        if xs is None:
            continue
        c = color_for(i)
        yt = _col(run.metrics, "reward_true_mean")
        if yt is not None:
            m = yt.notna()
            ax_t.plot(xs[m], yt[m], color=c, alpha=0.3, lw=1)
            ax_t.plot(xs[m], _smooth(yt[m]), color=c, lw=2, label=lab, marker=_marker(m))
            any_data = True
        yw = _col(run.metrics, "reward_wm_mean")
        yc = _col(run.metrics, "reward_wm_calibrated_mean")
        if yw is not None:
            m = yw.notna()
            ax_w.plot(xs[m], _smooth(yw[m]), color=c, lw=1.5, ls=":")
            any_data = True
        if yc is not None:
            m = yc.notna()
            ax_w.plot(xs[m], _smooth(yc[m]), color=c, lw=2, label=lab, marker=_marker(m))
            any_data = True
    if not any_data:
        plt.close(fig)
        return None
    ax_t.set_title("true reward on executed (anchor) trajectories")
    ax_w.set_title("world-model reward: debiased (solid), raw (dotted)")
    for ax in (ax_t, ax_w):
        ax.set_xlabel(X_LABEL[x])
        ax.grid(alpha=0.3)
    ax_t.set_ylabel("leaderboard percentile")
    if ax_t.get_legend_handles_labels()[0]:
        ax_t.legend(fontsize=8)
    elif ax_w.get_legend_handles_labels()[0]:
        ax_w.legend(fontsize=8)
    fig.tight_layout()
    return fig


def fig_evaluations(runs: Sequence[RunData], labels: Sequence[str] | None = None) -> Any | None:
    """Evaluations (real execution) against step: mean leaderboard percentile and valid rate.

    One point per ``eval.jsonl`` record; held-out tasks solid, train tasks dashed. ``None`` when
    there are none.
    """
    plt = pyplot()
    fig, (ax_p, ax_v) = plt.subplots(1, 2, figsize=(12, 4))
    any_data = False
    for i, run in enumerate(runs):
        ev = run.evals
        if ev.empty or "split" not in ev:
            continue
        c = color_for(i)
        for split, style in (("heldout", "o-"), ("train", "s--")):
            e = ev[ev["split"] == split]
            if e.empty:
                continue
            lab = (labels[i] if labels else f"{run.name} [{run.method}]") + (" train" if split == "train" else "")
            ax_p.plot(e["step"], pd.to_numeric(e["mean_percentile"], errors="coerce"), style, color=c, label=lab)
            if "valid_rate" in e:
                ax_v.plot(e["step"], pd.to_numeric(e["valid_rate"], errors="coerce"), style, color=c, label=lab)
            any_data = True
    if not any_data:
        plt.close(fig)
        return None
    ax_p.set_title("mean leaderboard percentile (real execution)")
    ax_p.set_ylabel("leaderboard percentile")
    ax_v.set_title("valid-submission rate")
    ax_v.set_ylabel("fraction")
    for ax in (ax_p, ax_v):
        ax.set_xlabel("policy step evaluated")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    ax_p.legend(fontsize=8)
    fig.tight_layout()
    return fig


def calibration_points(run: RunData) -> pd.DataFrame:
    """All anchor pairs of a run as a frame: ``step``, ``wm`` (raw r_hat), ``wm_cal`` (f_hat(r_hat)),
    ``true`` (r). Empty frame when the run has no calibration records with anchors."""
    rows = []
    for rec in run.calibration:
        wm = rec.get("anchor_wm") or []
        cal = rec.get("anchor_wm_calibrated") or [None] * len(wm)
        tr = rec.get("anchor_true") or []
        for a, b, t in zip(wm, cal, tr):
            if a is None or t is None:
                continue
            rows.append({"step": rec.get("step"), "wm": a, "wm_cal": b, "true": t})
    return pd.DataFrame(rows, columns=["step", "wm", "wm_cal", "true"])


def fig_calibration(run: RunData) -> Any | None:
    """Calibration map of one run, before and after debiasing.

    Left: true reward r against raw world-model score r_hat on every anchor trajectory (colour =
    step), with the last applied map f_hat (``map_x``, ``map_y``) drawn over it. Right: r against the
    debiased score f_hat(r_hat). The diagonal is a perfect world model. Titles give the mean squared
    error to r before and after. ``None`` when the run has no anchor pairs.
    """
    pts = calibration_points(run)
    if pts.empty:
        return None
    plt = pyplot()
    fig, (ax_b, ax_a) = plt.subplots(1, 2, figsize=(12.5, 5), sharey=True)
    steps = pd.to_numeric(pts["step"], errors="coerce").fillna(0)
    sc = ax_b.scatter(pts["wm"], pts["true"], c=steps, cmap="viridis", s=14, alpha=0.7)
    mse_b = float(np.mean((pts["wm"].astype(float) - pts["true"].astype(float)) ** 2))
    last_map = next((r for r in reversed(run.calibration) if r.get("map_x")), None)
    if last_map:
        ax_b.plot(last_map["map_x"], last_map["map_y"], color="crimson", lw=2,
                  label=f"f_hat at step {last_map.get('step')} ({last_map.get('mode')})")
        ax_b.legend(fontsize=8, loc="upper left")
    ax_b.set_title(f"before debiasing: r vs raw r_hat\nMSE {mse_b:.4f}", fontsize=10)
    ax_b.set_xlabel("world-model score r_hat")
    ax_b.set_ylabel("true reward r (leaderboard percentile)")
    cal = pts.dropna(subset=["wm_cal"])
    if not cal.empty:
        mse_a = float(np.mean((cal["wm_cal"].astype(float) - cal["true"].astype(float)) ** 2))
        ax_a.scatter(cal["wm_cal"], cal["true"], c=steps[cal.index], cmap="viridis", s=14, alpha=0.7)
        ax_a.set_title(f"after debiasing: r vs f_hat(r_hat)\nMSE {mse_a:.4f}", fontsize=10)
    else:
        ax_a.set_title("after debiasing: no calibrated scores recorded")
    ax_a.set_xlabel("debiased score f_hat(r_hat)")
    for ax in (ax_b, ax_a):
        ax.plot([0, 1], [0, 1], color="grey", ls="--", lw=1)
        ax.set_xlim(-0.02, 1.02)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    fig.colorbar(sc, ax=[ax_b, ax_a], label="step", shrink=0.85)
    fig.suptitle(f"{run.name} [{run.method}]: calibration on anchor trajectories", y=1.04)
    return fig


def fig_alpha_noise(runs: Sequence[RunData], labels: Sequence[str] | None = None) -> Any | None:
    """Fusion weight alpha and the world model's noise variance over steps.

    Left: ``alpha`` (weight of the anchor gradient; 1 for grpo, 0 for wm). Right: ``residual_var``
    (sigma_xi^2 = Var(r - f_hat(r_hat)), solid) and ``var_anchor`` (V_A, dotted). ``None`` if absent.
    """
    plt = pyplot()
    fig, (ax_a, ax_v) = plt.subplots(1, 2, figsize=(12, 4))
    any_a = any_v = False
    for i, run in enumerate(runs):
        lab = labels[i] if labels else f"{run.name} [{run.method}]"
        c = color_for(i)
        st = _col(run.metrics, "step")
        if st is None:
            continue
        a = _col(run.metrics, "alpha")
        if a is not None:
            m = a.notna()
            ax_a.plot(st[m], a[m], color=c, lw=1.8, label=lab, marker=_marker(m))
            any_a = True
        rv = _col(run.metrics, "residual_var")
        if rv is not None:
            m = rv.notna()
            ax_v.plot(st[m], rv[m], color=c, lw=1.8, label=f"{lab}: sigma_xi^2", marker=_marker(m))
            any_v = True
        va = _col(run.metrics, "var_anchor")
        if va is not None:
            m = va.notna()
            ax_v.plot(st[m], va[m], color=c, lw=1.2, ls=":", label=f"{lab}: V_A")
            any_v = True
    if not (any_a or any_v):
        plt.close(fig)
        return None
    ax_a.set_title("alpha: weight of the anchor gradient")
    ax_a.set_ylim(-0.02, 1.02)
    ax_v.set_title("noise variance: sigma_xi^2 (solid), anchor V_A (dotted)")
    return finish_axes(fig, (ax_a, ax_v), "training step", legend_fontsize=7)


def fig_ranking_and_collapse(runs: Sequence[RunData], labels: Sequence[str] | None = None) -> Any | None:
    """The world model's order inside the anchor groups and the policy's concentration, over steps.

    Left: ``wm_kendall_tau`` (within-group Kendall tau-b of the world model's score against the executed reward,
    steps with anchor groups only; :mod:`wmrl.core.ranking`). Middle: ``policy_distinct_programs`` (distinct
    programs among a group's samples, mean over the step's groups). Right: ``policy_entropy`` (minus the mean
    sequence log-probability of the samples, nats). ``None`` if no run logged any of them.
    """
    plt = pyplot()
    panels = (("wm_kendall_tau", "world model's Kendall tau-b in anchor groups"),
              ("policy_distinct_programs", "distinct programs per group"),
              ("policy_entropy", "policy entropy estimate (nats)"))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    drawn = False
    for i, run in enumerate(runs):
        lab = labels[i] if labels else f"{run.name} [{run.method}]"
        st = _col(run.metrics, "step")
        if st is None:
            continue
        for ax, (key, _) in zip(axes, panels, strict=True):
            y = _col(run.metrics, key)
            if y is None:
                continue
            m = y.notna()
            if m.any():
                ax.plot(st[m], y[m], color=color_for(i), lw=1.5, label=lab, marker=_marker(m))
                drawn = True
    if not drawn:
        plt.close(fig)
        return None
    for ax, (_, title) in zip(axes, panels, strict=True):
        ax.set_title(title, fontsize=9)
    axes[0].set_ylim(-1.05, 1.05)
    return finish_axes(fig, axes, "training step", legend_fontsize=7)


def ledger_breakdown(run: RunData) -> dict[str, float]:
    """Training compute of one run split into parts, in CPU-seconds (from ``ledger.json``).

    Parts: ``setup`` (without the warm-up and world-model fit the trainer times inside it),
    ``warm-up (trainer)``, ``WM fit`` and other non-eval phases; the trainer stages
    in ``STAGES_SHOWN`` plus ``other stages``; ``other trainer CPU`` (trainer-process CPU outside any
    timed stage or phase, e.g. model loading and threads); ``sandbox: warm-up`` and
    ``sandbox: anchors`` (summed ``cpu_s`` of those executions). Evaluation is not training
    compute and is left out, so the parts add up to ``totals.train_compute_cpu_s``. Parts absent
    from the ledger are absent from the dict.
    """
    led = run.ledger or {}
    out: dict[str, float] = {}
    labels = {"setup": "setup", "warmup": "warm-up (trainer)", "wm_fit": "WM fit"}
    phases = {k: float((v or {}).get("cpu_s") or 0.0) for k, v in (led.get("phases") or {}).items()}
    nested = phases.get("warmup", 0.0) + phases.get("wm_fit", 0.0)
    if "setup" in phases and nested and phases["setup"] >= nested - 1e-6:
        # The trainer times warm-up and world-model fit inside its set-up phase: count them once.
        phases["setup"] -= nested
    timed = 0.0
    for key, v in phases.items():
        if key == "eval":
            continue
        timed += v
        if v:
            lab = labels.get(key, key)
            out[lab] = out.get(lab, 0.0) + v
    other = 0.0
    for st, rec in (led.get("stages") or {}).items():
        if st == "eval":
            continue
        v = float((rec or {}).get("cpu_s") or 0.0)
        timed += v
        if st in STAGES_SHOWN:
            out[st] = out.get(st, 0.0) + v
        else:
            other += v
    if other:
        out["other stages"] = other
    ex = led.get("executions") or {}
    sandbox = 0.0
    for key, lab in (("warmup", "sandbox: warm-up"), ("anchor", "sandbox: anchors")):
        v = float((ex.get(key) or {}).get("sandbox_cpu_s") or 0.0)
        sandbox += v
        if v:
            out[lab] = v
    total = (led.get("totals") or {}).get("train_compute_cpu_s")
    if total is not None:
        rest = float(total) - timed - sandbox
        if rest > 1e-6:
            out["other trainer CPU"] = rest
    return {k: v for k, v in out.items() if v > 0.0}


def fig_ledger(runs: Sequence[RunData], labels: Sequence[str] | None = None) -> Any | None:
    """Stacked horizontal bars: each run's training compute by part (CPU-hours), see
    :func:`ledger_breakdown`. ``None`` when no run has a ledger."""
    parts = [ledger_breakdown(r) for r in runs]
    if not any(parts):
        return None
    plt = pyplot()
    keys: list[str] = []
    for p in parts:
        for k in p:
            if k not in keys:
                keys.append(k)
    names = [labels[i] if labels else f"{r.name} [{r.method}]" for i, r in enumerate(runs)]
    fig, ax = plt.subplots(figsize=(11, 0.55 * len(runs) + 1.8))
    left = np.zeros(len(runs))
    cmap = plt.get_cmap("tab20")
    for j, k in enumerate(keys):
        vals = np.array([p.get(k, 0.0) / 3600.0 for p in parts])
        ax.barh(names, vals, left=left, color=cmap(j % 20), label=k)
        left += vals
    ax.set_xlabel("training compute (CPU-hours)")
    ax.set_title("compute ledger: where the training compute went")
    ax.invert_yaxis()
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def _finite(v: Any) -> bool:
    try:
        return v is not None and math.isfinite(float(v))
    except (TypeError, ValueError):
        return False

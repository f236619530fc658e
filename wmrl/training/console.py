"""What a run prints: the step line of train.log and the end-of-run summary table (rich)."""
from __future__ import annotations

from typing import Any

from wmrl.console import fmt as _fmt
from wmrl.runs.ledger import format_ledger
from wmrl.training.components import RunSummary, now_iso
from rich.table import Table
from wmrl.console import make_console


def _weight_text(rec: dict[str, Any]) -> str:
    """``ppi_lambda X`` for a PPI++ step (its weights are 1/n_A and lambda/n_W), else ``alpha X``."""
    if rec.get("ppi_lambda") is not None:
        return f"ppi_lambda {_fmt(rec['ppi_lambda'])}"
    return f"alpha {_fmt(rec.get('alpha'))}"


def rpg_note(rec: dict[str, Any]) -> str:
    """Why an evaluation record's RPG (``mean_rpg_tasks``) is n/a or covers only some of its tasks ('' when it
    covers them all): the tasks without a baseline or gold score, at most three named, with the reason."""
    if "mean_rpg_tasks" not in rec:
        return "not recorded in this evaluation record (made before RPG was recorded for every task)"
    missing = rec.get("rpg_missing") or {}
    if not missing:
        return ""
    items = list(missing.items())
    named = "; ".join(f"{tid}: {why}" for tid, why in items[:3])
    named += f"; {len(items) - 3} more" if len(items) > 3 else ""
    if rec.get("mean_rpg_tasks") is None:
        return f"no task has both a baseline and a gold score ({named})"
    n = rec.get("rpg_n_tasks", 0)
    return f"over {n} of {n + len(items)} tasks ({named})"


def rpg_text(rec: dict[str, Any], before: dict[str, Any] | None = None) -> str:
    """An evaluation record's DSBench RPG for a summary: ``0.412``, with ``before`` (the step-0 record)
    ``0.100 -> 0.412 (+0.312)``; ``n/a (why)`` when no task has a baseline and a gold score; the coverage in
    brackets when only some have (:func:`rpg_note`)."""
    v = rec.get("mean_rpg_tasks")
    note = rpg_note(rec)
    if v is None:
        return f"n/a ({note})"
    text = _fmt(v)
    if before is not None and before.get("mean_rpg_tasks") is not None:
        v0 = before["mean_rpg_tasks"]
        text = f"{_fmt(v0)} -> {text} ({v - v0:+.3f})"
    return f"{text} ({note})" if note else text


def _step_line(rec: dict[str, Any]) -> str:
    return (f"{now_iso()} step {rec['step']}: anchors {rec['n_anchor_groups']}/{rec['n_groups']} "
            f"reward_true {_fmt(rec.get('reward_true_mean'))} reward_wm {_fmt(rec.get('reward_wm_mean'))} "
            f"reward_wm_calibrated {_fmt(rec.get('reward_wm_calibrated_mean'))} {_weight_text(rec)} "
            f"loss {_fmt(rec.get('loss'), 4)} infra {rec['n_infra_errors']} "
            + ("INFRA ALARM " if rec.get("infra_alarm") else "")
            + (f"turns {_fmt(rec['episode_turns_mean'], 2)} submitted {_fmt(rec.get('episode_submitted_rate'), 2)} "
               f"turn gain {_fmt(rec.get('reward_true_turn_gain'))} " if "episode_turns_mean" in rec else "")
            + (f"late {rec['anchor_late_samples']} in flight {rec['anchors_in_flight']} "
               + ("update skipped (anchors in flight, none arrived) " if rec.get("update_skipped_without_anchors")
                  else "") if "anchors_in_flight" in rec else "")
            + f"wall {rec['step_wall_s']:.1f}s")


def print_summary(summary: RunSummary, console: Any = None) -> None:
    """A clean end-of-run table (rich) plus the compute ledger."""

    console = console or make_console()
    t = Table(title=f"wmrl train: {summary.method} ({summary.status})", show_header=True)
    t.add_column("quantity")
    t.add_column("value", justify="right")
    led = summary.ledger
    tot = led.get("totals", {})
    ex = led.get("executions", {})
    t.add_row("run dir", str(summary.run_dir))
    t.add_row("steps", str(summary.steps))
    t.add_row("wall time", f"{summary.wall_s:.1f} s")
    t.add_row("train compute", f"{tot.get('train_compute_cpu_s', 0):.1f} CPU-s")
    t.add_row("eval compute", f"{tot.get('eval_compute_cpu_s', 0):.1f} CPU-s")
    g = led.get("groups", {})
    t.add_row("groups (anchor / total)", f"{g.get('anchor')} / {g.get('total')}")
    t.add_row("anchor fraction (realised / configured)",
              f"{_fmt(g.get('anchor_fraction'))} / {_fmt(g.get('anchor_fraction_configured'))}")
    for k in ("warmup", "anchor", "eval"):
        e = ex.get(k, {})
        t.add_row(f"{k} executions", f"{e.get('count', 0)} ({e.get('infra_errors', 0)} infra errors, "
                                     f"{e.get('sandbox_cpu_s', 0):.1f} sandbox CPU-s)")
    m = summary.last_metrics
    t.add_row("last step: true reward (anchors)", _fmt(m.get("reward_true_mean")))
    t.add_row("last step: world-model reward (calibrated)", _fmt(m.get("reward_wm_calibrated_mean")))
    if m.get("ppi_lambda") is not None:
        t.add_row("last step: ppi_lambda", _fmt(m.get("ppi_lambda")))
    else:
        t.add_row("last step: alpha", _fmt(m.get("alpha")))
    for split, r in summary.final_eval.items():
        r0 = summary.initial_eval.get(split)
        if r0 is not None and r.get("step") != 0:
            p0, p1 = r0.get("mean_percentile"), r.get("mean_percentile")
            change = f" ({p1 - p0:+.3f})" if p0 is not None and p1 is not None else ""
            t.add_row(f"{split}: mean percentile, step 0 -> step {r.get('step')}",
                      f"{_fmt(p0)} -> {_fmt(p1)}{change}")
            t.add_row(f"{split}: RPG (DSBench), step 0 -> step {r.get('step')}", rpg_text(r, r0))
        else:
            t.add_row(f"{split} (step {r.get('step')}): mean percentile", _fmt(r.get("mean_percentile")))
            t.add_row(f"{split} (step {r.get('step')}): RPG (DSBench)", rpg_text(r))
        t.add_row(f"{split}: valid-submission rate", _fmt(r.get("valid_rate")))
        t.add_row(f"{split}: medals", " ".join(f"{k} {v}" for k, v in (r.get("medals") or {}).items()))
    console.print(t)
    console.print(format_ledger(led), highlight=False)


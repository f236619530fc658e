"""Reading and showing where runs converged: each run's ``convergence.json`` (written by
:mod:`wmrl.bench.convergence`, rows of :func:`wmrl.report.convergence.convergence_rows`) as the tables of
the bench page ("Where each run converged") and of ``wmrl report``. Reads files only.
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from wmrl.core.recipe import recipe_names
from wmrl.report.convergence import ROW_COLUMNS, TOLERANCE, VERDICTS, verdict_counts
from wmrl.report.tables import Cell, Table

#: The per-run file, in the run directory.
FILE = "convergence.json"
#: The bench-level file, one row per (method, seed, task).
CSV = "convergence.csv"

HELP = (
    "Per run and train task: the final policy's modal program (its most frequent completion among the final "
    "evaluation's samples of the task) with its share of the samples and its true reward (mean executed reward of "
    "those samples); the best program found (highest mean executed reward over every program the bench's runs and "
    "the shared corpus executed for the task, any stream); the candidates (every distinct executed completion of the "
    "task with a reward) ranked by the run's final world model (raw r_hat; rank 1 = its favourite; f_hat = the "
    "run's final calibration map). Verdict: 'best' = the modal program's true reward is within "
    f"{TOLERANCE:g} of the best found; 'wm-led' = not best, and the world model scores the modal program above the "
    "best program: the run converged to what its world model likes; 'other' = neither (and every run without "
    "world-model predictions that is not best); 'n/a' = no true reward for the modal program."
)


def read_run_convergence(run_dir: str | Path) -> dict[str, Any] | None:
    """``RUN_DIR/convergence.json``, or None when absent or unreadable."""
    p = Path(run_dir) / FILE
    if not p.is_file():
        return None
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def bench_convergence(out: str | Path) -> list[dict[str, Any]]:
    """The ``convergence.json`` of every finished run of the bench in ``out`` (method, then seed order).
    A document whose run finished again after it was written (``summary.json`` newer) gets
    ``stale: True``."""
    order = {m: i for i, m in enumerate(recipe_names())}
    docs = []
    for rd in Path(out).glob("*/seed*"):
        summary = rd / "summary.json"
        if rd.parent.name not in order or not summary.is_file():
            continue
        doc = read_run_convergence(rd)
        if doc is None:
            continue
        doc["stale"] = (doc.get("key") or {}).get("summary_mtime_ns") != summary.stat().st_mtime_ns
        docs.append(doc)
    return sorted(docs, key=lambda d: (order.get(str(d.get("method")), 99), int(d.get("seed") or 0)))


def convergence_frame(docs: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per (method, seed, task) of ``docs``: ``method``, ``seed`` and the columns of
    :data:`wmrl.report.convergence.ROW_COLUMNS` (full program texts; NaN where unknown)."""
    rows = [{"method": d.get("method"), "seed": d.get("seed"), **{k: t.get(k) for k in ROW_COLUMNS}}
            for d in docs for t in d.get("tasks") or []]
    return pd.DataFrame(rows, columns=["method", "seed", *ROW_COLUMNS])


def program_label(text: Any, width: int = 96) -> str:
    """A program as one line of at most ``width`` characters (whitespace collapsed, the middle elided)."""
    if not isinstance(text, str):
        return ""
    s = " ".join(text.split())
    if len(s) <= width:
        return s
    keep = width - 1
    return s[: keep - keep // 3] + "…" + s[len(s) - keep // 3:]


def _num(x: Any, digits: int = 3) -> Cell:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return Cell("")
    return Cell(v, fmt=f".{digits}f", na="")


def _rank(rank: Any, n: Any) -> Cell:
    try:
        r = float(rank)
    except (TypeError, ValueError):
        return Cell("")
    return Cell("" if math.isnan(r) else f"{int(r)} / {int(n)}")


def per_run_table(frame: pd.DataFrame) -> Table:
    """The rows of :func:`convergence_frame` for reading: the run (``method``, ``seed``; or ``run`` when the
    frame has that column), task, verdict, modal program (share, true reward, r_hat, f_hat, world-model rank
    out of the candidates), best program found (true reward, r_hat, f_hat, rank) and the world model's
    favourite (true reward). Prediction columns that are empty everywhere are left out."""
    recs = []
    for r in frame.to_dict("records"):
        rec: dict[str, Any] = ({"run": Cell(r["run"])} if "run" in r else
                               {"method": Cell(r["method"]), "seed": Cell(r["seed"])})
        rec.update({
            "task": Cell(r["task_id"]),
            "verdict": Cell(r["verdict"]),
            "modal program": Cell(program_label(r["modal_program"])),
            "share": _num(r["modal_share"], 2),
            "modal true": _num(r["modal_true"]),
            "modal r_hat": _num(r["modal_pred"]),
            "modal f_hat": _num(r["modal_pred_calibrated"]),
            "modal WM rank": _rank(r["modal_rank"], r["n_candidates"]),
            "best program found": Cell(program_label(r["best_program"])),
            "best true": _num(r["best_true"]),
            "found in": Cell(r.get("best_found_in") or ""),
            "best r_hat": _num(r["best_pred"]),
            "best f_hat": _num(r["best_pred_calibrated"]),
            "best WM rank": _rank(r["best_rank"], r["n_candidates"]),
            "WM favourite": Cell(program_label(r["wm_favourite_program"])),
            "favourite true": _num(r["wm_favourite_true"]),
        })
        recs.append(rec)
    table = Table.from_records(recs)
    empty = [c for c in table.columns if c not in ("run", "method", "seed", "task", "verdict")
             and all(cell.text() == "" for cell in table.column(c))]
    return table.drop(empty) if table.rows else table


def summary_table(frame: pd.DataFrame) -> Table:
    """Per method (:func:`wmrl.report.convergence.verdict_counts`): runs, (seed, task) rows, the count of each
    verdict, the mean shortfall (best found - modal true reward) and how many modal programs are the world
    model's favourite (blank without predictions)."""
    if frame.empty:
        return Table([])
    counts = verdict_counts(frame)
    recs = []
    for r in counts.to_dict("records"):
        fav = r["modal_is_favourite"]
        fav = None if fav is None or math.isnan(fav) else int(fav)
        recs.append({"method": Cell(r["method"]), "runs": Cell(r["runs"]), "tasks": Cell(r["tasks"]),
                     **{v: Cell(r[v]) for v in VERDICTS},
                     "mean shortfall": _num(r["mean_shortfall"]),
                     "modal = WM favourite": Cell("" if fav is None else f"{fav} / {r['tasks']}")})
    return Table.from_records(recs)


def wm_led_sentence(frame: pd.DataFrame, docs: Sequence[dict[str, Any]]) -> str:
    """Two sentences for the page's main text: per method, how many (seed, task) rows are ``wm-led`` (``—`` for a
    method without a world model or whose world models could not be loaded) and how many are ``best``."""
    if frame.empty:
        return ""
    uses = {d.get("method") for d in docs if (d.get("world_model") or {}).get("uses")}
    led, best = [], []
    for r in verdict_counts(frame).to_dict("records"):
        m, n = r["method"], r["tasks"]
        g = frame[frame["method"] == m]
        with_pred = int(pd.to_numeric(g["modal_pred"], errors="coerce").notna().sum())
        if m not in uses:
            led.append(f"{m} — (no world model)")
        elif with_pred == 0:
            led.append(f"{m} — of {n} (world model not loaded)")
        else:
            gap = f" ({n - with_pred} without predictions)" if with_pred < n else ""
            led.append(f"{m} {r['wm-led']} of {n}{gap}")
        best.append(f"{m} {r['best']} of {n}")
    return (f"wm-led, i.e. the final policy's modal program is one its world model scores above the best program "
            f"found, which truly scores more than {TOLERANCE:g} higher (of seeds x train tasks): {'; '.join(led)}. "
            f"At the best program found (within {TOLERANCE:g}): {'; '.join(best)}. Per run and task: 'Where each "
            "run converged'.")


def notes(docs: Sequence[dict[str, Any]]) -> list[str]:
    """``"<method> seed <k>: <note>"`` for every note of ``docs``, and one for each stale document."""
    out = []
    for d in docs:
        tag = f"{d.get('method')} seed {d.get('seed')}"
        out += [f"{tag}: {n}" for n in d.get("notes") or []]
        if d.get("stale"):
            out.append(f"{tag}: computed before the run's summary.json was last written (rewrite the table to "
                       "refresh it)")
    return out


def timing_text(docs: Sequence[dict[str, Any]]) -> str:
    """How long the world models took to score the candidates, e.g. ``"1,234 programs scored in 3.2 s"``."""
    n = sum(int(d.get("n_scored") or 0) for d in docs)
    s = sum(float(d.get("score_seconds") or 0.0) for d in docs)
    return f"{n:,} program predictions in {s:.1f} s." if n else ""

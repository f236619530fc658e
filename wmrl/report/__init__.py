"""wmrl.report: run directories into plots, HTML reports and benchmark tables.

Public API::

    from wmrl.report import load_run, load_runs, write_report, render_report
    run = load_run("runs/wmrl-20260101-120000")      # RunData: config, metrics, evals, calibration, ledger
    write_report(["runs/a", "runs/b"], "report.html")  # one self-contained HTML page

The bench (``wmrl bench``) plans and runs in :mod:`wmrl.bench`; this package reads its folder
(:mod:`wmrl.report.bench_results`), computes its statistics (:mod:`wmrl.report.bench_stats` on
:mod:`wmrl.report.stats`) and writes its table, plot and pages (:mod:`wmrl.report.bench_page`). Every
table is one :class:`wmrl.report.tables.Table`, rendered to Markdown, HTML and CSV. ``report`` imports
nothing of ``wmrl.bench`` or ``wmrl.training``. Matplotlib, pandas and the Agg backend are imported
here; torch is not.
"""
import importlib
from typing import Any

_EXPORTS = {"render_report": "wmrl.report.report", "write_report": "wmrl.report.report",
            "NotARunDir": "wmrl.report.runs", "RunData": "wmrl.report.runs", "load_run": "wmrl.report.runs",
            "load_runs": "wmrl.report.runs"}


def __getattr__(name: str) -> Any:
    """Import on first use, so that ``wmrl --help`` (which imports ``wmrl.report.cli``) stays fast."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'wmrl.report' has no attribute {name!r}")


__all__ = ["NotARunDir", "RunData", "load_run", "load_runs", "render_report", "write_report"]

"""``wmrl export``: a run directory or bench folder as one Parquet dataset (docs/export.md)."""
from __future__ import annotations

from pathlib import Path

import typer


def export_cmd(
    source: Path = typer.Argument(..., help="A run directory written by `wmrl train`, or a bench folder written by "
                                            "`wmrl bench` (one run per method and seed)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="A FILE.parquet, or a folder (it gets samples.parquet); "
                                                              "default SOURCE/samples.parquet."),
) -> None:
    """Write every sample of a run (or of every run of a bench) as one Parquet file: prompt, completion, program,
    rewards (true, predicted, calibrated, used), advantage, weight, status, costs, multi-turn turns and observations.
    Load it with datasets.load_dataset("parquet", data_files=FILE) or pandas.read_parquet(FILE)."""
    from wmrl.export.dataset import ExportError, export
    from wmrl.export.schema import SCHEMA_VERSION

    try:
        res = export(source, out)
    except ExportError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    for r in res.runs:
        if r.skipped:
            typer.echo(f"skipped {r.run_id}: {r.skipped}")
        for line in r.skipped_lines:
            typer.echo(f"note: {r.run_id}: {line}")
    n_runs = sum(1 for r in res.runs if not r.skipped)
    joined = sum(r.executions_joined for r in res.runs)
    typer.echo(f"exported {res.rows} samples of {n_runs} run{'s' if n_runs != 1 else ''} ({joined} joined with their "
               f"executions) to {res.path} (schema v{SCHEMA_VERSION}, docs/export.md)")


def register(app: typer.Typer) -> None:
    """Add ``wmrl export`` to the top-level app."""
    app.command(name="export")(export_cmd)

"""Commands of ``wmrl.report``: ``wmrl report`` (HTML page for run directories) and ``wmrl bench``
(the side-by-side benchmark, :mod:`wmrl.training.bench`). Heavy imports stay inside the commands."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Optional

import typer


def report_cmd(
    run_dirs: list[Path] = typer.Argument(..., help="One or more run directories written by `wmrl train`."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="HTML file to write; default RUN_DIR/report.html "
                                       "for one run, ./report.html for several."),
    title: Optional[str] = typer.Option(None, help="Page title."),
) -> None:
    """Write one self-contained HTML page (plots embedded) comparing the given runs."""
    from wmrl.report.report import write_report  # noqa: PLC0415
    from wmrl.report.runs import NotARunDir  # noqa: PLC0415

    target = out or (run_dirs[0] / "report.html" if len(run_dirs) == 1 else Path("report.html"))
    try:
        path = write_report(run_dirs, target, title=title, command=_command_line())
    except (NotARunDir, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(f"report written: {path}")


def bench_cmd(
    preset: str = typer.Option(..., "--preset", "-p", help="Preset name (configs/bench/NAME.yaml: cpu-small, "
                               "cpu-lm, gpu-paper) or a preset YAML path."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Bench folder; default runs/bench-<preset>. "
                                       "Rerun the same command to resume; finished runs are skipped."),
    seeds: Optional[int] = typer.Option(None, "--seeds", help="Number of seeds (0..N-1); default the preset's."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Training steps of every run; default the preset's."),
    methods: Optional[str] = typer.Option(None, "--methods", help="Comma-separated subset, e.g. grpo,wmrl; "
                                          "default all of the preset's."),
    set_: list[str] = typer.Option([], "--set", help="Config override for every run, key=value (repeatable)."),
    table_only: bool = typer.Option(False, "--table-only", help="Only (re)write the table from finished runs."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the planned runs and their state, run nothing."),
) -> None:
    """Benchmark grpo, wm, wmrl and the wmrl ablations side by side (same tasks, seeds, steps).

    Each final policy is evaluated on held-out tasks with real execution; the table (Markdown + HTML) and a reward-against-compute plot go into the bench folder.
    """
    from wmrl.training import bench  # noqa: PLC0415
    from wmrl.training.config import ConfigError  # noqa: PLC0415

    try:
        p = bench.load_preset(preset)
        target = out or Path("runs") / f"bench-{p.name}"
        ms = [m.strip() for m in methods.split(",") if m.strip()] if methods else None
        if table_only:
            paths = bench.write_outputs(target)
        elif dry_run:
            for r in bench.plan(p, target, seeds, steps, ms, set_):
                typer.echo(f"{r.method:16s} seed {r.seed}  {bench.run_state(r.run_dir):9s}  {r.run_dir}")
            return
        else:
            if p.expected_hours and seeds is None and steps is None:
                typer.echo(f"preset {p.name}: about {p.expected_hours} h on the machine it was sized for")
            paths = bench.run_bench(p, target, seeds, steps, ms, set_, command=_command_line())
    except (bench.BenchError, ConfigError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except KeyboardInterrupt:
        typer.echo("interrupted: rerun the same command to resume (finished runs are skipped)", err=True)
        raise typer.Exit(130) from None
    for k, v in paths.items():
        typer.echo(f"{k}: {v}")
    typer.echo((paths["markdown"]).read_text(encoding="utf-8"))


def _command_line() -> str:
    """The command as typed (``wmrl ...``), quoted so it can be pasted back into a shell."""
    argv = list(sys.argv)
    prog = Path(argv[0]).name if argv else "wmrl"
    if prog in ("__main__.py", "cli.py"):
        prog = "wmrl"
    return " ".join([prog, *(shlex.quote(a) for a in argv[1:])])


def register(app: typer.Typer) -> None:
    """Add ``wmrl report`` and ``wmrl bench`` to the top-level app."""
    app.command(name="report")(report_cmd)
    app.command(name="bench")(bench_cmd)

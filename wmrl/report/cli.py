"""Commands of ``wmrl.report``: ``wmrl report`` (HTML page for run directories) and ``wmrl bench``
(the side-by-side benchmark, :mod:`wmrl.training.bench`). Heavy imports stay inside the commands."""
from __future__ import annotations

import shlex
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
    cmd = _command(["report", *map(str, run_dirs)], {"--out": out, "--title": title})
    try:
        path = write_report(run_dirs, target, title=title, command=cmd)
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
            cmd = _command(["bench"], {"--preset": preset, "--out": out, "--seeds": seeds, "--steps": steps,
                                       "--methods": methods}, [("--set", v) for v in set_])
            paths = bench.run_bench(p, target, seeds, steps, ms, set_, command=cmd)
    except (bench.BenchError, ConfigError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except KeyboardInterrupt:
        typer.echo("interrupted: rerun the same command to resume (finished runs are skipped)", err=True)
        raise typer.Exit(130) from None
    for k, v in paths.items():
        typer.echo(f"{k}: {v}")
    typer.echo((paths["markdown"]).read_text(encoding="utf-8"))


#: Environment variables that change what a command reads; the recorded command names them when set.
_ENV_THAT_MATTERS = ("WMRL_HOME", "WMRL_TASKS_DIR", "OMP_WAIT_POLICY", "OMP_NUM_THREADS")


def _command(words: list[str], options: dict[str, object], repeated: list[tuple[str, str]] = ()) -> str:
    """The command as a user would type it to repeat this run: ``[ENV=...] wmrl WORDS --opt value ...``.

    Built from the parsed arguments (not ``sys.argv``, which is the test runner's under CliRunner);
    options left at their defaults are omitted; values are shell-quoted.
    """
    import os  # noqa: PLC0415

    env = [f"{k}={shlex.quote(os.environ[k])}" for k in _ENV_THAT_MATTERS if os.environ.get(k)]
    parts = ["wmrl", *(shlex.quote(w) for w in words)]
    for k, v in options.items():
        if v is not None:
            parts += [k, shlex.quote(str(v))]
    for k, v in repeated:
        parts += [k, shlex.quote(str(v))]
    return " ".join(env + parts)


def register(app: typer.Typer) -> None:
    """Add ``wmrl report`` and ``wmrl bench`` to the top-level app."""
    app.command(name="report")(report_cmd)
    app.command(name="bench")(bench_cmd)

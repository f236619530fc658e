"""Commands of ``wmrl.report``: ``wmrl report`` (HTML page for run directories). ``wmrl bench`` is
registered by :mod:`wmrl.bench.cli`. Heavy imports stay inside the commands."""
from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

import typer


def report_cmd(
    run_dirs: list[Path] = typer.Argument(..., help="One or more run directories written by `wmrl train`."),
    out: Path | None = typer.Option(None, "--out", "-o", help="HTML file to write; default RUN_DIR/report.html "
                                       "for one run, ./report.html for several."),
    title: str | None = typer.Option(None, help="Page title."),
) -> None:
    """Write one self-contained HTML page (plots embedded) comparing the given runs."""
    from wmrl.report.report import write_report
    from wmrl.report.runs import NotARunDir

    target = out or (run_dirs[0] / "report.html" if len(run_dirs) == 1 else Path("report.html"))
    cmd = command_line(["report", *map(str, run_dirs)], {"--out": out, "--title": title})
    try:
        path = write_report(run_dirs, target, title=title, command=cmd)
    except (NotARunDir, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    typer.echo(f"report written: {path}")


#: Environment variables that change what a command reads; the recorded command names them when set.
_ENV_THAT_MATTERS = ("WMRL_HOME", "WMRL_TASKS_DIR", "OMP_WAIT_POLICY", "OMP_NUM_THREADS")


def command_line(words: list[str], options: dict[str, object], repeated: Sequence[tuple[str, str]] = ()) -> str:
    """The command as a user would type it to repeat this run: ``[ENV=...] wmrl WORDS --opt value ...``.

    Built from the parsed arguments (not ``sys.argv``, which is the test runner's under CliRunner);
    options left at their defaults are omitted; values are shell-quoted.
    """
    import os

    env = [f"{k}={shlex.quote(os.environ[k])}" for k in _ENV_THAT_MATTERS if os.environ.get(k)]
    parts = ["wmrl", *(shlex.quote(w) for w in words)]
    for k, v in options.items():
        if v is not None:
            parts += [k, shlex.quote(str(v))]
    for k, v in repeated:
        parts += [k, shlex.quote(str(v))]
    return " ".join(env + parts)


def register(app: typer.Typer) -> None:
    """Add ``wmrl report`` to the top-level app."""
    app.command(name="report")(report_cmd)

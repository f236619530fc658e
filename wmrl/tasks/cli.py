"""Commands of ``wmrl.tasks``: ``wmrl tasks list | show | grade | stats | fixtures | coverage``, and the helpers
that the suite's other commands share (``wmrl tasks build | check`` run programs in the sandbox, so they are
:mod:`wmrl.execution.cli`'s, registered on :data:`tasks_app`).

Imports of heavy libraries stay inside the commands.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import typer

tasks_app = typer.Typer(help="The task suite: build it, list it, show a task, grade a submission.",
                        no_args_is_help=True)

DIR_HELP = "suite directory (default: $WMRL_TASKS_ROOT or $WMRL_HOME/tasks)"
ROOT_HELP = ("where tasks live, searched recursively; repeat for several roots (default: $WMRL_TASKS_ROOT, "
              "folders joined by ':', else $WMRL_HOME/tasks); --dir is the older spelling")


def suite_dir(dir_: str | Path | list[Path] | None) -> Path:
    """The suite folder ``dir_`` (the first of a list), or the default one."""
    from wmrl.paths import default_tasks_dir

    if isinstance(dir_, list):
        dir_ = dir_[0] if dir_ else None
    return Path(dir_).expanduser() if dir_ else default_tasks_dir()


def task_roots(dir_: str | Path | list[Path] | None) -> list[Path]:
    """The task roots ``dir_`` (one or several folders), or the default ones."""
    from wmrl.paths import default_task_roots

    dirs = [dir_] if isinstance(dir_, (str, Path)) else dir_
    return [Path(d).expanduser() for d in dirs] if dirs else default_task_roots()


def fail(msg: str, code: int = 2) -> NoReturn:
    """Print a one-line error in red and exit (no traceback for a user error)."""
    typer.secho(msg, fg="red", err=True)
    raise typer.Exit(code)


def _looks_like_path(arg: str) -> bool:
    """True for an argument written as a path (a separator, ``~``, ``.``/``..``), not a bare task id."""
    seps = {os.sep, "/"} | ({os.altsep} if os.altsep else set())
    return any(s in arg for s in seps) or arg.startswith("~") or arg in (".", "..")


def _load_folder(task: str, dir_: Path | list[Path] | None = None) -> Any:
    """The task folder ``task`` of any layout; the roots given with ``--root`` are searched for its benchmark
    package's metadata (an MLE-bench data folder whose ``config.yaml`` lies in a checkout given as a root)."""
    from wmrl.tasks.loader import TaskFormatError, load_error, load_task

    path = Path(task).expanduser()
    if not path.exists():
        fail(f"task folder {path} does not exist; give a task id (see 'wmrl tasks list') or the path of a task folder")
    if not path.is_dir():
        fail(f"{path} is a file, not a task folder; give a task id (see 'wmrl tasks list') or the path of a task "
              "folder")
    search = [r for r in task_roots(dir_) if r.is_dir()] if dir_ else []
    try:
        return load_task(path, search=search)
    except TaskFormatError as exc:
        fail(str(exc))
    except Exception as exc:  # noqa: BLE001 - a broken folder is one line, never a traceback
        fail(load_error(path, exc))


def resolve_task(task: str, dir_: Path | list[Path] | None) -> Any:
    """A task by id in the suite, or a task folder of any layout given as a path.

    A bare id (no path separator) is looked up in the suite first; only an argument written as a path,
    or an id the suite does not know that names an existing folder, is loaded as a task folder.
    """
    from wmrl.tasks.loader import SuiteNotBuilt, TaskFormatError, TaskSuite

    if not task.strip():
        fail("the task id is empty; give a task id (see 'wmrl tasks list') or the path of a task folder")
    if _looks_like_path(task):
        return _load_folder(task, dir_)
    root = task_roots(dir_)
    try:
        return TaskSuite(root).get(task)
    except SuiteNotBuilt as exc:
        if Path(task).is_dir():
            return _load_folder(task, dir_)
        fail(str(exc))
    except KeyError as exc:
        if Path(task).is_dir():
            return _load_folder(task, dir_)
        fail(exc.args[0])
    except TaskFormatError as exc:
        fail(f"the task suite in {root} cannot be loaded: {exc}")



@tasks_app.command("list")
def list_cmd(
    as_json: bool = typer.Option(False, "--json", help="print JSON (one object per task) for scripts"),
    dir_: list[Path] | None = typer.Option(None, "--root", "--dir", help=ROOT_HELP),
) -> None:
    """A table of the tasks under the roots: id, adapter, type, rows, metric, reward kind, split; then what
    was found, skipped and refused, and why. Exits 1 when a task was refused."""
    from wmrl.tasks.loader import SuiteNotBuilt, TaskFormatError, TaskSuite

    roots = task_roots(dir_)
    try:
        suite = TaskSuite(roots)
        tasks = suite.tasks()
    except SuiteNotBuilt as exc:
        fail(str(exc))
    except TaskFormatError as exc:
        fail(f"the tasks under {', '.join(map(str, roots))} cannot be loaded: {exc}")
    disc = suite.discovery
    if as_json:  # a list of tasks on stdout (as before); the discovery summary goes to stderr
        typer.echo(json.dumps([{
            "id": t.id, "adapter": t.adapter, "type": t.type, "rows": t.n_rows, "train_rows": t.n_train,
            "test_rows": t.n_test, "columns": t.n_features, "metric": t.metric, "metric_source": t.metric_source,
            "lower_is_better": t.lower_is_better, "reward_kind": t.reward_kind, "awards_medals": t.awards_medals,
            "split": t.split, "layout": t.layout, "time_limit_s": t.time_limit_s,
            "leaderboards": len(t.leaderboard_paths), "source": t.source, "license": t.license,
            "root": str(t.root)} for t in tasks], indent=1))
        warn_metric_disagreements(tasks, compute=False)
        if disc.refused or disc.skipped or any(t.warnings for t in tasks):
            typer.echo(disc.summary(), err=True)
        if disc.refused:
            raise typer.Exit(1)
        return
    from wmrl.console import make_console
    from rich.table import Table

    table = Table(title=f"{len(tasks)} tasks under {', '.join(map(str, roots))}")
    for col in ("id", "adapter", "type", "rows", "columns", "metric", "reward", "split", "limit s", "board"):
        table.add_column(col, justify="right" if col in ("rows", "columns", "limit s", "board") else "left",
                         no_wrap=True)
    for t in tasks:
        table.add_row(t.id, t.adapter, t.type, f"{t.n_rows:,}", str(t.n_features),
                      t.metric + (" (lower)" if t.lower_is_better else ""), t.reward_kind, t.split,
                      f"{t.time_limit_s:.0f}", str(len(t.leaderboard_paths)))
    console = make_console()
    console.print(table)
    warn_metric_disagreements(tasks, compute=False)
    typer.echo(disc.summary())
    if disc.refused:
        typer.secho(f"{len(disc.refused)} task(s) refused (see above)", fg="red", err=True)
        raise typer.Exit(1)


def warn_metric_disagreements(tasks: list, compute: bool) -> None:
    """A warning line (stderr) for each task whose scores come from the benchmark's grading code because wmrl's
    metric disagreed with it (:func:`wmrl.tasks.grading.metric_disagreement`; with ``compute=False`` only what is
    already known); a task whose code cannot run here is left to the checks that report it."""
    from wmrl.tasks.grading import MetricCodeUnavailable, metric_disagreement

    for task in tasks:
        try:
            line = metric_disagreement(task, compute=compute)
        except MetricCodeUnavailable:
            continue  # reported by `wmrl tasks check` as a metric_code problem
        if line:
            typer.secho(f"{task.id}: warning: {line}", fg="yellow", err=True)


@tasks_app.command("show")
def show_cmd(
    task_id: str = typer.Argument(..., help="task id, or the path of a task folder (any layout)"),
    dir_: list[Path] | None = typer.Option(None, "--root", "--dir", help=ROOT_HELP),
) -> None:
    """A task's description and a summary of its leaderboards."""
    import numpy as np
    from wmrl.console import make_console
    from rich.markdown import Markdown

    from wmrl.tasks import leaderboard as lb

    task = resolve_task(task_id, dir_)
    console = make_console()
    console.print(Markdown(task.description or f"# {task.id}\n\n(no description)"))
    console.print(f"\n[bold]{task.id}[/bold]: {task.type}, metric {task.metric} "
                  f"({'lower' if task.lower_is_better else 'higher'} is better), split {task.split}, "
                  f"{task.n_train} train / {task.n_test} test rows, time limit {task.time_limit_s:.0f}s, "
                  f"layout {task.layout}")
    if task.baseline_score is not None:
        console.print(f"baseline (constant) score {task.baseline_score:.6g}"
                      + (f", gold score {task.gold_score:.6g}" if task.gold_score is not None else ""))
    if not task.leaderboard_paths:
        console.print("[yellow]no leaderboard[/yellow]")
    for path in task.leaderboard_paths:
        try:
            board = lb.read_leaderboard(path)
        except lb.LeaderboardError as exc:
            fail(str(exc))
        lower = lb.infer_lower_is_better(board, task.lower_is_better)
        g, s, b = lb.medal_positions(board.size)
        console.print(f"leaderboard {path.name}: N={board.size}, best {board[0]:.6g}, median "
                      f"{float(np.median(board)):.6g}, worst {board[-1]:.6g}; medal thresholds gold "
                      f"{board[g - 1]:.6g}, silver {board[s - 1] if s else float('nan'):.6g}, "
                      f"bronze {board[b - 1] if b else float('nan'):.6g} ({'lower' if lower else 'higher'} is better)")


@tasks_app.command("grade")
def grade_cmd(
    task_id: str = typer.Argument(..., help="task id, or the path of a task folder (any layout)"),
    submission: Path = typer.Argument(..., help="submission CSV"),
    dir_: list[Path] | None = typer.Option(None, "--root", "--dir", help=ROOT_HELP),
    as_json: bool = typer.Option(False, "--json", help="print the grade as JSON"),
) -> None:
    """Grade a submission: raw score, leaderboard percentile (reward), medal, above median, RPG."""
    import math

    from wmrl.tasks.grading import grade_submission
    from wmrl.tasks.leaderboard import LeaderboardError
    from wmrl.tasks.spec import InvalidSubmission

    task = resolve_task(task_id, dir_)
    try:
        grade = grade_submission(task, submission)
    except InvalidSubmission as exc:
        fail(f"invalid submission: {exc}", 1)
    except (FileNotFoundError, LeaderboardError) as exc:  # the task folder's problem, not the submission's
        fail(f"cannot grade task {task.id!r}: {exc}")
    if as_json:
        typer.echo(json.dumps({"task_id": task.id, **grade.as_dict()}, allow_nan=False))
        return
    rpg = "n/a" if grade.rpg is None else f"{grade.rpg:.3f}"
    reward = "n/a (no leaderboard)" if math.isnan(grade.reward) else f"{grade.reward:.3f}"
    typer.echo(f"task {task.id}: {task.metric} = {grade.score:.6g} | percentile (reward) {reward} | "
               f"medal {grade.medal or 'none'} | above median {'yes' if grade.above_median else 'no'} | RPG {rpg}")


@tasks_app.command("stats")
def stats_cmd(
    as_json: bool = typer.Option(False, "--json", help="print JSON for scripts"),
) -> None:
    """Measured figures of the committed reference pools: runs, CPU-seconds, memory, board spread."""
    import numpy as np
    import pandas as pd

    from wmrl.tasks import leaderboard as lb
    from wmrl.tasks.build import LEADERBOARD_DIR

    runs_path = LEADERBOARD_DIR / "reference_runs.csv"
    if not runs_path.is_file():
        typer.secho(f"no {runs_path}: run 'wmrl tasks build --leaderboards'", fg="red", err=True)
        raise typer.Exit(2)
    runs = pd.read_csv(runs_path)
    rows = []
    for task_id, g in runs.groupby("task_id"):
        board_path = LEADERBOARD_DIR / f"{task_id}.csv"
        board = lb.read_leaderboard(board_path) if board_path.is_file() else np.array([np.nan])
        rows.append({"task_id": task_id, "runs": int(len(g)), "ok": int((g["status"] == "ok").sum()),
                     "cpu_s_median": float(g["cpu_s"].median()), "cpu_s_max": float(g["cpu_s"].max()),
                     "slowest": str(g.loc[g["cpu_s"].idxmax(), "solution"]),
                     "peak_rss_mb_max": float(g["peak_rss_bytes"].max() / 2**20),
                     "best": float(board[0]), "median": float(np.median(board)), "worst": float(board[-1])})
    total = {"runs": int(len(runs)), "ok": int((runs["status"] == "ok").sum()),
             "cpu_minutes": float(runs["cpu_s"].sum() / 60), "wall_minutes_summed": float(runs["wall_s"].sum() / 60)}
    if as_json:
        typer.echo(json.dumps({"tasks": rows, "total": total}, indent=1))
        return
    from wmrl.console import make_console
    from rich.table import Table

    table = Table(title="reference pools (CPU-seconds per run; board = raw metric, best first)")
    for col in ("task", "ok/runs", "cpu s median", "cpu s max", "slowest", "RSS MB max", "best", "median", "worst"):
        table.add_column(col, no_wrap=True, justify="left" if col in ("task", "slowest") else "right")
    for r in rows:
        table.add_row(r["task_id"], f"{r['ok']}/{r['runs']}", f"{r['cpu_s_median']:.2f}", f"{r['cpu_s_max']:.2f}",
                      r["slowest"], f"{r['peak_rss_mb_max']:.0f}", f"{r['best']:.4g}", f"{r['median']:.4g}",
                      f"{r['worst']:.4g}")
    console = make_console()
    console.print(table)
    console.print(f"total: {total['ok']}/{total['runs']} runs ok, {total['cpu_minutes']:.1f} CPU-minutes, "
                  f"{total['wall_minutes_summed']:.1f} wall-minutes summed over runs")



@tasks_app.command("fixtures")
def fixtures_cmd(
    out: Path = typer.Option(..., "--out", help="folder to write the benchmark-layout fixtures into"),
    benchmark: list[str] | None = typer.Option(None, "--benchmark", help=(
        "a benchmark layout: mlebench, mledojo, dsbench or a registered one (repeatable; default all)")),
) -> None:
    """Write small tasks in the real MLE-Dojo, MLE-bench and DSBench layouts, made from built-in tables."""
    from wmrl.tasks.fixtures import build_benchmark_fixtures
    from wmrl.tasks.layouts import benchmark_layouts

    known = benchmark_layouts()
    bad = [b for b in (benchmark or []) if b not in known]
    if bad:
        fail(f"unknown benchmark(s) {bad}; choose from {', '.join(known)}")
    made = build_benchmark_fixtures(out, tuple(benchmark) if benchmark else None)
    for tid, path in made.items():
        typer.echo(f"{tid}: {path}")


@tasks_app.command("coverage")
def coverage_cmd(
    path: Path = typer.Argument(..., help="an MLE-bench, MLE-Dojo or DSBench checkout (detected from its layout)"),
    json_out: Path | None = typer.Option(None, "--json", help="also write every competition's row as JSON to "
                                            "FILE ('-': print the JSON instead of the tables)"),
) -> None:
    """Which competitions of a benchmark checkout wmrl can grade with the benchmark's own grading code,
    and why each other one is refused. Reads the code (never runs it); also says whether wmrl's own
    metric recognition reads the metric. Exits 2 when PATH is not a checkout of the three."""
    from wmrl.tasks.coverage import REASONS, CoverageError, benchmark_coverage

    try:
        results = benchmark_coverage(path)
    except CoverageError as exc:
        fail(str(exc))
    doc = {"path": str(Path(path).expanduser().resolve()), "python": sys.executable,
           "benchmarks": [b.as_dict() for b in results]}
    text = json.dumps(doc, indent=1)
    if json_out is not None and str(json_out) == "-":
        typer.echo(text)
        return
    if json_out is not None:
        try:
            json_out.expanduser().write_text(text + "\n", encoding="utf-8")
        except OSError as exc:
            fail(f"cannot write {json_out}: {exc.strerror or exc}")
    from rich.table import Table

    from wmrl.console import make_console

    console = make_console()
    table = Table(title=f"grading by the benchmark's own code ({path})")
    for col in ("benchmark", "competitions", "gradable", "refused", "recognise_metric"):
        table.add_column(col, justify="left" if col == "benchmark" else "right", no_wrap=True)
    for b in results:
        s = b.summary()
        table.add_row(b.name, str(s["competitions"]), str(s["gradable"]), str(s["refused"]), str(s["recognised"]))
    console.print(table)
    reasons = Table(title="refused, by reason (the first that applies)")
    reasons.add_column("reason", no_wrap=True)
    for b in results:
        reasons.add_column(b.name, justify="right", no_wrap=True)
    reasons.add_column("meaning")
    for key, meaning in REASONS.items():
        reasons.add_row(key, *(str(b.refused_by_reason()[key]) for b in results), meaning)
    console.print(reasons)
    mods = [(b.name, m, c) for b in results for m, c in b.missing_module_counts().items()]
    if mods:
        mt = Table(title="modules not installed (needed by: competitions importing it; alone: those it alone blocks)")
        for col in ("module", "benchmark", "needed by", "alone"):
            mt.add_column(col, justify="right" if col in ("needed by", "alone") else "left", no_wrap=True)
        for name, m, c in mods:
            mt.add_row(m, name, str(c["needed_by"]), str(c["only_blocker"]))
        console.print(mt)
    if json_out is not None:
        console.print(f"per-competition rows: {json_out}")


def register(app: typer.Typer) -> None:
    """Add this package's commands to the top-level ``wmrl`` app (the ``tasks`` sub-app)."""
    app.add_typer(tasks_app, name="tasks")

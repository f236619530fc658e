"""Commands of ``wmrl.tasks``: ``wmrl tasks build | list | show | grade | stats | check | fixtures | coverage``.

Imports of heavy libraries stay inside the commands.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import NoReturn

import typer

tasks_app = typer.Typer(help="The task suite: build it, list it, show a task, grade a submission.",
                        no_args_is_help=True)

_DIR_HELP = "suite directory (default: $WMRL_TASKS_ROOT or $WMRL_HOME/tasks)"
_ROOT_HELP = ("where tasks live, searched recursively; repeat for several roots (default: $WMRL_TASKS_ROOT, "
              "folders joined by ':', else $WMRL_HOME/tasks); --dir is the older spelling")


def _suite_dir(dir_) -> Path:
    from wmrl.paths import default_tasks_dir

    if isinstance(dir_, list):
        dir_ = dir_[0] if dir_ else None
    return Path(dir_).expanduser() if dir_ else default_tasks_dir()


def _roots(dir_: str | Path | list[Path] | None) -> list[Path]:
    from wmrl.paths import default_task_roots

    dirs = [dir_] if isinstance(dir_, (str, Path)) else dir_
    return [Path(d).expanduser() for d in dirs] if dirs else default_task_roots()


def _fail(msg: str, code: int = 2) -> NoReturn:
    """Print a one-line error in red and exit (no traceback for a user error)."""
    typer.secho(msg, fg="red", err=True)
    raise typer.Exit(code)


def _looks_like_path(arg: str) -> bool:
    """True for an argument written as a path (a separator, ``~``, ``.``/``..``), not a bare task id."""
    seps = {os.sep, "/"} | ({os.altsep} if os.altsep else set())
    return any(s in arg for s in seps) or arg.startswith("~") or arg in (".", "..")


def _load_folder(task: str):
    from wmrl.tasks.loader import TaskFormatError, load_task

    path = Path(task).expanduser()
    if not path.exists():
        _fail(f"task folder {path} does not exist; give a task id (see 'wmrl tasks list') or the path of a task folder")
    if not path.is_dir():
        _fail(f"{path} is a file, not a task folder; give a task id (see 'wmrl tasks list') or the path of a task "
              "folder")
    try:
        return load_task(path)
    except TaskFormatError as exc:
        _fail(str(exc))


def _resolve_task(task: str, dir_: Path | list[Path] | None):
    """A task by id in the suite, or a task folder of any layout given as a path.

    A bare id (no path separator) is looked up in the suite first; only an argument written as a path,
    or an id the suite does not know that names an existing folder, is loaded as a task folder.
    """
    from wmrl.tasks.loader import SuiteNotBuilt, TaskFormatError, TaskSuite

    if not task.strip():
        _fail("the task id is empty; give a task id (see 'wmrl tasks list') or the path of a task folder")
    if _looks_like_path(task):
        return _load_folder(task)
    root = _roots(dir_)
    try:
        return TaskSuite(root).get(task)
    except SuiteNotBuilt as exc:
        if Path(task).is_dir():
            return _load_folder(task)
        _fail(str(exc))
    except KeyError as exc:
        if Path(task).is_dir():
            return _load_folder(task)
        _fail(exc.args[0])
    except TaskFormatError as exc:
        _fail(f"the task suite in {root} cannot be loaded: {exc}")


@tasks_app.command("build")
def build_cmd(
    out: Path | None = typer.Option(None, "--out", help=_DIR_HELP),
    leaderboards: bool = typer.Option(False, "--leaderboards",
                                      help="also rerun the reference pools in the sandbox and rewrite the "
                                           "committed leaderboards (about 30 CPU-minutes for all tasks)"),
    only: list[str] | None = typer.Option(None, "--only", help="build only these task ids (repeatable)"),
) -> None:
    """Build the built-in suite of real tasks (seconds); leaderboards come from the committed CSVs."""
    import time

    from wmrl.console import make_console

    from wmrl.tasks.build import SuiteDirError, build_suite

    console = make_console()
    root = _suite_dir(out)
    t0 = time.perf_counter()
    try:
        tasks = build_suite(root, only or None)
    except KeyError as exc:
        _fail(exc.args[0])
    except SuiteDirError as exc:
        _fail(str(exc))
    console.print(f"built {len(tasks)} tasks in {root} ({time.perf_counter() - t0:.1f}s)")
    if leaderboards:
        from wmrl.execution.leaderboards import rebuild_leaderboards

        t1 = time.perf_counter()
        rebuild_leaderboards(tasks, log=console.print)
        tasks = build_suite(root, [t.id for t in tasks])  # copy the new boards into the task folders
        console.print(f"rebuilt {len(tasks)} leaderboards in {time.perf_counter() - t1:.0f}s")
    missing = [t.id for t in tasks if not t.leaderboard_paths]
    if missing:
        console.print(f"[yellow]no leaderboard yet for: {', '.join(missing)} "
                      "(run 'wmrl tasks build --leaderboards')[/yellow]")


@tasks_app.command("list")
def list_cmd(
    as_json: bool = typer.Option(False, "--json", help="print JSON (one object per task) for scripts"),
    dir_: list[Path] | None = typer.Option(None, "--root", "--dir", help=_ROOT_HELP),
) -> None:
    """A table of the tasks under the roots: id, adapter, type, rows, metric, reward kind, split; then what
    was found, skipped and refused, and why. Exits 1 when a task was refused."""
    from wmrl.tasks.loader import SuiteNotBuilt, TaskFormatError, TaskSuite

    roots = _roots(dir_)
    try:
        suite = TaskSuite(roots)
        tasks = suite.tasks()
    except SuiteNotBuilt as exc:
        _fail(str(exc))
    except TaskFormatError as exc:
        _fail(f"the tasks under {', '.join(map(str, roots))} cannot be loaded: {exc}")
    disc = suite.discovery
    if as_json:  # a list of tasks on stdout (as before); the discovery summary goes to stderr
        typer.echo(json.dumps([{
            "id": t.id, "adapter": t.adapter, "type": t.type, "rows": t.n_rows, "train_rows": t.n_train,
            "test_rows": t.n_test, "columns": t.n_features, "metric": t.metric, "metric_source": t.metric_source,
            "lower_is_better": t.lower_is_better, "reward_kind": t.reward_kind, "awards_medals": t.awards_medals,
            "split": t.split, "layout": t.layout, "time_limit_s": t.time_limit_s,
            "leaderboards": len(t.leaderboard_paths), "source": t.source, "license": t.license,
            "root": str(t.root)} for t in tasks], indent=1))
        _warn_metric_disagreements(tasks, compute=False)
        if disc.refused or disc.skipped:
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
    _warn_metric_disagreements(tasks, compute=False)
    typer.echo(disc.summary())
    if disc.refused:
        typer.secho(f"{len(disc.refused)} task(s) refused (see above)", fg="red", err=True)
        raise typer.Exit(1)


def _warn_metric_disagreements(tasks: list, compute: bool) -> None:
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
    dir_: list[Path] | None = typer.Option(None, "--root", "--dir", help=_ROOT_HELP),
) -> None:
    """A task's description and a summary of its leaderboards."""
    import numpy as np
    from wmrl.console import make_console
    from rich.markdown import Markdown

    from wmrl.tasks import leaderboard as lb

    task = _resolve_task(task_id, dir_)
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
            _fail(str(exc))
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
    dir_: list[Path] | None = typer.Option(None, "--root", "--dir", help=_ROOT_HELP),
    as_json: bool = typer.Option(False, "--json", help="print the grade as JSON"),
) -> None:
    """Grade a submission: raw score, leaderboard percentile (reward), medal, above median, RPG."""
    import math

    from wmrl.tasks.grading import grade_submission
    from wmrl.tasks.leaderboard import LeaderboardError
    from wmrl.tasks.spec import InvalidSubmission

    task = _resolve_task(task_id, dir_)
    try:
        grade = grade_submission(task, submission)
    except InvalidSubmission as exc:
        _fail(f"invalid submission: {exc}", 1)
    except (FileNotFoundError, LeaderboardError) as exc:  # the task folder's problem, not the submission's
        _fail(f"cannot grade task {task.id!r}: {exc}")
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


@tasks_app.command("check")
def check_cmd(
    tasks: list[str] | None = typer.Argument(None, help="Task ids or task folders (default: the whole suite)."),
    dir_: list[Path] | None = typer.Option(None, "--root", "--dir", help=_ROOT_HELP),
    copies: bool = typer.Option(False, "--copies", help="also look for copies of the test rows in every file the "
                                "sandbox can read (wmrl.execution.leakscan; minutes over a large environment, cached)"),
    scan_only: list[Path] | None = typer.Option(None, "--copies-in", help="look for copies only under these "
                                                   "folders (repeatable; implies --copies)"),
    mask: bool = typer.Option(False, "--mask", help="with --copies: list each copy found in the task folder's "
                              "sandbox-masks.txt, so that the sandbox masks it from then on"),
    allow_refused: bool = typer.Option(False, "--allow-refused", help="without task ids: exit 0 although some "
                                       "tasks under the roots were refused (cannot be graded), when every task "
                                       "that loaded passes; the refusals are still listed"),
    views: float | None = typer.Option(None, "--views", help="also build each task's validation "
                                       "view at this held-out fraction (e.g. 0.2, a config's "
                                       "episode.validation_fraction) and check it as multi-turn training does"),
) -> None:
    """Check tasks as the trainer does before training: answers in public/ (any table, by value), a metric
    that disagrees with its leaderboards; with --views, the validation views of multi-turn episodes; with
    --copies, copies of the test rows the sandbox leaves readable (with --mask, also masked from then on).
    Prints one line per problem; without task ids, also every task under the roots that was refused and why,
    and what was skipped. Exits 1 when any task has a problem
    or (unless --allow-refused) a task under the roots was refused."""
    from wmrl.tasks.checks import check_task
    from wmrl.tasks.loader import SuiteNotBuilt, TaskFormatError, TaskSuite

    if views is not None and not 0.0 < views < 1.0:
        _fail(f"--views {views}: the held-out fraction must lie strictly between 0 and 1, e.g. --views 0.2")
    disc = None
    if tasks:
        if allow_refused:
            _fail("--allow-refused goes with checking every task under the roots (no task ids); a task named "
                  "here that was refused is an error either way")
        chosen = [_resolve_task(t, dir_) for t in tasks]
    else:
        try:
            suite = TaskSuite(_roots(dir_))
            chosen = list(suite)
            disc = suite.discovery
        except (SuiteNotBuilt, TaskFormatError) as exc:
            _fail(str(exc))
    found: dict[str, list] = {}
    if copies or scan_only:
        from wmrl.execution.leakscan import scan_tasks

        roots = [str(Path(d).expanduser().resolve()) for d in scan_only] if scan_only else None
        for c in scan_tasks(chosen, roots=roots, masked=[] if roots else None):
            found.setdefault(c.task_id, []).append(c)
        if mask:
            from wmrl.execution.masks import read_masks, write_masks

            for task in chosen:
                if found.get(task.id):
                    f = write_masks(task.root, [*read_masks(task.root), *(c.path for c in found[task.id])])
                    typer.echo(f"{task.id}: {len(found[task.id])} copy(ies) listed in {f}; the sandbox masks them")
    bad = 0
    for task in chosen:
        from wmrl.tasks.checks import TaskProblem

        problems = check_task(task, views) + [TaskProblem(task.id, "answer_copy", c.message())
                                       for c in found.get(task.id, [])]
        bad += bool(problems)
        _warn_metric_disagreements([task], compute=True)
        for p in problems:
            typer.echo(f"{task.id}: {p.kind}: {p.message}")
        if not problems:
            typer.echo(f"{task.id}: ok")
    refused = disc.refused if disc is not None else []
    if disc is not None and (refused or disc.skipped):
        typer.echo(disc.summary())
    if bad:
        typer.secho(f"{bad} of {len(chosen)} task(s) would be refused for training", fg="red", err=True)
    if refused and disc is not None:
        where = " ".join(f"--root {r}" for r in disc.roots)
        ids = ", ".join(tid for tid, _, _ in refused)
        typer.secho(f"{len(refused)} task(s) under the roots were refused (cannot be graded): {ids}; each "
                    f"'refused <id>: <reason>' line above says why ('wmrl tasks list {where}' lists them too)"
                    + ("; --allow-refused: not counted as a failure" if allow_refused else
                       "; pass --allow-refused to exit 0 when only refusals remain"),
                    fg="yellow" if allow_refused else "red", err=True)
    if bad or (refused and not allow_refused):
        raise typer.Exit(1)


@tasks_app.command("fixtures")
def fixtures_cmd(
    out: Path = typer.Option(..., "--out", help="folder to write the benchmark-layout fixtures into"),
    benchmark: list[str] | None = typer.Option(None, "--benchmark",
                                                  help="mledojo, mlebench or dsbench (repeatable; default all)"),
) -> None:
    """Write small tasks in the real MLE-Dojo, MLE-bench and DSBench layouts, made from built-in tables."""
    from wmrl.tasks.fixtures import build_benchmark_fixtures

    bad = [b for b in (benchmark or []) if b not in ("mledojo", "mlebench", "dsbench")]
    if bad:
        _fail(f"unknown benchmark(s) {bad}; choose mledojo, mlebench or dsbench")
    made = build_benchmark_fixtures(out, tuple(benchmark) if benchmark else ("mledojo", "mlebench", "dsbench"))
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
        _fail(str(exc))
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
            _fail(f"cannot write {json_out}: {exc.strerror or exc}")
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

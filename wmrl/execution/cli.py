"""Commands of ``wmrl.execution``: ``wmrl exec``, ``wmrl sandbox-bench``, and the suite's commands that run
programs in the sandbox, ``wmrl tasks build`` (``--leaderboards`` reruns the reference pools) and ``wmrl tasks
check`` (``--copies`` scans what the sandbox leaves readable), registered on :data:`wmrl.tasks.cli.tasks_app`.

Heavy imports (pandas via the grader, ray) stay inside the commands.
"""
from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import NoReturn

import typer

from wmrl.tasks.cli import (DIR_HELP, ROOT_HELP, fail, resolve_task, suite_dir, task_roots, tasks_app,
                            warn_metric_disagreements)

MiB = 1024**2


def _load_task(task_id: str, tasks_dir: Path | None):
    """A task by id from ``tasks_dir`` (or the default suite), or from a task folder given as a path."""
    from wmrl.tasks.loader import TaskSuite, default_suite, detect_layout, load_task

    as_path = Path(task_id)
    if as_path.is_dir() and detect_layout(as_path):
        return load_task(as_path)
    if tasks_dir is not None and not tasks_dir.is_dir():
        raise FileNotFoundError(f"--root {tasks_dir} is not a folder; pass the folder that "
                                "'wmrl tasks build --out DIR' wrote")
    suite = TaskSuite(tasks_dir) if tasks_dir is not None else default_suite()
    try:
        return suite.get(task_id)
    except KeyError:
        if task_id and as_path.is_dir():
            raise FileNotFoundError(
                f"{task_id} is a folder but not a task folder (expected task.yaml (wmrl), config.yaml + "
                "prepared/ (MLE-bench) or data/public + data/private (MLE-Dojo)), and not a task id of "
                "the suite; see 'wmrl tasks list'") from None
        raise


def _fail(msg: str, code: int = 1) -> NoReturn:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code)


def exec_command(
    task_id: str = typer.Argument(..., help="Task id in the suite, or the path of a task folder."),
    program: Path = typer.Argument(..., help="The solution program (Python file)."),
    json_out: bool = typer.Option(False, "--json", help="Print the outcome as one JSON object."),
    tasks_dir: Path | None = typer.Option(None, "--root", "--tasks-dir",
                                          help="Where tasks live (searched recursively, any layout; default: the "
                                               "built-in suite). The same option as `wmrl tasks list --root`."),
    time_limit: float | None = typer.Option(None, "--time-limit",
                                            help="Wall-clock limit, seconds (default: the task's)."),
    memory_mb: int = typer.Option(4096, "--memory-mb",
                                  help="Memory limit, MiB: of the whole process tree, and of each process's "
                                       "address space."),
    threads: int = typer.Option(1, "--threads", help="BLAS/OpenMP threads of the program."),
    unsandboxed: bool = typer.Option(False, "--unsandboxed",
                                     help="Allow the weak rlimit-only mode when bwrap is missing (no isolation!)."),
    log_path: Path | None = typer.Option(None, "--log", help="Append the execution to this SQLite execution log."),
) -> None:
    """Run PROGRAM on TASK_ID in the sandbox, grade it, print the outcome.

    Exits 0 whenever the program ran (whatever its status), 1 when the tool could not run it
    (unknown task, unreadable program, bwrap missing), 2 on an infrastructure error.
    """
    from wmrl.execution.log import ExecutionLog
    from wmrl.execution.runner import execute
    from wmrl.execution.sandbox import SandboxConfig, SandboxUnavailable
    from wmrl.execution.types import ExecutionRequest, ExecutionStatus

    if program.exists() and not program.is_file():  # a FIFO or /dev/zero would hang or fill memory
        _fail(f"cannot read the program {program}: not a regular file; pass a Python source file")
    try:
        source = program.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        _fail(f"cannot read the program {program}: it is not UTF-8 text ({exc}); "
              "save it as UTF-8 (wmrl runs Python source in UTF-8)")
    except OSError as exc:
        _fail(f"cannot read the program {program}: {exc.strerror or exc}")
    try:
        task = _load_task(task_id, tasks_dir)
    except (KeyError, FileNotFoundError, ValueError) as exc:
        _fail(str(exc).strip('"'))
    try:
        config = SandboxConfig(memory_bytes=memory_mb * MiB, threads=threads, allow_unsandboxed=unsandboxed)
    except ValueError as exc:
        _fail(str(exc))
    request = ExecutionRequest(task=task, program=source, time_limit_s=time_limit,
                               meta={"source": "wmrl exec", "program_path": str(program)})
    lg = None
    if log_path is not None:  # open it first: a bad --log must not cost (or lose) an execution
        try:
            lg = ExecutionLog(log_path)
        except (OSError, sqlite3.Error) as exc:
            _fail(f"cannot open the execution log {log_path}: {exc}; pass the path of a new file or of "
                  "an existing wmrl execution log (SQLite)")
    try:
        try:
            result = execute(request, config)
        except SandboxUnavailable as exc:
            _fail(str(exc))
        except ValueError as exc:
            _fail(str(exc))
        if lg is not None:
            try:
                lg.append(request, result)
            except (OSError, sqlite3.Error) as exc:
                typer.echo(f"warning: could not append to the execution log {log_path}: {exc}", err=True)
    finally:
        if lg is not None:
            lg.close()
    if json_out:
        typer.echo(json.dumps(_json_safe(result.to_dict()), default=str))
    else:
        _print_result(result)
    if result.status == ExecutionStatus.INFRA_ERROR:
        raise typer.Exit(2)


def _json_safe(d: dict) -> dict:
    """Non-finite floats (a reward of NaN when a task has no leaderboard) become ``null``."""
    import math

    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


#: The most characters of the program's stdout and of its stderr that ``wmrl exec`` prints (the tail).
SHOWN_OUTPUT_CHARS = 2000


def _print_result(result) -> None:
    """The outcome as a table, then the tails of stdout and stderr; every text the program controls (its
    output, the error built from its exception) is printed through :func:`wmrl.console.program_text`."""
    from wmrl.console import make_console, program_text
    from rich.table import Table

    console = make_console()
    table = Table(show_header=False, box=None)
    colour = {"ok": "green", "infra_error": "magenta"}.get(result.status.value, "red")
    table.add_row("status", f"[{colour}]{result.status.value}[/]")
    table.add_row("task", result.task_id)
    for name in ("score", "reward", "medal", "above_median"):
        table.add_row(name, "-" if getattr(result, name) is None else f"{getattr(result, name)}")
    table.add_row("wall", f"{result.wall_s:.3f} s (limit {result.time_limit_s:g} s)")
    table.add_row("cpu", f"{result.cpu_s:.3f} CPU-s (whole process tree)")
    table.add_row("peak memory", f"{result.peak_rss_bytes / MiB:.1f} MiB")
    table.add_row("exit code", str(result.exit_code))
    table.add_row("sandbox", result.sandbox)
    table.add_row("program sha256", result.program_sha256[:16] + "...")
    if result.error:
        table.add_row("error", program_text(result.error))
    console.print(table)
    for name in ("stdout", "stderr"):
        text = getattr(result, name).rstrip()
        if text:
            console.print(f"[bold]{name}[/] ({getattr(result, name + '_bytes')} bytes; the last "
                          f"{SHOWN_OUTPUT_CHARS} characters at most, control characters shown escaped):")
            console.print(program_text(text, SHOWN_OUTPUT_CHARS))


def sandbox_bench_command(
    repeats: int = typer.Option(20, "--repeats", help="Executions of the trivial program per mode."),
    task_id: str | None = typer.Option(None, "--task",
                                       help="Task for the pool throughput (default: the smallest train task)."),
    tasks_dir: Path | None = typer.Option(None, "--root", "--tasks-dir",
                                          help="Where tasks live (searched recursively, any layout; default: the "
                                               "built-in suite). The same option as `wmrl tasks list --root`."),
    solutions: int = typer.Option(4, "--solutions", help="Reference solutions run at each concurrency."),
    concurrency: str = typer.Option("1,2", "--concurrency", help="Comma-separated pool sizes."),
    skip_pool: bool = typer.Option(False, "--skip-pool", help="Only measure the sandbox overhead."),
    json_out: bool = typer.Option(False, "--json", help="Print the figures as one JSON object."),
) -> None:
    """Sandbox overhead per execution (bwrap vs plain subprocess, side by side) and pool throughput."""
    from wmrl.console import make_console
    from rich.table import Table

    from wmrl.execution.bench import pool_throughput, sandbox_overhead
    from wmrl.execution.sandbox import SandboxUnavailable

    console = make_console(stderr=json_out, min_width=110)
    report: dict = {}
    try:
        levels = [int(x) for x in concurrency.split(",") if x.strip()]
    except ValueError:
        levels = []
    if not skip_pool and (not levels or min(levels) < 1):
        _fail(f"--concurrency must be comma-separated integers >= 1 like '1,2', got {concurrency!r}")
    if not skip_pool and solutions < 1:
        _fail(f"--solutions must be >= 1, got {solutions}")
    task = None
    if not skip_pool:  # resolve the task first: a typo must not cost the overhead measurement
        try:
            if task_id is not None:
                task = _load_task(task_id, tasks_dir)
            else:
                from wmrl.tasks.loader import TaskSuite, default_suite

                if tasks_dir is not None and not tasks_dir.is_dir():
                    raise FileNotFoundError(f"--root {tasks_dir} is not a folder; pass the folder that "
                                            "'wmrl tasks build --out DIR' wrote")
                suite = TaskSuite(tasks_dir) if tasks_dir is not None else default_suite()
                task = min(suite.tasks("train"), key=lambda x: (x.n_rows or 10**12, x.id))
        except (KeyError, FileNotFoundError, ValueError) as exc:
            _fail(str(exc).strip('"'))
    try:
        timings = sandbox_overhead(repeats)
    except (SandboxUnavailable, ValueError) as exc:
        _fail(str(exc))
    report["overhead"] = {k: t.as_dict() for k, t in timings.items()}
    report["overhead"]["bwrap_minus_plain_median_s"] = timings["bwrap"].median - timings["plain"].median
    report["overhead"]["rlimit_minus_plain_median_s"] = timings["rlimit"].median - timings["plain"].median
    t = Table(title=f"Trivial program, {repeats} runs each (interleaved), seconds per execution")
    for col in ("mode", "median", "mean", "p90", "min"):
        t.add_column(col)
    for k in ("plain", "rlimit", "bwrap"):
        d = timings[k].as_dict()
        t.add_row(k, f"{d['median_s']:.4f}", f"{d['mean_s']:.4f}", f"{d['p90_s']:.4f}", f"{d['min_s']:.4f}")
    console.print(t)
    console.print("sandbox overhead (median bwrap - plain): "
                  f"{report['overhead']['bwrap_minus_plain_median_s'] * 1000:.1f} ms "
                  f"per execution; launcher/limits alone (rlimit - plain): "
                  f"{report['overhead']['rlimit_minus_plain_median_s'] * 1000:.1f} ms")

    if not skip_pool:
        from wmrl.tasks.reference import reference_programs

        assert task is not None  # resolved above whenever the pool is measured
        progs = reference_programs(task)
        step = max(1, len(progs) // max(1, solutions))
        chosen = progs[::step][:solutions]
        console.print(f"pool throughput on task {task.id} ({task.n_rows} rows), reference solutions: "
                      + ", ".join(n for n, _ in chosen))
        levels_out = pool_throughput(task, [p for _, p in chosen], levels)
        report["pool"] = {"task_id": task.id, "solutions": [n for n, _ in chosen],
                          "levels": [x.as_dict() for x in levels_out]}
        t2 = Table(title=f"LocalExecutor on {task.id}: {len(chosen)} reference solutions")
        for col in ("concurrency", "batch wall s", "executions/min", "CPU-s total", "mean exec wall s", "statuses"):
            t2.add_column(col)
        for x in levels_out:
            d = x.as_dict()
            t2.add_row(str(x.concurrency), f"{x.wall_s:.2f}", f"{x.per_minute:.1f}", f"{x.cpu_s:.2f}",
                       f"{d['mean_exec_wall_s']:.2f}", json.dumps(x.statuses))
        console.print(t2)
        if len(levels_out) > 1:
            same = all(a == b for a, b in zip(levels_out[0].scores, levels_out[-1].scores))
            report["pool"]["same_scores_across_levels"] = same
            console.print(f"same scores at every concurrency: {same}")
    if json_out:
        sys.stdout.write(json.dumps(report, default=str) + "\n")


def tasks_build_cmd(
    out: Path | None = typer.Option(None, "--out", help=DIR_HELP),
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
    root = suite_dir(out)
    t0 = time.perf_counter()
    try:
        tasks = build_suite(root, only or None)
    except KeyError as exc:
        fail(exc.args[0])
    except SuiteDirError as exc:
        fail(str(exc))
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



def tasks_check_cmd(
    tasks: list[str] | None = typer.Argument(None, help="Task ids or task folders (default: the whole suite)."),
    dir_: list[Path] | None = typer.Option(None, "--root", "--dir", help=ROOT_HELP),
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
        fail(f"--views {views}: the held-out fraction must lie strictly between 0 and 1, e.g. --views 0.2")
    disc = None
    if tasks:
        if allow_refused:
            fail("--allow-refused goes with checking every task under the roots (no task ids); a task named "
                  "here that was refused is an error either way")
        chosen = [resolve_task(t, dir_) for t in tasks]
    else:
        try:
            suite = TaskSuite(task_roots(dir_))
            chosen = list(suite)
            disc = suite.discovery
        except (SuiteNotBuilt, TaskFormatError) as exc:
            fail(str(exc))
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
        warn_metric_disagreements([task], compute=True)
        for p in problems:
            typer.echo(f"{task.id}: {p.kind}: {p.message}")
        if not problems:
            typer.echo(f"{task.id}: ok")
    refused = disc.refused if disc is not None else []
    if disc is not None and (refused or disc.skipped or any(t.warnings for t in disc.tasks.values())):
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



def register(app: typer.Typer) -> None:
    """Add this package's commands to the top-level ``wmrl`` app, and ``build`` and ``check`` to ``wmrl tasks``."""
    app.command(name="exec")(exec_command)
    app.command(name="sandbox-bench")(sandbox_bench_command)
    tasks_app.command("build")(tasks_build_cmd)
    tasks_app.command("check")(tasks_check_cmd)

"""Rebuilding the committed leaderboards: every task's reference pool (:func:`wmrl.tasks.reference.reference_programs`)
executed in the sandbox, their scores written as the task's leaderboard (``wmrl tasks build --leaderboards``).

It lives in ``execution`` because it runs programs; ``tasks`` describes them and never executes anything.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from wmrl.execution.pool import LocalExecutor
from wmrl.execution.types import ExecutionRequest, ExecutionStatus
from wmrl.tasks.reference import reference_programs
from wmrl.tasks.spec import Task


def rebuild_leaderboards(
    tasks: Sequence[Task],
    board_dir: Path | None = None,
    executor_factory: Callable[[], Any] | None = None,
    time_limit_s: float = 300.0,
    log: Callable[[str], None] = print,
) -> dict[str, list[float]]:
    """Execute every task's reference pool in the sandbox and write the leaderboards.

    Args:
        tasks: built tasks (their leaderboards are ignored while their pool is graded).
        board_dir: where ``<task_id>.csv`` and ``reference_runs.csv`` go (default: the committed
            ``wmrl/tasks/leaderboards``).
        executor_factory: makes the executor (default ``LocalExecutor(max_workers=2)``); anything with
            ``run_batch(requests) -> results`` and ``close()``.
        time_limit_s: wall-clock limit of each reference execution, seconds.
        log: progress sink.

    Returns:
        ``{task_id: best-first scores}`` of the boards written.

    Raises:
        RuntimeError: a task ends with fewer than 10 successful reference solutions (the message
            lists the failures).
    """
    import pandas as pd  # noqa: PLC0415 - heavy (pandas)

    from wmrl.tasks import leaderboard as lb  # noqa: PLC0415 - heavy: loads pandas
    from wmrl.tasks.build import LEADERBOARD_DIR  # noqa: PLC0415 - heavy: loads pandas

    board_dir = Path(board_dir) if board_dir is not None else LEADERBOARD_DIR
    board_dir.mkdir(parents=True, exist_ok=True)
    if executor_factory is None:
        def executor_factory():
            return LocalExecutor(max_workers=2)

    executor = executor_factory()
    runs_path = board_dir / "reference_runs.csv"
    old_runs = pd.read_csv(runs_path) if runs_path.is_file() else None
    rows: list[dict] = []
    boards: dict[str, list[float]] = {}
    try:
        for task in tasks:
            bare = dataclasses.replace(task, leaderboard_paths=())
            programs = reference_programs(bare)
            requests = [ExecutionRequest(task=bare, program=prog, request_id=f"{task.id}/{name}",
                                         time_limit_s=time_limit_s, meta={"reference": name})
                        for name, prog in programs]
            t0 = time.perf_counter()
            results = executor.run_batch(requests)
            scores = []
            for (name, _), res in zip(programs, results):
                rows.append({"task_id": task.id, "solution": name, "status": res.status.value,
                             "score": res.score, "wall_s": round(res.wall_s, 3), "cpu_s": round(res.cpu_s, 3),
                             "peak_rss_bytes": res.peak_rss_bytes, "error": (res.error or "")[:200]})
                if res.status == ExecutionStatus.OK and res.score is not None:
                    scores.append(float(res.score))
            failed = [r for r in rows[-len(programs):] if r["status"] != "ok"]
            log(f"{task.id}: {len(scores)}/{len(programs)} ok in {time.perf_counter() - t0:.1f}s wall"
                + (f"; failed: {', '.join(r['solution'] + '=' + r['status'] for r in failed)}" if failed else ""))
            if len(scores) < 10:
                raise RuntimeError(f"task {task.id}: only {len(scores)} reference solutions succeeded: "
                                   + "; ".join(f"{r['solution']}: {r['status']} {r['error']}" for r in failed))
            boards[task.id] = list(lb.write_leaderboard(board_dir / f"{task.id}.csv", scores,
                                                        task.lower_is_better))
    finally:
        close = getattr(executor, "close", None)
        if close:
            close()
        if rows:
            new = pd.DataFrame(rows)
            if old_runs is not None:
                new = pd.concat([old_runs[~old_runs["task_id"].isin(new["task_id"].unique())], new])
            new.sort_values(["task_id", "solution"]).to_csv(runs_path, index=False)
    return boards

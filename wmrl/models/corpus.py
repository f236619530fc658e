"""The warm-up corpus: programs sampled from the base policy on the train tasks, executed for real.

The world model is fitted on it before training (``wmrl wm warmup`` then ``wmrl wm fit``, or the
trainer's quick start, which counts its cost). Every execution carries the trajectory in its
``meta`` (``prompt``, ``completion``, ``scaffold``, ``group_id``, ``task_id``, ``step=-1``,
``stream="warmup"``), so the execution log alone is enough to fit a world model later.
"""
from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import Any

from wmrl.execution.pool import result_or_infra
from wmrl.execution.types import ExecutionRequest
from wmrl.models.scaffolds import get_scaffold
from wmrl.tasks.spec import Task
from wmrl.trajectory import Trajectory


def result_record(result: Any, request: Any) -> dict[str, Any]:
    """An execution-log-shaped record (dict, as :meth:`wmrl.execution.log.ExecutionLog.records` returns)
    from an ``ExecutionResult`` and its ``ExecutionRequest``."""
    status = getattr(result.status, "value", result.status)
    return {
        "request_id": result.request_id,
        "task_id": result.task_id,
        "status": status,
        "score": result.score,
        "reward": result.reward,
        "wall_s": result.wall_s,
        "cpu_s": result.cpu_s,
        "peak_rss_bytes": result.peak_rss_bytes,
        "error": getattr(result, "error", ""),
        "meta": request.log_meta(),
        "trajectory": request.trajectory,
    }


def collect_warmup(
    policy: Any,
    scaffold: Any,
    tasks: Sequence[Task],
    executor: Any,
    samples_per_task: int = 8,
    *,
    max_new_tokens: int | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int = 0,
    tasks_per_batch: int = 2,
    group_size: int | None = None,
    run: str = "warmup",
    progress: Callable[[str], None] | None = None,
) -> tuple[list[dict[str, Any]], list[Any]]:
    """Sample ``samples_per_task`` programs per task from ``policy`` and execute all of them.

    Sampling goes ``tasks_per_batch`` tasks at a time (one group of ``samples_per_task`` per task);
    each batch's programs are submitted to ``executor`` at once, so executions of one batch overlap
    with sampling of the next.

    Args:
        policy: a :class:`wmrl.models.policy.Policy` (its current adapter is used; for a warm-up
            that is the untrained base policy).
        scaffold: a scaffold object or name.
        tasks: train tasks (never held-out ones: the world model must not see them).
        executor: a :class:`wmrl.interfaces.Executor` (e.g. ``LocalExecutor(max_workers=2,
            log=ExecutionLog(path))``: the executor's log stores every row).
        samples_per_task: trajectories per task (>= 1).
        group_size: trajectories per group (default ``samples_per_task``: one group per task);
            must divide ``samples_per_task``. Several groups per task let a group-level held-out
            split keep every task in training while holding out some of its samples.
        max_new_tokens, temperature, top_p: sampling settings (see ``Policy.sample``).
        seed: sampling seed (batch ``b`` uses ``seed + b``).
        run: stored as ``meta["run"]`` (separates groups of different corpora).
        progress: called with a one-line status after each batch (e.g. ``print``).

    Returns:
        ``(records, results)``: one record dict per trajectory (keys of
        :meth:`wmrl.execution.log.ExecutionLog.records`: ``task_id``, ``status``, ``reward``,
        ``wall_s``, ``cpu_s``, ``meta``...) and the ``ExecutionResult`` objects, in sampling order.
        ``meta`` also holds ``gen_seconds_per_sample`` (wall seconds of sampling / batch size).

    Raises:
        ValueError: no tasks, ``samples_per_task < 1``, ``tasks_per_batch < 1``, or ``group_size``
            not a divisor of ``samples_per_task``.
    """
    if isinstance(scaffold, str):
        scaffold = get_scaffold(scaffold)
    if not tasks:
        raise ValueError("collect_warmup needs at least one train task")
    if samples_per_task < 1 or tasks_per_batch < 1:
        raise ValueError("samples_per_task and tasks_per_batch must be >= 1, "
                         f"got {samples_per_task}, {tasks_per_batch}")
    g = samples_per_task if group_size is None else int(group_size)
    if g < 1 or samples_per_task % g:
        raise ValueError(f"group_size={group_size} must be >= 1 and divide samples_per_task={samples_per_task}")
    reps = samples_per_task // g
    pending: list[tuple[Any, ExecutionRequest]] = []
    by_id = {t.id: t for t in tasks}
    t0 = time.perf_counter()
    for b, start in enumerate(range(0, len(tasks), tasks_per_batch)):
        chunk = list(tasks[start:start + tasks_per_batch])
        batch = policy.sample([t for t in chunk for _ in range(reps)], scaffold, group_size=g,
                              max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                              generator_seed=seed + b)
        per = batch.stats.get("gen_seconds", 0.0) / max(len(batch), 1)
        valid = batch.valid or [None] * len(batch)
        for i in range(len(batch)):
            traj = Trajectory(stream="warmup", run=run, step=-1, group_id=start * reps + batch.group_ids[i], sample=i,
                              task_id=batch.task_ids[i], prompt=batch.prompts[i], completion=batch.completions[i],
                              scaffold=batch.scaffold, completion_tokens=int(batch.completion_mask[i].sum()),
                              well_formed=valid[i], gen_seconds_per_sample=per)
            req = ExecutionRequest(task=by_id[batch.task_ids[i]], program=batch.programs[i],
                                   request_id=f"{run}-{start * reps + batch.group_ids[i]}-{i}", trajectory=traj)
            pending.append((executor.submit(req), req))
        if progress:
            progress(f"sampled {start + len(chunk)}/{len(tasks)} tasks ({len(pending)} programs, "
                     f"{time.perf_counter() - t0:.0f} s)")
    return _gather(pending, progress, t0)


def _gather(pending: list, progress: Any, t0: float) -> tuple[list[dict[str, Any]], list[Any]]:
    """Wait for every submitted ``(future, request)``; their log records and results, in order."""
    results = [result_or_infra(f, r) for f, r in pending]
    records = [result_record(res, req) for (_, req), res in zip(pending, results)]
    if progress:
        ok = sum(r["status"] == "ok" for r in records)
        progress(f"executed {len(records)} programs: {ok} ok ({time.perf_counter() - t0:.0f} s)")
    return records, results


def collect_uniform(
    scaffold: Any,
    tasks: Sequence[Task],
    executor: Any,
    samples_per_task: int = 8,
    *,
    seed: int = 0,
    run: str = "uniform",
    progress: Callable[[str], None] | None = None,
) -> tuple[list[dict[str, Any]], list[Any]]:
    """Draw ``samples_per_task`` sentences per task uniformly at random from ``scaffold``'s grammar
    (no LM: every sentence equally likely, drawn with replacement) and execute all of them.

    What a policy that knows nothing would write; ``wmrl scaffolds --uniform`` measures a grammar's status
    mix with it. Records are shaped as :func:`collect_warmup`'s (``stream="warmup"``, ``step=-1``, one
    group per task, ``extra={"sampler": "uniform"}``), so they can serve as a warm-up corpus too.

    Args:
        scaffold: a scaffold object or name with a grammar (``grammar_key`` not None on every task).
        tasks: the tasks (train tasks, for a warm-up corpus).
        executor: a :class:`wmrl.interfaces.Executor`.
        samples_per_task: sentences per task (>= 1).
        seed: the draw's seed; task ``t`` draws from ``random.Random(f"{seed}-{t.id}")``, so a task's
            sentences do not depend on the other tasks.
        run: stored as ``meta["run"]``.
        progress: called with a one-line status after submitting and after executing.

    Returns:
        ``(records, results)`` as :func:`collect_warmup` returns them, in task order.

    Raises:
        ValueError: no tasks, ``samples_per_task < 1``, or a task the scaffold has no grammar for.
    """
    if isinstance(scaffold, str):
        scaffold = get_scaffold(scaffold)
    if not tasks:
        raise ValueError("collect_uniform needs at least one task")
    if samples_per_task < 1:
        raise ValueError(f"samples_per_task must be >= 1, got {samples_per_task}")
    t0 = time.perf_counter()
    pending: list[tuple[Any, ExecutionRequest]] = []
    for gi, task in enumerate(tasks):
        key = scaffold.grammar_key(task)
        if key is None:
            raise ValueError(f"scaffold {scaffold.name!r} has no grammar for task {task.id!r}: uniform draws need "
                             "a grammar scaffold (grammar, grammar-fail, grammar-fine, grammar-dense)")
        sentences = scaffold.grammar_sentences(key)
        prompt = scaffold.prompt(task)
        for i, completion in enumerate(random.Random(f"{seed}-{task.id}").choices(sentences, k=samples_per_task)):
            traj = Trajectory(stream="warmup", run=run, step=-1, group_id=gi, sample=i, task_id=task.id,
                              prompt=prompt, completion=completion, scaffold=scaffold.name, well_formed=True,
                              extra={"sampler": "uniform"})
            req = ExecutionRequest(task=task, program=scaffold.render(task, completion),
                                   request_id=f"{run}-{gi}-{i}", trajectory=traj)
            pending.append((executor.submit(req), req))
    if progress:
        progress(f"drew {len(pending)} programs uniformly from {len(tasks)} tasks' grammars")
    return _gather(pending, progress, t0)

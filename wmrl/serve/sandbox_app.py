"""``wmrl serve sandbox``: the sandbox and the trusted grader behind the service contract (:mod:`wmrl.serve.contract`).

Programs run in the executor pool (:class:`wmrl.execution.pool.LocalExecutor`: bubblewrap sandboxes, at most
``workers`` at once) and are graded in this process; every outcome is appended to the SQLite execution log
(:class:`wmrl.execution.log.ExecutionLog`), which is the source of truth for idempotency:

- a request id that is running is joined (a concurrent duplicate waits for the same execution);
- a request id that finished is answered from the log (``replayed: true``), also after a restart;
- a request id is claimed in the log (committed) before its program starts; an id claimed but never logged was in
  flight when the service died and runs again when retried, *alone* (nothing else is admitted while it runs, so a
  death during it is its own doing): after ``max_attempts`` starts without a logged outcome it is answered with
  ``runtime_error`` and the task's failure reward (logged, so the answer is final), not started again and not an
  ``infra_error``: a program that takes its host down (exhausts its memory) is a failing program, and training
  counts it (docs/services.md, "Blame");
- a request id reused with another task or program is refused with 409.

A request with ``validation`` runs on the task's validation view (:func:`wmrl.tasks.validation.validation_view`,
built once per fraction and seed with this installation's secret) and is graded on its held-out rows too
(``validation_score``), as multi-turn episodes need.

Admission: at most ``max_concurrency`` items are in flight (running or queued for a worker); a new one beyond that
gets 503 with ``Retry-After``. A batch with more new items than ``max_concurrency`` could never be admitted: it gets
413 naming the cap. Joins and replays are always admitted. An answer that takes longer than
``timeout_s`` is a 504; the execution goes on and is logged, so a retry with the same id gets its result.
"""
from __future__ import annotations

import asyncio
import math
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException

from wmrl.execution.log import ExecutionLog
from wmrl.execution.runner import infra_result
from wmrl.execution.types import ExecutionRequest, ExecutionResult, ExecutionStatus, program_hash
from wmrl.serve.common import BodyGuard, Counters, create_app, retry_after
from wmrl.serve.contract import (PREFIX, BatchRequest, BatchResponse, Capacity, GradeRequest, GradeResponse,
                                 Health, Load)
from wmrl.tasks.validation import validation_view
from wmrl.trajectory import Trajectory

_RESULT_FIELDS = set(GradeResponse.model_fields) - {"contract", "replayed", "attempt"}


def grade_response(result: ExecutionResult, *, replayed: bool = False, attempt: int = 1) -> GradeResponse:
    """The contract's answer for an :class:`ExecutionResult` (non-finite numbers become null)."""
    d = {k: v for k, v in result.to_dict().items() if k in _RESULT_FIELDS}
    for k, v in d.items():
        if isinstance(v, float) and not math.isfinite(v):
            d[k] = None if k in ("score", "reward", "validation_score") else 0.0
    return GradeResponse(**d, replayed=replayed, attempt=attempt)


@dataclass
class _Running:
    future: Future
    task_id: str
    sha: str
    attempt: int


class SandboxService:
    """The state behind the sandbox app: tasks, executor, log, the running request ids, the counters.

    Args:
        tasks: ``get(task_id) -> Task`` raising ``KeyError`` for an unknown id, and ``ids()`` (a
            :class:`wmrl.tasks.loader.TaskSuite`).
        executor: the pool the programs run in (its ``log`` must be ``log``, so outcomes are logged before they
            are answered).
        log: the execution log (idempotency's source of truth).
        max_concurrency: items in flight at most (>= 1). timeout_s: longest wait for an answer, seconds.
        max_attempts: starts of one request id without a logged outcome before it is refused (>= 1).

    Raises:
        ValueError: the executor logs elsewhere, or a limit below 1.
    """

    def __init__(self, tasks: Any, executor: Any, log: ExecutionLog, *, max_concurrency: int, timeout_s: float,
                 max_attempts: int = 2):
        if getattr(executor, "log", None) is not log:
            raise ValueError("the executor must append to the service's execution log (LocalExecutor(log=log))")
        if max_concurrency < 1 or max_attempts < 1 or timeout_s <= 0:
            raise ValueError("max_concurrency and max_attempts must be >= 1 and timeout_s > 0")
        self.tasks, self.executor, self.log = tasks, executor, log
        self.max_concurrency, self.timeout_s, self.max_attempts = int(max_concurrency), float(timeout_s), \
            int(max_attempts)
        self.running: dict[str, _Running] = {}
        self.solo: str | None = None  # the request id running alone (the service died during it before)
        self.solo_waiting: dict[str, float] = {}  # ids waiting to run alone -> until when they hold others off
        self._views: dict[tuple[str, float, int], Any] = {}
        self.mean_wall_s = 0.0  # moving average of the executions' wall seconds (0: none finished yet)
        self._lock = threading.Lock()
        self.counters = Counters()

    # ------------------------------------------------------------------ the request path
    def task(self, task_id: str | None) -> Any:
        """The task ``task_id``.

        Raises:
            HTTPException: 422 without a task id, 404 for an unknown one (the message lists known ids).
        """
        if not task_id:
            raise HTTPException(422, "task_id is required by the sandbox: name a task of `GET /v1/tasks`")
        try:
            return self.tasks.get(task_id)
        except KeyError as e:
            raise HTTPException(404, str(e.args[0] if e.args else e)) from None

    def view(self, task: Any, fraction: float, seed: int) -> Any:
        """The validation view of ``task`` (built once per fraction and seed, then reused).

        Raises:
            HTTPException: 422 when the task has no validation view (the message says why).
        """
        key = (task.id, float(fraction), int(seed))
        if key not in self._views:
            try:
                self._views[key] = validation_view(task, fraction, seed)
            except (ValueError, FileNotFoundError) as e:
                raise HTTPException(422, f"validation: task {task.id} has no validation view: {e}") from None
        return self._views[key]

    def _existing(self, rid: str, task_id: str, sha: str) -> tuple[str, Any]:
        """``("join", _Running)``, ``("replay", (ExecutionResult, attempts))`` or ``("new", starts)`` for ``rid``
        (``attempts``, ``starts``: the starts the claims table counts for ``rid``; a new id with starts died with the
        service).

        Raises:
            HTTPException: 409 when ``rid`` belongs to another task or program.
        """
        with self._lock:
            run = self.running.get(rid)
        if run is not None:
            self._same(rid, run.task_id, run.sha, task_id, sha)
            return "join", run
        done = self.log.result(rid)
        if done is not None:
            self._same(rid, done.task_id, done.program_sha256, task_id, sha)
            claim = self.log.claimed(rid)
            return "replay", (done, int(claim["attempts"]) if claim else 1)
        claim = self.log.claimed(rid)
        if claim is not None:
            self._same(rid, claim["task_id"], claim["program_sha256"], task_id, sha)
        return "new", int(claim["attempts"]) if claim else 0

    @staticmethod
    def _same(rid: str, task0: str, sha0: str, task_id: str, sha: str) -> None:
        if (task0, sha0) != (task_id, sha):
            what = "task" if task0 != task_id else "program"
            raise HTTPException(409, f"request id {rid!r} was used for another {what} (task {task0}, program sha256 "
                                     f"{sha0[:12]}...); use a fresh id per program")

    def start(self, items: list[GradeRequest]) -> list[tuple[str, Any]]:
        """Admit ``items`` all or none: per item ``("join", _Running)``, ``("replay", (ExecutionResult, attempts))`` or
        ``("run", _Running)``. Runs on the event loop's thread without awaiting, so two requests with one id cannot
        both start it.

        Raises:
            HTTPException: 404/422 (task), 409 (id reuse), 422 (one id twice in a batch), 413 (more new items than
                ``max_concurrency``: never admissible), 503 (at capacity).
        """
        plans = []
        seen: set[str] = set()
        for it in items:
            task = self.task(it.task_id)
            if it.validation is not None:
                task = self.view(task, it.validation.fraction, it.validation.seed)
            rid = it.request_id or f"anon-{uuid.uuid4().hex}"
            if rid in seen:
                raise HTTPException(422, f"request id {rid!r} appears twice in one batch")
            seen.add(rid)
            sha = program_hash(it.program)
            kind, obj = self._existing(rid, task.id, sha)
            plans.append((kind, obj, rid, task, sha, it))
        new = sum(1 for p in plans if p[0] == "new")
        if new > self.max_concurrency:
            raise HTTPException(413, f"the batch has {new} new items but at most {self.max_concurrency} are admitted "
                                     "at once (--max-concurrency): it could never be admitted; split it into "
                                     f"batches of at most {self.max_concurrency} items")
        with self._lock:
            free = self.max_concurrency - len(self.running)
        if new > free:
            raise HTTPException(503, f"at capacity: {self.max_concurrency - free} of {self.max_concurrency} items in "
                                     f"flight, {new} new asked; retry the same request after Retry-After seconds",
                                headers=retry_after(self.retry_after_s()))
        self._admit_alone([(p[2], p[1]) for p in plans if p[0] == "new"])
        out: list[tuple[str, Any]] = []
        for kind, obj, rid, task, sha, it in plans:
            if kind != "new":
                out.append((kind, obj))
                continue
            out.append(("run", self._submit(rid, task, sha, it)))
        return out

    def _admit_alone(self, new: list[tuple[str, int]]) -> None:
        """Refuse (503) new items while an id the service died during runs alone or waits to: such an id (``starts``
        >= 1, below ``max_attempts``) runs only with nothing else running, and holds new items off until it does
        (for at most a minute, should its client have gone), so a death during its run is its own doing.

        Raises:
            HTTPException: 503 with Retry-After.
        """
        if not new:
            return
        now = time.monotonic()
        suspects = [rid for rid, starts in new if 1 <= starts < self.max_attempts]
        with self._lock:
            self.solo_waiting = {k: v for k, v in self.solo_waiting.items() if v > now}
            if self.solo is not None:
                why = f"request {self.solo} runs alone (the service died while it ran before)"
            elif suspects and (self.running or len(new) > 1):
                for rid in suspects:
                    self.solo_waiting.setdefault(rid, now + 60.0)
                why = (f"request {suspects[0]} died with the service before and runs again alone, when nothing else "
                       "runs" + (" (send it in a batch of its own)" if len(new) > 1 else ""))
            elif not suspects and self.solo_waiting:
                why = f"request {next(iter(self.solo_waiting))} waits to run alone (the service died while it ran)"
            else:
                if suspects:
                    self.solo = suspects[0]
                    self.solo_waiting.pop(suspects[0], None)
                return
        raise HTTPException(503, f"{why}; retry the same request after Retry-After seconds",
                            headers=retry_after(self.retry_after_s()))

    def _submit(self, rid: str, task: Any, sha: str, it: GradeRequest) -> _Running:
        req = ExecutionRequest(task=task, program=it.program, request_id=rid, time_limit_s=it.time_limit_s,
                               meta=dict(it.meta), trajectory=_trajectory(it.trajectory))
        try:
            attempt = self.log.claim(rid, task.id, sha)
        except BaseException:
            self._release_solo(rid)
            raise
        fut: Future
        if attempt > self.max_attempts:
            res = died_result(req, attempt - 1)
            self.log.append(req, res)
            self._release_solo(rid)
            fut = Future()
            fut.set_result(res)
            return _Running(fut, task.id, sha, attempt)
        fut = self.executor.submit(req)
        run = _Running(fut, task.id, sha, attempt)
        with self._lock:
            self.running[rid] = run
        self.counters.add(executed=1)

        def done(f: Future) -> None:
            self._release_solo(rid)
            with self._lock:
                if self.running.get(rid) is run:
                    del self.running[rid]
                if not f.cancelled() and f.exception() is None:
                    w = float(f.result().wall_s or 0.0)
                    self.mean_wall_s = w if not self.mean_wall_s else 0.8 * self.mean_wall_s + 0.2 * w

        fut.add_done_callback(done)
        return run

    def _release_solo(self, rid: str) -> None:
        with self._lock:
            if self.solo == rid:
                self.solo = None

    def retry_after_s(self) -> float:
        """When a refused client should retry, seconds: about when the next execution finishes and frees a place
        (the executions' mean wall seconds / workers), between 1 and 30."""
        workers = max(1, int(getattr(self.executor, "max_workers", 1)))
        return max(1.0, min(30.0, self.mean_wall_s / workers))

    async def answer(self, plan: tuple[str, Any], deadline: float) -> GradeResponse:
        """Wait for one admitted item until ``deadline`` (``time.monotonic()`` seconds).

        Raises:
            HTTPException: 504 when it has not finished by then (it keeps running; retry with the same id).
        """
        kind, obj = plan
        if kind == "replay":
            self.counters.add(served=1, replayed=1)
            result, attempts = obj
            return grade_response(result, replayed=True, attempt=attempts)
        try:
            res = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(obj.future)),
                                         max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise HTTPException(504, f"no outcome within {self.timeout_s:g} s (--timeout-s); the execution goes on "
                                     "and is logged: retry with the same request id for its result") from None
        self.counters.add(served=1)
        return grade_response(res, attempt=obj.attempt)

    # ------------------------------------------------------------------ health
    def health(self) -> Health:
        """Capacity and load now."""
        with self._lock:
            n = len(self.running)
        workers = int(getattr(self.executor, "max_workers", 1))
        c = self.counters
        return Health(service="sandbox", capacity=Capacity(workers=workers, max_concurrency=self.max_concurrency,
                                                           max_body_bytes=0, timeout_s=self.timeout_s),
                      load=Load(in_flight=n, queued=max(0, n - workers), served=c.served, replayed=c.replayed,
                                executed=c.executed, rejected=c.rejected),
                      uptime_s=time.time() - c.started, n_tasks=len(self.tasks.ids()),
                      detail={"sandbox": getattr(self.executor, "mode", ""), "log": str(self.log.path),
                              "max_attempts": self.max_attempts, "running_alone": self.solo})


def died_result(request: ExecutionRequest, starts: int) -> ExecutionResult:
    """The final outcome of a request the service died during ``starts`` times (the last time running alone): the
    program's failure (``runtime_error``, the task's failure reward, no score), not an ``infra_error``, which training
    would leave out: a program that takes its host down, as by exhausting its memory, must not escape its grade."""
    res = infra_result(request, f"the service died each of the {starts} times this program ran (the last time it ran "
                                "alone), as when a program exhausts the host's memory; counted as the program's "
                                "failure and not started again")
    res.status = ExecutionStatus.RUNTIME_ERROR
    res.reward = float(request.task.failure_reward)
    return res


def _trajectory(d: dict[str, Any] | None) -> Trajectory | None:
    try:
        return Trajectory.from_dict(d)
    except (ValueError, TypeError) as e:
        raise HTTPException(422, f"trajectory: {e}") from None


def create_sandbox_app(service: SandboxService, *, token: str | None, max_body_bytes: int = 16 * 2**20,
                       read_timeout_s: float = 30.0) -> Any:
    """The ASGI app of ``service`` (FastAPI, wrapped in :class:`wmrl.serve.common.BodyGuard`).

    Args:
        service: the :class:`SandboxService`. token: the bearer token (None: an open service).
        max_body_bytes: request body limit, bytes (413 beyond). read_timeout_s: longest pause while a body
            arrives, seconds (408 after it).
    """
    app, auth = create_app("wmrl sandbox", service, token, max_body_bytes, service.tasks.ids)

    @app.post(f"{PREFIX}/grade", response_model=GradeResponse, dependencies=auth)
    async def grade(item: GradeRequest) -> GradeResponse:
        deadline = time.monotonic() + service.timeout_s
        return await service.answer(service.start([item])[0], deadline)

    @app.post(f"{PREFIX}/grade/batch", response_model=BatchResponse, dependencies=auth)
    async def grade_batch(batch: BatchRequest) -> BatchResponse:
        deadline = time.monotonic() + service.timeout_s
        plans = service.start(batch.items)
        results = await asyncio.gather(*(service.answer(p, deadline) for p in plans))
        return BatchResponse(results=list(results))

    return BodyGuard(app, max_body_bytes, read_timeout_s, service.counters, token=token)

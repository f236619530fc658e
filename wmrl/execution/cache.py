"""An exact execution cache: a program already executed on a task is not executed again.

Executions in the sandbox are deterministic (the same program on the same task data, under the same limits, gives
the same outcome), so a run that writes a program twice needs to pay for it once. GRPO's policies concentrate:
most of a long run's executions repeat a program it has already run. :class:`CachingExecutor` wraps any
:class:`wmrl.interfaces.Executor`; a request whose (task id, program SHA-256, time limit) was executed before in
this run (or is executing now) gets that outcome without a new execution, with ``wall_s``, ``cpu_s`` and
``grade_s`` set to 0 (nothing was spent: the compute ledger charges nothing) and its own ``request_id``. Each hit
is appended to the execution log with ``meta.cached_from`` naming the request that ran, so the log still has one
row per request. The cache is seeded from the log when a run resumes. Infrastructure errors are never cached.

Turn it on with the training config's ``executor.cache: true``.
"""
from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from wmrl.execution.log import ExecutionLog
from wmrl.execution.types import ExecutionRequest, ExecutionResult, ExecutionStatus, program_hash

__all__ = ["CachingExecutor"]

Key = tuple[str, str, float]


def _key(request: ExecutionRequest) -> Key:
    """(task id, program SHA-256, the wall limit the program runs under in seconds)."""
    limit = request.time_limit_s if request.time_limit_s is not None else request.task.time_limit_s
    return request.task.id, program_hash(request.program), float(limit)


class CachingExecutor:
    """An :class:`wmrl.interfaces.Executor` that executes each distinct (task, program, time limit) once (module
    docstring).

    Args:
        inner: the executor that runs the misses (it appends them to ``log`` itself).
        log: the run's execution log: hits are appended to it, and on start the cache is seeded from its rows
            (a resumed run does not execute again what it executed before it stopped). None: no log.

    Attributes:
        hits, misses: requests answered from the cache / passed to ``inner`` since this object was made.
    """

    def __init__(self, inner: Any, log: ExecutionLog | None = None) -> None:
        self.inner = inner
        self.log = log
        self._lock = threading.Lock()
        self._done: dict[Key, ExecutionResult] = {}
        self._running: dict[Key, Future[ExecutionResult]] = {}
        self.hits = 0
        self.misses = 0
        if log is not None:
            for rec in log.records():
                key = (rec.get("task_id"), rec.get("program_sha256"), float(rec.get("time_limit_s") or 0.0))
                if rec.get("status") == ExecutionStatus.INFRA_ERROR.value or not key[1] or key in self._done:
                    continue  # rebuild each key's outcome once, not once per repeat of its program
                res = log.result(str(rec["request_id"]))
                if res is not None and res.status != ExecutionStatus.INFRA_ERROR:
                    self._done[(res.task_id, res.program_sha256, float(res.time_limit_s))] = res

    def _hit(self, request: ExecutionRequest, source: ExecutionResult) -> ExecutionResult:
        res = replace(source, request_id=request.request_id, wall_s=0.0, cpu_s=0.0, grade_s=0.0)
        if self.log is not None:
            meta = dict(request.meta, cached_from=source.request_id)
            self.log.append(replace(request, meta=meta), res)
        return res

    def submit(self, request: ExecutionRequest) -> Future[ExecutionResult]:
        """The outcome of ``request``: from the cache when its key was executed (or is executing), else from
        ``inner.submit``. Cancelling a future of a hit that waits on a running execution does not cancel that
        execution."""
        key = _key(request)
        with self._lock:
            done = self._done.get(key)
            running = self._running.get(key)
            miss = done is None and running is None
            if miss:
                self.misses += 1
                fut = self.inner.submit(request)
                self._running[key] = fut
            else:
                self.hits += 1
        if miss:  # outside the lock: a future that is already done runs the callback in this thread
            fut.add_done_callback(lambda f, k=key: self._finished(k, f))
            return fut
        out: Future[ExecutionResult] = Future()
        if done is not None:
            out.set_result(self._hit(request, done))
            return out
        assert running is not None

        def relay(f: Future[ExecutionResult]) -> None:
            if out.cancelled():
                return
            try:
                src = f.result()
            except BaseException as e:  # noqa: BLE001 - the running execution's error is this request's too
                out.set_exception(e)
                return
            if src.status == ExecutionStatus.INFRA_ERROR:  # not cached: this request runs on its own
                self.inner.submit(request).add_done_callback(lambda g: _copy(g, out))
                return
            out.set_result(self._hit(request, src))

        running.add_done_callback(relay)
        return out

    def _finished(self, key: Key, fut: Future[ExecutionResult]) -> None:
        with self._lock:
            self._running.pop(key, None)
            if fut.cancelled() or fut.exception() is not None:
                return
            res = fut.result()
            if res.status != ExecutionStatus.INFRA_ERROR:
                self._done.setdefault(key, res)

    def run_batch(self, requests: Sequence[ExecutionRequest]) -> list[ExecutionResult]:
        """Run all requests (misses concurrently through ``inner``); results in submission order."""
        return [f.result() for f in [self.submit(r) for r in requests]]

    def close(self) -> None:
        """Close ``inner``."""
        self.inner.close()


def _copy(src: Future[ExecutionResult], dst: Future[ExecutionResult]) -> None:
    """``src``'s outcome into ``dst``, unless ``dst`` was cancelled."""
    if dst.cancelled():
        return
    exc = src.exception()
    if exc is not None:
        dst.set_exception(exc)
    else:
        dst.set_result(src.result())

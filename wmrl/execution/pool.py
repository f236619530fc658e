"""A local executor pool: sandboxed executions on the local machine, graded in this process.

:class:`LocalExecutor` implements :class:`wmrl.interfaces.Executor`. Jobs queue up and run on at most
``max_workers`` threads, each of which drives one sandbox process tree (the heavy work is in the
sandbox, so threads are enough). Every result is appended to the :class:`ExecutionLog` when one is
given, then delivered through an :class:`ExecutionFuture`; cancelling a running future kills its
process tree at once.
"""
from __future__ import annotations

import logging
import os
import queue
import threading
import traceback
from collections.abc import Sequence
from concurrent.futures import CancelledError, Future, InvalidStateError
from concurrent.futures._base import CANCELLED_AND_NOTIFIED, RUNNING
from typing import Self

from wmrl.execution.log import ExecutionLog
from wmrl.execution.runner import Grader, cap_error, execute, infra_result
from wmrl.execution.sandbox import SandboxConfig, resolve_mode
from wmrl.execution.types import ExecutionRequest, ExecutionResult, ExecutionStatus

log = logging.getLogger(__name__)


class ExecutionFuture(Future):
    """A :class:`concurrent.futures.Future` whose ``cancel()`` also works while the job runs.

    Cancelling a pending job removes it from the queue; cancelling a running one kills its whole
    process tree (the worker moves on) and the future becomes cancelled (``result()`` raises
    :class:`concurrent.futures.CancelledError`). Returns False only when already finished.
    """

    def __init__(self) -> None:
        super().__init__()
        self.kill_event = threading.Event()

    def cancel(self) -> bool:
        with self._condition:
            if self._state == RUNNING:
                self.kill_event.set()
                self._state = CANCELLED_AND_NOTIFIED
                for waiter in self._waiters:
                    waiter.add_cancelled(self)
                self._condition.notify_all()
                running = True
            else:
                running = False
        if running:
            self._invoke_callbacks()  # type: ignore[attr-defined]  # Future's own (private) helper, not in typeshed
            return True
        return super().cancel()


def safe_set_result(fut: Future, result: ExecutionResult) -> None:
    """Set a future's result unless it was cancelled meanwhile."""
    try:
        fut.set_result(result)
    except InvalidStateError:
        pass


def result_or_infra(fut: Future, request: ExecutionRequest) -> ExecutionResult:
    """``fut.result()``, or an ``infra_error`` result when the future was cancelled or failed."""
    try:
        return fut.result()
    except CancelledError:
        return infra_result(request, "cancelled before it finished")
    except Exception as exc:  # noqa: BLE001
        return infra_result(request, f"executor failed: {type(exc).__name__}: {exc}")


class FutureExecutor:
    """What :class:`LocalExecutor` and :class:`~wmrl.execution.ray_pool.RayExecutor` share.

    The futures, the closed flag, the set of running futures that :meth:`close` cancels, the log
    appends and their failure count. A backend sets ``_name``, calls :meth:`_init_futures`, and
    implements ``_dispatch(fut, request)`` (queue a job, called under the lock), ``_run(fut,
    request)`` (run one, returning its result) and ``_shutdown(running)`` (stop after close).
    """

    _name = "executor"
    #: re-execute a request once when it ends in ``infra_error`` (:func:`recheck_infra_error`)
    recheck_infra = True

    def _dispatch(self, fut: ExecutionFuture, request: ExecutionRequest) -> None:
        """Queue the job of ``request`` for ``fut`` (called under the lock)."""
        raise NotImplementedError

    def _run(self, fut: ExecutionFuture, request: ExecutionRequest) -> ExecutionResult:
        """Run one job; its result."""
        raise NotImplementedError

    def _shutdown(self, running: list[ExecutionFuture]) -> None:
        """Stop the backend after :meth:`close`; ``running`` are the futures still running."""
        raise NotImplementedError

    def _init_futures(self) -> None:
        self._lock = threading.Lock()
        self._running: set[ExecutionFuture] = set()
        self._closed = False
        self._log_failures = 0

    def submit(self, request: ExecutionRequest) -> ExecutionFuture:
        """Queue one execution; returns its future (cancellable, also while running).

        Raises:
            RuntimeError: the executor is closed.
        """
        fut = ExecutionFuture()
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self._name} is closed; create a new one")
            self._dispatch(fut, request)
        return fut

    def run_batch(self, requests: Sequence[ExecutionRequest]) -> list[ExecutionResult]:
        """Run all requests (up to the concurrency limit at once); results in submission order.

        A request whose future is cancelled or fails comes back as an ``infra_error`` result.
        """
        futures = [self.submit(r) for r in requests]
        return [result_or_infra(f, r) for f, r in zip(futures, requests)]

    def close(self) -> None:
        """Cancel queued jobs, kill running ones, stop the backend (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            running = list(self._running)
        self._shutdown(running)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def log_failures(self) -> int:
        """Number of results that could not be appended to the log (each also logged as an error)."""
        return self._log_failures

    def _drive(self, fut: ExecutionFuture, request: ExecutionRequest) -> None:
        """Run one queued job on the calling thread: result logged, then set on its future."""
        with self._lock:  # registered before it can run, so close() always sees it
            self._running.add(fut)
            closed = self._closed
        if closed:
            fut.cancel()
        if not fut.set_running_or_notify_cancel():
            with self._lock:
                self._running.discard(fut)
            return
        try:
            result = self._run_safely(fut, request)
            if result.is_infra_error and self.recheck_infra and not fut.kill_event.is_set():
                result = recheck_infra_error(request, result, self._run_safely(fut, request))
            append_to_log(self, request, result)
            safe_set_result(fut, result)
        finally:
            with self._lock:
                self._running.discard(fut)


    def _run_safely(self, fut: ExecutionFuture, request: ExecutionRequest) -> ExecutionResult:
        try:
            return self._run(fut, request)
        except Exception as exc:  # noqa: BLE001 - a program the sandbox cannot even write (bad text), a bug
            return infra_result(request, f"executor failed: {type(exc).__name__}: {cap_error(str(exc))}")


def recheck_infra_error(request: ExecutionRequest, first: ExecutionResult, second: ExecutionResult) -> ExecutionResult:
    """The outcome of a request whose first execution was an ``infra_error``, given its re-execution.

    A passing infrastructure fault does not come back: the re-execution's outcome stands. One that comes back
    with the same program and task is no longer taken as missing (which would let a program that can trigger
    it censor its own grade): it counts as the program's failure (``runtime_error``, the task's failure
    reward), with both errors in ``error``. The cancelled re-execution of a closing executor stays an
    ``infra_error``. Either way ``wall_s`` and ``cpu_s`` cover both executions (seconds, CPU-seconds).
    """
    second.wall_s = float(first.wall_s or 0.0) + float(second.wall_s or 0.0)
    second.cpu_s = float(first.cpu_s or 0.0) + float(second.cpu_s or 0.0)
    if not second.is_infra_error or "cancelled" in (second.error or ""):
        return second
    log.warning("infra error of %s on task %s reproduced on re-execution; counted as the program's failure: %s",
                second.request_id, request.task.id, second.error)
    second.status = ExecutionStatus.RUNTIME_ERROR
    second.score = None
    second.reward = float(request.task.failure_reward)
    second.error = cap_error(f"infrastructure error reproduced on re-execution, counted as the program's failure: "
                             f"{second.error} (first: {first.error})")
    return second


class LocalExecutor(FutureExecutor):
    """Run sandboxed executions on the local machine, at most ``max_workers`` at a time.

    Args:
        max_workers: concurrency limit (default ``os.cpu_count()``).
        sandbox: limits and isolation of each execution (default :class:`SandboxConfig()`).
        log: execution log every result is appended to (from the worker threads).
        grader: ``grader(task, path) -> Grade`` run in this process (default: the task suite's).
        recheck_infra: re-execute a request once when it ends in ``infra_error``; an error that comes back
            counts as the program's failure (:func:`recheck_infra_error`).

    Raises:
        SandboxUnavailable: bwrap is missing and ``sandbox.allow_unsandboxed`` is off (checked at
            construction, so a misconfigured machine fails before any job is queued).
        ValueError: ``max_workers`` < 1.

    Use as a context manager, or call :meth:`close`, to stop the workers and kill running jobs.
    """

    _name = "LocalExecutor"

    def __init__(self, max_workers: int | None = None, sandbox: SandboxConfig | None = None,
                 log: ExecutionLog | None = None, grader: Grader | None = None, recheck_infra: bool = True):
        self.max_workers = int(max_workers) if max_workers is not None else (os.cpu_count() or 1)
        if self.max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers!r}")
        self.sandbox = sandbox or SandboxConfig()
        self.mode = resolve_mode(self.sandbox)  # raises SandboxUnavailable early
        self.log = log
        self.grader = grader
        self.recheck_infra = bool(recheck_infra)
        self._queue: queue.Queue = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._init_futures()

    # -- internals -----------------------------------------------------------------------------

    def _dispatch(self, fut: ExecutionFuture, request: ExecutionRequest) -> None:
        self._queue.put((fut, request))
        if len(self._threads) < self.max_workers:
            t = threading.Thread(target=self._worker, name=f"wmrl-exec-{len(self._threads)}", daemon=True)
            self._threads.append(t)
            t.start()

    def _shutdown(self, running: list[ExecutionFuture]) -> None:
        while True:
            try:
                fut, _ = self._queue.get_nowait()
            except queue.Empty:
                break
            fut.cancel()
        for fut in running:
            fut.cancel()
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join(timeout=30)

    def _worker(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            self._drive(*item)

    def _run(self, fut: ExecutionFuture, request: ExecutionRequest) -> ExecutionResult:
        return run_one(request, self.sandbox, fut.kill_event, self.grader)


def run_one(request: ExecutionRequest, sandbox: SandboxConfig, kill_event: threading.Event,
            grader: Grader | None) -> ExecutionResult:
    """:func:`wmrl.execution.runner.execute`, turning any driver exception into ``infra_error``."""
    try:
        return execute(request, sandbox, kill_event, grader)
    except Exception as exc:  # noqa: BLE001 - a worker must never die
        log.error("execution of %s failed in the driver: %s", request.task.id, traceback.format_exc())
        return infra_result(request, f"driver failed: {type(exc).__name__}: {exc}")


def append_to_log(owner, request: ExecutionRequest, result: ExecutionResult) -> None:
    """Append to ``owner.log`` if any; a failing log is reported and counted, never raised."""
    if owner.log is None:
        return
    try:
        owner.log.append(request, result)
    except Exception:  # noqa: BLE001
        owner._log_failures += 1
        log.error("could not append execution %s to %s: %s", result.request_id,
                  getattr(owner.log, "path", "?"), traceback.format_exc())

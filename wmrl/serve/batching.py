"""A micro-batching queue: requests that arrive within a few milliseconds share one model call.

:class:`MicroBatcher` runs ``fn(rows) -> answers`` on one thread of its own. A request is a list of rows (a client's
whole batch stays together, in order); the thread takes the oldest request, then keeps collecting requests until
``max_wait_s`` has passed since it took the first or ``max_batch`` rows are waiting, and answers them all with one
call. A single request larger than ``max_batch`` is one call of its own (its rows are never split).
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

log = logging.getLogger(__name__)


class MicroBatcher:
    """Batch concurrent requests into calls of ``fn``.

    Args:
        fn: ``fn(rows: list) -> Sequence`` of one answer per row, in order (e.g. a world model's predictions).
        max_batch: most rows per call (>= 1), unless one request alone is larger.
        max_wait_s: longest the first request of a batch waits for others, seconds (>= 0).

    Raises:
        ValueError: ``max_batch`` < 1 or ``max_wait_s`` < 0.
    """

    def __init__(self, fn: Callable[[list[Any]], Sequence[Any]], *, max_batch: int = 64, max_wait_s: float = 0.005):
        if int(max_batch) < 1 or max_wait_s < 0:
            raise ValueError(f"max_batch must be >= 1 and max_wait_s >= 0, got {max_batch}, {max_wait_s}")
        self.fn, self.max_batch, self.max_wait_s = fn, int(max_batch), float(max_wait_s)
        self._q: queue.Queue[tuple[list[Any], Future] | None] = queue.Queue()
        self._lock = threading.Lock()
        self.queued_rows = 0  # rows waiting for a call
        self.running_rows = 0  # rows of the call in progress
        self.calls = 0  # model calls made
        self.rows_done = 0  # rows answered
        self._closed = False
        self._carry: tuple[list[Any], Future] | None = None  # a request that did not fit the last call
        self._thread = threading.Thread(target=self._loop, name="wmrl-microbatch", daemon=True)
        self._thread.start()

    def submit(self, rows: list[Any]) -> Future:
        """Queue one request; its future gives ``(answers [len(rows)], rows in the call)``.

        Raises:
            RuntimeError: the batcher is closed.
        """
        fut: Future = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the micro-batcher is closed")
            self.queued_rows += len(rows)
        self._q.put((list(rows), fut))
        return fut

    def close(self) -> None:
        """Answer what is queued, then stop the thread (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._q.put(None)
        self._thread.join(timeout=60)

    def _take(self) -> list[tuple[list[Any], Future]] | None:
        first, self._carry = (self._carry, None) if self._carry is not None else (self._q.get(), None)
        if first is None:
            return None
        jobs, n = [first], len(first[0])
        deadline = time.monotonic() + self.max_wait_s
        while n < self.max_batch:
            left = deadline - time.monotonic()
            try:
                job = self._q.get(timeout=left) if left > 0 else self._q.get_nowait()
            except queue.Empty:
                break
            if job is None:  # closing: answer what was taken, then stop on the next take
                self._q.put(None)
                break
            if n + len(job[0]) > self.max_batch:
                self._carry = job  # first of the next call
                break
            jobs.append(job)
            n += len(job[0])
        return jobs

    def _loop(self) -> None:
        while True:
            jobs = self._take()
            if jobs is None:
                return
            taken = sum(len(rs) for rs, _ in jobs)
            jobs = [(rs, fut) for rs, fut in jobs if fut.set_running_or_notify_cancel()]
            rows = [r for rs, _ in jobs for r in rs]
            with self._lock:
                self.queued_rows -= taken
                self.running_rows = len(rows)
            try:
                answers = list(self.fn(rows)) if rows else []
                if len(answers) != len(rows):
                    raise RuntimeError(f"the batched function returned {len(answers)} answers for {len(rows)} rows")
            except Exception as exc:  # every waiting request gets the error, the thread lives on
                log.exception("batched call of %d rows failed", len(rows))
                for _, fut in jobs:
                    fut.set_exception(exc)
            else:
                i = 0
                for rs, fut in jobs:
                    fut.set_result((answers[i:i + len(rs)], len(rows)))
                    i += len(rs)
            finally:
                with self._lock:
                    self.running_rows = 0
                    self.calls += 1
                    self.rows_done += len(rows)

"""A Ray executor: the same interface as :class:`~wmrl.execution.pool.LocalExecutor`, runs on a cluster.

Each execution is one Ray task that runs :func:`wmrl.execution.sandbox.run_program` on a worker
node (bubblewrap there, with the same limits) and returns the :class:`SandboxRun` (outputs,
rusage, the submission bytes). Grading happens back in this driver process with
:func:`wmrl.execution.runner.outcome`, so the private answers never leave it.

Requirements on a cluster: every node has bubblewrap and wmrl installed (same interpreter path,
or set ``SandboxConfig.python``), and sees the tasks' ``public/`` folders at the same path (a
shared filesystem). Cancelling a running future cancels its Ray task: the worker's sandbox loop is
interrupted and kills its process tree (and ``force=True`` after 5 s kills the worker, whose
sandbox dies with it through bubblewrap's ``--die-with-parent``).
"""
from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from wmrl.execution.log import ExecutionLog
from wmrl.execution.pool import ExecutionFuture, FutureExecutor
from wmrl.execution.runner import Grader, infra_result, outcome, time_limit_of
from wmrl.execution.sandbox import SandboxConfig, run_program
from wmrl.execution.types import ExecutionRequest, ExecutionResult

log = logging.getLogger(__name__)


def _remote_run(program: str, public_dir: str, time_limit_s: float, config: SandboxConfig):
    """Body of the Ray task (runs on a worker)."""
    return run_program(program, public_dir, time_limit_s, config)


class RayExecutor(FutureExecutor):
    """Run sandboxed executions as Ray tasks; grade and log in this process.

    Args:
        address: Ray cluster address for ``ray.init(address=...)`` (e.g. ``"auto"`` or
            ``"ray://head:10001"``); ``None`` uses an already initialised Ray or starts a local one.
            A Ray instance started here is shut down by :meth:`close`.
        max_concurrency: executions in flight at once (default: the cluster's CPUs divided by
            ``sandbox.threads``).
        sandbox: limits and isolation on the workers (default :class:`SandboxConfig()`).
        log: execution log, appended to from this process.
        grader: ``grader(task, path) -> Grade`` (default: the task suite's), run in this process.
        init_kwargs: more keyword arguments for ``ray.init`` when it is called here.
        max_workers: alias of ``max_concurrency`` (the :class:`LocalExecutor` name).

    Raises:
        ImportError: ray is not installed (``pip install 'ray>=2.40'``).
    """

    _name = "RayExecutor"

    def __init__(self, address: str | None = None, max_concurrency: int | None = None,
                 sandbox: SandboxConfig | None = None, log: ExecutionLog | None = None,
                 grader: Grader | None = None, init_kwargs: dict[str, Any] | None = None,
                 max_workers: int | None = None):
        import ray  # noqa: PLC0415 - heavy (ray)

        if max_workers is not None:  # the LocalExecutor spelling, accepted as an alias
            if max_concurrency is not None and max_concurrency != max_workers:
                raise ValueError(f"max_workers={max_workers} and max_concurrency={max_concurrency} disagree; pass one")
            max_concurrency = max_workers

        self._ray = ray
        self.sandbox = sandbox or SandboxConfig()
        self.log = log
        self.grader = grader
        self._owns_ray = False
        if not ray.is_initialized():
            ray.init(address=address, **(init_kwargs or {}))
            self._owns_ray = True
        if max_concurrency is None:
            cpus = int(ray.cluster_resources().get("CPU", 1))
            max_concurrency = max(1, cpus // max(1, self.sandbox.threads))
        if int(max_concurrency) < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency!r}")
        self.max_concurrency = int(max_concurrency)
        self._remote = ray.remote(num_cpus=self.sandbox.threads, max_retries=0)(_remote_run)
        self._threads = ThreadPoolExecutor(max_workers=self.max_concurrency, thread_name_prefix="wmrl-ray")
        self._init_futures()

    def _dispatch(self, fut: ExecutionFuture, request: ExecutionRequest) -> None:
        self._threads.submit(self._drive, fut, request)

    def _shutdown(self, running: list[ExecutionFuture]) -> None:
        """Cancel queued and running executions, stop the driver threads, shut down a Ray started here."""
        for fut in running:
            fut.cancel()
        self._threads.shutdown(wait=True, cancel_futures=True)
        if self._owns_ray:
            self._ray.shutdown()

    def _run(self, fut: ExecutionFuture, request: ExecutionRequest) -> ExecutionResult:
        ray = self._ray
        try:
            limit = time_limit_of(request)
            ref = self._remote.remote(request.program, str(request.task.public_dir), limit, self.sandbox)
        except Exception as exc:  # noqa: BLE001
            return infra_result(request, f"could not submit the Ray task: {type(exc).__name__}: {exc}")
        cancel_sent = None
        while True:
            ready, _ = ray.wait([ref], timeout=0.1)
            if ready:
                break
            if fut.kill_event.is_set():
                now = time.monotonic()
                if cancel_sent is None:
                    ray.cancel(ref, force=False)
                    cancel_sent = now
                elif now - cancel_sent > 5:
                    ray.cancel(ref, force=True)
                    cancel_sent = float("inf")
        try:
            run = ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - task cancelled, worker died, sandbox unavailable
            why = "cancelled" if fut.kill_event.is_set() else "Ray task failed"
            return infra_result(request, f"{why}: {type(exc).__name__}: {str(exc)[:2000]}")
        return outcome(request, run, self.grader)

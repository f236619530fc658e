"""CachingExecutor: each distinct (task, program, limit) runs once; repeats cost nothing, are logged, and a
resumed run's log seeds the cache."""
from __future__ import annotations

import threading
from concurrent.futures import Future

from wmrl.execution.cache import CachingExecutor
from wmrl.execution.log import ExecutionLog
from wmrl.execution.pool import LocalExecutor
from wmrl.execution.types import ExecutionRequest, ExecutionResult, ExecutionStatus, program_hash
from wmrl.interfaces import Executor

from conftest import GOOD_PROGRAM, WEAK_PROGRAM, require_bwrap


class _Counting:
    """A fake inner executor: answers each request after ``release`` is set, counting what it ran."""

    def __init__(self, status: ExecutionStatus = ExecutionStatus.OK) -> None:
        self.ran: list[str] = []
        self.release = threading.Event()
        self.status = status
        self.closed = False

    def submit(self, request: ExecutionRequest) -> Future[ExecutionResult]:
        self.ran.append(request.request_id)
        fut: Future[ExecutionResult] = Future()
        status = self.status

        def finish() -> None:
            self.release.wait(10)
            fut.set_result(ExecutionResult(request.request_id, request.task.id, status, 0.5,
                                           0.75 if status == ExecutionStatus.OK else None, 1.5, 1.2, 10, "", "",
                                           program_hash(request.program), time_limit_s=request.task.time_limit_s))
        threading.Thread(target=finish, daemon=True).start()
        return fut

    def close(self) -> None:
        self.closed = True


def test_repeats_wait_for_the_running_execution_and_cost_nothing(tiny_task, tmp_path):
    inner = _Counting()
    log = ExecutionLog(tmp_path / "log.sqlite")
    ex = CachingExecutor(inner, log)
    assert isinstance(ex, Executor)
    futs = [ex.submit(ExecutionRequest(tiny_task, p, request_id=f"r{i}"))
            for i, p in enumerate(["print(1)", "print(1)", "print(2)"])]
    inner.release.set()
    res = [f.result(10) for f in futs]
    assert inner.ran == ["r0", "r2"] and (ex.hits, ex.misses) == (1, 2)
    assert [r.request_id for r in res] == ["r0", "r1", "r2"]
    assert res[1].reward == res[0].reward == 0.75 and res[1].cpu_s == 0.0 and res[1].wall_s == 0.0
    # a later repeat is answered at once; another time limit is another key
    again = ex.submit(ExecutionRequest(tiny_task, "print(2)", request_id="r3")).result(1)
    assert again.reward == 0.75 and again.cpu_s == 0.0 and inner.ran == ["r0", "r2"]
    ex.submit(ExecutionRequest(tiny_task, "print(2)", request_id="r4", time_limit_s=3.0)).result(10)
    assert inner.ran == ["r0", "r2", "r4"]
    rows = {r["request_id"]: r for r in log.records()}
    assert set(rows) >= {"r1", "r3"} and rows["r1"]["meta"]["cached_from"] == "r0"  # hits logged by the cache
    ex.close()
    assert inner.closed


def test_infrastructure_errors_are_not_cached(tiny_task, tmp_path):
    inner = _Counting(ExecutionStatus.INFRA_ERROR)
    inner.release.set()
    ex = CachingExecutor(inner)
    for i in range(3):
        assert ex.submit(ExecutionRequest(tiny_task, "print(1)", request_id=f"r{i}")).result(10).status == \
            ExecutionStatus.INFRA_ERROR
    assert inner.ran == ["r0", "r1", "r2"]


def test_real_executions_once_and_the_log_seeds_a_resumed_run(tiny_task, tmp_path):
    require_bwrap()
    path = tmp_path / "log.sqlite"
    with LocalExecutor(max_workers=2, log=ExecutionLog(path)) as inner:
        ex = CachingExecutor(inner, inner.log)
        res = ex.run_batch([ExecutionRequest(tiny_task, p, request_id=str(i))
                            for i, p in enumerate([GOOD_PROGRAM, WEAK_PROGRAM, GOOD_PROGRAM])])
    assert [r.status for r in res] == [ExecutionStatus.OK] * 3
    assert res[2].score == res[0].score and res[2].cpu_s == 0.0 < res[0].cpu_s
    assert ex.misses == 2 and ex.hits == 1
    with LocalExecutor(max_workers=1, log=ExecutionLog(path)) as inner2:  # the run resumes on its log
        ex2 = CachingExecutor(inner2, inner2.log)
        r = ex2.submit(ExecutionRequest(tiny_task, WEAK_PROGRAM, request_id="resumed")).result(60)
    assert ex2.misses == 0 and r.score == res[1].score and r.cpu_s == 0.0


def test_the_training_config_switches_the_cache_on(tmp_path):
    from wmrl.training.config import load_config
    from wmrl.training.parts import make_executor

    on = make_executor(load_config(None, ["executor.cache=true", "executor.sandbox=false"]), tmp_path / "a.sqlite")
    off = make_executor(load_config(None, ["executor.sandbox=false"]), tmp_path / "b.sqlite")
    try:
        assert isinstance(on, CachingExecutor) and isinstance(on.inner, LocalExecutor)
        assert isinstance(off, LocalExecutor)
    finally:
        on.close()
        off.close()

"""LocalExecutor: ordering, concurrency, cancellation, logging, the Executor protocol."""
from __future__ import annotations

import time
from concurrent.futures import CancelledError

import pytest

from wmrl.execution.log import ExecutionLog
from wmrl.execution.pool import LocalExecutor
from wmrl.execution.sandbox import SandboxConfig, SandboxUnavailable
from wmrl.execution.types import ExecutionRequest, ExecutionStatus
from wmrl.interfaces import Executor

from conftest import GOOD_PROGRAM, WEAK_PROGRAM, require_bwrap


def sleeper(s: float, code: int = 0) -> str:
    return f"import time, sys\ntime.sleep({s})\nopen('submission.csv', 'w').write('id,y\\n')\nsys.exit({code})\n"


@pytest.fixture()
def executor():
    require_bwrap()
    with LocalExecutor(max_workers=2) as ex:
        yield ex


def test_is_an_executor(executor):
    assert isinstance(executor, Executor)
    assert LocalExecutor().max_workers >= 1


def test_batch_results_in_submission_order_and_graded(executor, tiny_task, tmp_path):
    reqs = [ExecutionRequest(tiny_task, p, request_id=str(i), meta={"i": i})
            for i, p in enumerate([sleeper(0.8, 3), GOOD_PROGRAM, WEAK_PROGRAM, sleeper(0.1, 4)])]
    res = executor.run_batch(reqs)
    assert [r.request_id for r in res] == ["0", "1", "2", "3"]
    assert [r.status for r in res] == [ExecutionStatus.RUNTIME_ERROR, ExecutionStatus.OK, ExecutionStatus.OK,
                                       ExecutionStatus.RUNTIME_ERROR]
    assert res[0].error == "exit code 3" and res[3].error == "exit code 4"
    assert res[1].score == pytest.approx(1.0) and res[1].reward == 1.0 and res[1].medal == "gold"
    assert 0 <= res[2].reward < res[1].reward


def test_runs_concurrently(executor, tiny_task):
    t0 = time.monotonic()
    res = executor.run_batch([ExecutionRequest(tiny_task, sleeper(1.5)) for _ in range(2)])
    elapsed = time.monotonic() - t0
    assert all(r.wall_s >= 1.5 for r in res)
    assert elapsed < res[0].wall_s + res[1].wall_s - 0.7, elapsed  # the two 1.5 s sleeps overlapped


def test_cancel_running_kills_it(executor, tiny_task):
    fut = executor.submit(ExecutionRequest(tiny_task, sleeper(60)))
    while not fut.running():
        time.sleep(0.05)
    time.sleep(0.5)
    t0 = time.monotonic()
    assert fut.cancel() and fut.cancelled()
    with pytest.raises(CancelledError):
        fut.result()
    # the worker is free again quickly: a new job finishes soon
    r = executor.submit(ExecutionRequest(tiny_task, sleeper(0.1, 5))).result(timeout=30)
    assert r.status == ExecutionStatus.RUNTIME_ERROR and time.monotonic() - t0 < 10


def test_cancel_pending(tiny_task):
    require_bwrap()
    with LocalExecutor(max_workers=1) as ex:
        first = ex.submit(ExecutionRequest(tiny_task, sleeper(1.0)))
        second = ex.submit(ExecutionRequest(tiny_task, sleeper(1.0)))
        assert second.cancel()
        assert first.result(timeout=30).status == ExecutionStatus.INVALID_SUBMISSION
        assert second.cancelled()


def test_run_batch_turns_a_cancelled_job_into_infra_error(tiny_task):
    require_bwrap()
    import threading

    with LocalExecutor(max_workers=1) as ex:
        reqs = [ExecutionRequest(tiny_task, sleeper(30), request_id="slow")]
        timer = threading.Timer(1.0, lambda: [f.cancel() for f in list(ex._running)])
        timer.start()
        res = ex.run_batch(reqs)
        assert res[0].status == ExecutionStatus.INFRA_ERROR and res[0].reward is None


def test_close_kills_running_and_refuses_new(tiny_task):
    require_bwrap()
    ex = LocalExecutor(max_workers=1)
    fut = ex.submit(ExecutionRequest(tiny_task, sleeper(60)))
    while not fut.running():
        time.sleep(0.05)
    t0 = time.monotonic()
    ex.close()
    assert fut.cancelled() and time.monotonic() - t0 < 10
    with pytest.raises(RuntimeError, match="closed"):
        ex.submit(ExecutionRequest(tiny_task, "print(1)"))


def test_results_are_logged(tiny_task, tmp_path):
    require_bwrap()
    lg = ExecutionLog(tmp_path / "exec.sqlite")
    with LocalExecutor(max_workers=2, log=lg) as ex:
        ex.run_batch([ExecutionRequest(tiny_task, GOOD_PROGRAM, request_id="a", meta={"completion": "c"}),
                      ExecutionRequest(tiny_task, "raise SystemExit(2)", request_id="b")])
    rows = {r["request_id"]: r for r in lg.records()}
    assert rows["a"]["status"] == "ok" and rows["a"]["meta"] == {"completion": "c"} and rows["a"]["cpu_s"] > 0
    assert rows["b"]["status"] == "runtime_error" and rows["b"]["reward"] == 0.0


def test_refuses_without_bwrap():
    with pytest.raises(SandboxUnavailable, match="apt-get install"):
        LocalExecutor(sandbox=SandboxConfig(bwrap_path="/nonexistent"))
    with pytest.raises(ValueError):
        LocalExecutor(max_workers=0)


def test_a_program_the_sandbox_cannot_write_is_its_own_failure_and_the_pool_keeps_working(tiny_task, tmp_path):
    """A lone surrogate in the program text (no UTF-8 file can hold it): the driver fails, again on re-execution,
    so the program's own failure (never a missing outcome it could censor with); the row is logged with "?" in
    its place, and the next execution runs (the worker thread survives)."""
    from wmrl.execution.log import ExecutionLog
    from wmrl.execution.pool import LocalExecutor
    from wmrl.execution.types import ExecutionRequest

    with ExecutionLog(tmp_path / "x.sqlite") as lg:
        with LocalExecutor(max_workers=1, log=lg) as ex:
            bad = ex.submit(ExecutionRequest(task=tiny_task, program="print('\udcff')")).result(timeout=60)
            good = ex.submit(ExecutionRequest(task=tiny_task, program="print(1)")).result(timeout=120)
        assert bad.status.value == "runtime_error" and "UnicodeEncodeError" in bad.error and "reproduced" in bad.error
        assert bad.reward == tiny_task.failure_reward
        assert good.status.value == "invalid_submission"  # it ran: no submission.csv
        rows = lg.records()
        assert len(rows) == 2 and rows[0]["program"] == "print('?')"  # encoded with "replace"

"""RayExecutor: the same batch gives the same outcomes as the local pool (local Ray started here)."""
from __future__ import annotations

import time

import pytest

from wmrl.execution.log import ExecutionLog
from wmrl.execution.pool import LocalExecutor
from wmrl.execution.types import ExecutionRequest, ExecutionStatus
from wmrl.interfaces import Executor

from conftest import GOOD_PROGRAM, WEAK_PROGRAM, require_bwrap

pytestmark = pytest.mark.ray

BATCH = [
    ("good", GOOD_PROGRAM, None),
    ("weak", WEAK_PROGRAM, None),
    ("crash", "raise ValueError('boom')", None),
    ("nosub", "print('no submission')", None),
    ("loop", "while True: pass", 2.0),
    ("extra", "open('submission.csv','w').write('id,y\\n999999,0.5\\n')", None),
]


@pytest.fixture(scope="module")
def ray_executor():
    require_bwrap()
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    from wmrl.execution.ray_pool import RayExecutor

    ex = RayExecutor(max_concurrency=2)
    try:
        yield ex
    finally:
        ex.close()
        ray.shutdown()


def _requests(task):
    return [ExecutionRequest(task, prog, request_id=name, time_limit_s=limit) for name, prog, limit in BATCH]


def test_same_outcomes_as_the_local_pool(ray_executor, tiny_task, tmp_path):
    assert isinstance(ray_executor, Executor)
    with LocalExecutor(max_workers=2) as local:
        expected = local.run_batch(_requests(tiny_task))
    lg = ExecutionLog(tmp_path / "ray.sqlite")
    ray_executor.log = lg
    try:
        got = ray_executor.run_batch(_requests(tiny_task))
    finally:
        ray_executor.log = None
    assert [r.request_id for r in got] == [name for name, _, _ in BATCH]
    assert [r.status for r in got] == [r.status for r in expected]
    assert [r.status.value for r in got] == ["ok", "ok", "runtime_error", "invalid_submission", "timeout",
                                            "invalid_submission"]
    for a, b in zip(got, expected):
        assert a.score == b.score and a.reward == b.reward and a.program_sha256 == b.program_sha256
        assert a.sandbox == "bwrap" and (a.cpu_s > 0 or a.status == ExecutionStatus.INFRA_ERROR)
    assert lg.count() == len(BATCH)


def test_cancel_a_running_ray_execution(ray_executor, tiny_task):
    fut = ray_executor.submit(ExecutionRequest(tiny_task, "import time\ntime.sleep(120)\n"))
    while not fut.running():
        time.sleep(0.05)
    time.sleep(1.0)
    assert fut.cancel() and fut.cancelled()
    t0 = time.monotonic()
    r = ray_executor.run_batch([ExecutionRequest(tiny_task, GOOD_PROGRAM)])[0]
    assert r.status == ExecutionStatus.OK and time.monotonic() - t0 < 60

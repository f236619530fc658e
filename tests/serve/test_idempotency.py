"""Idempotency by request id: a request id runs once, sent twice or concurrently, and across a kill -9 of the
service and its restart on the same execution log (the log is the source of truth)."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.serve.servers import BINARY, REGRESSION, TOKEN, Server, auth
from wmrl.execution.log import ExecutionLog

pytestmark = pytest.mark.slow

TASK = "vcdextra-titanicp"


def _grade(url: str, rid: str, program: str = BINARY, task: str = TASK) -> httpx.Response:
    return httpx.post(url + "/v1/grade", headers=auth(), timeout=300,
                      json={"request_id": rid, "task_id": task, "program": program})


def test_one_id_runs_once_sequential_concurrent_and_conflicting(small_suite, tmp_path):
    log = tmp_path / "log.sqlite"
    with Server("sandbox", ["--token", TOKEN, "--workers", "2", "--log", str(log),
                            "--tasks-root", str(small_suite)]) as s:
        first = _grade(s.url, "twice").json()
        again = _grade(s.url, "twice").json()
        assert not first["replayed"] and again["replayed"]
        # the same outcome (the log keeps timestamps to the millisecond)
        assert again["started_at"] == pytest.approx(first["started_at"], abs=1e-3)
        same = set(first) - {"replayed", "started_at"}
        assert {k: again[k] for k in same} == {k: first[k] for k in same}
        with ThreadPoolExecutor(6) as pool:  # six at once, one id: one execution, six equal answers
            answers = [r.json() for r in pool.map(lambda _: _grade(s.url, "together"), range(6))]
        assert len({(a["status"], a["reward"], a["wall_s"]) for a in answers}) == 1
        r = _grade(s.url, "twice", program=BINARY + "# another program\n")
        assert r.status_code == 409 and "another program" in r.json()["detail"]
        r = _grade(s.url, "twice", task="aer-houseprices", program=REGRESSION % 1.0)
        assert r.status_code == 409 and "another task" in r.json()["detail"]
        h = s.health()["load"]
        assert h["executed"] == 2 and h["served"] == 8 and h["replayed"] >= 1
    exlog = ExecutionLog(log)
    assert exlog.count({"request_id": "twice"}) == 1 and exlog.count({"request_id": "together"}) == 1
    assert len(exlog) == 2


def test_kill9_mid_load_then_restart_answers_every_id_once(small_suite, tmp_path):
    """12 requests through the RemoteExecutor (which retries with the same ids); the service is killed with SIGKILL
    while some run, and restarted on the same log and port: every id is answered, each executed exactly once (an id
    in flight at the kill runs again once, its claim counting two starts)."""
    from wmrl.execution.types import ExecutionRequest
    from wmrl.serve.client import RemoteExecutor
    from wmrl.tasks.loader import TaskSuite

    log = tmp_path / "log.sqlite"
    args = ["--token", TOKEN, "--workers", "2", "--log", str(log), "--tasks-root", str(small_suite)]
    task = TaskSuite(small_suite).get(TASK)
    slow = "import time; time.sleep(1.0)\n" + BINARY
    reqs = [ExecutionRequest(task=task, program=slow + f"# variant {i}\n", request_id=f"r{i}") for i in range(12)]
    server = Server("sandbox", args).start()
    ex = RemoteExecutor(server.url, TOKEN, max_workers=6, namespace="kill", retries=10)
    try:
        futures = [ex.submit(r) for r in reqs]
        deadline = time.time() + 180
        while ExecutionLog(log).count() < 3 and time.time() < deadline:  # some finished, others in flight
            time.sleep(0.1)
        server.kill9()
        killed_with = ExecutionLog(log).count()
        assert 3 <= killed_with < 12
        restarted = Server("sandbox", args, port=server.port).start()
        try:
            results = [f.result(timeout=300) for f in futures]
            # after the restart only the ids without a logged outcome ran (those in flight or not yet sent)
            assert restarted.health()["load"]["executed"] == 12 - killed_with
        finally:
            restarted.stop()
    finally:
        ex.close()
        server.stop()
    assert [r.request_id for r in results] == [f"r{i}" for i in range(12)]
    assert all(r.status.value == "ok" and r.reward is not None for r in results), [r.error for r in results]
    exlog = ExecutionLog(log)
    rows = exlog.records()
    assert sorted(r["request_id"] for r in rows) == sorted(f"kill/r{i}" for i in range(12))  # once each, none lost
    restarts = [exlog.claimed(f"kill/r{i}")["attempts"] for i in range(12)]
    assert set(restarts) <= {1, 2} and 2 in restarts  # something was in flight at the kill and ran again, once
    assert ex.client.n_retries > 0


def test_an_id_that_died_with_the_service_twice_is_not_started_a_third_time_and_fails(small_suite, tmp_path):
    from fastapi.testclient import TestClient

    from wmrl.execution.pool import LocalExecutor
    from wmrl.execution.types import program_hash
    from wmrl.serve.sandbox_app import SandboxService, create_sandbox_app
    from wmrl.tasks.loader import TaskSuite

    exlog = ExecutionLog(tmp_path / "log.sqlite")
    for _ in range(2):  # two starts that never finished (the service died during each)
        exlog.claim("poison", TASK, program_hash(BINARY))
    with LocalExecutor(max_workers=1, log=exlog) as ex:
        svc = SandboxService(TaskSuite(small_suite), ex, exlog, max_concurrency=2, timeout_s=60, max_attempts=2)
        client = TestClient(create_sandbox_app(svc, token=None))
        a = client.post("/v1/grade", json={"request_id": "poison", "task_id": TASK, "program": BINARY}).json()
        assert a["status"] == "runtime_error" and "died each of the 2 times" in a["error"] and a["attempt"] == 3
        assert a["reward"] == TaskSuite(small_suite).get(TASK).failure_reward  # the program's failure, not dropped
        b = client.post("/v1/grade", json={"request_id": "poison", "task_id": TASK, "program": BINARY}).json()
        assert b["replayed"] and b["status"] == "runtime_error"  # final: answered from the log from now on
        assert svc.counters.executed == 0


def test_an_id_that_died_with_the_service_runs_again_alone(small_suite, tmp_path):
    """A death with several programs running blames none of them: the retried id waits until nothing else runs,
    holds new ids off meanwhile, and nothing else is admitted while it runs."""
    from concurrent.futures import Future

    from fastapi.testclient import TestClient

    from wmrl.execution.pool import LocalExecutor
    from wmrl.execution.types import program_hash
    from wmrl.serve.sandbox_app import SandboxService, _Running, create_sandbox_app
    from wmrl.tasks.loader import TaskSuite

    exlog = ExecutionLog(tmp_path / "log.sqlite")
    exlog.claim("suspect", TASK, program_hash(BINARY))  # started once, never finished: the service died
    with LocalExecutor(max_workers=2, log=exlog) as ex:
        svc = SandboxService(TaskSuite(small_suite), ex, exlog, max_concurrency=4, timeout_s=120, max_attempts=2)
        client = TestClient(create_sandbox_app(svc, token=None))
        svc.running["other"] = _Running(Future(), TASK, "x", 1)  # another execution is running
        r = client.post("/v1/grade", json={"request_id": "suspect", "task_id": TASK, "program": BINARY})
        assert r.status_code == 503 and "runs again alone" in r.json()["detail"] and "retry-after" in r.headers
        r = client.post("/v1/grade", json={"request_id": "newcomer", "task_id": TASK, "program": BINARY})
        assert r.status_code == 503 and "waits to run alone" in r.json()["detail"]
        del svc.running["other"]
        svc.solo = "elsewhere"  # while an id runs alone, nothing new is admitted
        r = client.post("/v1/grade", json={"request_id": "newcomer", "task_id": TASK, "program": BINARY})
        assert r.status_code == 503 and "runs alone" in r.json()["detail"]
        svc.solo = None
        a = client.post("/v1/grade", json={"request_id": "suspect", "task_id": TASK, "program": BINARY}).json()
        assert a["status"] == "ok" and a["attempt"] == 2
        assert svc.solo is None and svc.counters.executed == 1
        b = client.post("/v1/grade", json={"request_id": "newcomer", "task_id": TASK, "program": BINARY}).json()
        assert b["status"] == "ok"

"""The sandbox service in process (FastAPI's test client on the real executor and log): capacity (503 +
Retry-After), a slow execution past the timeout (504, then the retry gets its logged outcome), validation views,
batches, and the health report."""
from __future__ import annotations

import threading
import time

import pytest
from fastapi.testclient import TestClient

from tests.serve.servers import BINARY
from wmrl.execution.log import ExecutionLog
from wmrl.execution.pool import LocalExecutor
from wmrl.serve.sandbox_app import SandboxService, create_sandbox_app
from wmrl.tasks.loader import TaskSuite

pytestmark = pytest.mark.slow

TASK = "vcdextra-titanicp"
SLOW = "import time; time.sleep(2.0)\n" + BINARY


@pytest.fixture
def service(small_suite, tmp_path):
    exlog = ExecutionLog(tmp_path / "log.sqlite")
    with LocalExecutor(max_workers=1, log=exlog) as ex:
        svc = SandboxService(TaskSuite(small_suite), ex, exlog, max_concurrency=1, timeout_s=60)
        yield svc, TestClient(create_sandbox_app(svc, token=None))


def test_capacity_then_timeout_then_the_logged_outcome(service):
    svc, client = service
    answers = {}
    t = threading.Thread(target=lambda: answers.update(slow=client.post(
        "/v1/grade", json={"request_id": "slow", "task_id": TASK, "program": SLOW})))
    t.start()
    deadline = time.time() + 30
    while not svc.running and time.time() < deadline:
        time.sleep(0.02)
    busy = client.post("/v1/grade", json={"request_id": "other", "task_id": TASK, "program": BINARY})
    assert busy.status_code == 503 and int(busy.headers["retry-after"]) >= 1 and busy.json()["error"] == "busy"
    assert "1 of 1 items in flight" in busy.json()["detail"]
    h = client.get("/v1/health").json()
    assert h["load"]["in_flight"] == 1 and h["capacity"] == {"workers": 1, "max_concurrency": 1, "max_batch": 1,
                                                             "max_body_bytes": 16 * 2**20, "timeout_s": 60.0}
    svc.timeout_s = 0.2  # a joining duplicate of the slow id gives up waiting: 504, the execution goes on
    late = client.post("/v1/grade", json={"request_id": "slow", "task_id": TASK, "program": SLOW})
    assert late.status_code == 504 and "retry with the same request id" in late.json()["detail"]
    t.join(timeout=120)
    svc.timeout_s = 60
    assert answers["slow"].status_code == 200 and answers["slow"].json()["status"] == "ok"
    again = client.post("/v1/grade", json={"request_id": "slow", "task_id": TASK, "program": SLOW}).json()
    assert again["replayed"] and again["reward"] == answers["slow"].json()["reward"]
    assert svc.log.count({"request_id": "slow"}) == 1
    assert client.post("/v1/grade", json={"request_id": "other", "task_id": TASK,
                                          "program": BINARY}).status_code == 200  # capacity is back


def test_validation_view_and_batches(service):
    svc, client = service
    svc.max_concurrency = 4
    r = client.post("/v1/grade/batch", json={"items": [
        {"request_id": "v1", "task_id": TASK, "program": BINARY, "validation": {"fraction": 0.25, "seed": 3}},
        {"request_id": "t1", "task_id": TASK, "program": BINARY}]})
    assert r.status_code == 200, r.text
    view, plain = r.json()["results"]
    assert view["status"] == plain["status"] == "ok"
    assert view["validation_score"] is not None and plain["validation_score"] is None
    bad = client.post("/v1/grade", json={"task_id": TASK, "program": BINARY, "validation": {"fraction": 1.5}})
    assert bad.status_code == 422 and bad.json()["detail"]["errors"][0]["loc"][-1] == "fraction"
    dup = client.post("/v1/grade/batch", json={"items": [{"request_id": "d", "task_id": TASK, "program": "x"}] * 2})
    assert dup.status_code == 422 and "appears twice" in dup.json()["detail"]
    h = client.get("/v1/health").json()
    assert h["service"] == "sandbox" and h["load"]["executed"] == 2 and h["load"]["served"] == 2
    assert h["load"]["rejected"] == 2 and h["detail"]["max_attempts"] == 2

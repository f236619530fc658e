"""Refusals in the contract's shape, in process: an oversized batch is a 413 naming the cap (both services), a
request without ``program`` a 422 naming it, unknown paths/methods and unparseable JSON in the error envelope, the
token checked before the body's size, a replayed answer's real attempt count, and the CLI's port and token-file
errors."""
from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from tests.serve.servers import BINARY, ROOT
from tests.serve.test_world_model_service import CountingWorldModel, FakeTasks
from wmrl.execution.log import ExecutionLog
from wmrl.execution.pool import LocalExecutor
from wmrl.execution.types import program_hash
from wmrl.serve.sandbox_app import SandboxService, create_sandbox_app
from wmrl.serve.world_model_app import WorldModelService, create_world_model_app
from wmrl.tasks.loader import TaskSuite

TASK = "vcdextra-titanicp"
TOKEN = "tok"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _envelope(r, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"contract", "error", "detail"} and body["contract"] == "wmrl.serve/v1", body
    assert body["error"] == code, body
    return body


@pytest.fixture
def sandbox(small_suite, tmp_path):
    exlog = ExecutionLog(tmp_path / "log.sqlite")
    with LocalExecutor(max_workers=1, log=exlog) as ex:
        svc = SandboxService(TaskSuite(small_suite), ex, exlog, max_concurrency=2, timeout_s=60)
        yield svc, TestClient(create_sandbox_app(svc, token=TOKEN, max_body_bytes=4096))


@pytest.fixture
def world_model():
    svc = WorldModelService(CountingWorldModel(), FakeTasks(), None, max_batch=8, max_concurrency=2, timeout_s=30)
    try:
        yield svc, TestClient(create_world_model_app(svc, token=TOKEN))
    finally:
        svc.batcher.close()


def test_a_batch_over_the_cap_is_413_naming_it_even_when_idle(sandbox, world_model):
    svc, client = sandbox
    items = [{"request_id": f"b{i}", "task_id": TASK, "program": BINARY} for i in range(3)]
    body = _envelope(client.post("/v1/grade/batch", headers=AUTH, json={"items": items}), 413, "too_large")
    assert "--max-concurrency" in body["detail"] and "at most 2" in body["detail"]
    assert not svc.running and svc.log.claimed("b0") is None  # nothing started
    wsvc, wclient = world_model
    items = [{"prompt": "p", "program": f"x = {i}"} for i in range(3)]
    body = _envelope(wclient.post("/v1/grade/batch", headers=AUTH, json={"items": items}), 413, "too_large")
    assert "--max-concurrency" in body["detail"] and wsvc.world_model.calls == []
    r = wclient.post("/v1/grade/batch", headers=AUTH, json={"items": items[:2]})
    assert r.status_code == 200 and len(r.json()["results"]) == 2


def test_program_is_required_by_both_services(sandbox, world_model):
    for _, client in (sandbox, world_model):
        body = _envelope(client.post("/v1/grade", headers=AUTH, json={"task_id": TASK, "prompt": "p"}),
                         422, "invalid")
        assert ["body", "program"] in [e["loc"] for e in body["detail"]["errors"]]
    _, wclient = world_model  # prompt and completion stay optional
    r = wclient.post("/v1/grade", headers=AUTH, json={"task_id": "t1", "program": "x = 1", "prompt": "p"})
    assert r.status_code == 200, r.text


def test_every_http_error_is_an_envelope(sandbox):
    _, client = sandbox
    _envelope(client.get("/v1/grade", headers=AUTH), 405, "method_not_allowed")
    assert "/v1/" in _envelope(client.get("/v2/health"), 404, "not_found")["detail"]
    deep = b'{"task_id": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    small = TestClient(create_sandbox_app(sandbox[0], token=TOKEN, max_body_bytes=1 << 20))
    body = _envelope(small.post("/v1/grade", headers={**AUTH, "content-type": "application/json"}, content=deep),
                     422, "invalid")
    assert "JSON" in body["detail"]


def test_the_token_is_checked_before_the_body_size(sandbox):
    _, client = sandbox
    r = client.post("/v1/grade", json={"task_id": TASK, "program": "#" * 10_000})
    assert _envelope(r, 401, "unauthorized") and r.headers["www-authenticate"] == "Bearer"
    _envelope(client.post("/v1/grade", headers={"Authorization": "Bearer nope"}, json={"program": "x"}),
              401, "unauthorized")
    _envelope(client.post("/v1/grade", headers=AUTH, json={"task_id": TASK, "program": "#" * 10_000}),
              413, "too_large")


def test_a_replayed_answer_reports_the_claims_attempts(sandbox, small_suite, tmp_path):
    svc, client = sandbox
    svc.log.claim("again", TASK, program_hash(BINARY))  # started once, then the service died
    first = client.post("/v1/grade", headers=AUTH, json={"request_id": "again", "task_id": TASK, "program": BINARY})
    assert first.status_code == 200 and first.json()["attempt"] == 2 and not first.json()["replayed"]
    svc.executor.close()
    exlog = ExecutionLog(tmp_path / "log.sqlite")  # a restart on the same log
    with LocalExecutor(max_workers=1, log=exlog) as ex:
        restarted = SandboxService(TaskSuite(small_suite), ex, exlog, max_concurrency=2, timeout_s=60)
        again = TestClient(create_sandbox_app(restarted, token=None)).post(
            "/v1/grade", json={"request_id": "again", "task_id": TASK, "program": BINARY}).json()
    assert again["replayed"] and again["attempt"] == 2 and again["score"] == first.json()["score"]


def _cli(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "wmrl.cli", "serve", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})


def test_cli_port_in_use_and_unreadable_token_file(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        p = _cli("sandbox", "--no-token", "--port", str(port), "--unsandboxed", cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and str(port) in lines[0] and lines[0].startswith("error:")
    assert "/v1/health" not in p.stderr and list(tmp_path.iterdir()) == []  # no log created, no URL printed
    p = _cli("sandbox", "--token-file", str(tmp_path / "nope"), cwd=tmp_path)
    assert p.returncode == 2 and "--token-file" in p.stderr and "nope" in p.stderr, p.stderr

"""Bad input against a real `wmrl serve sandbox` subprocess: each is refused with a clear 4xx, and the service goes on
serving (a good request right after each one is graded)."""
from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest

from tests.serve.servers import BINARY, TOKEN, Server, auth

pytestmark = pytest.mark.slow

TASK = "vcdextra-titanicp"


@pytest.fixture(scope="module")
def server(small_suite, tmp_path_factory):
    log = tmp_path_factory.mktemp("bad") / "log.sqlite"
    with Server("sandbox", ["--token", TOKEN, "--workers", "2", "--max-body-bytes", "65536", "--read-timeout-s",
                            "2", "--log", str(log), "--tasks-root", str(small_suite)]) as s:
        s.log = log
        yield s


def _still_serves(server: Server, rid: str) -> None:
    r = httpx.post(server.url + "/v1/grade", headers=auth(), timeout=120,
                   json={"request_id": rid, "task_id": TASK, "program": BINARY})
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "ok" and 0.0 <= r.json()["reward"] <= 1.0


def _error(r: httpx.Response, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["contract"] == "wmrl.serve/v1" and body["error"] == code
    return body


def test_malformed_json_is_422_naming_the_problem(server):
    r = httpx.post(server.url + "/v1/grade", headers={**auth(), "content-type": "application/json"},
                   content=b'{"task_id": "vcdextra-titanicp", "program": ', timeout=30)
    body = _error(r, 422, "invalid")
    assert body["detail"]["errors"][0]["type"] == "json_invalid"
    r = httpx.post(server.url + "/v1/grade", headers=auth(), timeout=30,
                   json={"task_id": TASK, "program": "x", "time_limit_s": -1, "colour": "red"})
    locs = {tuple(e["loc"]) for e in _error(r, 422, "invalid")["detail"]["errors"]}
    assert ("body", "time_limit_s") in locs and ("body", "colour") in locs  # a typo is refused, not ignored
    r = httpx.post(server.url + "/v1/grade", headers=auth(), timeout=30,
                   json={"request_id": "bad id with spaces", "task_id": TASK, "program": "x"})
    assert "request_id must match" in json.dumps(_error(r, 422, "invalid")["detail"])
    _still_serves(server, "after-malformed")


def test_huge_body_is_413_declared_or_streamed(server):
    big = {"task_id": TASK, "program": "#" * 200_000}
    _error(httpx.post(server.url + "/v1/grade", headers=auth(), json=big, timeout=30), 413, "too_large")

    def chunks():  # no Content-Length: the guard counts what arrives
        yield b'{"task_id": "vcdextra-titanicp", "program": "'
        for _ in range(40):
            yield b"#" * 4096
        yield b'"}'

    r = httpx.post(server.url + "/v1/grade", headers={**auth(), "content-type": "application/json"},
                   content=chunks(), timeout=30)
    assert "--max-body-bytes" in _error(r, 413, "too_large")["detail"]
    _still_serves(server, "after-huge")


def test_missing_or_wrong_token_is_401(server):
    req = {"task_id": TASK, "program": BINARY}
    r = httpx.post(server.url + "/v1/grade", json=req, timeout=30)
    assert "missing bearer token" in _error(r, 401, "unauthorized")["detail"]
    assert r.headers["www-authenticate"] == "Bearer"
    r = httpx.post(server.url + "/v1/grade", json=req, headers={"Authorization": "Bearer nope"}, timeout=30)
    assert _error(r, 401, "unauthorized")["detail"] == "wrong bearer token"
    # the token is checked before the body: a bad body without a token is still a 401
    _error(httpx.post(server.url + "/v1/grade", content=b"{", timeout=30), 401, "unauthorized")
    _error(httpx.get(server.url + "/v1/tasks", timeout=30), 401, "unauthorized")
    served = httpx.get(server.url + "/v1/tasks", headers=auth(), timeout=30).json()["tasks"]
    assert {"aer-houseprices", TASK} <= set(served)
    _still_serves(server, "after-token")


def test_unknown_task_is_404_listing_the_known_ones(server):
    r = httpx.post(server.url + "/v1/grade", headers=auth(), json={"task_id": "no-such-task", "program": "x"},
                   timeout=30)
    detail = _error(r, 404, "not_found")["detail"]
    assert "no-such-task" in detail and TASK in detail
    r = httpx.post(server.url + "/v1/grade", headers=auth(), json={"program": "x"}, timeout=30)
    assert "task_id is required" in _error(r, 422, "invalid")["detail"]
    # a batch with one unknown task is refused whole, before anything runs
    before = server.health()["load"]["executed"]
    r = httpx.post(server.url + "/v1/grade/batch", headers=auth(), timeout=30,
                   json={"items": [{"task_id": TASK, "program": BINARY}, {"task_id": "nope", "program": "x"}]})
    _error(r, 404, "not_found")
    assert server.health()["load"]["executed"] == before
    _still_serves(server, "after-unknown")


def test_a_stalled_body_does_not_hang_other_requests(server):
    body = json.dumps({"request_id": "stalled", "task_id": TASK, "program": BINARY}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    head = (f"POST /v1/grade HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    sock.sendall(head + body[: len(body) // 2])  # half the body, then nothing
    answers: dict[str, bytes] = {}

    def read_slow() -> None:  # the head and the body may come in separate segments: read until closed
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        answers["slow"] = b"".join(chunks)

    t = threading.Thread(target=read_slow)
    t.start()
    t0 = time.monotonic()
    _still_serves(server, "while-stalled")  # served while the stalled body is pending
    assert httpx.get(server.url + "/v1/health", timeout=5).status_code == 200
    t.join(timeout=60)
    sock.close()
    assert answers["slow"].startswith(b"HTTP/1.1 408"), answers["slow"][:200]
    assert b"stalled" in answers["slow"]
    assert time.monotonic() - t0 < 60
    from wmrl.execution.log import ExecutionLog

    assert ExecutionLog(server.log).count({"request_id": "stalled"}) == 0  # nothing of it ran
    _still_serves(server, "after-stalled")
    h = server.health()
    assert h["load"]["rejected"] >= 1 and h["load"]["in_flight"] == 0

"""Attacks on `wmrl serve sandbox` and `wmrl serve world-model` (real subprocesses): connections that are opened and
never finish a request, more connections than the process has descriptors, a request id with a trailing newline,
and a program whose service dies while it runs, again and again (docs/services.md, "Connections" and "Blame")."""
from __future__ import annotations

import resource
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.serve.servers import BINARY, TOKEN, Server, auth, closed_by_server, fitted_world_model, open_idle
from wmrl.execution.log import ExecutionLog

pytestmark = pytest.mark.slow

TASK = "vcdextra-titanicp"


@pytest.fixture(scope="module")
def wm_dir(small_suite, tmp_path_factory) -> Path:
    return fitted_world_model(tmp_path_factory.mktemp("wm") / "wm", small_suite)


def _args(kind: str, small_suite: Path, wm_dir: Path, tmp: Path, *extra: str) -> list[str]:
    common = ["--token", TOKEN, "--tasks-root", str(small_suite), *extra]
    if kind == "sandbox":
        return [*common, "--workers", "1", "--log", str(tmp / "log.sqlite")]
    return [*common, "--model", str(wm_dir), "--backbone", "tiny", "--seed", "0", "--threads", "1"]


def _good(server: Server, rid: str) -> httpx.Response:
    body = {"request_id": rid, "task_id": TASK, "program": BINARY}
    if server.kind == "world-model":
        body.update(prompt="a task", completion="model = Ridge(alpha=1)\n")
    return httpx.post(server.url + "/v1/grade", headers=auth(), json=body, timeout=120)


def _close(socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()


@pytest.fixture
def many_descriptors():
    """This test process may open 4,000 sockets (soft RLIMIT_NOFILE raised to the hard limit, restored after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4000:
        pytest.skip(f"the descriptor hard limit is {hard}; this attack needs 4000")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_request_id_with_a_trailing_newline_is_refused():
    from pydantic import ValidationError

    from wmrl.serve.contract import GradeRequest

    with pytest.raises(ValidationError, match="request_id"):
        GradeRequest(request_id="poison\n", task_id=TASK, program="x")
    assert GradeRequest(request_id="ns/poison-1.a:b", task_id=TASK, program="x").request_id == "ns/poison-1.a:b"


@pytest.mark.parametrize("kind", ["sandbox", "world-model"])
def test_silent_and_half_request_line_connections_are_closed_after_the_header_deadline(kind, small_suite, wm_dir,
                                                                                        tmp_path):
    """Before: uvicorn gives a request head no deadline, so these stayed open for good (six still open after 75 s)."""
    with Server(kind, _args(kind, small_suite, wm_dir, tmp_path, "--header-timeout-s", "2",
                            "--read-timeout-s", "10")) as s:
        socks = open_idle(s.port, 3) + open_idle(s.port, 3, b"GET /v1/hea")
        try:
            assert len(socks) == 6
            assert len(closed_by_server(socks, 60.0)) == 6  # a 2 s deadline; 60 s leaves room for a loaded machine
            assert _good(s, "after-idle").status_code == 200
        finally:
            _close(socks)


@pytest.mark.parametrize("kind", ["sandbox", "world-model"])
def test_more_idle_connections_than_descriptors_leave_health_and_a_good_request_answered(
        kind, small_suite, wm_dir, tmp_path, many_descriptors):
    """Before: at the descriptor limit the server stopped accepting, so /v1/health and good requests waited behind
    idle sockets for good. The service's limit is 2,300 descriptors; 2,000 idle connections are most of it, then
    400 more are beyond it."""
    with Server(kind, _args(kind, small_suite, wm_dir, tmp_path), nofile=2300) as s:
        socks = open_idle(s.port, 2000)
        try:
            assert len(socks) == 2000
            assert httpx.get(s.url + "/v1/health", timeout=60).status_code == 200
            assert _good(s, "with-2000-idle").status_code == 200
            socks += open_idle(s.port, 400)
            assert httpx.get(s.url + "/v1/health", timeout=60).status_code == 200
            assert _good(s, "with-2400-idle").status_code == 200
        finally:
            _close(socks)


def test_connections_beyond_the_cap_are_refused_at_once_and_health_is_still_answered(small_suite, wm_dir,
                                                                                      tmp_path):
    """8 connections (the cap) held by authenticated requests whose bodies never come; idle connections beyond the
    cap and its health reserve are closed at once (not after the 120 s deadline), health is answered, and a good
    request is refused at once with 503 rather than left waiting."""
    with Server("sandbox", _args("sandbox", small_suite, wm_dir, tmp_path, "--max-connections", "8",
                                 "--header-timeout-s", "120", "--read-timeout-s", "120")) as s:
        head = (f"POST /v1/grade HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n").encode()
        busy = open_idle(s.port, 8, head)
        idle: list[socket.socket] = []
        try:
            time.sleep(1.0)
            idle = open_idle(s.port, 40)
            assert len(closed_by_server(idle, 30.0)) >= 20
            assert httpx.get(s.url + "/v1/health", timeout=30).status_code == 200
            r = _good(s, "beyond-the-cap")
            assert r.status_code == 503 and r.json()["error"] == "busy", r.text
        finally:
            _close(busy + idle)


def test_a_program_its_service_dies_under_twice_gets_the_failure_reward_not_infra_error(small_suite, tmp_path):
    """Before: the third send answered infra_error with no reward, so training dropped the sample and a program
    that can kill its host chose to be left out of its gradient."""
    from wmrl.execution.types import ExecutionRequest, ExecutionStatus
    from wmrl.serve.client import RemoteExecutor
    from wmrl.tasks.loader import TaskSuite

    log = tmp_path / "log.sqlite"
    args = ["--token", TOKEN, "--workers", "1", "--max-attempts", "2", "--log", str(log), "--tasks-root",
            str(small_suite)]
    program = "import time\ntime.sleep(120)\n" + BINARY
    server = Server("sandbox", args).start()
    try:
        for attempt in (1, 2):
            sender = threading.Thread(target=_send_and_forget, args=(server.url, "kill/poison", program), daemon=True)
            sender.start()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                claim = ExecutionLog(log).claimed("kill/poison")
                if claim and claim["attempts"] == attempt:
                    break
                time.sleep(0.1)
            time.sleep(1.0)  # the program is running
            server.kill9()  # as an out-of-memory kill of the service would
            sender.join(timeout=60)
            server = Server("sandbox", args, port=server.port).start()
        task = TaskSuite(small_suite).get(TASK)
        with RemoteExecutor(server.url, TOKEN, max_workers=1, namespace="kill", retries=2) as ex:
            third = ex.submit(ExecutionRequest(task=task, program=program, request_id="poison")).result(timeout=120)
            fourth = ex.submit(ExecutionRequest(task=task, program=program, request_id="poison")).result(timeout=120)
    finally:
        server.stop()
    assert not third.is_infra_error, third.error
    assert third.status == ExecutionStatus.RUNTIME_ERROR and "died" in third.error
    assert third.reward == pytest.approx(task.failure_reward)
    assert (fourth.status, fourth.reward) == (third.status, third.reward)  # final: answered from the log
    assert ExecutionLog(log).claimed("kill/poison")["attempts"] == 3


def _send_and_forget(url: str, rid: str, program: str) -> None:
    try:
        httpx.post(url + "/v1/grade", headers=auth(), timeout=300,
                   json={"request_id": rid, "task_id": TASK, "program": program})
    except httpx.TransportError:
        pass  # the service was killed under it

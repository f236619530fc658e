"""The hostile-program suite: every attack in ``hostile/`` must be contained by the sandbox.

Each program's docstring says ``EXPECT: <status>`` (and optionally ``CONFIG: key=value ...``).
For every program we assert the exact status and that nothing leaked or changed outside its
folder: the task's files (answers, leaderboard, public data) are byte-identical, a canary folder
outside the sandbox is untouched, the private-answer canary and the driver's secret environment
variable never appear in the program's output, no process of the sandbox's uid range survives,
no connection reached the driver's listening sockets, and the driver keeps working afterwards.
"""
from __future__ import annotations

import hashlib
import os
import re
import socket
import sys
import time
from pathlib import Path

import pytest

from wmrl.execution import sandbox as sb
from wmrl.execution.pool import LocalExecutor
from wmrl.execution.types import ExecutionRequest, ExecutionStatus

from conftest import GOOD_PROGRAM, SECRET_ANSWER_MARK, make_tiny_task, require_bwrap

HOSTILE_DIR = Path(__file__).with_name("hostile")
PROGRAMS = sorted(p.stem for p in HOSTILE_DIR.glob("*.py"))
SECRET = "wmrl-driver-secret-5b1e0d"
FORBIDDEN_MARKERS = ("WROTE", "CONNECTED", "RAISED", "LEAK", "STARTED", SECRET_ANSWER_MARK, SECRET)


def _snapshot(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "link:" + os.readlink(p)
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[rel] = "dir"
    return out


def _sandbox_uid_processes() -> list[str]:
    base = sb.SandboxConfig().uid_base + (os.getpid() % 4096) * 256
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        m = re.search(r"^Uid:\s+(\d+)", status, re.M)
        if m and base <= int(m.group(1)) < base + 256:
            found.append(f"{pid}: {status.splitlines()[0]}")
    return found


@pytest.fixture(scope="module")
def arena(tmp_path_factory):
    """The task, an outside canary folder, listening sockets, the secret env var, one executor."""
    require_bwrap()
    root = tmp_path_factory.mktemp("hostile")
    task = make_tiny_task(root / "task")
    outside = root / "outside"
    outside.mkdir()
    (outside / "canary.txt").write_text("do not touch")
    os.chmod(outside, 0o755)
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    tcp.setblocking(False)
    uds = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    uds.bind("\0wmrl-test-abstract")
    uds.listen(8)
    uds.setblocking(False)
    os.environ["WMRL_TEST_SECRET"] = SECRET
    config = sb.SandboxConfig(memory_bytes=768 * 1024**2, nproc=64, fsize_bytes=16 * 1024**2, nofile=64,
                              output_bytes=8 * 1024, disk_bytes=48 * 1024**2, max_files=2000)
    executor = LocalExecutor(max_workers=1, sandbox=config)
    subs = {
        "__PRIVATE_PATH__": str(task.answers_path),
        "__TASK_ROOT__": str(task.root),
        "__OUTSIDE_DIR__": str(outside),
        "__DRIVER_PORT__": str(tcp.getsockname()[1]),
        "__DRIVER_PID__": str(os.getpid()),
        "__PYTHON_PREFIX__": sys.prefix,
    }
    yield {"task": task, "outside": outside, "tcp": tcp, "uds": uds, "executor": executor,
           "subs": subs, "config": config}
    executor.close()
    tcp.close()
    uds.close()
    os.environ.pop("WMRL_TEST_SECRET", None)


def _load(name: str, subs: dict[str, str]) -> tuple[str, str, dict[str, float]]:
    text = (HOSTILE_DIR / f"{name}.py").read_text()
    for k, v in subs.items():
        text = text.replace(k, v)
    doc = text.split('"""')[1]
    expect = re.search(r"EXPECT:\s*(\w+)", doc).group(1)
    config = {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)",
                                                 doc.split("CONFIG:")[1])} if "CONFIG:" in doc else {}
    return text, expect, config


def test_suite_is_large_enough():
    assert len(PROGRAMS) >= 20, PROGRAMS


@pytest.mark.parametrize("name", PROGRAMS)
def test_hostile_program_is_contained(arena, name):
    program, expect, overrides = _load(name, arena["subs"])
    task = arena["task"]
    before_task = _snapshot(task.root)
    before_outside = _snapshot(arena["outside"])
    time_limit = overrides.pop("time_limit_s", 3.0)
    executor = arena["executor"]
    if overrides:
        executor = LocalExecutor(max_workers=1, sandbox=arena["config"].with_(**overrides))
    try:
        t0 = time.monotonic()
        result = executor.submit(ExecutionRequest(task, program, request_id=name,
                                                  time_limit_s=time_limit)).result(timeout=60)
        elapsed = time.monotonic() - t0
    finally:
        if executor is not arena["executor"]:
            executor.close()
    output = result.stdout + result.stderr
    assert result.status == ExecutionStatus(expect), (
        f"{name}: expected {expect}, got {result.status.value} ({result.error})\n{output[-3000:]}")
    for marker in FORBIDDEN_MARKERS:
        assert marker not in result.stdout, f"{name}: {marker!r} in stdout:\n{result.stdout[-3000:]}"
        assert marker not in result.stderr, f"{name}: {marker!r} in stderr"
    assert _snapshot(task.root) == before_task, f"{name} changed the task folder"
    assert _snapshot(arena["outside"]) == before_outside, f"{name} changed a folder outside the sandbox"
    assert _sandbox_uid_processes() == [], f"{name} left processes behind"
    for sock in (arena["tcp"], arena["uds"]):
        with pytest.raises(BlockingIOError):
            sock.accept()
    # limits are enforced promptly (the wall limit plus the 2 s kill grace at most, plus start-up)
    assert elapsed < time_limit + 10, f"{name} took {elapsed:.1f} s"
    if result.status == ExecutionStatus.INFRA_ERROR:
        assert result.reward is None
    else:
        assert result.reward is not None
        if result.status != ExecutionStatus.OK:
            assert result.reward == task.failure_reward
    assert len(result.stdout.encode()) <= arena["config"].output_bytes + 200
    if name == "huge_stdout":
        assert result.stdout_bytes >= 20 * 1024 * 1024 and "truncated" in result.stdout
    if name == "cpu_limit":
        assert "CPU-time limit" in result.error and result.cpu_s < 4, (result.error, result.cpu_s)
    if name == "busy_child_left_behind":
        assert result.wall_s < time_limit  # the leftover did not keep the sandbox alive


def test_driver_still_works_after_the_suite(arena):
    """Run last (file order): the same executor still grades a correct program perfectly."""
    r = arena["executor"].run_batch([ExecutionRequest(arena["task"], GOOD_PROGRAM, time_limit_s=20)])[0]
    assert r.status == ExecutionStatus.OK, r.error + r.stderr
    assert r.score == pytest.approx(1.0)

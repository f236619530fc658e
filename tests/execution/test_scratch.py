"""Scratch cleanup never touches a live run: two drivers in different PID namespaces.

Driver A runs in its own PID namespace (``unshare --pid --fork --mount-proc``), so the pid stamped
in its folder's name means nothing in this process's namespace (pid-visibility ownership used to
delete such folders mid-run). Driver B (this test process) sweeps the shared scratch folder and runs
its own execution there while A's program is still running: A's folder must stay and A's execution
must end ``ok``. Then a driver in another namespace is SIGKILLed mid-run: its lock dies with it and
B's sweep removes the folder it left.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wmrl.execution import scratch as scr
from wmrl.execution.runner import execute
from wmrl.execution.sandbox import SandboxConfig
from wmrl.execution.types import ExecutionRequest, ExecutionStatus

from conftest import GOOD_PROGRAM, require_bwrap

ROOT = Path(__file__).resolve().parents[2]

DRIVER = """
import json, sys
sys.path.insert(0, {tests!r})
from conftest import make_tiny_task
from pathlib import Path
from wmrl.execution.runner import execute
from wmrl.execution.sandbox import SandboxConfig
from wmrl.execution.types import ExecutionRequest
task = make_tiny_task(Path({task!r}))
program = "import time; time.sleep({sleep})\\n" + {good!r}
r = execute(ExecutionRequest(task=task, program=program, time_limit_s=60), SandboxConfig(scratch_dir={scratch!r}))
print(json.dumps({{"status": r.status.value, "score": r.score, "error": r.error}}))
"""


def _unshare_ok() -> bool:
    if shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _free_pid(start: int = 300) -> int:
    """A pid number no process of this namespace has now."""
    for pid in range(start, 4_000_000):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
    raise AssertionError("no free pid")


def _start_driver(tmp_path: Path, scratch: Path, name: str, sleep: float) -> tuple[subprocess.Popen, int]:
    """Driver A in a new PID namespace. Its shell (pid 1 there) first spends pids 2..N+1 on N runs of
    ``true``, so that A's own pid there (N+2) is one that no process of this namespace has: exactly
    the folder a pid-visibility sweep would have taken for a dead driver's. Returns (process, N+2)."""
    code = DRIVER.format(tests=str(Path(__file__).parent), task=str(tmp_path / f"task-{name}"), sleep=sleep,
                         good=GOOD_PROGRAM, scratch=str(scratch))
    target = _free_pid()
    (tmp_path / f"driver-{name}.py").write_text(code)
    script = f"i=0; while [ $i -lt {target - 2} ]; do /bin/true; i=$((i+1)); done; {sys.executable} " \
             f"{tmp_path / f'driver-{name}.py'}"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "/bin/sh", "-c", script],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True, start_new_session=True)
    return p, target


def _wait_for_folder(scratch: Path, before: set[str], timeout: float = 60) -> Path:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        new = [p for p in scratch.iterdir() if p.name.startswith("wmrl-exec-") and p.name not in before]
        if new and (new[0] / "work").is_dir():
            return new[0]
        time.sleep(0.05)
    raise AssertionError(f"no execution folder appeared in {scratch}")


@pytest.fixture()
def namespaces():
    require_bwrap()
    if os.geteuid() != 0:
        pytest.skip("a PID namespace needs root here (unshare --pid); run the suite as root to exercise it")
    if not _unshare_ok():
        pytest.skip("`unshare --pid --fork --mount-proc` is not permitted here (no CAP_SYS_ADMIN in this container)")


def test_a_live_driver_in_another_pid_namespace_keeps_its_folder(namespaces, tmp_path, tiny_task):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    a, _target = _start_driver(tmp_path, scratch, "a", sleep=6)
    try:
        folder = _wait_for_folder(scratch, set())
        stamped_pid = int(folder.name.split("-")[-2])
        assert stamped_pid != a.pid, "driver A is not in a PID namespace of its own"
        try:  # the dangerous case: the stamped pid runs nothing here, so it looked like a dead driver's
            os.kill(stamped_pid, 0)
            pytest.fail(f"pid {stamped_pid} of A's namespace is also alive here; the test would prove nothing")
        except ProcessLookupError:
            pass
        # driver B: an explicit sweep, then its own execution in the same scratch folder (which sweeps too)
        scr._swept.discard(str(scratch))
        assert scr.sweep_stale_scratch(scratch) == []
        r = execute(ExecutionRequest(task=tiny_task, program=GOOD_PROGRAM), SandboxConfig(scratch_dir=str(scratch)))
        assert r.status == ExecutionStatus.OK
        assert folder.is_dir() and (folder / "work").is_dir(), "B removed A's live execution folder"
        out, err = a.communicate(timeout=120)
    finally:
        if a.poll() is None:
            os.killpg(a.pid, signal.SIGKILL)
            a.wait()
    assert a.returncode == 0, err[-2000:]
    res = json.loads(out.strip().splitlines()[-1])
    assert res["status"] == "ok" and res["score"] == pytest.approx(1.0), res
    assert not folder.exists()  # A removed its own folder at the end
    assert [p.name for p in scratch.iterdir()] == []


def test_the_folder_of_a_killed_driver_in_another_namespace_is_swept(namespaces, tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    a, _ = _start_driver(tmp_path, scratch, "k", sleep=60)
    try:
        folder = _wait_for_folder(scratch, set())
        assert scr.sweep_stale_scratch(scratch) == []  # alive: kept
    finally:
        os.killpg(a.pid, signal.SIGKILL)  # the driver, its namespace and its sandbox die at once
        a.wait()
    t0 = time.monotonic()
    removed: list[Path] = []
    while time.monotonic() - t0 < 20 and not removed:  # the kernel drops the lock as the process dies
        removed = scr.sweep_stale_scratch(scratch)
        time.sleep(0.1)
    assert removed == [folder] and not folder.exists()

"""wmrl.execution.memlimit: the tree's memory limit by a cgroup or by the driver's supervisor, the cleanup of the
executions' cgroups, the mode recorded on the result, and the seccomp filter's shape."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from wmrl.execution import memlimit
from wmrl.execution import supervise as sv
from wmrl.execution.sandbox import SandboxConfig, SandboxUnavailable, find_bwrap, resolve_mode, run_program
from wmrl.execution.seccomp import userns_filter

MiB = 1024**2


def _cgroup_parent() -> Path:
    found = memlimit.find_parent()
    if found is None:
        pytest.skip("no writable cgroup with a memory controller here")
    return found[1]


def _ours(parent: Path) -> set[str]:
    return {n for n in os.listdir(parent) if n.startswith(f"{memlimit.PREFIX}{os.getpid()}-")}


def test_the_supervisor_kills_a_tree_over_its_limit_and_reports_its_sum(tmp_path):
    """Two children of 150 MiB each under a 200 MiB limit: each alone is under it, the tree is not."""
    child = "import time\nb = bytearray(150 * 1024 * 1024)\nb[::4096] = b'x' * len(b[::4096])\ntime.sleep(30)\n"
    code = (f"import subprocess, sys\nps = [subprocess.Popen([sys.executable, '-c', {child!r}]) for _ in range(2)]\n"
            "[p.wait() for p in ps]\n")
    limits = SimpleNamespace(memory_bytes=1 << 30, nproc=64, fsize_bytes=1 << 30, nofile=64, output_bytes=1 << 16,
                             disk_bytes=1 << 30, max_files=1000, max_depth=16, poll_s=0.05)
    watch = memlimit.SupervisorWatch(200 * MiB)
    run = sv.run_tree(lambda m, i: ([sys.executable, "-c", code], "/"), pid_namespace=False, config=limits,
                      time_limit_s=60, folders=[tmp_path], memory=watch)
    assert run.killed == "memory" and run.memory_limit_mode == "supervisor"
    assert run.tree_peak_bytes > 200 * MiB and run.peak_rss_bytes >= run.tree_peak_bytes
    assert "over its memory limit of 209715200 bytes (supervisor)" in run.err.text()
    assert run.wall_s < 30


def test_tree_pids_and_resident_bytes_of_this_process():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in memlimit.tree_pids(os.getpid())
        assert memlimit.resident_bytes(os.getpid()) > 1 * MiB
    finally:
        child.kill()
        child.wait()
    assert memlimit.resident_bytes(child.pid) == 0  # gone


def test_an_executions_cgroup_is_removed_after_it_ended_even_at_the_limit(public):
    if find_bwrap() is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    parent = _cgroup_parent()
    before = _ours(parent)
    prog = "b = bytearray(400 * 1024 * 1024)\nb[::4096] = b'x' * len(b[::4096])\n"
    for limit in (1024 * MiB, 256 * MiB):  # a clean exit, then a kill at the limit
        run = run_program(prog, public, 60, SandboxConfig(memory_bytes=limit, memory_limit_mode="cgroup"))
        assert run.memory_limit_mode in ("cgroup-v1", "cgroup-v2") and run.infra_error == "", run.infra_error
        assert _ours(parent) == before
    assert run.killed == "memory" or "MemoryError" in run.stderr, (run.killed, run.stderr)


def test_stale_cgroups_are_swept_and_live_ones_kept(monkeypatch):
    found = memlimit.find_parent()
    if found is None or found[0] != "cgroup-v1":
        pytest.skip("needs the cgroup v1 memory controller (a v2 parent holding processes takes no child cgroups)")
    # A parent of the test's own, so that no other driver's execution cgroup is ever in reach of the sweep.
    parent = found[1] / f"wmrl-test-sweep-{os.getpid()}"
    parent.mkdir()
    stale = parent / f"{memlimit.PREFIX}1-stale"
    live = parent / f"{memlimit.PREFIX}1-live"
    other = parent / "other"
    for d in (stale, live, other):
        d.mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (live / "cgroup.procs").write_text(str(sleeper.pid))
        monkeypatch.setattr(memlimit, "STALE_AFTER_S", 0.0)
        time.sleep(0.05)
        assert memlimit.sweep_stale(parent) == [stale]
        assert not stale.exists() and live.exists() and other.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
        for d in (live, other, parent):
            for _ in range(40):
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)


def test_a_cgroup_that_cannot_be_made_falls_back_to_the_supervisor_only_in_auto(public, monkeypatch):
    if find_bwrap() is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    _cgroup_parent()

    def refuse(mode: str, limit_bytes: int):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(memlimit, "watch", refuse)
    run = run_program("print('hi')", public, 60, SandboxConfig())
    assert run.memory_limit_mode == "supervisor" and run.exit_code == 0 and run.infra_error == ""
    run = run_program("print('hi')", public, 60, SandboxConfig(memory_limit_mode="cgroup"))
    assert not run.started and "No space left on device" in run.infra_error


def test_modes_are_checked_in_one_line(monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="memory_limit_mode must be one of auto, cgroup, supervisor"):
        SandboxConfig(memory_limit_mode="kernel")
    monkeypatch.setenv(memlimit.PARENT_ENV, str(tmp_path))  # a folder, but no cgroup
    memlimit.find_parent.cache_clear()
    try:
        assert memlimit.find_parent() is None
        assert memlimit.choose("auto") == "supervisor"
        with pytest.raises(SandboxUnavailable, match=f"set {memlimit.PARENT_ENV} to a delegated cgroup v2 folder"):
            resolve_mode(SandboxConfig(memory_limit_mode="cgroup", use_bwrap=False, allow_unsandboxed=True))
    finally:
        monkeypatch.delenv(memlimit.PARENT_ENV)
        memlimit.find_parent.cache_clear()


def test_the_mode_is_kept_in_the_execution_log(tmp_path):
    from wmrl.execution.log import ExecutionLog
    from wmrl.execution.types import ExecutionRequest, ExecutionResult, ExecutionStatus

    result = ExecutionResult(request_id="r1", task_id="t", status=ExecutionStatus.MEMORY_EXCEEDED, score=None,
                             reward=0.0, wall_s=1.0, cpu_s=1.0, peak_rss_bytes=1 << 30, stdout="", stderr="",
                             program_sha256="0" * 64, memory_limit_mode="cgroup-v1")
    with ExecutionLog(tmp_path / "log.sqlite") as log:
        log.append(ExecutionRequest(task=SimpleNamespace(id="t"), program="x"), result)  # type: ignore[arg-type]
        assert log.result("r1").memory_limit_mode == "cgroup-v1"


def test_own_cgroup_folders_are_found_from_the_mount_table():
    cgroup = "4:memory:/jobs/a b\n1:cpu:/\n0::/user.slice/run-1.scope\n"
    mountinfo = ("41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
                 "35 31 0:32 /jobs /sys/fs/cgroup/mem\\040ory rw,relatime - cgroup cgroup rw,memory\n"
                 "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n")
    assert memlimit.own_cgroup_dirs(cgroup, mountinfo) == [
        ("cgroup-v2", Path("/sys/fs/cgroup/unified/user.slice/run-1.scope")),
        ("cgroup-v1", Path("/sys/fs/cgroup/mem ory/a b"))]
    outside = "35 31 0:32 /other /m rw - cgroup cgroup rw,memory\n"  # the mount shows another part of the tree
    assert memlimit.own_cgroup_dirs("4:memory:/jobs/x\n", outside) == []


def test_the_seccomp_filter_is_built_for_known_machines_only():
    for machine in ("x86_64", "aarch64", "AMD64"):
        bpf = userns_filter(machine)
        assert bpf is not None and len(bpf) == 12 * 8  # twelve 8-byte instructions
    assert userns_filter("sparc64") is None

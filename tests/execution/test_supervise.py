"""wmrl.execution.supervise on bare child processes (no sandbox, no launcher): start, deadline, disk quota,
output caps, the launcher's marker protocol and what a failed start leaves behind."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from wmrl.execution import supervise as sv


def _limits(**changes) -> SimpleNamespace:
    base = dict(memory_bytes=1 << 30, nproc=64, fsize_bytes=1 << 30, nofile=64, output_bytes=1 << 16,
                disk_bytes=1 << 30, max_files=1000, max_depth=16, poll_s=0.05)
    return SimpleNamespace(**{**base, **changes})


def _python(code: str):
    """A ``command`` for :func:`run_tree` running ``code`` with ``MARKER`` set to the marker pipe's fd."""
    def command(marker_w: int, info_w: int) -> tuple[list[str], str]:
        assert info_w == -1  # no PID namespace, no bwrap info pipe
        return [sys.executable, "-c", f"MARKER = {marker_w}\n" + code], "/"
    return command


def test_a_clean_exit_with_the_launchers_marker(tmp_path):
    run = sv.run_tree(_python("import os\nos.write(MARKER, b'LSM2048')\nprint('hi')"), pid_namespace=False,
                      config=_limits(), time_limit_s=30, folders=[tmp_path])
    assert run.started and run.launch_error == "" and run.killed == ""
    assert run.exit_code == 0 and run.out.text() == "hi\n" and run.peak_rss_bytes == 2048 * 1024
    assert 0 < run.wall_s < 30 and run.cpu_s > 0


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def test_the_deadline_kills_the_tree_and_its_children(tmp_path):
    code = ("import subprocess, sys, time\n"
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "print(c.pid, flush=True)\ntime.sleep(60)")
    run = sv.run_tree(_python(code), pid_namespace=False, config=_limits(), time_limit_s=1.0, folders=[tmp_path])
    assert run.killed == "timeout" and not run.started
    assert run.exit_code == 128 + 15  # SIGTERM to the top process (no launcher to ask)
    assert run.wall_s < 10
    grandchild = int(run.out.text().split()[0])
    for _ in range(100):  # the process group was SIGKILLed once the top process was reaped
        if not _alive(grandchild):
            break
        time.sleep(0.05)
    assert not _alive(grandchild)


def test_the_disk_quota_over_all_folders(tmp_path):
    a, b = tmp_path / "work", tmp_path / "tmp"
    a.mkdir()
    b.mkdir()
    code = (f"import time\nfor d in ({str(a)!r}, {str(b)!r}):\n"
            "    open(d + '/f', 'wb').write(b'x' * (600 * 1024))\ntime.sleep(60)")
    run = sv.run_tree(_python(code), pid_namespace=False, config=_limits(disk_bytes=1 << 20), time_limit_s=30,
                      folders=[a, b])
    assert run.killed == "disk" and "wmrl: killed: the program stored" in run.err.text()
    assert sv.over_disk([a], _limits(disk_bytes=1 << 20)) is None  # each folder alone is under the quota
    (a / "d" / "e").mkdir(parents=True)
    assert sv.over_disk([a, b], _limits(max_depth=1, disk_bytes=1 << 30))[0] == "depth"


def test_output_is_capped_head_and_tail(tmp_path):
    run = sv.run_tree(_python("import sys\nsys.stdout.write('a' * 5000 + 'b' * 5000)"), pid_namespace=False,
                      config=_limits(output_bytes=100), time_limit_s=30, folders=[tmp_path])
    text = run.out.text()
    assert run.out.total == 10_000 and text.startswith("a" * 50) and text.endswith("b" * 50)
    assert "[... 9900 bytes truncated by wmrl ...]" in text


def test_a_launch_error_on_the_marker(tmp_path):
    run = sv.run_tree(_python("import os\nos.write(MARKER, b'LEno such program')\nraise SystemExit(3)"),
                      pid_namespace=False, config=_limits(), time_limit_s=30, folders=[tmp_path])
    assert not run.started and run.launch_error == "no such program" and run.exit_code == 3


def test_a_failed_start_raises_and_closes_its_pipes(tmp_path):
    fds = set(os.listdir("/proc/self/fd"))

    def command(marker_w: int, info_w: int) -> tuple[list[str], str]:
        return [str(tmp_path / "no-such-binary")], "/"

    with pytest.raises(sv.StartFailed, match="no-such-binary"):
        sv.run_tree(command, pid_namespace=True, config=_limits(), time_limit_s=5, folders=[tmp_path])

    def broken(marker_w: int, info_w: int) -> tuple[list[str], str]:
        raise RuntimeError("cannot build the command")

    with pytest.raises(RuntimeError, match="cannot build"):
        sv.run_tree(broken, pid_namespace=True, config=_limits(), time_limit_s=5, folders=[tmp_path])
    assert set(os.listdir("/proc/self/fd")) == fds


def test_rlimits_round_cpu_up_and_clamp_it():
    limits = sv.rlimits(_limits(memory_bytes=123), 2.2)
    assert limits["RLIMIT_CPU"] == [3, 4] and limits["RLIMIT_AS"] == [123, 123] and limits["RLIMIT_CORE"] == [0, 0]
    assert sv.rlimits(_limits(), 1e30)["RLIMIT_CPU"][1] == sv.MAX_LIMIT

"""Cleanup that no program can break: removal of any tree a program leaves, the folder-depth limit, and
a sweep that never stops an execution (folders it cannot remove are set aside)."""
from __future__ import annotations

import logging
import os
import socket
from pathlib import Path


from wmrl.execution import scratch as scr
from wmrl.execution.runner import execute
from wmrl.execution.sandbox import SandboxConfig
from wmrl.execution.supervise import tree_usage
from wmrl.execution.types import ExecutionRequest, ExecutionStatus

from conftest import GOOD_PROGRAM, require_bwrap

# Writes its submission, then leaves behind 3,000 nested folders, a path over 4096 bytes, folders of
# mode 000 and a read-only one, and a FIFO deep down.
HOSTILE_TREE = GOOD_PROGRAM + """
import os
top = os.open(".", os.O_RDONLY)
for name, n in (("d", 3000), ("L" * 200, 40)):
    fd = os.dup(top)
    for i in range(n):
        os.mkdir(name, dir_fd=fd)
        new = os.open(name, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = new
    os.mkfifo("fifo", dir_fd=fd)
    os.mkdir("locked", dir_fd=fd)
    os.mkdir("inner", dir_fd=fd)
    open("/dev/null").close()
    os.chmod("locked", 0, dir_fd=fd)
    os.close(fd)
os.mkdir("ro")
open("ro/f", "w").write("x")
os.chmod("ro", 0o500)
os.chmod("d", 0)
print("tree made")
"""


def _config(scratch: Path, **kw) -> SandboxConfig:
    return SandboxConfig(scratch_dir=str(scratch), max_files=50_000, **kw)


def _folders(scratch: Path) -> list[str]:
    return sorted(p.name for p in scratch.iterdir())


def test_a_program_that_leaves_any_tree_is_cleaned_up(tmp_path, tiny_task):
    require_bwrap()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    # polled rarely, so that the program finishes its tree before any limit is checked
    r = execute(ExecutionRequest(task=tiny_task, program=HOSTILE_TREE), _config(scratch, poll_s=15))
    assert r.status == ExecutionStatus.OK, (r.status, r.error, r.stderr[-2000:])
    assert "tree made" in r.stdout
    assert _folders(scratch) == []
    r = execute(ExecutionRequest(task=tiny_task, program=GOOD_PROGRAM), _config(scratch))
    assert r.status == ExecutionStatus.OK and _folders(scratch) == []


def test_nesting_deeper_than_max_depth_kills_the_program(tmp_path, tiny_task):
    require_bwrap()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    program = "import os, time\nfor i in range(100):\n    os.mkdir('d'); os.chdir('d')\ntime.sleep(30)\n"
    r = execute(ExecutionRequest(task=tiny_task, program=program, time_limit_s=20), _config(scratch))
    assert r.status == ExecutionStatus.RUNTIME_ERROR, (r.status, r.error)
    assert "max_depth" in r.error and "more than 64 levels deep" in r.stderr
    assert r.wall_s < 10 and _folders(scratch) == []
    r = execute(ExecutionRequest(task=tiny_task, program=program.replace("100", "30").replace("30)", "1)")),
                _config(scratch, max_depth=40))
    assert r.status == ExecutionStatus.INVALID_SUBMISSION, (r.status, r.error)  # within the limit: not killed


def test_tree_usage_reports_depth_and_long_paths(tmp_path):
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    assert tree_usage(tmp_path, 1 << 30, 1000)[1:] == (3, 3)
    assert tree_usage(tmp_path, 1 << 30, 1000, depth_cap=2)[2] == 3  # stops over the cap
    fd = os.open(tmp_path, os.O_RDONLY)
    for _ in range(25):  # 25 * 201 bytes: longer than PATH_MAX
        os.mkdir("x" * 200, dir_fd=fd)
        new = os.open("x" * 200, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = new
    os.close(fd)
    assert tree_usage(tmp_path, 1 << 30, 10_000, depth_cap=64)[2] == 65
    assert scr.remove_tree(tmp_path / ("x" * 200))


def test_removal_copes_with_a_5000_deep_tree(tmp_path):
    fd = os.open(tmp_path, os.O_RDONLY)
    os.mkdir("top", dir_fd=fd)
    for i in range(5000):
        name = "top" if i == 0 else "n"
        nxt = os.open(name, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = nxt
        os.mkdir("n", dir_fd=fd)
        if i % 1000 == 0:
            os.mkfifo("fifo", dir_fd=fd)
            os.symlink("/etc", "link", dir_fd=fd)  # removed, never followed
            with socket.socket(socket.AF_UNIX) as s:
                s.bind(f"/proc/self/fd/{fd}/sock")
    os.close(fd)
    os.chmod(tmp_path / "top", 0)
    assert scr.remove_tree(tmp_path / "top") is True
    assert list(tmp_path.iterdir()) == [] and os.path.isdir("/etc")
    assert scr.remove_tree(tmp_path / "missing") is True


def test_rmtree_never_raises(tmp_path, monkeypatch, caplog):
    d = tmp_path / "d"
    d.mkdir()

    def boom(*_a, **_k):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(scr, "_remove_tree", boom)
    with caplog.at_level(logging.WARNING, logger="wmrl.execution.sandbox"):
        assert scr.remove_tree(d) is False
    assert "RecursionError" in caplog.text and d.is_dir()


def _stale(scratch: Path) -> Path:
    d = scratch / f"{scr.SCRATCH_PREFIX}{socket.gethostname()}-1-abc123"
    (d / "work").mkdir(parents=True)
    (d / scr.OWNER_LOCK).write_text("")
    return d


def test_an_unremovable_folder_is_quarantined_and_executions_go_on(tmp_path, tiny_task, monkeypatch, caplog):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    stuck = _stale(scratch)
    real = scr.remove_tree
    monkeypatch.setattr(scr, "remove_tree", lambda p: False if Path(p) == stuck else real(p))
    with caplog.at_level(logging.WARNING, logger="wmrl.execution.sandbox"):
        assert scr.sweep_stale_scratch(scratch) == []
    quarantined = scratch / f"{scr.QUARANTINE_PREFIX}{stuck.name[len(scr.SCRATCH_PREFIX):]}"
    assert _folders(scratch) == [quarantined.name] and (quarantined / "work").is_dir()
    assert caplog.text.count("could not remove the execution folder") == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="wmrl.execution.sandbox"):
        assert scr.sweep_stale_scratch(scratch) == []  # left alone, not reported again
    assert caplog.text == "" and _folders(scratch) == [quarantined.name]
    require_bwrap()
    scr._swept.discard(str(scratch))
    r = execute(ExecutionRequest(task=tiny_task, program=GOOD_PROGRAM), _config(scratch))
    assert r.status == ExecutionStatus.OK
    assert _folders(scratch) == [quarantined.name]


def test_a_failing_sweep_never_stops_an_execution(tmp_path, tiny_task, monkeypatch):
    require_bwrap()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    _stale(scratch)

    def boom(*_a, **_k):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(scr, "_lock_if_abandoned", boom)
    scr._swept.discard(str(scratch))
    r = execute(ExecutionRequest(task=tiny_task, program=GOOD_PROGRAM), _config(scratch))
    assert r.status == ExecutionStatus.OK, r.error

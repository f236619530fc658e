"""The sandbox itself: isolation, limits, accounting, output capture, refusal without bwrap."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from wmrl.execution import sandbox as sb
from wmrl.execution import scratch as scr
from wmrl.execution import supervise as sv
from wmrl.execution.sandbox import SandboxConfig, SandboxUnavailable, UnsandboxedWarning, run_program

from conftest import require_bwrap


# -- pure parts ------------------------------------------------------------------------------------


def test_head_tail_keeps_both_ends_and_counts():
    h = sv.HeadTail(10)
    for chunk in (b"abc", b"defgh", b"ijklmnop", b"qrstuvwxyz"):
        h.add(chunk)
    assert h.total == 26
    text = h.text()
    assert text.startswith("abcde") and text.endswith("vwxyz") and "16 bytes truncated" in text
    small = sv.HeadTail(100)
    small.add(b"hello")
    assert small.text() == "hello"


def test_config_validation_messages():
    with pytest.raises(ValueError, match="nproc"):
        SandboxConfig(nproc=0)
    with pytest.raises(ValueError, match="64 MiB"):
        SandboxConfig(memory_bytes=10 * 1024**2)
    assert SandboxConfig(env={"A": "1"}).env == (("A", "1"),)


def test_parent_dirs_are_made_traversable():
    args = sb._with_parent_dirs(["bwrap", "--ro-bind", "/usr", "/usr", "--ro-bind", "/a/b/c", "/a/b/c",
                                 "--bind", "/x", "/w", "--ro-bind", "/p", "/w/input"])
    joined = " ".join(args)
    assert "--perms 0755 --dir /a" in joined and "--perms 0755 --dir /a/b" in joined
    assert "--dir /w " not in joined + " "  # /w is itself a mount point
    assert args.index("--dir") < args.index("--ro-bind")


def test_parent_dirs_inside_a_writable_mount_are_made_there():
    """A venv under /tmp (QA: a clone in /tmp/qa-clone): its parents must be made inside the /tmp bind,
    after it, 0755; before, they were left to bwrap (0700 root) and every execution was an infra_error."""
    args = sb._with_parent_dirs(["bwrap", "--ro-bind", "/usr", "/usr", "--perms", "1777", "--size", "5",
                                 "--tmpfs", "/dev/shm", "--bind", "/h/tmp", "/tmp",
                                 "--ro-bind", "/tmp/a/b/.venv", "/tmp/a/b/.venv"])
    joined = " ".join(args)
    assert "--perms 0755 --dir /tmp/a --perms 0755 --dir /tmp/a/b --ro-bind /tmp/a/b/.venv" in joined
    assert joined.index("--bind /h/tmp /tmp") < joined.index("--dir /tmp/a")
    assert "--perms 1777 --size 5 --tmpfs /dev/shm" in joined  # modifiers stay attached
    assert "--dir /usr" not in joined and "--dir /tmp " not in joined + " "


def test_interpreter_under_tmp_runs(public):
    """The program runs when the interpreter's folder lies under /tmp (the sandbox's scratch mount)."""
    require_bwrap()
    import shutil
    import sys
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="wmrl-qa-venv-", dir="/tmp"))
    try:
        (base / "env" / "bin").mkdir(parents=True)
        os.chmod(base / "env", 0o755)
        os.chmod(base / "env" / "bin", 0o755)
        py = base / "env" / "bin" / "python"
        py.symlink_to(os.path.realpath(sys.executable))
        r = run_program("print('hello')", public, 30, SandboxConfig(python=str(py)))
        assert r.infra_error == "" and r.exit_code == 0 and "hello" in r.stdout, (r.infra_error, r.stderr)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_missing_bwrap_is_refused_with_install_hint():
    cfg = SandboxConfig(bwrap_path="/nonexistent/bwrap")
    with pytest.raises(SandboxUnavailable, match="apt-get install -y bubblewrap"):
        sb.resolve_mode(cfg)
    with pytest.raises(SandboxUnavailable, match="allow_unsandboxed"):
        sb.resolve_mode(SandboxConfig(use_bwrap=False))


def test_unsandboxed_mode_only_on_request_and_warns_every_run(public):
    cfg = SandboxConfig(bwrap_path="/nonexistent/bwrap", allow_unsandboxed=True)
    assert sb.resolve_mode(cfg) == "unsandboxed"
    for _ in range(2):
        with pytest.warns(UnsandboxedWarning, match="WITHOUT a sandbox"):
            r = run_program("open('submission.csv','w').write('x')", public, 10, cfg)
        assert r.mode == "unsandboxed" and r.started and r.exit_code == 0 and r.submission == b"x"


# -- real runs --------------------------------------------------------------------------------------


def test_program_sees_only_its_folder_input_and_a_clean_environment(public):
    require_bwrap()
    os.environ["WMRL_SANDBOX_TEST_SECRET"] = "zzsecretzz"
    prog = ("import os, json\n"
            "print(json.dumps({'cwd': os.getcwd(), 'ls': sorted(os.listdir('.')), 'input': sorted(os.listdir('input')),"
            " 'root': sorted(os.listdir('/')), 'uid': os.getuid(), 'env': sorted(os.environ), 'pid': os.getpid()}))\n")
    r = run_program(prog, public, 20, SandboxConfig())
    assert r.started and r.exit_code == 0, r.stderr
    import json

    seen = json.loads(r.stdout)
    assert seen["cwd"] == "/workspace" and seen["ls"] == ["input"] and seen["input"] == ["train.csv"]
    assert "home" not in seen["root"] and "WMRL_SANDBOX_TEST_SECRET" not in seen["env"]
    assert seen["uid"] != 0 and seen["pid"] == 2  # its own PID namespace (the launcher is PID 1)
    assert "zzsecretzz" not in r.stdout


def test_cpu_seconds_count_the_whole_tree_including_leftovers(public):
    require_bwrap()
    prog = ("import os, time\n"
            "def spin(s):\n    t = time.process_time()\n    while time.process_time() - t < s: pass\n"
            "if os.fork() == 0:\n    spin(0.4); os._exit(0)\n"
            "if os.fork() == 0:\n    os.setsid(); spin(100)\n"  # a leftover, killed when main exits
            "spin(0.4)\nos.wait()\ntime.sleep(0.3)\n")
    r = run_program(prog, public, 20, SandboxConfig())
    assert r.exit_code == 0, r.stderr
    # main 0.4 + child 0.4 + leftover >= 0.3 (it spins until main exits) CPU-seconds
    assert r.cpu_s >= 0.95, r.cpu_s
    assert r.wall_s < 10


def test_peak_memory_is_measured(public):
    require_bwrap()
    r = run_program("b = bytearray(200 * 1024 * 1024)\nb[::4096] = b'x' * len(b[::4096])\n", public, 20,
                    SandboxConfig())
    assert r.exit_code == 0, r.stderr
    assert 200 * 1024**2 <= r.peak_rss_bytes < 400 * 1024**2


def test_signal_death_is_128_plus_signal(public):
    require_bwrap()
    r = run_program("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", public, 20, SandboxConfig())
    assert r.started and r.exit_code == 128 + 11


def test_launcher_failure_is_an_infrastructure_error(public):
    require_bwrap()
    # more open files than the kernel allows (fs.nr_open): setrlimit fails inside the launcher
    r = run_program("print(1)", public, 20, SandboxConfig(nofile=2**31 - 1))
    assert not r.started and "sandbox failed before the program started" in r.infra_error


def test_broken_bwrap_is_an_infrastructure_error(public, tmp_path):
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\ncase \"$*\" in *--info-fd*) echo 'bwrap: cannot mount' >&2; exit 1;; esac\nexec true\n")
    fake.chmod(0o755)
    r = run_program("print(1)", public, 20, SandboxConfig(bwrap_path=str(fake)))
    assert not r.started and "bwrap: cannot mount" in r.infra_error


def test_timeout_kills_the_tree_fast(public):
    require_bwrap()
    prog = "import os, time\nfor _ in range(3):\n    os.fork()\ntime.sleep(100)\n"
    r = run_program(prog, public, 1.0, SandboxConfig())
    assert r.killed == "timeout" and 1.0 <= r.wall_s < 4.0


def test_cancel_event_kills_the_run(public):
    require_bwrap()
    import threading

    ev = threading.Event()
    threading.Timer(0.8, ev.set).start()
    r = run_program("import time\ntime.sleep(100)\n", public, 60, SandboxConfig(), cancel=ev)
    assert r.killed == "cancelled" and r.wall_s < 5


def test_workdir_is_removed_unless_kept(public):
    require_bwrap()
    r = run_program("open('x','w').write('1')", public, 20, SandboxConfig())
    assert not Path(r.workdir).exists()
    r = run_program("open('x','w').write('1')", public, 20, SandboxConfig(keep_workdir=True))
    try:
        assert (Path(r.workdir) / "x").read_text() == "1"
    finally:
        scr.remove_tree(Path(r.workdir).parent)


def test_scratch_folders_of_killed_drivers_are_swept(tmp_path, public):
    """Only folders whose owner lock nobody holds are removed (see test_scratch.py for drivers in
    other PID namespaces)."""
    import fcntl
    import socket

    host = socket.gethostname()

    def folder(name: str, lock: bool = True) -> Path:
        d = tmp_path / name
        (d / "work").mkdir(parents=True)
        (d / "work" / "model.bin").write_bytes(b"0" * 1024)
        if lock:
            (d / scr.OWNER_LOCK).write_text("")
        return d

    stale = folder(f"wmrl-exec-{host}-{os.getpid()}-abc123")              # lock file, nobody holds it
    live = folder(f"wmrl-exec-{host}-999999-def456")                       # held (below), pid irrelevant
    own, own_fd = scr.make_scratch(tmp_path)                                # this driver's live folder
    other_host = folder(f"wmrl-exec-{host}x-{os.getpid()}-jkl012")        # another machine on a shared disk
    unnamed = folder("wmrl-exec-mno345")                                   # not a driver-stamped folder
    unlocked = folder(f"wmrl-exec-{host}-{os.getpid()}-pqr678", lock=False)  # no lock file: never taken
    held = os.open(live / scr.OWNER_LOCK, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        assert scr.sweep_stale_scratch(tmp_path) == [stale]
        assert not stale.exists() and all(d.exists() for d in (live, own, other_host, unnamed, unlocked))
    finally:
        os.close(held)
    assert own.name.startswith(f"wmrl-exec-{host}-{os.getpid()}-") and (own / scr.OWNER_LOCK).is_file()
    assert scr.sweep_stale_scratch(tmp_path) == [live]  # its lock was released: its driver is gone
    assert own.exists()
    scr.remove_tree(own)
    os.close(own_fd)
    assert scr.sweep_stale_scratch(tmp_path / "missing") == []
    # run_program sweeps once per scratch folder and stamps its own folder with host and pid
    stale = folder(f"wmrl-exec-{host}-{os.getpid()}-abc123")
    require_bwrap()
    r = run_program("open('x','w').write('1')", public, 20, SandboxConfig(scratch_dir=str(tmp_path), keep_workdir=True))
    try:
        assert not stale.exists()
        assert Path(r.workdir).parent.name.startswith(f"wmrl-exec-{host}-{os.getpid()}-")
        assert scr.sweep_stale_scratch(tmp_path) == []  # a kept folder stays locked while its driver runs
    finally:
        scr.remove_tree(Path(r.workdir).parent)


def test_bad_arguments():
    with pytest.raises(ValueError, match="time_limit_s"):
        run_program("", "/", 0)
    with pytest.raises(ValueError, match="not a folder"):
        run_program("", "/nonexistent-public", 1)
    for bad in (float("inf"), float("nan"), 1e308):  # were OverflowError / an infra_error
        with pytest.raises(ValueError, match="time_limit_s"):
            run_program("", "/", bad)
    with pytest.raises(ValueError, match="memory_bytes"):
        SandboxConfig(memory_bytes=10**20)  # does not fit setrlimit's C long
    with pytest.raises(ValueError, match="cpu_time_s"):
        SandboxConfig(cpu_time_s=float("inf"))
    assert sv.rlimits(SandboxConfig(threads=2**40), 1e6)["RLIMIT_CPU"][1] < 2**63


def test_user_namespace_mode_runs(public):
    """The mode used when the driver is not root (forced here): uid 65534 inside, same isolation."""
    require_bwrap()
    prog = ("import os\nprint(os.getuid(), sorted(os.listdir('input')), os.path.exists('/root/.ssh'))\n"
            "open('submission.csv', 'w').write('id,y\\n')\n")
    r = run_program(prog, public, 20, SandboxConfig(user_namespace=True))
    assert r.mode == "bwrap-userns" and r.exit_code == 0, r.stderr + r.infra_error
    assert r.stdout.split()[0] == "65534" and "train.csv" in r.stdout and r.submission == b"id,y\n"


def test_unreadable_public_files_are_an_infrastructure_error(tmp_path):
    require_bwrap()
    if os.geteuid() != 0:
        pytest.skip("only the root mode runs the program under another uid")
    pub = tmp_path / "pub"
    pub.mkdir()
    (pub / "train.csv").write_text("id\n1\n")
    os.chmod(pub, 0o755)
    os.chmod(pub / "train.csv", 0o600)
    r = run_program("print(open('input/train.csv').read())", pub, 20, SandboxConfig())
    assert not r.started and "chmod -R o+rX" in r.infra_error


def test_peak_memory_excludes_the_drivers_own_pages(public):
    """A big driver (torch loaded, say) must not inflate the program's peak RSS through fork."""
    require_bwrap()
    ballast = bytearray(600 * 1024 * 1024)
    ballast[::4096] = b"x" * len(ballast[::4096])  # make the driver's pages resident
    r = run_program("b = bytearray(50 * 1024 * 1024)\nb[::4096] = b'x' * len(b[::4096])\n", public, 20,
                    SandboxConfig())
    del ballast
    assert r.exit_code == 0, r.stderr
    assert 50 * 1024**2 <= r.peak_rss_bytes < 300 * 1024**2, r.peak_rss_bytes

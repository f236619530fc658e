"""Adversarial cases of the sandbox's limits: one memory limit for a program's whole process tree (enforced by a
cgroup where the kernel offers one, else by the driver's supervisor), a high ``oom_score_adj`` for the sandbox's
processes so that the kernel picks them before the trainer, and no user namespaces inside the sandbox.

Each program runs through :func:`wmrl.execution.sandbox.run_program` and is judged by
:func:`wmrl.execution.runner.classify`, as every execution is; the test process plays the trainer.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from wmrl.execution import memlimit
from wmrl.execution.runner import classify
from wmrl.execution.sandbox import SandboxConfig, find_bwrap, run_program
from wmrl.execution.types import ExecutionStatus

MiB = 1024**2
GiB = 1024**3

#: Three processes of 800 MiB each, pages touched, held together for a few seconds: 2.4 GiB in all, each one
#: well under a per-process limit of 1 GiB. The parent waits for them and then writes a submission.
THREE_800MIB = """
import subprocess, sys
child = ("import time\\n"
         "b = bytearray(800 * 1024 * 1024)\\n"
         "b[::4096] = b'x' * len(b[::4096])\\n"
         "time.sleep(6)\\n")
procs = [subprocess.Popen([sys.executable, "-c", child]) for _ in range(3)]
codes = [p.wait() for p in procs]
print("children exited", codes, flush=True)
open("submission.csv", "w").write("id,y\\n")
"""

#: unshare(CLONE_NEWUSER | CLONE_NEWNS) through ctypes (os.unshare needs Python 3.12); prints the errno, 0 on
#: success.
UNSHARE_USERNS = """
import ctypes, os
CLONE_NEWUSER, CLONE_NEWNS = 0x10000000, 0x00020000
libc = ctypes.CDLL(None, use_errno=True)
rc = libc.unshare(CLONE_NEWUSER | CLONE_NEWNS)
print("unshare", rc, ctypes.get_errno() if rc != 0 else 0, flush=True)
pid = os.fork()
if pid == 0:  # a child made by fork (clone without namespace flags) still works
    os._exit(0)
print("fork", os.waitpid(pid, 0)[1], flush=True)
"""


def _require_bwrap() -> None:
    if find_bwrap() is None:
        pytest.skip("bubblewrap (bwrap) is not installed")


def _modes() -> list:
    cgroup = pytest.param("cgroup", marks=pytest.mark.skipif(
        memlimit.find_parent() is None, reason="no writable cgroup with a memory controller here"))
    return [cgroup, "supervisor"]


@pytest.mark.parametrize("mode", _modes())
def test_three_800mib_processes_under_a_1gib_limit_exceed_memory(public, mode):
    """Finding: the memory limit was per process (RLIMIT_AS), so three 800 MiB processes under a 1 GiB limit ended
    ``ok`` with 2.4 GiB resident, and the reported peak was one process's (0.85 GB)."""
    _require_bwrap()
    config = SandboxConfig(memory_bytes=1 * GiB, memory_limit_mode=mode)
    before = Path("/proc/self/oom_score_adj").read_text()
    # A second stand-in for the trainer beside this process: a process of the driver holding 200 MiB.
    trainer = subprocess.Popen([sys.executable, "-c", "import time\nb = bytearray(200 * 1024 * 1024)\n"
                                "b[::4096] = b'x' * len(b[::4096])\ntime.sleep(600)\n"])
    try:
        run = run_program(THREE_800MIB, public, 120, config)
        assert trainer.poll() is None  # alive
    finally:
        trainer.kill()
        trainer.wait()
    status, message = classify(run)
    assert run.infra_error == "", run.infra_error
    assert status == ExecutionStatus.MEMORY_EXCEEDED, (status, message, run.peak_rss_bytes, run.stdout, run.stderr)
    assert run.memory_limit_mode == ("cgroup-v1" if mode == "cgroup" and memlimit.find_parent()[0] == "cgroup-v1"
                                     else "cgroup-v2" if mode == "cgroup" else "supervisor")
    assert run.peak_rss_bytes >= 0.95 * GiB, run.peak_rss_bytes  # the tree's, not one process's 0.8 GiB
    assert "whole process tree" in message
    print(f"\nmeasured: {status.value} ({run.memory_limit_mode}), peak {run.peak_rss_bytes / GiB:.2f} GiB, "
          f"wall {run.wall_s:.1f} s")
    assert Path("/proc/self/oom_score_adj").read_text() == before  # the trainer's own OOM score is untouched


def test_the_sandbox_processes_get_a_high_oom_score_adj(public):
    """Finding: the sandbox's processes had ``oom_score_adj`` 0, so on a full machine the kernel could kill the
    trainer or the service instead of the program."""
    _require_bwrap()
    prog = ("import subprocess, sys\n"
            "print(open('/proc/self/oom_score_adj').read().strip(), flush=True)\n"
            "subprocess.run([sys.executable, '-c', \"print(open('/proc/self/oom_score_adj').read().strip())\"])\n")
    run = run_program(prog, public, 60, SandboxConfig())
    assert run.exit_code == 0, run.stderr + run.infra_error
    assert run.stdout.split() == ["1000", "1000"]
    print(f"\nmeasured: oom_score_adj {' and '.join(run.stdout.split())}, wall {run.wall_s:.1f} s")
    assert Path("/proc/self/oom_score_adj").read_text().strip() != "1000"


@pytest.mark.parametrize("user_namespace", [None, True], ids=["default", "user-namespace"])
def test_no_user_namespace_can_be_made_inside_the_sandbox(public, user_namespace):
    """Finding: a program could call ``unshare(CLONE_NEWUSER | CLONE_NEWNS)`` inside the sandbox: kernel attack
    surface it has no need for."""
    _require_bwrap()
    run = run_program(UNSHARE_USERNS, public, 60, SandboxConfig(user_namespace=user_namespace))
    assert run.exit_code == 0, run.stderr + run.infra_error
    words = run.stdout.split()
    rc, err = int(words[1]), int(words[2])
    import errno

    assert rc == -1 and err in (errno.EPERM, errno.EINVAL, errno.ENOSPC), run.stdout
    assert words[3:] == ["fork", "0"]
    print(f"\nmeasured: unshare -1, errno {errno.errorcode[err]} ({run.mode}), wall {run.wall_s:.1f} s")

"""In-sandbox launcher and reaper: starts the solution program under its limits, then reaps its tree.

This file runs *inside* the sandbox as PID 1 of the sandbox's PID namespace (``bwrap --as-pid-1``),
with the interpreter bound there (``python -I -S``). It imports only the standard library and never
``wmrl``. It receives one JSON argument::

    {"rlimits": {"RLIMIT_AS": [soft, hard], ...},   # bytes / seconds / counts, as setrlimit takes
     "uid": 1000123 | null, "gid": 1000123 | null,   # the program's uid/gid when started as root
     "marker_fd": 5,                                 # status pipe to the driver (see below)
     "cgroup_fd": 6 | null,                          # cgroup.procs of the execution's memory cgroup
     "oom_score_adj": 1000,                          # of every process of the tree
     "argv": ["/path/python", "/sandbox/solution.py"],
     "env": {"PATH": "/usr/bin", ...}}

Before anything else it joins the execution's memory cgroup (it writes ``0`` to ``cgroup_fd``, which the driver
opened; a failure is a launch error: the program never runs outside its limit) and sets its ``oom_score_adj``,
which every process it starts inherits (an unprivileged program cannot lower it). Then it forks the program:
the child sets every limit (hard = soft, so an unprivileged program can never raise them), drops to the
program's uid/gid when started as root (which clears all capabilities), closes every inherited descriptor and
execs the program. The launcher itself
keeps its privileges (the program cannot signal or trace it) and:

* writes ``L`` on the marker pipe when it is running, then ``S`` once the exec succeeded, or ``E``
  and the reason when it did not (the driver reports anything but ``LS`` as an infrastructure
  error; the program never holds that pipe, so it cannot forge it);
* reaps every process of the tree (orphans are re-parented to PID 1), so that the kernel adds
  each one's CPU time to the launcher's children usage, which bubblewrap and then the driver's
  ``wait4`` collect: the CPU-seconds of the whole tree, leftover children included;
* when the program's main process exits, or when the driver sends SIGTERM (timeout, cancellation,
  disk quota), kills every remaining process with SIGKILL, reaps them, and exits with the main
  process's status (its exit code, or 128+N when it died of signal N).
"""
import json
import os
import resource
import signal
import sys

class _Stop(Exception):
    """Raised by the SIGTERM handler so that a blocking ``waitpid`` returns (PEP 475 retries it)."""


def _on_term(signum, frame):
    raise _Stop


def _kill_rest(main_pid: int) -> None:
    """SIGKILL every other process of the tree (the whole PID namespace when we are its PID 1)."""
    if os.getpid() == 1:
        try:
            os.kill(-1, signal.SIGKILL)  # in a PID namespace: every process of it but ourselves
        except OSError:
            pass
    else:
        try:
            os.killpg(main_pid, signal.SIGKILL)
        except OSError:
            pass


def _not_dumpable() -> None:
    """PR_SET_DUMPABLE 0: a program with the launcher's uid (user-namespace mode) cannot ptrace it."""
    try:
        import ctypes  # noqa: PLC0415 - best effort, inside the try: a Python without ctypes still launches

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:  # noqa: BLE001 - best effort; the marker protocol does not depend on it
        pass


def _child(spec: dict, err_w: int) -> None:
    try:
        os.setpgid(0, 0)
        for name, (soft, hard) in spec["rlimits"].items():
            resource.setrlimit(getattr(resource, name), (int(soft), int(hard)))
        uid, gid = spec.get("uid"), spec.get("gid")
        if os.geteuid() == 0 and uid is not None:
            if gid is None:
                raise ValueError("the launcher spec gives a uid but no gid")
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            if os.geteuid() == 0 or os.getuid() == 0:
                raise RuntimeError("could not drop root privileges")
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        os.umask(0o022)
        os.closerange(3, err_w)
        os.closerange(err_w + 1, 65536)
        argv = spec["argv"]
        os.execve(argv[0], argv, spec["env"])
    except BaseException as exc:  # noqa: BLE001
        try:
            os.write(err_w, f"{type(exc).__name__}: {exc}".encode("utf-8", "replace"))
        finally:
            os._exit(127)


def main() -> int:
    spec = json.loads(sys.argv[1])
    marker = int(spec["marker_fd"])
    os.set_inheritable(marker, False)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # delivered once we are reaping
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.write(marker, b"L")
    if spec.get("cgroup_fd") is not None:
        try:
            os.write(int(spec["cgroup_fd"]), b"0")  # 0: the writing process (its children follow it)
            os.close(int(spec["cgroup_fd"]))
        except OSError as exc:
            os.write(marker, f"Ecould not join the execution's memory cgroup: {exc}".encode("utf-8", "replace"))
            return 126
    if spec.get("oom_score_adj") is not None:
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write(str(int(spec["oom_score_adj"])))
        except OSError:  # no writable /proc (the rlimit-only mode in a restricted container): the default stays
            pass
    err_r, err_w = os.pipe()  # close-on-exec: EOF without data means the exec succeeded
    pid = os.fork()
    if pid == 0:
        os.close(err_r)
        _child(spec, err_w)
    os.close(err_w)
    if os.geteuid() != 0:  # same uid as the program (user-namespace mode): forbid ptrace of us
        _not_dumpable()
    chunks = []
    while True:
        try:
            b = os.read(err_r, 4096)
        except InterruptedError:
            continue
        if not b:
            break
        chunks.append(b)
    os.close(err_r)
    if chunks:
        os.write(marker, b"E" + b"".join(chunks))
    else:
        os.write(marker, b"S")
    status = None
    killed = False
    while True:
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            died, st = os.waitpid(-1, 0)
        except _Stop:
            if not killed:
                _kill_rest(pid)
                killed = True
            continue
        except ChildProcessError:
            break
        if died == pid:
            status = st
            if not killed:
                _kill_rest(pid)
                killed = True
    if not chunks:
        # Peak RSS of the program's own tree, measured here (a fresh, small process): the driver's
        # wait4 rusage would also count the driver's pages that its fork shared before exec.
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        os.write(marker, b"M%d" % peak_kib)
    os.close(marker)
    if chunks:
        return 126
    if status is None:
        return 137
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    try:
        rc = main()
    except BaseException as exc:  # noqa: BLE001 - report anything as a launcher failure
        try:
            fd = int(json.loads(sys.argv[1]).get("marker_fd", -1))
            os.write(fd, f"E{type(exc).__name__}: {exc}".encode("utf-8", "replace"))
        except Exception:  # noqa: BLE001
            pass
        sys.stderr.write(f"wmrl-launcher: {type(exc).__name__}: {exc}\n")
        sys.stderr.flush()
        os._exit(126)
    sys.stdout.flush()
    os._exit(rc)

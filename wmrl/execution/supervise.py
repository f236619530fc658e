"""Start, watch, limit and stop the process tree of one execution, and account for what it used.

:mod:`wmrl.execution.sandbox` sets an execution up (the folder, the bubblewrap profile, the file view) and
hands this module the command line that starts the launcher (:mod:`wmrl.execution._launcher`); this module
runs it (:func:`run_tree`) and returns what happened (:class:`TreeRun`).

Limits (``setrlimit`` in :mod:`wmrl.execution._launcher`, hard = soft, so the program cannot raise
them; the values: :func:`rlimits`): address space (``RLIMIT_AS``, bytes), CPU time per process
(``RLIMIT_CPU``, seconds), number of processes/threads (``RLIMIT_NPROC``), file size (``RLIMIT_FSIZE``,
bytes), open files (``RLIMIT_NOFILE``), no core dumps. The driver adds a wall-clock timeout, a disk quota on
the working and scratch folders (polled: :func:`over_disk`), truncation of stdout/stderr (head and tail
kept: :class:`HeadTail`) and one memory limit for the whole tree (a :class:`MemoryWatch` from
:mod:`wmrl.execution.memlimit`: a cgroup of the kernel, or the driver's supervisor).

Process tree (:class:`ProcessTree`): the launcher is PID 1 of the sandbox's PID namespace (``bwrap
--as-pid-1``). It forks the program, reaps every process (orphans are re-parented to it), and when the
program's main process exits, or when the driver sends SIGTERM on timeout, cancellation or disk overrun, it
SIGKILLs every remaining process of the namespace and reaps them; 2 s later the driver SIGKILLs PID 1 itself
if it is still there, which makes the kernel kill the whole namespace. Without a PID namespace (the
rlimit-only mode) the driver kills the process group. Nothing survives an execution.

CPU seconds are user+sys of the whole process tree, read from ``wait4`` rusage of the bubblewrap
process: the launcher reaped every process of the tree (the kernel adds each reaped child's usage
to its reaper's children usage) and bubblewrap reaped the launcher. Peak memory is the tree's, bytes: the
memory watch's figure (the cgroup's high-water mark, or the largest sum of the tree's resident memory the
supervisor saw), and never less than the largest resident set of a single process of the tree (the launcher's
figure on its marker pipe, else ``ru_maxrss``).
"""
from __future__ import annotations

import errno
import json
import math
import os
import re
import selectors
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

#: Largest value of an integer limit (bytes, counts): setrlimit takes a signed C long.
MAX_LIMIT = 2**62


class Limits(Protocol):
    """The limits this module enforces (:class:`wmrl.execution.sandbox.SandboxConfig` has them; its
    docstring says what each means): bytes, counts, levels and seconds."""

    @property
    def memory_bytes(self) -> int: ...
    @property
    def nproc(self) -> int: ...
    @property
    def fsize_bytes(self) -> int: ...
    @property
    def nofile(self) -> int: ...
    @property
    def output_bytes(self) -> int: ...
    @property
    def disk_bytes(self) -> int: ...
    @property
    def max_files(self) -> int: ...
    @property
    def max_depth(self) -> int: ...
    @property
    def poll_s(self) -> float: ...


class MemoryWatch(Protocol):
    """One memory limit for a whole tree (:mod:`wmrl.execution.memlimit`: ``CgroupWatch``, ``SupervisorWatch``)."""

    kind: str

    def started(self, pid: int) -> None: ...
    def over(self) -> str | None: ...
    @property
    def peak_bytes(self) -> int: ...


class StartFailed(Exception):
    """The command that starts the tree could not be started (the ``OSError`` of ``Popen``, as text)."""


class HeadTail:
    """Keeps the first and last ``cap/2`` bytes of a stream and counts the total (``cap``: bytes)."""

    def __init__(self, cap: int):
        self.half = max(1, cap // 2)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        """Count ``data`` and keep what falls in the head or the tail."""
        self.total += len(data)
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.half:
                del self.tail[: len(self.tail) - self.half]

    def text(self) -> str:
        """Head and tail decoded as UTF-8 (bad bytes replaced), with a note of how many bytes were dropped."""
        kept = len(self.head) + len(self.tail)
        head = self.head.decode("utf-8", "replace")
        if self.total > kept:
            dropped = self.total - kept
            return head + f"\n[... {dropped} bytes truncated by wmrl ...]\n" + self.tail.decode("utf-8", "replace")
        return head + self.tail.decode("utf-8", "replace")


def rlimits(config: Limits, cpu_limit_s: float) -> dict[str, list[int]]:
    """The launcher's ``setrlimit`` values, ``{name: [soft, hard]}``: ``config``'s, and ``cpu_limit_s`` CPU-seconds
    rounded up (SIGXCPU at the soft limit, SIGKILL one second later)."""
    cpu = min(max(1, math.ceil(cpu_limit_s)), MAX_LIMIT - 1)  # setrlimit takes a C long
    return {
        "RLIMIT_AS": [config.memory_bytes, config.memory_bytes],
        "RLIMIT_CPU": [cpu, cpu + 1],  # SIGXCPU at the soft limit, SIGKILL one second later
        "RLIMIT_NPROC": [config.nproc, config.nproc],
        "RLIMIT_FSIZE": [config.fsize_bytes, config.fsize_bytes],
        "RLIMIT_NOFILE": [config.nofile, config.nofile],
        "RLIMIT_CORE": [0, 0],
    }


def tree_usage(path: Path, byte_cap: int, file_cap: int, depth_cap: int = MAX_LIMIT) -> tuple[int, int, int]:
    """(bytes on disk, entries, deepest folder level) under ``path`` without following links (iteratively:
    any depth); stops early over a cap. A folder directly in ``path`` is level 1; a folder whose path is
    too long to read counts as deeper than ``depth_cap``."""
    total = 0
    count = 0
    deepest = 0
    stack = [(path, 0)]
    while stack:
        d, level = stack.pop()
        try:
            it = os.scandir(d)
        except OSError as exc:
            if exc.errno == errno.ENAMETOOLONG:
                return total, count, depth_cap + 1
            continue
        with it:
            for e in it:
                count += 1
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError as exc:
                    if exc.errno == errno.ENAMETOOLONG:
                        return total, count, depth_cap + 1
                    continue
                total += st.st_blocks * 512
                if stat.S_ISDIR(st.st_mode):
                    stack.append((Path(e.path), level + 1))
                    deepest = max(deepest, level + 1)
                if total > byte_cap or count > file_cap or deepest > depth_cap:
                    return total, count, deepest
    return total, count, deepest


def parent_pid(pid: int) -> int | None:
    """The parent pid of ``pid`` (from ``/proc/<pid>/stat``), or None when it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rindex(b")") + 2:].split()[1])
    except (OSError, ValueError, IndexError):
        return None


class ProcessTree:
    """The process tree of one execution, and how to stop it.

    ``proc`` is bwrap (or the bare launcher when unsandboxed, ``pid_namespace`` False); the launcher is PID 1
    of the sandbox's PID namespace, and bwrap reports its pid on the info pipe (``info``). :meth:`kill` asks
    the launcher to kill and reap the tree (SIGTERM); :meth:`hard_kill` SIGKILLs the namespace's PID 1 (the
    kernel kills the rest) and the process group.
    """

    def __init__(self, proc: subprocess.Popen, pid_namespace: bool, info: bytearray) -> None:
        self.proc, self.pid_namespace, self.info = proc, pid_namespace, info
        self.child_pid: int | None = None
        self.killed = ""
        self.kill_sent_at: float | None = None

    def launcher_pid(self) -> int | None:
        """The launcher's pid, once known and only while it is still bwrap's child (never a recycled pid)."""
        if not self.pid_namespace:
            return self.proc.pid
        if self.child_pid is None and self.info:
            try:
                self.child_pid = int(json.loads(bytes(self.info))["child-pid"])
            except (ValueError, KeyError):
                return None
        pid = self.child_pid
        return pid if pid is not None and parent_pid(pid) == self.proc.pid else None

    def kill(self, reason: str) -> None:
        """Ask the launcher to kill and reap the tree (SIGTERM); SIGKILL everything if it cannot be asked.
        The first reason is kept (``timeout``, ``cancelled``, ``disk``, ``depth``, ``memory``)."""
        if self.killed:
            return
        self.killed = reason
        self.kill_sent_at = time.monotonic()
        pid = self.launcher_pid()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGTERM)
                return
            except ProcessLookupError:
                pass
        self.hard_kill()

    def hard_kill(self) -> None:
        """SIGKILL the namespace's PID 1 (the kernel kills the rest) and the process group."""
        pid = self.launcher_pid()
        for target in ([pid] if pid is not None and self.pid_namespace else []):
            try:
                os.kill(target, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def over_disk(folders: Sequence[Path], config: Limits) -> tuple[str, str] | None:
    """``(reason, message)`` when the program's files in ``folders`` (its working and scratch folders) together
    exceed the disk or file-count limit (reason ``disk``) or its folders are nested deeper than ``max_depth``
    in one of them (reason ``depth``), else None."""
    usage = [tree_usage(f, config.disk_bytes, config.max_files, config.max_depth) for f in folders]
    used, count = sum(u[0] for u in usage), sum(u[1] for u in usage)
    if used > config.disk_bytes or count > config.max_files:
        return "disk", (f"\nwmrl: killed: the program stored {used} bytes in {count} entries, over the "
                        f"limit of {config.disk_bytes} bytes / {config.max_files} entries\n")
    if max((u[2] for u in usage), default=0) > config.max_depth:
        return "depth", (f"\nwmrl: killed: the program nested folders more than {config.max_depth} levels deep "
                         f"(or made a path too long to read) in its working or scratch folder\n")
    return None


def supervise(tree: ProcessTree, streams: dict[int, Any], folders: Sequence[Path], config: Limits, deadline: float,
              cancel: threading.Event | None, err: HeadTail,
              memory: MemoryWatch | None = None) -> tuple[int, Any, float | None]:
    """Read the pipes until the tree has exited and they are closed (or 1 s after it was reaped), enforcing
    the wall-clock deadline (``time.monotonic()`` seconds), cancellation, the disk limit on ``folders`` and
    the tree's memory limit (``memory``, every ``poll_s``) on the way; a disk, depth or memory kill's message
    goes to ``err``.

    Args:
        streams: ``{fd: callback}``: each pipe the driver reads and what gets its bytes.

    Returns:
        (wait status, rusage, monotonic time it was reaped).
    """
    proc = tree.proc
    sel = selectors.DefaultSelector()
    for fd in streams:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    open_fds = set(streams)
    next_poll = time.monotonic() + config.poll_s
    status = rusage = reaped_at = None
    try:
        while True:
            now = time.monotonic()
            if status is None:
                pid, st, ru = os.wait4(proc.pid, os.WNOHANG)
                if pid == proc.pid:
                    status, rusage, reaped_at = st, ru, now
                    if not tree.pid_namespace:  # no PID namespace: take leftovers down by group
                        try:
                            os.killpg(proc.pid, signal.SIGKILL)
                        except (ProcessLookupError, PermissionError):
                            pass
            if status is not None and (not open_fds or (reaped_at is not None and now - reaped_at > 1.0)):
                break
            if status is None and not tree.killed:
                if now >= deadline:
                    tree.kill("timeout")
                elif cancel is not None and cancel.is_set():
                    tree.kill("cancelled")
                elif now >= next_poll:
                    next_poll = now + config.poll_s
                    over = over_disk(folders, config)
                    if over:
                        tree.kill(over[0])
                        err.add(over[1].encode())
                    elif memory is not None:
                        why = memory.over()
                        if why:
                            tree.kill("memory")
                            err.add(why.encode())
            if status is None and tree.killed and tree.kill_sent_at is not None and now - tree.kill_sent_at > 2.0:
                tree.hard_kill()  # the launcher did not finish reaping in 2 s: take the namespace down
                tree.kill_sent_at = None
            timeout = config.poll_s if status is None else 0.05
            if status is None and not tree.killed:
                timeout = max(0.0, min(timeout, deadline - now))
            if open_fds:
                for key, _ in sel.select(timeout):
                    try:
                        data = os.read(key.fd, 1 << 16)
                    except BlockingIOError:
                        continue
                    if data:
                        streams[key.fd](data)
                    else:
                        sel.unregister(key.fd)
                        open_fds.discard(key.fd)
            else:
                time.sleep(min(timeout, 0.005))  # all pipes closed: the tree is exiting
    finally:
        sel.close()
        if status is None:  # exception path: make sure nothing survives
            tree.killed = tree.killed or "cancelled"
            tree.hard_kill()
            _, status, rusage = os.wait4(proc.pid, 0)
    return status, rusage, reaped_at


@dataclass
class TreeRun:
    """What a finished tree did (:func:`run_tree`).

    Attributes:
        status: its ``wait4`` status.
        rusage: its ``wait4`` resource usage (the whole tree's: see the module docstring).
        t0: ``time.monotonic()`` when it was started, seconds.
        reaped_at: ``time.monotonic()`` when it was reaped (None: it was reaped on the error path).
        killed: why the driver stopped it: ``""``, ``timeout``, ``cancelled``, ``disk``, ``depth`` or ``memory``
            (the tree reached its memory limit).
        marker: what the launcher wrote on its marker pipe (``LS`` + ``M<peak RSS KiB>``, or ``LE`` + why).
        out, err: the program's stdout and stderr (head and tail kept).
        tree_peak_bytes: the memory watch's peak of the whole tree, bytes (0 without a watch).
        memory_limit_mode: the watch's kind (``cgroup-v2``, ``cgroup-v1``, ``supervisor``; ``""`` without one).
    """

    status: int
    rusage: Any
    t0: float
    reaped_at: float | None
    killed: str
    marker: bytearray
    out: HeadTail
    err: HeadTail
    tree_peak_bytes: int = 0
    memory_limit_mode: str = ""

    @property
    def wall_s(self) -> float:
        """Seconds from the start until the tree was reaped (until now on the error path)."""
        return (self.reaped_at or time.monotonic()) - self.t0

    @property
    def cpu_s(self) -> float:
        """CPU-seconds, user + sys, of the whole tree."""
        return self.rusage.ru_utime + self.rusage.ru_stime

    @property
    def peak_rss_bytes(self) -> int:
        """The tree's peak memory, bytes: the memory watch's (:attr:`tree_peak_bytes`), and at least the largest
        resident set of one process of the tree (the launcher's figure, which excludes the driver's pages shared
        by fork before exec, else ``ru_maxrss``)."""
        m = re.search(rb"M(\d+)$", bytes(self.marker)) if self.marker.startswith(b"LS") else None
        return max(self.tree_peak_bytes, int(m.group(1) if m else self.rusage.ru_maxrss) * 1024)

    @property
    def exit_code(self) -> int:
        """The exit code, or 128+N when the tree's top process died of signal N."""
        code = os.waitstatus_to_exitcode(self.status)
        return code if code >= 0 else 128 - code

    @property
    def started(self) -> bool:
        """Whether the launcher started the program (it wrote ``LS``)."""
        return self.marker.startswith(b"LS")

    @property
    def launch_error(self) -> str:
        """Why the launcher could not start the program (after ``LE``), or ``""``."""
        return bytes(self.marker[2:]).decode("utf-8", "replace") if self.marker.startswith(b"LE") else ""


def run_tree(command: Callable[[int, int], tuple[list[str], str]], *, pid_namespace: bool, config: Limits,
             time_limit_s: float, folders: Sequence[Path], cancel: threading.Event | None = None,
             memory: MemoryWatch | None = None, pass_fds: Sequence[int] = ()) -> TreeRun:
    """Start the launcher's tree, supervise it until it has exited and return what it did.

    Args:
        command: ``command(marker_fd, info_fd) -> (argv, cwd)``: the command line that starts the launcher,
            given the write ends of its marker pipe and of bwrap's info pipe (-1 without ``pid_namespace``);
            both are passed to the child and closed here once it runs.
        pid_namespace: the tree runs under bubblewrap in its own PID namespace (bwrap reports the
            launcher's pid on the info pipe), else bare (stopped by process group).
        config: the output, disk and polling limits (:class:`Limits`).
        time_limit_s: wall-clock limit from the start, seconds.
        folders: the program's writable folders, held to ``config``'s disk, file-count and depth limits.
        cancel: when set during the run, the tree is killed (``killed="cancelled"``).
        memory: the tree's memory limit; when it says the tree is over (while it runs, or once after it was
            reaped: a process the kernel killed at the limit), the tree is killed (``killed="memory"``).
        pass_fds: more descriptors the child inherits (the caller's; it closes them).

    Raises:
        StartFailed: the command could not be started (nothing ran).
    """
    info_r = info_w = -1
    marker_r, marker_w = os.pipe()
    if pid_namespace:
        info_r, info_w = os.pipe()
    ours = [fd for fd in (marker_r, info_r) if fd >= 0]
    fds_to_close = [marker_w] + ([info_w] if info_w >= 0 else [])
    try:
        cmd, cwd = command(marker_w, info_w)
    except BaseException:
        for fd in fds_to_close + ours:
            os.close(fd)
        raise
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, pass_fds=tuple(fds_to_close) + tuple(pass_fds), cwd=cwd,
                                env={"PATH": "/usr/bin:/bin"}, start_new_session=True, close_fds=True)
    except OSError as exc:
        for fd in fds_to_close + ours:
            os.close(fd)
        raise StartFailed(str(exc)) from exc
    for fd in fds_to_close:
        os.close(fd)

    out = HeadTail(config.output_bytes)
    err = HeadTail(config.output_bytes)
    marker = bytearray()
    info = bytearray()
    assert proc.stdout is not None and proc.stderr is not None
    streams = {proc.stdout.fileno(): out.add, proc.stderr.fileno(): err.add, marker_r: marker.extend}
    if info_r >= 0:
        streams[info_r] = info.extend
    tree = ProcessTree(proc, pid_namespace, info)
    if memory is not None:
        memory.started(proc.pid)
    try:
        status, rusage, reaped_at = supervise(tree, streams, folders, config, t0 + time_limit_s, cancel, err, memory)
        if memory is not None and not tree.killed:  # a kill at the limit the tree outlived or exited after
            why = memory.over()
            if why:
                tree.killed = "memory"
                err.add(why.encode())
    finally:
        for fd in ours:
            try:
                os.close(fd)
            except OSError:
                pass
        proc.stdout.close()
        proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return TreeRun(status=status, rusage=rusage, t0=t0, reaped_at=reaped_at, killed=tree.killed, marker=marker,
                   out=out, err=err, tree_peak_bytes=memory.peak_bytes if memory is not None else 0,
                   memory_limit_mode=memory.kind if memory is not None else "")

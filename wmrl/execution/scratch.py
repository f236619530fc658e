"""Execution folders: each execution's scratch folder, owned through an ``flock`` on its lock file, and the
sweep that removes the folders of drivers that were killed (SIGKILL, out-of-memory killer).

A folder is ``wmrl-exec-<host>-<driver pid>-XXXX`` in the scratch dir (default: the system temp dir). Its
driver holds an exclusive lock on :data:`OWNER_LOCK` for as long as the folder is in use
(:func:`make_scratch`); :func:`sweep_stale_scratch` removes only folders whose lock nobody holds, so a live
driver in another PID namespace keeps its folders.
"""
from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
import threading
from pathlib import Path

log = logging.getLogger("wmrl.execution.sandbox")


SCRATCH_PREFIX = "wmrl-exec-"
#: The lock file in each execution folder; its driver holds an exclusive ``flock`` on it for as long
#: as the folder is in use (the kernel releases it when the driver dies, however it dies).
OWNER_LOCK = ".owner.lock"
_swept: set[str] = set()
_swept_lock = threading.Lock()


def _scratch_prefix() -> str:
    """``wmrl-exec-<host>-<driver pid>-``: whose execution folder it is (for people reading the folder
    list; ownership itself is proved by the folder's lock, not by the pid)."""
    return f"{SCRATCH_PREFIX}{socket.gethostname()}-{os.getpid()}-"


def make_scratch(scratch_dir: str | os.PathLike | None = None) -> tuple[Path, int]:
    """A fresh execution folder ``wmrl-exec-<host>-<pid>-XXXX`` in ``scratch_dir`` (default: the system
    temp dir), locked: returns ``(folder, fd)`` where ``fd`` holds an exclusive ``flock`` on the
    folder's :data:`OWNER_LOCK`. The folder is made under a hidden name, locked, then renamed, so that
    no sweeper ever sees it unlocked. Close ``fd`` only after removing the folder.

    Raises:
        OSError: the folder cannot be made or locked.
    """
    import fcntl

    tmp = Path(tempfile.mkdtemp(prefix="." + _scratch_prefix(), dir=scratch_dir))
    fd = -1
    try:
        fd = os.open(tmp / OWNER_LOCK, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        final = tmp.with_name(tmp.name[1:])
        os.rename(tmp, final)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        _rmtree(tmp)
        raise
    return final, fd


def _lock_if_abandoned(folder: Path) -> int | None:
    """An fd holding the folder's owner lock when nobody else holds it (its driver is gone), else None.

    A folder without a lock file (made by an older wmrl, or not by wmrl) is never taken."""
    import fcntl

    try:
        fd = os.open(folder / OWNER_LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held: a live driver, in whatever PID namespace or container
        os.close(fd)
        return None
    return fd


def sweep_stale_scratch(scratch_dir: str | os.PathLike | None = None) -> list[Path]:
    """Remove the execution folders that drivers on this host left behind when they were killed
    (SIGKILL, out-of-memory killer): folders named ``wmrl-exec-<this host>-*`` in ``scratch_dir``
    (default: the system temp dir), owned by this user, whose :data:`OWNER_LOCK` no process holds.

    Ownership is proved by the lock, never by pid visibility: a live driver in another PID namespace
    (a container, ``unshare --pid``) holds its lock, so its folders stay. Folders without a lock file,
    of other hosts (a shared scratch disk) and without that name are left alone.

    Returns:
        The folders removed. Never raises; a folder that cannot be removed is logged and kept.
    """
    base = Path(scratch_dir or tempfile.gettempdir())
    host_prefix = f"{SCRATCH_PREFIX}{socket.gethostname()}-"
    removed = []
    try:
        entries = list(base.iterdir())
    except OSError:
        return removed
    for p in entries:
        if not p.name.startswith(host_prefix):
            continue
        try:
            if not p.is_dir() or p.is_symlink() or p.stat().st_uid != os.geteuid():
                continue
        except OSError:
            continue
        fd = _lock_if_abandoned(p)
        if fd is None:
            continue
        try:
            _rmtree(p)  # holding the lock: no other sweeper takes it meanwhile
        finally:
            os.close(fd)
        if not p.exists():
            removed.append(p)
    if removed:
        log.info("removed %d execution folder(s) left by killed drivers in %s", len(removed), base)
    return removed


def _sweep_once(scratch_dir: str | None) -> None:
    """:func:`sweep_stale_scratch` the first time this process executes into ``scratch_dir``."""
    key = str(scratch_dir)
    with _swept_lock:
        if key in _swept:
            return
        _swept.add(key)
    sweep_stale_scratch(scratch_dir)


def _rmtree(root: Path) -> None:
    def onerror(func, path, _exc):
        try:
            os.chmod(os.path.dirname(path), 0o700)
            func(path)
        except OSError:
            pass
    try:
        shutil.rmtree(root, onerror=onerror)
    except OSError:
        log.warning("could not remove %s", root)

"""Execution folders: each execution's scratch folder, owned through an ``flock`` on its lock file, and the
sweep that removes the folders of drivers that were killed (SIGKILL, out-of-memory killer).

A folder is ``wmrl-exec-<host>-<driver pid>-XXXX`` in the scratch dir (default: the system temp dir). Its
driver holds an exclusive lock on :data:`OWNER_LOCK` for as long as the folder is in use
(:func:`make_scratch`); :func:`sweep_stale_scratch` removes only folders whose lock nobody holds, so a live
driver in another PID namespace keeps its folders.
"""
from __future__ import annotations

import fcntl
import logging
import os
import socket
import stat
import tempfile
import threading
from pathlib import Path

log = logging.getLogger("wmrl.execution.sandbox")


SCRATCH_PREFIX = "wmrl-exec-"
#: Name prefix of execution folders that could not be removed, renamed aside; nothing in wmrl touches them.
QUARANTINE_PREFIX = "wmrl-quarantine-"
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
        remove_tree(tmp)
        raise
    return final, fd


def _lock_if_abandoned(folder: Path) -> int | None:
    """An fd holding the folder's owner lock when nobody else holds it (its driver is gone), else None.

    A folder without a lock file (made by an older wmrl, or not by wmrl) is never taken."""
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
        The folders removed. Never raises; a folder that cannot be removed is renamed to
        ``wmrl-quarantine-...`` in the same dir (never looked at again) and logged once.
    """
    try:
        return _sweep(scratch_dir)
    except Exception:  # a sweep must never stop an execution; logged with its traceback
        log.exception("the sweep of stale execution folders failed; executions go on")
        return []


def _sweep(scratch_dir: str | os.PathLike | None) -> list[Path]:
    base = Path(scratch_dir or tempfile.gettempdir())
    host_prefix = f"{SCRATCH_PREFIX}{socket.gethostname()}-"
    removed: list[Path] = []
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
            if remove_or_quarantine(p):  # holding the lock: no other sweeper takes it meanwhile
                removed.append(p)
        finally:
            os.close(fd)
    if removed:
        log.info("removed %d execution folder(s) left by killed drivers in %s", len(removed), base)
    return removed


def sweep_once(scratch_dir: str | None) -> None:
    """:func:`sweep_stale_scratch` the first time this process executes into ``scratch_dir``."""
    key = str(scratch_dir)
    with _swept_lock:
        if key in _swept:
            return
        _swept.add(key)
    sweep_stale_scratch(scratch_dir)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)


def _open_dir(name: str, dir_fd: int) -> int:
    """An fd on the folder ``name`` in ``dir_fd`` (never through a link); on EACCES it is chmod 0o700 first."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        os.chmod(name, 0o700, dir_fd=dir_fd)  # lstat said folder; a folder's mode, never a link's target
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


def _remove_entry(name: str, dir_fd: int, is_dir: bool, fix_mode: bool = True) -> None:
    """``unlink``/``rmdir`` ``name`` in ``dir_fd``; on EACCES/EPERM the folder is made writable (only with
    ``fix_mode``: never the folder the tree is in) and it is retried."""
    op = os.rmdir if is_dir else os.unlink
    try:
        op(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except PermissionError:
        if not fix_mode:
            raise
        os.fchmod(dir_fd, 0o700)
        op(name, dir_fd=dir_fd)


def _remove_tree(parent_fd: int, top: str) -> bool:
    """Remove ``top`` (a name in ``parent_fd``) and everything under it, depth-first with an explicit stack
    of names: one folder fd open at a time (going up through ``..``, checked against the device and inode
    the folder had on the way down), so that no depth, path length or fd limit stops it. Links are removed,
    never followed; sockets, FIFOs and device nodes are unlinked, never opened. Returns whether it is gone."""
    try:
        st = os.lstat(top, dir_fd=parent_fd)
    except FileNotFoundError:
        return True
    if not stat.S_ISDIR(st.st_mode):
        _remove_entry(top, parent_fd, False, fix_mode=False)
        return True
    names = [top]
    ids = [(st.st_dev, st.st_ino)]
    kept: set[tuple[int, int]] = set()  # folders that could not be removed: not entered again
    ok = True
    fd = _open_dir(top, parent_fd)
    try:
        while True:
            child = None
            with os.scandir(fd) as it:
                for e in it:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            est = e.stat(follow_symlinks=False)
                            if (est.st_dev, est.st_ino) not in kept:
                                child = (e.name, (est.st_dev, est.st_ino))
                                break
                        else:
                            _remove_entry(e.name, fd, False)
                    except OSError:
                        ok = False
            if child is not None:
                try:
                    new = _open_dir(child[0], fd)
                    nst = os.fstat(new)
                    if (nst.st_dev, nst.st_ino) != child[1]:
                        os.close(new)
                        raise OSError(f"{child[0]} was replaced while it was being removed")
                except OSError:
                    kept.add(child[1])
                    ok = False
                    continue
                os.close(fd)
                fd = new
                names.append(child[0])
                ids.append(child[1])
                continue
            # this folder is empty (but for what could not be removed): go up and remove it
            name, this = names.pop(), ids.pop()
            if not names:
                os.close(fd)
                fd = -1
                try:
                    _remove_entry(name, parent_fd, True, fix_mode=False)
                except OSError:
                    return False
                return ok
            up = os.open("..", _DIR_FLAGS, dir_fd=fd)
            ust = os.fstat(up)
            os.close(fd)
            fd = up
            if (ust.st_dev, ust.st_ino) != ids[-1]:
                return False  # moved under us: stop rather than remove anything outside the tree
            try:
                _remove_entry(name, fd, True)
            except OSError:
                kept.add(this)
                ok = False
    finally:
        if fd >= 0:
            os.close(fd)


def remove_tree(root: str | os.PathLike) -> bool:
    """Remove the folder (or file) ``root`` and everything under it, whatever a program left there: any
    depth, paths longer than ``PATH_MAX``, folders of mode 000 or read-only, links (never followed),
    sockets, FIFOs, device nodes.

    Returns:
        Whether ``root`` is gone. Never raises: what cannot be removed is logged and kept.
    """
    try:
        parent, name = os.path.split(os.path.abspath(os.fspath(root)))
        pfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            if _remove_tree(pfd, name):
                return True
        finally:
            os.close(pfd)
    except FileNotFoundError:
        return True
    except Exception as exc:  # noqa: BLE001 - cleanup must never fail its caller
        log.warning("could not remove %s: %s: %s", root, type(exc).__name__, exc)
        return False
    log.warning("could not remove everything in %s", root)
    return False


def _quarantine(folder: Path) -> Path | None:
    """Rename a folder that could not be removed to ``wmrl-quarantine-...`` next to it (the sweep never
    looks at such names again) and warn once. Returns the new path, or None when it cannot be renamed."""
    target = folder.with_name(QUARANTINE_PREFIX + folder.name[len(SCRATCH_PREFIX):])
    try:
        os.rename(folder, target)
    except OSError as exc:
        log.warning("could not remove the execution folder %s nor rename it aside (%s); delete it by hand",
                    folder, exc)
        return None
    log.warning("could not remove the execution folder %s; renamed it to %s, which wmrl leaves alone: "
                "delete it by hand (as root if needed)", folder, target)
    return target


def remove_or_quarantine(folder: Path) -> bool:
    """Remove an execution folder; one that cannot be removed is renamed aside (:func:`_quarantine`).

    Returns:
        Whether the folder was removed. Never raises.
    """
    if remove_tree(folder):
        return True
    try:
        _quarantine(folder)
    except Exception:
        log.exception("could not set %s aside", folder)
    return False

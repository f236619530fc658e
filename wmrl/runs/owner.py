"""The owner of a run directory: one trainer at a time.

A trainer holds an exclusive ``flock`` on :data:`OWNER_LOCK` in its run directory for as long as it
runs (:class:`RunDirOwner`), with its pid, host and start time written in the file for the message of
a refused start. The kernel drops the lock when the trainer dies, however it dies, so a lock file left
by a dead trainer is taken over silently.

A new run directory appears with its lock already held (:meth:`RunDirOwner.claim`): the folder is made
under a hidden temporary name next to it, the lock taken inside, and the folder renamed into place in one
step, so no other trainer ever sees it unlocked. Only the process that made a folder this way removes it
(:meth:`RunDirOwner.discard`, a start that failed): renamed out of the way first, so the run directory's
path is either whole or absent, never half-deleted. Temporary folders left by a process killed meanwhile
(``.<name>.start-*``, ``.<name>.discard-*`` beside the run directory) are removed by the next claim once
their lock is free.

A start that fails before its first checkpoint is undone by :meth:`RunDirOwner.undo_start`: the folder the start
made is discarded, and in a folder that existed only what the start added is removed (what was there is noted by
:meth:`RunDirOwner.note_entries`), so both tracks leave a folder as they found it.
"""
from __future__ import annotations

import errno
import glob
import json
import os
import secrets
import shutil
import socket
from pathlib import Path

from wmrl.runs.rundir import RunDirError, fsync_dir, now_iso

#: The lock file in a run directory; its trainer holds an exclusive ``flock`` on it while it runs.
OWNER_LOCK = ".owner.lock"

#: The text track's command that continues a run (followed by the run directory).
TEXT_RESUME = "wmrl train --resume"


class RunDirOwner:
    """The lock of one run directory (:meth:`acquire`, :meth:`release`; also a context manager).

    Args:
        root: the run directory.
        resume: the track's command that continues a run, named with the run directory in the message of a
            refused start (``wmrl train --resume``, ``wmrl embodied train --resume``).
    """

    def __init__(self, root: str | os.PathLike[str], resume: str = TEXT_RESUME):
        self.root = Path(root)
        self.resume = resume
        #: The names the folder held before a start added to it (:meth:`note_entries`); None: nothing noted.
        self.before: set[str] | None = None
        self.fd: int | None = None
        #: Whether :meth:`acquire` made the lock file (it was not in the folder before).
        self.created = False
        #: Whether :meth:`claim` made the run directory itself (it did not exist before this call).
        self.made_root = False

    @property
    def path(self) -> Path:
        return self.root / OWNER_LOCK

    def acquire(self) -> None:
        """Take the lock (no-op when this object holds it already) and write this process's pid, host
        and start time in the lock file. The run directory must exist.

        Raises:
            RunDirError: another live process holds the lock (the message names its pid, host and
                start time, and what to do).
            OSError: the lock file cannot be made or opened.
        """
        import fcntl

        if self.fd is not None:
            return
        created = not os.path.lexists(self.path)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe(fd)
            os.close(fd)
            raise RunDirError(
                f"{self.root} is in use by another trainer ({holder}); two trainers on one run directory "
                f"would corrupt its records. Wait for that trainer to end, or stop it and resume then "
                f"(`{self.resume} {self.root}`)") from None
        except BaseException:
            os.close(fd)
            raise
        _write_owner(fd)
        self.fd, self.created = fd, created

    def claim(self) -> None:
        """Take the lock of a run directory that may not exist yet: an existing folder is locked as by
        :meth:`acquire`; a missing one is made with the lock already held (made under a temporary name
        beside it, locked, renamed into place: one step for every other process), and :attr:`made_root`
        says so. Parent folders are made as needed. No-op when this object holds the lock already.

        Raises:
            RunDirError: the path names something that is not a folder (a file, a broken link), a parent
                is not a folder, the folder cannot be made there (the message says why), or another live
                process holds the lock (as :meth:`acquire`).
        """
        if self.fd is not None:
            return
        if os.path.lexists(self.root) and not self.root.is_dir():
            raise RunDirError(f"run_dir {self.root} is a file, not a folder; choose another run_dir (a new or "
                              f"empty folder) or move the file away")
        if self.root.is_dir():
            self.acquire()
            return
        parent = self.root.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
            _sweep(parent, self.root.name)
            tmp = parent / f".{self.root.name}.start-{os.getpid()}-{secrets.token_hex(4)}"
            tmp.mkdir()  # the folder's mode as the umask makes it, like any other folder of the user
        except OSError as e:
            raise RunDirError(f"cannot make the run directory {self.root} ({e.strerror or e}); choose another "
                              f"run_dir") from None
        fd = -1
        try:
            fd = os.open(tmp / OWNER_LOCK, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a file nobody else has opened: never refused
            _write_owner(fd)
            os.rename(tmp, self.root)  # atomic; refused when another process made the folder meanwhile
        except OSError as e:
            if fd >= 0:
                os.close(fd)
            shutil.rmtree(tmp, ignore_errors=True)
            if e.errno in (errno.EEXIST, errno.ENOTEMPTY) and self.root.is_dir():
                self.acquire()  # another process made it first: its lock decides
                return
            raise RunDirError(f"cannot make the run directory {self.root} ({e.strerror or e}); choose another "
                              f"run_dir") from None
        except BaseException:
            if fd >= 0:
                os.close(fd)
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        fsync_dir(parent)
        self.fd, self.created, self.made_root = fd, True, True

    def discard(self) -> None:
        """Remove the run directory that :meth:`claim` made in this process (a start that failed), and give
        the lock up: the folder is first renamed to a hidden name beside it (one step: its path is then
        absent, never half-deleted), then deleted, its lock file last. Does nothing to a folder this object
        did not make or no longer holds.

        Raises:
            OSError: the folder cannot be renamed (it is then left whole, lock released).
        """
        if not self.made_root or self.fd is None:
            return
        try:
            grave = self.root.parent / f".{self.root.name}.discard-{os.getpid()}-{secrets.token_hex(4)}"
            os.rename(self.root, grave)
            fsync_dir(self.root.parent)
            _remove_tree(grave)
        finally:
            self.made_root = False
            self.release()

    def note_entries(self) -> None:
        """Note what the run directory holds before a start adds to it (:attr:`before`; nothing to note of a folder
        :meth:`claim` made, or of the lock file :meth:`acquire` made)."""
        if self.made_root:
            self.before = None
            return
        self.before = set(os.listdir(self.root)) if self.root.is_dir() else set()
        if self.created:
            self.before.discard(OWNER_LOCK)

    def undo_start(self) -> None:
        """Undo a start that failed before its first checkpoint: the folder :meth:`claim` made is discarded
        (:meth:`discard`); in a folder that existed, only the entries added since :meth:`note_entries` are removed,
        ``config.yaml`` and its hash last, so a kill midway leaves a folder that resumes or starts again. Nothing
        is removed when nothing was noted.

        Raises:
            OSError: as :meth:`discard`.
        """
        if self.made_root:
            self.discard()
            return
        if self.before is None or not self.root.is_dir():
            return
        before, last = self.before, ("config.yaml.sha256", "config.yaml")
        added = sorted((p for p in self.root.iterdir() if p.name not in before),
                       key=lambda p: last.index(p.name) + 1 if p.name in last else 0)
        for p in added:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)

    def release(self) -> None:
        """Give the lock up (no-op when not held). The file stays: the next owner overwrites it."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> "RunDirOwner":
        self.acquire()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()


def _write_owner(fd: int) -> None:
    """Write this process's pid, host and start time into the held lock file ``fd``."""
    info = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": now_iso()}).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, info + b"\n", 0)


def _remove_tree(path: Path) -> None:
    """Delete a temporary folder of :meth:`RunDirOwner.claim` or :meth:`RunDirOwner.discard`, its lock file
    last, so that one killed midway leaves a folder whose free lock (or emptiness) lets :func:`_sweep` finish."""
    if not path.is_dir():
        return
    for p in list(path.iterdir()):
        if p.name == OWNER_LOCK:
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    (path / OWNER_LOCK).unlink(missing_ok=True)
    shutil.rmtree(path, ignore_errors=True)


def _sweep(parent: Path, name: str) -> None:
    """Remove the temporary folders of run directory ``name`` in ``parent`` that a killed process left
    (:meth:`RunDirOwner.claim`'s ``.<name>.start-*``, :meth:`RunDirOwner.discard`'s ``.<name>.discard-*``):
    those with a lock file that no live process holds, and those that hold no file at all whose process (the pid
    in the name) has ended. A live process's are left alone.

    Raises:
        nothing: a folder that cannot be read or removed is left as it is.
    """
    import fcntl

    stem = glob.escape(f".{name}")
    for d in sorted(parent.glob(f"{stem}.start-*")) + sorted(parent.glob(f"{stem}.discard-*")):
        try:
            fd = os.open(d / OWNER_LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:  # no lock file: its process killed before making it or after removing it, or still there
            if not _alive(d.name) and not any(files for _w, _s, files in os.walk(d)):
                shutil.rmtree(d, ignore_errors=True)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # its process is alive
        finally:
            os.close(fd)
        _remove_tree(d)


def _alive(name: str) -> bool:
    """Whether the process whose pid a temporary folder's name holds (``.<run>.start-<pid>-<hex>``) still runs
    (True when the name holds none, or the process is another user's)."""
    try:
        pid = int(name.rsplit("-", 2)[-2])
        os.kill(pid, 0)
    except (ValueError, IndexError, PermissionError):
        return True
    except ProcessLookupError:
        return False
    return True


def _describe(fd: int) -> str:
    """``pid 123 on host h since <time>`` from a held lock file (what its owner wrote there)."""
    try:
        d = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"pid {d['pid']} on host {d['host']} since {d['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that has not written its pid yet"

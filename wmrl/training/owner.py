"""The owner of a run directory: one trainer at a time.

A trainer holds an exclusive ``flock`` on :data:`OWNER_LOCK` in its run directory for as long as it
runs (:class:`RunDirOwner`), with its pid, host and start time written in the file for the message of
a refused start. The kernel drops the lock when the trainer dies, however it dies, so a lock file left
by a dead trainer is taken over silently.
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
from pathlib import Path

from wmrl.training.components import RunDirError, now_iso

#: The lock file in a run directory; its trainer holds an exclusive ``flock`` on it while it runs.
OWNER_LOCK = ".owner.lock"


class RunDirOwner:
    """The lock of one run directory (:meth:`acquire`, :meth:`release`; also a context manager)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.fd: int | None = None
        #: Whether :meth:`acquire` made the lock file (it was not in the folder before).
        self.created = False

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
                f"(`wmrl train --resume {self.root}`)") from None
        except BaseException:
            os.close(fd)
            raise
        info = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": now_iso()}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, info + b"\n", 0)
        self.fd, self.created = fd, created

    def release(self) -> None:
        """Give the lock up (no-op when not held). The file stays: the next owner overwrites it."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> RunDirOwner:
        self.acquire()
        return self

    def __exit__(self, *_exc) -> None:
        self.release()


def _describe(fd: int) -> str:
    """``pid 123 on host h since <time>`` from a held lock file (what its owner wrote there)."""
    try:
        d = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"pid {d['pid']} on host {d['host']} since {d['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that has not written its pid yet"

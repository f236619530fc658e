"""Masks over files a task could be rebuilt from that no package list names.

Two sources, both applied by :func:`wmrl.execution.sandbox.hidden_paths`:

* **package test folders** (:func:`test_folders`): installed packages ship test fixtures, and some are
  full copies of public tables (scikit-learn's OpenML fixtures hold titanic, penguins, iris ...).
  Every folder named in :data:`TEST_FOLDER_NAMES` under a site folder the sandbox imports from that
  holds any file other than code (:data:`CODE_SUFFIXES`) is masked (only the outermost of nested
  ones). Folders of code only are left visible: each mask is one more mount, and bubblewrap's cost
  per mount grows with the number of mounts (about 1.2 s per execution for the 429 test folders of a
  full scientific environment, against about 20 ms for the 86 that hold data). ``testing`` modules
  (``numpy.testing``, ``torch.testing``) are library code and stay visible.
* **found copies** (:func:`read_masks`): the paths :mod:`wmrl.execution.leakscan` found holding a task's
  test rows, written by ``wmrl tasks check --copies --mask`` (:func:`write_masks`) into :data:`MASKS_FILE` in
  the task folder (a suite folder's file applies to all its tasks; one absolute path per line) and read again
  at each execution.
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

#: Folder names masked wherever they appear under a site folder (package test suites and their data).
TEST_FOLDER_NAMES = ("tests", "test")
#: File, in a suite folder or a task folder, listing more host paths to mask (one absolute path a line).
MASKS_FILE = "sandbox-masks.txt"
#: Files that are code, not data: a test folder holding only these (and ``__pycache__``) stays visible.
CODE_SUFFIXES = (".py", ".pyc", ".pyi", ".pyx", ".pxd", ".typed")


def _holds_data(folder: str) -> bool:
    for _dirpath, dirs, files in os.walk(folder, onerror=lambda e: None):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        if any(not f.endswith(CODE_SUFFIXES) for f in files):
            return True
    return False


@lru_cache(maxsize=16)
def test_folders(site_dirs: tuple[str, ...]) -> tuple[str, ...]:
    """Every folder named in :data:`TEST_FOLDER_NAMES` under the folders ``site_dirs`` (not below
    another one: a masked folder hides what it holds) that holds a file other than code, as host
    paths, sorted. Links are not followed. Walking a large environment takes about 0.2-1 s (cached
    per process). Never raises: unreadable folders are skipped."""
    out: list[str] = []
    for root in site_dirs:
        for dirpath, dirs, _files in os.walk(root, onerror=lambda e: None):
            keep = []
            for d in dirs:
                if d in TEST_FOLDER_NAMES:
                    if _holds_data(os.path.join(dirpath, d)):
                        out.append(os.path.join(dirpath, d))
                else:
                    keep.append(d)
            dirs[:] = keep
    return tuple(sorted(set(out)))


def read_masks(task_root: str | os.PathLike) -> tuple[str, ...]:
    """The host paths listed in :data:`MASKS_FILE` of the task folder ``task_root`` and of the suite
    folder above it (absolute paths, blank lines and ``#`` comments skipped). Never raises: a missing
    or unreadable file lists nothing."""
    root = Path(task_root)
    out: list[str] = []
    for f in (root / MASKS_FILE, root.parent / MASKS_FILE):
        try:
            text = f.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        out += [ln.strip() for ln in text.splitlines() if ln.strip().startswith("/")]
    return tuple(dict.fromkeys(out))


def write_masks(folder: str | os.PathLike, paths: list[str] | tuple[str, ...]) -> Path:
    """Write :data:`MASKS_FILE` into ``folder`` listing ``paths`` (host paths, made absolute); with no
    paths, an existing file is removed. Returns the file's path.

    Raises:
        OSError: the folder cannot be written.
    """
    f = Path(folder) / MASKS_FILE
    paths = sorted({os.path.abspath(p) for p in paths})
    if not paths:
        f.unlink(missing_ok=True)
        return f
    f.write_text("# host paths holding copies of test rows (wmrl tasks check --copies --mask); masked in the sandbox\n"
                 + "".join(p + "\n" for p in paths), encoding="utf-8")
    return f

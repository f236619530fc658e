"""Find copies of a task's test rows in the files a sandboxed program can read.

Masking data packages by name misses copies shipped elsewhere (package test fixtures, examples, docs).
This scan names no package: it walks every folder the sandbox binds (:func:`scan_roots`: the system
folders and the interpreter's prefixes, minus what :func:`wmrl.execution.sandbox.hidden_paths` masks)
and looks, in every data-like file (:data:`DATA_SUFFIXES`, also gzip/bz2/xz/zip-compressed), for the
test rows of each task.

Fingerprint of a test row (read from the task's public ``test.csv``, the id column left out): its
cells are split into tokens (words and numbers, lower-cased; numbers written in a canonical form, so
``29``, ``29.0`` and ``2.9e1`` agree, to 6 significant digits); the row keeps its
:data:`TOKENS_PER_ROW` rarest tokens over the test set. A record of a file (a line; a long line is cut
at ``}``/``]`` and into :data:`RECORD_CHARS`-character pieces) matches a row when it holds all of them
(ordinals are numbers: ``1st`` matches ``1``), so rows of common values (a class, a sex, an age) are told apart by their
combination. Rows with fewer than :data:`MIN_TOKENS` tokens, or with no token of three characters or more (small
integers only), cannot be told apart and are not counted. A file holding at least :data:`MIN_SHARE` of a
task's test rows and at least :data:`MIN_ROWS` of them (or all, for a smaller test set) is a copy.

Tables stored column by column (one column a line) or in binary formats are not found.
Results are cached per file under ``$WMRL_HOME/cache/leakscan`` by (path, size, mtime) and the
fingerprint of the tasks scanned.
"""
from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import lzma
import math
import os
import re
import sys
import zipfile
from collections import Counter, defaultdict
from dataclasses import dataclass
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from wmrl.execution.sandbox import SandboxConfig, visible_roots, hidden_paths
from wmrl.paths import wmrl_home

#: File names (lower-cased) the scan reads, optionally followed by a compression suffix.
DATA_SUFFIXES = (".csv", ".tsv", ".txt", ".dat", ".data", ".json", ".arff", ".tab", ".psv")
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz", ".zip")
#: Decompressed bytes read per file (the rest is ignored), bytes.
MAX_READ_BYTES = 32 * 1024**2
#: Files larger than this on disk are skipped, bytes.
MAX_FILE_BYTES = 256 * 1024**2
#: Tokens kept per test row, and the fewest a row needs to be counted.
TOKENS_PER_ROW = 5
MIN_TOKENS = 2
#: A file is a copy from this share of a task's test rows, and this many rows.
MIN_SHARE = 0.2
MIN_ROWS = 20
#: Longest record compared with a row; longer lines are cut, characters.
RECORD_CHARS = 1024

_TOKEN = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?=(?:st|nd|rd|th)\b)(?:st|nd|rd|th)|"
                    r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[^\W\d_]+")
_ORDINAL = re.compile(r"(\d+)(?:st|nd|rd|th)")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_CUT = re.compile(r"(?<=[}\]])")
_CACHE_VERSION = "v1"


@dataclass(frozen=True)
class Copy:
    """A file holding copies of a task's test rows.

    Attributes:
        task_id: the task. path: the host path of the file. rows: test rows found in it.
        n_test: the task's test rows. share: ``rows / n_test``.
    """

    task_id: str
    path: str
    rows: int
    n_test: int

    @property
    def share(self) -> float:
        return self.rows / self.n_test if self.n_test else 0.0

    def message(self) -> str:
        """One line: where the copy is and how to fix it."""
        return (f"{self.path} holds {self.rows} of the {self.n_test} test rows ({self.share:.0%}), readable inside "
                f"the sandbox: a program could look the answers up; mask it ('wmrl tasks check --copies --mask' lists "
                f"it in the task's sandbox-masks.txt) or add the path to SandboxConfig.hide_paths")


def _canon(tok: str) -> str:
    m = _ORDINAL.fullmatch(tok)
    if m:  # "1st" is the level 1 of a factor
        return m.group(1)
    if _NUMBER.fullmatch(tok):
        try:
            v = float(tok)
        except ValueError:
            return tok
        if math.isfinite(v):
            return format(v, ".6g") if v != int(v) or abs(v) >= 1e15 else str(int(v))
    return tok


def _tokens(text: str, cache: dict[str, str]) -> set[str]:
    out = set()
    for t in _TOKEN.findall(text.lower()):
        c = cache.get(t)
        if c is None:
            c = cache[t] = _canon(t)
        out.add(c)
    return out


class _Fingerprint:
    """Per task: each countable row's token set, indexed by its rarest token (its anchor)."""

    def __init__(self, task_id: str, rows: list[set[str]], n_test: int) -> None:
        df = Counter(t for r in rows for t in r)
        self.task_id = task_id
        self.n_test = n_test
        self.index: dict[str, list[int]] = defaultdict(list)
        self.rows: list[frozenset[str]] = []
        for r in rows:
            if len(r) < MIN_TOKENS or not any(len(t) >= 3 for t in r):  # small integers tell no row apart
                self.rows.append(frozenset())
                continue
            rare = sorted(r, key=lambda t: (df[t], -len(t), t))
            keep = frozenset(rare[:TOKENS_PER_ROW])
            self.rows.append(keep)
            for t in rare[:2]:  # two anchors: a record may miss one token
                self.index[t].append(len(self.rows) - 1)
        self.counted = sum(1 for r in self.rows if r)
        self.threshold = max(1, min(self.counted, max(MIN_ROWS, math.ceil(MIN_SHARE * n_test))))
        h = hashlib.sha256(task_id.encode())
        for kept in self.rows:
            h.update(("|".join(sorted(kept)) + "\n").encode())
        self.digest = h.hexdigest()[:16]

    def possible(self, tokens: set[str]) -> int:
        """Rows whose tokens all occur somewhere in ``tokens`` (an upper bound of the rows found)."""
        return len({i for t in tokens & self.index.keys() for i in self.index[t] if self._holds(i, tokens)})

    def _holds(self, i: int, tokens: set[str]) -> bool:
        r = self.rows[i]
        return r <= tokens

    def count(self, records: Iterable[set[str]]) -> int:
        found: set[int] = set()
        index = self.index
        for toks in records:
            for t in toks:
                for i in index.get(t, ()):
                    if i not in found and self._holds(i, toks):
                        found.add(i)
        return len(found)


def fingerprint(task) -> _Fingerprint:
    """The fingerprint of ``task``'s test rows (module docstring), from its public ``test.csv``.

    Raises:
        OSError, ValueError: ``test.csv`` cannot be read as a CSV.
    """
    import pandas as pd  # noqa: PLC0415 - heavy (pandas)

    df = pd.read_csv(task.test_path, dtype=str, keep_default_na=False)
    cols = [c for c in df.columns if c != task.id_column]
    cache: dict[str, str] = {}
    rows = [_tokens(" ".join(vals), cache) - {"na", "nan", "none", "null"}
            for vals in df[cols].itertuples(index=False, name=None)]
    return _Fingerprint(task.id, rows, len(df))


def _is_data_file(name: str) -> bool:
    low = name.lower()
    for c in COMPRESSED_SUFFIXES:
        if low.endswith(c):
            low = low[: -len(c)]
            break
    return low.endswith(DATA_SUFFIXES) or name.lower().endswith(".zip")


#: Readers of compressed data files, by suffix (anything else is read as it is).
_OPENERS: dict[str, Callable[..., Any]] = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}


def _read_text(path: str) -> list[str]:
    """The decompressed text(s) of a data file, each at most MAX_READ_BYTES; [] for a binary file."""
    low = path.lower()
    blobs: list[bytes] = []
    try:
        if low.endswith(".zip"):
            with zipfile.ZipFile(path) as z:
                for info in z.infolist()[:64]:
                    if (not info.is_dir() and _is_data_file(info.filename)
                            and not info.filename.lower().endswith(".zip")):
                        with z.open(info) as f:
                            blobs.append(f.read(MAX_READ_BYTES))
        else:
            opener = _OPENERS.get(os.path.splitext(low)[1], open)
            with opener(path, "rb") as f:
                blobs.append(f.read(MAX_READ_BYTES))
    except (OSError, EOFError, zipfile.BadZipFile, lzma.LZMAError, ValueError, RuntimeError):
        return []
    return [b.decode("utf-8", errors="replace") for b in blobs if b"\0" not in b[:8192]]


def _records(text: str) -> Iterable[str]:
    for line in text.splitlines():
        if len(line) <= RECORD_CHARS:
            yield line
            continue
        for piece in _CUT.split(line):
            for k in range(0, len(piece), RECORD_CHARS):
                yield piece[k:k + RECORD_CHARS]


def scan_file(path: str, prints: list[_Fingerprint]) -> dict[str, int]:
    """Test rows of each fingerprinted task found in the file ``path``: ``{task_id: rows}`` for the tasks
    that reach their copy threshold (module docstring). Never raises: an unreadable file holds nothing."""
    out: dict[str, int] = {}
    cache: dict[str, str] = {}
    for text in _read_text(path):
        whole = _tokens(text, cache)  # an upper bound first: most files hold too few of the tokens
        todo = []
        for fp in prints:
            if fp.possible(whole) >= fp.threshold:
                todo.append(fp)
        if not todo:
            continue
        records = [_tokens(r, cache) for r in _records(text)]
        for fp in todo:
            n = fp.count(records)
            if n >= fp.threshold:
                out[fp.task_id] = max(out.get(fp.task_id, 0), n)
    return out


def scan_roots(config=None, python: str | None = None,
               extra_masks: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """(roots, masked): the host folders a program can read in the sandbox of ``config`` (default
    :class:`~wmrl.execution.sandbox.SandboxConfig`) and the host paths masked there (``hidden_paths`` plus
    ``extra_masks``), both as real paths.

    Raises:
        wmrl.execution.sandbox.SandboxUnavailable: the interpreter does not run.
    """
    config = config or SandboxConfig()
    python = python or config.python or sys.executable
    roots = sorted({os.path.realpath(r) for r in visible_roots(python, config) if os.path.isdir(r)})
    masked = sorted({os.path.realpath(p) for p in hidden_paths(config, python, extra=tuple(extra_masks))})
    return roots, masked


def _walk(roots: list[str], masked: list[str]) -> Iterable[tuple[str, os.stat_result]]:
    mset = set(masked)
    seen: set[tuple[int, int]] = set()
    for root in roots:
        if root in mset or any(root.startswith(m + "/") for m in masked):
            continue
        for dirpath, dirs, files in os.walk(root, onerror=lambda e: None):
            dirs[:] = [d for d in dirs if os.path.join(dirpath, d) not in mset]
            for name in files:
                if not _is_data_file(name):
                    continue
                p = os.path.join(dirpath, name)
                if p in mset:
                    continue
                try:
                    st = os.stat(p)
                except OSError:
                    continue
                if not os.path.isfile(p) or st.st_size == 0 or st.st_size > MAX_FILE_BYTES:
                    continue
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
                yield p, st


def scan_tasks(tasks: list, config=None, roots: list[str] | None = None, masked: list[str] | None = None,
               extra_masks: tuple[str, ...] = (), cache: bool = True) -> list[Copy]:
    """Every copy of the test rows of ``tasks`` in the files the sandbox of ``config`` can read
    (:func:`scan_roots`, or the given ``roots`` minus ``masked``), one :class:`Copy` per (task, file),
    sorted. Results per file are cached (module docstring) unless ``cache`` is False. Wall time over a
    full scientific environment: a few seconds cold (module docs), well under one warm.

    Raises:
        OSError, ValueError: a task's ``test.csv`` cannot be read.
        wmrl.execution.sandbox.SandboxUnavailable: the interpreter does not run.
    """
    prints = [fingerprint(t) for t in tasks]
    prints = [fp for fp in prints if fp.counted]
    if not prints:
        return []
    if roots is None:
        roots, found_masks = scan_roots(config, extra_masks=extra_masks)
        masked = found_masks if masked is None else sorted(set(found_masks) | set(masked))
    masked = sorted(os.path.realpath(m) for m in (masked or []))
    key = hashlib.sha256((_CACHE_VERSION + "|".join(fp.digest for fp in prints)).encode()).hexdigest()[:24]
    store, store_path = _load_cache(key) if cache else ({}, None)
    n_test = {fp.task_id: fp.n_test for fp in prints}
    out: list[Copy] = []
    fresh: dict[str, list] = {}
    for path, st in _walk(roots, masked):
        stamp = [st.st_size, st.st_mtime_ns]
        hit = store.get(path)
        if hit is not None and hit[0] == stamp:
            found = hit[1]
        else:
            found = scan_file(path, prints)
        fresh[path] = [stamp, found]
        out += [Copy(tid, path, n, n_test[tid]) for tid, n in found.items()]
    if store_path is not None:
        try:
            store_path.write_text(json.dumps(fresh))
        except OSError:
            pass
    return sorted(out, key=lambda c: (c.task_id, c.path))


def _load_cache(key: str) -> tuple[dict, Path | None]:
    try:
        d = wmrl_home() / "cache" / "leakscan"
        d.mkdir(parents=True, exist_ok=True)
        p = d / f"{key}.json"
        return (json.loads(p.read_text()) if p.is_file() else {}), p
    except (OSError, ValueError):
        return {}, None

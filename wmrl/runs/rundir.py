"""The run directory on disk: paths, JSON-lines logs, atomic writes and checkpoints.

The layout and every key are documented in docs/run-directory.md. Durability rules:

- JSON-lines files are appended one line per record and flushed; on resume they are truncated to
  the checkpoint's step (:func:`truncate_jsonl`), which also drops a half-written last line.
- Whole-file JSON documents (``ledger.json``, ``summary.json``) are written to a temp file, fsynced
  and renamed (:func:`write_json_atomic`).
- A checkpoint is built in ``checkpoints/.tmp-step_NNNNNN``, its ``MANIFEST.json`` (size and SHA-256
  of every file; sizes only above 64 MiB) written last, every file fsynced, renamed to ``step_NNNNNN`` and only then named in
  ``checkpoints/latest`` (itself replaced atomically), so a SIGKILL at any moment leaves either the
  previous or the new checkpoint complete. On resume a checkpoint whose files do not match its
  manifest (truncated, damaged) or that lacks ``trainer_state.json`` is passed over for the newest
  complete one (:meth:`RunDir.resume_candidates`), and ``latest`` naming a missing folder is no
  reason to start over.
- ``config.yaml`` is saved with its SHA-256 in ``config.yaml.sha256``; a resume refuses an edited
  config unless told to accept it.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import random
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

LATEST = "latest"
#: Written last into every checkpoint: each file's size and SHA-256, so a truncated or damaged file
#: is found before it is loaded.
MANIFEST = "MANIFEST.json"
#: Files up to this size get a SHA-256 in the manifest (larger ones, e.g. a fully trained backbone and
#: its optimizer state, only their size: hashing them every step would cost seconds), bytes.
MANIFEST_HASH_MAX_BYTES = 64 * 1024**2
#: Next to ``config.yaml``: the SHA-256 of its text when the run saved it.
CONFIG_HASH = "config.yaml.sha256"


class RunDirError(RuntimeError):
    """The run directory is not usable as asked (it holds a run already, there is nothing to resume, another
    process owns it, ...); the message says why and what to do."""


def now_iso() -> str:
    """The current UTC time as ISO 8601 text to the second (``2026-12-02T16:47:35+00:00``): the time stamps of
    ``train.log`` and the summaries."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def file_sha256(path: Path) -> str:
    """SHA-256 hex digest of a file (``hashlib.file_digest``, streamed)."""
    import hashlib

    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def json_safe(obj: Any) -> Any:
    """JSON-safe copy: NaN/inf -> None, numpy scalars/arrays -> Python, Paths -> str."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return json_safe(obj.tolist())
    if isinstance(obj, (np.floating, float)):
        f = float(obj)
        return f if math.isfinite(f) else None
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "value") and isinstance(getattr(obj, "value"), str):  # enums
        return obj.value
    return obj


def to_json_line(record: dict[str, Any]) -> str:
    """One JSON line (no NaN: non-finite numbers become null)."""
    return json.dumps(json_safe(record), allow_nan=False, separators=(",", ":"))


def fsync_dir(path: Path) -> None:
    """fsync a directory so a rename inside it is durable (no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temp file, fsync and ``os.replace``."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON atomically (NaN -> null)."""
    write_text_atomic(path, json.dumps(json_safe(obj), indent=2, allow_nan=False) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """All complete JSON records of a JSON-lines file (a torn last line is skipped)."""
    path = Path(path)
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def truncate_jsonl(path: Path, max_step: int, max_lines: int | None = None) -> int:
    """Keep only complete records with ``step <= max_step`` and, when ``max_lines`` is given, only the
    first ``max_lines`` complete records (the count saved with the checkpoint). Returns how many
    lines were dropped."""
    path = Path(path)
    if not path.is_file():
        return 0
    raw = [ln for ln in path.read_text().splitlines() if ln.strip()]
    keep: list[str] = []
    for line in raw:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if max_lines is not None and len(keep) >= max_lines:
            break
        if int(rec.get("step", 0)) <= max_step:
            keep.append(line)
    write_text_atomic(path, "".join(ln + "\n" for ln in keep))
    return len(raw) - len(keep)


class RunDir:
    """Paths of one run directory and the append-only logs in it."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self._counts: dict[str, int] | None = None

    # paths ------------------------------------------------------------------------------------
    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def eval(self) -> Path:
        return self.root / "eval.jsonl"

    @property
    def calibration(self) -> Path:
        return self.root / "calibration.jsonl"

    @property
    def samples(self) -> Path:
        return self.root / "samples.jsonl"

    @property
    def ledger(self) -> Path:
        return self.root / "ledger.json"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def fidelity(self) -> Path:
        """The world model's fidelity card on the run's anchors (written when the run ends)."""
        return self.root / "fidelity.json"

    @property
    def executions(self) -> Path:
        return self.root / "executions.sqlite"

    @property
    def tb(self) -> Path:
        return self.root / "tb"

    @property
    def world_model(self) -> Path:
        return self.root / "world_model"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def log(self) -> Path:
        return self.root / "train.log"

    JSONL = ("metrics", "eval", "calibration", "samples")

    def create(self) -> None:
        """Make the folders of a new run."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.checkpoints.mkdir(exist_ok=True)
        self.tb.mkdir(exist_ok=True)

    def append(self, which: str, record: dict[str, Any]) -> None:
        """Append one record to ``<which>.jsonl`` (``metrics``, ``eval``, ``calibration``, ``samples``)."""
        if which not in self.JSONL:
            raise ValueError(f"unknown log {which!r}; use one of {', '.join(self.JSONL)}")
        self.append_many(which, [record])

    def append_many(self, which: str, records: list[dict[str, Any]]) -> None:
        """Append several records to ``<which>.jsonl`` in one write."""
        if which not in self.JSONL:
            raise ValueError(f"unknown log {which!r}; use one of {', '.join(self.JSONL)}")
        if not records:
            return
        counts = self.line_counts()
        counts[which] += len(records)
        with open(getattr(self, which), "a") as fh:
            fh.write("".join(to_json_line(r) + "\n" for r in records))
            fh.flush()

    def sync_logs(self) -> None:
        """fsync the JSON-lines logs (called before a checkpoint is published)."""
        for which in self.JSONL:
            p = getattr(self, which)
            if p.is_file():
                with open(p, "a") as fh:
                    os.fsync(fh.fileno())

    def truncate_logs(self, step: int, line_counts: dict[str, int] | None = None) -> dict[str, int]:
        """Drop records after ``step`` (and beyond the saved ``line_counts``) from every JSON-lines log;
        returns dropped counts per log."""
        lc = line_counts or {}
        dropped = {w: truncate_jsonl(getattr(self, w), step, lc.get(w)) for w in self.JSONL}
        self._counts = None
        return dropped

    def line_counts(self) -> dict[str, int]:
        """Complete records in each JSON-lines log now (saved with a checkpoint); counted once from
        disk, then kept up to date by :meth:`append_many`."""
        if self._counts is None:
            self._counts = {w: len(read_jsonl(getattr(self, w))) for w in self.JSONL}
        return self._counts

    def log_line(self, text: str) -> None:
        """Append one human-readable line to ``train.log``."""
        with open(self.log, "a") as fh:
            fh.write(text.rstrip("\n") + "\n")

    # checkpoints ------------------------------------------------------------------------------
    @staticmethod
    def checkpoint_name(step: int) -> str:
        return f"step_{step:06d}"

    def save_config_hash(self) -> str:
        """Record the SHA-256 of ``config.yaml`` as it is now (in ``config.yaml.sha256``); returns it."""
        digest = file_sha256(self.config)
        write_text_atomic(self.root / CONFIG_HASH, digest + "\n")
        return digest

    def config_edited(self) -> str:
        """Why ``config.yaml`` is not the file the run saved (one line), or ``""`` when it is, or when
        the run predates the hash (nothing to compare)."""
        p = self.root / CONFIG_HASH
        if not p.is_file():
            return ""
        want = p.read_text().strip()
        have = file_sha256(self.config)
        if have == want:
            return ""
        return (f"{self.config} was changed after the run saved it (sha256 {have[:12]}... is not the saved "
                f"{want[:12]}...)")

    def checkpoint_problem(self, path: Path) -> str:
        """Why the checkpoint folder ``path`` cannot be resumed from, or ``""`` when it is complete:
        the folder or its ``trainer_state.json`` is missing, or a file does not match ``MANIFEST.json``
        (size, then SHA-256). A checkpoint written before manifests existed is checked for
        ``trainer_state.json`` only."""
        if not path.is_dir():
            return "missing"
        if not (path / "trainer_state.json").is_file():
            return "trainer_state.json is missing"
        man = path / MANIFEST
        if not man.is_file():
            return ""
        try:
            files = json.loads(man.read_text())["files"]
        except (ValueError, KeyError, TypeError):
            return f"{MANIFEST} is unreadable"
        for rel, info in files.items():
            f = path / rel
            if not f.is_file():
                return f"{rel} is missing"
            size = f.stat().st_size
            if size != info["size"]:
                return f"{rel} is {size} bytes, {info['size']} when written (truncated or damaged)"
        for rel, info in files.items():
            if info.get("sha256") and file_sha256(path / rel) != info["sha256"]:
                return f"{rel} does not match its checksum (damaged)"
        return ""

    def resume_candidates(self) -> tuple[list[Path], list[str]]:
        """The checkpoints to resume from, best first, and notes on those passed over.

        First the one ``checkpoints/latest`` names, then every other ``step_NNNNNN`` newest first;
        each is checked with :meth:`checkpoint_problem` and only complete ones are returned. The notes
        say, one line each, why a checkpoint (or the ``latest`` pointer) was passed over."""
        notes: list[str] = []
        order: list[Path] = []
        ptr = self.checkpoints / LATEST
        named = ""
        if ptr.is_file():
            named = ptr.read_text().strip()
            if named:
                order.append(self.checkpoints / named)
        elif self.checkpoints.is_dir() and any(self.checkpoints.glob("step_*")):
            notes.append("checkpoints/latest is missing")
        steps = sorted((d for d in self.checkpoints.glob("step_*") if d.is_dir()), key=lambda d: d.name,
                       reverse=True) if self.checkpoints.is_dir() else []
        order += [d for d in steps if d.name != named]
        good: list[Path] = []
        for d in order:
            why = self.checkpoint_problem(d)
            if why:
                what = "checkpoints/latest names " + d.name if d.name == named else d.name
                notes.append(f"{what}: {why}")
            else:
                good.append(d)
        return good, notes

    def latest_checkpoint(self) -> Path | None:
        """The complete checkpoint named by ``checkpoints/latest``, or None when there is none."""
        ptr = self.checkpoints / LATEST
        if not ptr.is_file():
            return None
        name = ptr.read_text().strip()
        path = self.checkpoints / name
        if not name or not (path / "trainer_state.json").is_file():
            return None
        return path

    def checkpoint(self, name_or_step: str | int) -> Path:
        """Path of a checkpoint by step number or folder name; raises FileNotFoundError naming the
        available ones when it is missing."""
        name = self.checkpoint_name(name_or_step) if isinstance(name_or_step, int) else str(name_or_step)
        if name == LATEST:
            p = self.latest_checkpoint()
            if p is None:
                raise FileNotFoundError(f"{self.root} has no complete checkpoint")
            return p
        p = self.checkpoints / name
        if not (p / "trainer_state.json").is_file():
            have = sorted(d.name for d in self.checkpoints.glob("step_*") if d.is_dir())
            raise FileNotFoundError(f"checkpoint {name!r} not found in {self.checkpoints}; available: "
                                    f"{', '.join(have) or 'none'}")
        return p

    @contextmanager
    def write_checkpoint(self, step: int, keep: int = 2) -> Iterator[Path]:
        """Context manager yielding a temp folder to fill; on success it is fsynced, renamed to
        ``step_NNNNNN``, published in ``latest`` and older checkpoints beyond ``keep`` are pruned.
        On an exception the temp folder is removed and ``latest`` is untouched."""
        name = self.checkpoint_name(step)
        tmp = self.checkpoints / f".tmp-{name}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        try:
            yield tmp
            files = {}
            for dirpath, _dirs, names in os.walk(tmp):
                for f in names:
                    full = Path(dirpath) / f
                    size = full.stat().st_size
                    files[str(full.relative_to(tmp))] = {
                        "size": size, "sha256": file_sha256(full) if size <= MANIFEST_HASH_MAX_BYTES else None}
            (tmp / MANIFEST).write_text(json.dumps({"step": step, "files": files}, indent=1))
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        for dirpath, _dirs, names in os.walk(tmp):
            for f in names:
                with open(os.path.join(dirpath, f), "rb") as fh:
                    os.fsync(fh.fileno())
            fsync_dir(Path(dirpath))
        final = self.checkpoints / name
        if final.exists():  # re-written after a resume from an earlier step
            shutil.rmtree(final)
        os.rename(tmp, final)
        fsync_dir(self.checkpoints)
        write_text_atomic(self.checkpoints / LATEST, name + "\n")
        self._prune(keep, name)

    def _prune(self, keep: int, current: str) -> None:
        done = sorted(d for d in self.checkpoints.glob("step_*") if d.is_dir())
        for d in done[:-keep] if keep > 0 else []:
            if d.name != current:
                shutil.rmtree(d, ignore_errors=True)
        for d in self.checkpoints.glob(".tmp-step_*"):
            shutil.rmtree(d, ignore_errors=True)


def rng_state() -> dict[str, Any]:
    """RNG states of python ``random``, numpy's global RNG and torch (CPU, and CUDA when present)."""
    import torch

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch."""
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)

"""``wmrl export``: every sample of a run (or of every run of a bench) as one Parquet dataset (docs/export.md).

A run directory (docs/run-directory.md) is read, never written: ``samples.jsonl`` gives one row per line, joined
with the execution log (``executions.sqlite``, opened read-only) on the anchor's request key (origin step, group,
sample, turn) for the program text, the full completion, the costs and the execution's score; ``config.yaml``
gives the run's method, seed and name. A bench folder (``OUT/<method>/seed<k>/``, docs/benchmark.md) exports its
runs one after the other into the same file.

What is skipped, and said (the command's output and the file's metadata): a last ``samples.jsonl`` line that does
not parse (a run killed mid-write); every other bad record, counted with the first named: a ``samples.jsonl`` line
that is not a JSON object (damaged, nested too deep) or not a sample (no integer ``step``, an integer beyond 64
bits), an anchor row of the execution log whose keys are not integers; in a bench, a run with no samples yet. Text
that is not valid Unicode (a lone surrogate) is kept with U+FFFD in its place. Everything else that is not a usable
run is an :class:`ExportError` with what was wrong and what to pass. Lines are read one at a time, so the export
needs no more memory than its largest line and the execution log's anchor keys. The file is written next to its
target under a temporary name and renamed into place, so a reader never sees half a file and a failed export
leaves none.

The rows themselves (a record joined with its execution, every field made writable) are :mod:`wmrl.export.rows`.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from wmrl.export.rows import COMPLETION_CAP, INT64_RANGE, RunRows, key_field, text_field
from wmrl.export.schema import METADATA_KEY, RUNS_METADATA_KEY, SCHEMA_VERSION, arrow_schema

#: The largest ``config.yaml`` read, bytes (a run's is a few KiB).
CONFIG_MAX_BYTES = 4 * 1024**2


class _NoAliasLoader(yaml.SafeLoader):
    """PyYAML's safe loader refusing aliases (``*name``): a run's ``config.yaml`` as wmrl writes it has none, and
    a hand-made one with aliases could expand to any size (an "alias bomb") once its values are used."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.YAMLError(f"an alias (*name) at line {mark.line + 1}: a run's config.yaml holds none, and "
                                 "aliases can expand to any size")
        return super().compose_node(parent, index)


def _read_config(path: Path, raw: bytes) -> Any:
    """The YAML document of a run's ``config.yaml`` (its bytes ``raw``), within bounds.

    Raises:
        ExportError: over :data:`CONFIG_MAX_BYTES`, nested too deep, an alias, or not YAML (one line).
    """
    if len(raw) > CONFIG_MAX_BYTES:
        raise ExportError(f"{path}: {len(raw)} bytes, more than a run's config.yaml holds ({CONFIG_MAX_BYTES}); "
                          "restore the run's config.yaml")
    try:
        return yaml.load(raw.decode("utf-8", errors="replace"), Loader=_NoAliasLoader)  # noqa: S506 - safe loader
    except RecursionError:
        raise ExportError(f"{path}: nested too deep to read; restore the run's config.yaml") from None
    except yaml.YAMLError as exc:
        why = " ".join(str(exc).split())
        raise ExportError(f"{path}: not valid YAML ({why}); restore the run's config.yaml") from exc


#: Rows converted to Arrow and written at a time (bounds the memory of a long run's export).
CHUNK_ROWS = 4096
#: The default file name of an export (inside the exported folder, or inside ``--out`` when it is a folder).
DEFAULT_NAME = "samples.parquet"
_SEED_DIR = re.compile(r"seed\d+")


class ExportError(ValueError):
    """The input cannot be exported; the message says what was wrong and how to fix it."""


@dataclass
class RunSource:
    """One run directory to export: ``path`` and its ``run_id`` (its path relative to the exported folder)."""

    path: Path
    run_id: str


@dataclass
class RunReport:
    """What the export of one run did: ``rows`` written, ``executions_joined`` (rows and turns matched to the
    execution log), ``skipped_lines`` (one line per kind of record skipped: a cut last line, the bad
    ``samples.jsonl`` lines with their count and the first named, the bad execution-log rows likewise),
    ``bad_lines`` and ``bad_rows`` (how many of each were skipped), ``skipped`` (why the whole run was left out,
    or None)."""

    run_id: str
    rows: int = 0
    executions_joined: int = 0
    skipped_lines: list[str] = field(default_factory=list)
    skipped: str | None = None
    bad_lines: int = 0
    first_bad_line: str | None = None
    bad_rows: int = 0


@dataclass
class ExportResult:
    """The written file (``path``), its ``rows`` and one :class:`RunReport` per run found."""

    path: Path
    rows: int
    runs: list[RunReport]


# --------------------------------------------------------------------------- finding runs
def _is_run_dir(p: Path) -> bool:
    return p.is_dir() and any((p / f).is_file() for f in ("config.yaml", "samples.jsonl", "metrics.jsonl"))


def find_runs(path: str | Path) -> list[RunSource]:
    """The run directories of ``path``: itself when it is a run directory, else the ``<method>/seed<k>/`` run
    directories of a bench folder (sorted by method, then seed).

    Raises:
        ExportError: ``path`` does not exist, or is neither a run directory (``config.yaml``,
            ``samples.jsonl`` or ``metrics.jsonl``) nor a bench folder (``<method>/seed<k>/`` run directories).
    """
    p = Path(path)
    if not p.exists():
        raise ExportError(f"{p}: no such file or directory; pass a run directory written by `wmrl train` or a "
                          "bench folder written by `wmrl bench`")
    if not p.is_dir():
        raise ExportError(f"{p}: not a folder; pass a run directory written by `wmrl train` (its run_dir) or a "
                          "bench folder written by `wmrl bench` (its --out)")
    if _is_run_dir(p):
        return [RunSource(p, p.resolve().name)]
    runs = [RunSource(d, f"{d.parent.name}/{d.name}") for d in p.glob("*/seed*")
            if _SEED_DIR.fullmatch(d.name) and _is_run_dir(d)]
    if not runs:
        raise ExportError(
            f"{p}: neither a wmrl run directory (no config.yaml, samples.jsonl or metrics.jsonl) nor a bench folder "
            "(no <method>/seed<k>/ run directories); pass the folder `wmrl train` wrote (its run_dir) or the one "
            "`wmrl bench` wrote (its --out), see docs/run-directory.md and docs/benchmark.md")
    return sorted(runs, key=lambda r: (r.path.parent.name, int(r.path.name.removeprefix("seed"))))


def output_path(source: str | Path, out: str | Path | None) -> Path:
    """Where the export of ``source`` goes: ``out`` when it names a ``.parquet`` file; ``out/samples.parquet``
    when it is a folder (existing, or a name without a suffix); ``source/samples.parquet`` without ``out``.

    Raises:
        ExportError: ``out`` names a file of another kind (the export is Parquet only).
    """
    if out is None:
        return Path(source) / DEFAULT_NAME
    o = Path(out)
    if o.is_dir() or not o.suffix:
        return o / DEFAULT_NAME
    if o.suffix.lower() != ".parquet":
        raise ExportError(f"--out {o}: the export is a Parquet file; give a FILE.parquet or a folder "
                          f"(it then gets {DEFAULT_NAME})")
    return o


# --------------------------------------------------------------------------- reading a run
def _bad(what: str, count: int, first: str) -> str:
    """The one line that says how many bad records of ``what`` were skipped and names the first."""
    return f"skipped {count} bad {what}{'s' if count != 1 else ''}; the first: {first}"


def read_samples(path: Path, report: RunReport) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, record)`` of each line of a ``samples.jsonl`` that is a JSON object, read as a stream (one
    line in memory at a time). A last line that does not parse (a writer killed mid-line) is skipped and named in
    ``report.skipped_lines``; any other line that is not a JSON object (damaged, nested too deep to parse) is
    counted in ``report.bad_lines``, the first named (:func:`note_bad_line`)."""
    bad: tuple[int, str] | None = None  # a line that does not parse: cut short if no other line follows
    with open(path, encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            if bad is not None:
                note_bad_line(report, path, bad[0], f"not valid JSON ({bad[1]})")
                bad = None
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                bad = (n, exc.msg)
                continue
            except RecursionError:
                note_bad_line(report, path, n, "nested too deep to read")
                continue
            if not isinstance(rec, dict):
                note_bad_line(report, path, n, f"a JSON {type(rec).__name__}, not a sample record")
                continue
            yield n, rec
    if bad is not None:
        report.skipped_lines.append(f"{path.name}:{bad[0]}: the last line is cut short ({bad[1]}); a run killed "
                                    "while writing it, skipped")


def note_bad_line(report: RunReport, path: Path, n: int, why: str) -> None:
    """Count one skipped ``samples.jsonl`` line in ``report`` (``bad_lines``); the first is kept in
    ``first_bad_line``."""
    report.bad_lines += 1
    if report.first_bad_line is None:
        report.first_bad_line = f"{path.name}:{n}: {why}"


def _run_info(run: Path) -> dict[str, Any]:
    """``run_name``, ``method``, ``seed``, ``config_sha256`` of a run directory (None where unknown)."""
    cfg_path = run / "config.yaml"
    cfg: dict[str, Any] = {}
    digest = None
    if cfg_path.is_file():
        raw = cfg_path.read_bytes() if cfg_path.stat().st_size <= CONFIG_MAX_BYTES else b" " * (CONFIG_MAX_BYTES + 1)
        digest = hashlib.sha256(raw).hexdigest()
        loaded = _read_config(cfg_path, raw)
        cfg = loaded if isinstance(loaded, dict) else {}
    method = cfg.get("method")
    if isinstance(method, dict):  # an older layout: method: {name: ...}
        method = method.get("name")
    if not method and (run / "metrics.jsonl").is_file():
        first = (run / "metrics.jsonl").read_text(encoding="utf-8", errors="replace").split("\n", 1)[0]
        try:
            method = json.loads(first).get("method")
        except (json.JSONDecodeError, AttributeError):
            method = None
    seed = cfg.get("seed")
    name = cfg.get("name")
    return {"run_name": text_field(name) if isinstance(name, str) and name else run.resolve().name,
            "method": text_field(method) if isinstance(method, str) else None,
            "seed": seed if isinstance(seed, int) and not isinstance(seed, bool)
            and INT64_RANGE[0] <= seed <= INT64_RANGE[1] else None, "config_sha256": digest}


class Executions:
    """The anchor executions of a run's ``executions.sqlite``, by request key (read-only; absent file: empty).

    Keys are ``(step, group, sample, turn)`` of the trajectory record the trainer stores with each anchor
    (``turn`` None for single-turn runs); where a key repeats, the last row wins.

    Raises:
        ExportError: the file is not a readable SQLite execution log.
    """

    _COLS = ("id", "request_id", "status", "score", "wall_s", "cpu_s", "peak_rss_bytes", "program_sha256", "meta")

    def __init__(self, path: Path) -> None:
        self.path = path
        #: Anchor rows skipped because a key is not an integer (or their meta is not JSON); the first, named.
        self.bad_rows = 0
        self.first_bad: str | None = None
        self.by_key: dict[tuple[int, int, int, int | None], dict[str, Any]] = {}
        self.by_group: dict[tuple[int, int], list[dict[str, Any]]] = {}
        self._conn: sqlite3.Connection | None = None
        if not path.is_file():
            return
        try:
            self._conn = self._connect(path)
            rows = self._conn.execute(f"SELECT {', '.join(self._COLS)} FROM executions ORDER BY id").fetchall()
        except sqlite3.DatabaseError as exc:
            self.close()
            raise ExportError(f"{path}: not a readable execution log ({exc}); move it away to export the samples "
                              "without execution costs") from exc
        for r in rows:
            d = dict(zip(self._COLS, r))
            try:
                meta = json.loads(d.pop("meta") or "{}")
            except (json.JSONDecodeError, RecursionError, TypeError):
                continue
            if not isinstance(meta, dict) or meta.get("stream") != "anchor" or meta.get("step") is None:
                continue
            extra = meta.get("extra")
            turn = extra.get("turn") if isinstance(extra, dict) else None
            d.update(prompt=text_field(meta.get("prompt")), completion=text_field(meta.get("completion")))
            try:
                key = (key_field(meta["step"], "step"), key_field(meta.get("group_id", -1), "group_id"),
                       key_field(meta.get("sample", -1), "sample"), None if turn is None else key_field(turn, "turn"))
            except ValueError as exc:
                self.bad_rows += 1
                self.first_bad = self.first_bad or f"{path.name} row id {d['id']}: {exc}"
                continue
            self.by_key[key] = d
            self.by_group.setdefault((key[0], key[1]), []).append(d)

    @staticmethod
    def _connect(path: Path) -> sqlite3.Connection:
        uri = path.resolve().as_uri()
        try:
            conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=30.0)
            conn.execute("SELECT 1 FROM executions LIMIT 1")
            return conn
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                raise
            # a read-only folder where SQLite cannot create the WAL index: read the file as it stands
            return sqlite3.connect(f"{uri}?immutable=1", uri=True)

    def find(self, step: int, group: int, sample: int | None, turn: int | None, completion: str | None,
             program_sha256: str | None) -> dict[str, Any] | None:
        """The execution of one sample: by its key, or (a run that did not log ``sample``) the one execution of its
        (step, group) whose completion begins with ``completion``; None when there is none, or when its program's
        SHA-256 differs from ``program_sha256`` (not the same program)."""
        rec = None
        if sample is not None:
            rec = self.by_key.get((step, group, sample, turn))
        elif completion is not None:
            cands = [d for d in self.by_group.get((step, group), [])
                     if (d.get("completion") or "")[:COMPLETION_CAP] == completion[:COMPLETION_CAP]]
            rec = cands[-1] if cands else None
        if rec is not None and program_sha256 and rec.get("program_sha256") not in (None, program_sha256):
            return None
        return rec

    def program(self, rec: dict[str, Any]) -> str | None:
        """The program text of an execution row."""
        if self._conn is None:
            return None
        row = self._conn.execute("SELECT program FROM executions WHERE id = ?", (rec["id"],)).fetchone()
        return None if row is None else text_field(row[0])

    def close(self) -> None:
        """Close the database (idempotent)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _with_bad_lines_noted(lines: Iterator[tuple[int, dict[str, Any]]],
                          report: RunReport) -> Iterator[tuple[int, dict[str, Any]]]:
    """``lines`` as they come; once they are read, the count of bad lines and the first (one line) is added to
    ``report.skipped_lines``, after the note of a cut last line."""
    yield from lines
    if report.bad_lines:
        cut = [x for x in report.skipped_lines if "the last line is cut short" in x]
        rest = [x for x in report.skipped_lines if x not in cut]
        report.skipped_lines[:] = rest + [_bad("line", report.bad_lines, report.first_bad_line or "")] + cut


def run_rows(source: RunSource, report: RunReport) -> Iterator[list[dict[str, Any]]]:
    """The rows of one run in chunks of at most :data:`CHUNK_ROWS`, in ``samples.jsonl`` order; ``report`` is
    filled in as they are made.

    Raises:
        ExportError: no ``samples.jsonl`` or no sample in it yet (no line that is a sample), an unreadable
            ``config.yaml`` (bad YAML, over :data:`CONFIG_MAX_BYTES`, an alias) or execution log.
    """
    path = source.path / "samples.jsonl"
    if not path.is_file():
        raise ExportError(f"{source.path}: no samples yet (no samples.jsonl: the run has not finished a training "
                          "step); export it after its first step")
    no_samples = (f"{source.path}: no samples yet (samples.jsonl holds no complete line: the run has not finished "
                  "a training step); export it after its first step")
    ex = Executions(source.path / "executions.sqlite")
    try:
        make = RunRows(source, _run_info(source.path), ex)
        chunk: list[dict[str, Any]] = []
        if ex.bad_rows:
            report.bad_rows = ex.bad_rows
            report.skipped_lines.append(_bad("anchor row", ex.bad_rows, ex.first_bad or ""))
        for n, rec in _with_bad_lines_noted(read_samples(path, report), report):
            try:
                chunk.append(make.row(rec))
            except ValueError as exc:
                note_bad_line(report, path, n, f"not a sample record ({exc})")
                continue
            if len(chunk) >= CHUNK_ROWS:
                report.rows += len(chunk)
                yield chunk
                chunk = []
        if chunk:
            report.rows += len(chunk)
            yield chunk
        if report.rows == 0 and report.bad_lines:
            raise ExportError(f"{path}: none of its lines is a sample record ({report.skipped_lines[-1]}); see "
                              "docs/run-directory.md")
        if report.rows == 0:
            raise ExportError(no_samples)
        report.executions_joined = make.joined
    finally:
        ex.close()


# --------------------------------------------------------------------------- writing
def export(source: str | Path, out: str | Path | None = None) -> ExportResult:
    """Write every sample of the run directory or bench folder ``source`` to one Parquet file (docs/export.md).

    Args:
        source: a run directory (``wmrl train``'s run_dir) or a bench folder (``wmrl bench``'s --out).
        out: a ``.parquet`` file or a folder (default ``source/samples.parquet``, see :func:`output_path`).

    Returns:
        The :class:`ExportResult`: the file, its row count, and per run what was written or skipped.

    Raises:
        ExportError: ``source`` is not a run directory or bench folder, a run directory has no samples yet (in a
            bench: no run has any), no line of a ``samples.jsonl`` is a sample, ``out`` is not a Parquet file or
            folder, or the file cannot be written (the message names it). Nothing is left at ``out`` then.
    """
    import pyarrow as pa  # noqa: PLC0415 - heavy/optional dependency
    import pyarrow.parquet as pq  # noqa: PLC0415 - heavy/optional dependency

    runs = find_runs(source)
    target = output_path(source, out)
    bench = len(runs) > 1 or runs[0].path.resolve() != Path(source).resolve()
    reports: list[RunReport] = []
    head = {"schema_version": SCHEMA_VERSION, "source": "bench" if bench else "run",
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"), "run_ids": [r.run_id for r in runs]}
    schema = arrow_schema({METADATA_KEY: json.dumps(head, sort_keys=True).encode()})
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExportError(f"cannot create the folder of {target} ({exc.strerror}); choose another --out") from exc
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        writer = pq.ParquetWriter(str(tmp), schema, compression="zstd")
        try:
            for src in runs:
                rep = RunReport(src.run_id)
                reports.append(rep)
                try:
                    for chunk in run_rows(src, rep):
                        writer.write_table(pa.Table.from_pylist(chunk, schema=schema))
                except ExportError as exc:
                    if not bench or "no samples yet" not in str(exc):
                        raise
                    rep.skipped = str(exc)
            total = sum(r.rows for r in reports)
            if total == 0:
                raise ExportError(f"{source}: no run of this bench has samples yet ({len(runs)} run directories); "
                                  "export it after the runs' first steps")
            tail = {"rows": total, "runs": [{"run_id": r.run_id, "rows": r.rows, "skipped": r.skipped,
                                             "executions_joined": r.executions_joined,
                                             "skipped_lines": r.skipped_lines, "bad_lines": r.bad_lines,
                                             "bad_rows": r.bad_rows} for r in reports]}
            writer.add_key_value_metadata({RUNS_METADATA_KEY.decode(): json.dumps(tail, sort_keys=True)})
        finally:
            writer.close()
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        raise ExportError(f"cannot write {target} ({exc.strerror or exc}); choose another --out") from exc
    finally:
        tmp.unlink(missing_ok=True)
    return ExportResult(target, total, reports)

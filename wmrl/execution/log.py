"""The execution log: every execution of a run, appended to one SQLite database.

One row per execution (table ``executions``) with the task, the program text and its SHA-256, the
outcome (status, score, reward, medal; ``validation_score`` on a validation view), timings (wall seconds, CPU-seconds of
the process tree, peak resident bytes), truncated stdout/stderr, timestamps, and the request's ``meta`` as JSON (the
trainer stores prompt, completion, scaffold, step, group_id, stream, policy_version there), so a
world model can later be trained on (prompt + completion -> reward).

Durability: WAL journal, ``synchronous=FULL``, one committed transaction per :meth:`append`; a
killed process loses at most the row being written, never earlier ones. Thread-safe (one
connection behind a lock; the pool appends from its worker threads). Several processes may append
to the same file (SQLite locking, 30 s busy timeout).

Idempotency (what ``wmrl serve sandbox`` builds on): :meth:`ExecutionLog.result` is the finished execution of a
request id (the latest row), :meth:`ExecutionLog.claim` records in table ``claims`` (committed before the program
starts) that a request id was started, and counts its starts: an id started but never logged was in flight when
its process died.
"""
from __future__ import annotations

import json
import math
import sqlite3
import threading
import time
from datetime import datetime, UTC
from pathlib import Path
from typing import Any

from wmrl.execution.types import ExecutionRequest, ExecutionResult, ExecutionStatus
from wmrl.trajectory import Trajectory

SCHEMA_VERSION = 1

COLUMNS: dict[str, str] = {
    "id": "INTEGER PRIMARY KEY AUTOINCREMENT",
    "request_id": "TEXT NOT NULL",
    "task_id": "TEXT NOT NULL",
    "status": "TEXT NOT NULL",
    "score": "REAL",
    "reward": "REAL",
    "validation_score": "REAL",
    "medal": "TEXT",
    "above_median": "INTEGER",
    "wall_s": "REAL",
    "cpu_s": "REAL",
    "peak_rss_bytes": "INTEGER",
    "exit_code": "INTEGER",
    "time_limit_s": "REAL",
    "sandbox": "TEXT",
    "memory_limit_mode": "TEXT",
    "program_sha256": "TEXT NOT NULL",
    "program": "TEXT NOT NULL",
    "stdout": "TEXT",
    "stderr": "TEXT",
    "stdout_bytes": "INTEGER",
    "stderr_bytes": "INTEGER",
    "error": "TEXT",
    "grade_s": "REAL",
    "grade_peak_rss_bytes": "INTEGER",
    "started_at": "TEXT",
    "finished_at": "TEXT",
    "logged_at": "TEXT",
    "meta": "TEXT",
}


def _iso(ts: float) -> str | None:
    if not ts:
        return None
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds")


def _utf8(v: Any) -> Any:
    """``v``, with a text that is not valid UTF-8 (a lone surrogate) stored with ``?`` in its place: SQLite text
    must be UTF-8, and a row that cannot be written would lose the execution."""
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            return v.encode("utf-8", "replace").decode("utf-8")
    return v


def _finite(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


class ExecutionLog:
    """Append-only SQLite log of executions (one database file per run).

    Args:
        path: the database file; its folder is created. An existing log is opened and appended to.

    Raises:
        sqlite3.DatabaseError: ``path`` exists but is not a wmrl execution log.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(self.path), timeout=30.0, check_same_thread=False,
                                     isolation_level=None)
        try:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            cols = ", ".join(f"{k} {v}" for k, v in COLUMNS.items())
            with self._lock:
                self._conn.execute(f"CREATE TABLE IF NOT EXISTS executions ({cols})")
                have = {r[1] for r in self._conn.execute("PRAGMA table_info(executions)")}
                for k, v in COLUMNS.items():  # a log written by an older wmrl: add the new columns
                    if k not in have:
                        self._conn.execute(f"ALTER TABLE executions ADD COLUMN {k} {v}")
                self._conn.execute("CREATE INDEX IF NOT EXISTS executions_task ON executions(task_id)")
                self._conn.execute("CREATE INDEX IF NOT EXISTS executions_status ON executions(status)")
                self._conn.execute("CREATE INDEX IF NOT EXISTS executions_request ON executions(request_id)")
                self._conn.execute("CREATE TABLE IF NOT EXISTS claims (request_id TEXT PRIMARY KEY, task_id TEXT, "
                                   "program_sha256 TEXT, attempts INTEGER NOT NULL, claimed_at TEXT)")
                self._conn.execute("CREATE TABLE IF NOT EXISTS wmrl_meta (key TEXT PRIMARY KEY, value TEXT)")
                self._conn.execute("INSERT OR IGNORE INTO wmrl_meta VALUES ('schema_version', ?)",
                                   (str(SCHEMA_VERSION),))
        except BaseException:
            self._conn.close()  # a file that is not a database: do not leak the connection
            raise

    def append(self, request: ExecutionRequest, result: ExecutionResult) -> int:
        """Append one execution in its own committed transaction; returns the row id.

        ``request.log_meta()`` (free-form meta plus the trajectory record) is stored as JSON in ``meta``
        (non-serialisable values are stored via ``str``).
        """
        row = {
            "request_id": result.request_id or request.request_id,
            "task_id": result.task_id or request.task.id,
            "status": getattr(result.status, "value", str(result.status)),
            "score": _finite(result.score),
            "reward": _finite(result.reward),
            "validation_score": _finite(getattr(result, "validation_score", None)),
            "medal": result.medal,
            "above_median": None if result.above_median is None else int(bool(result.above_median)),
            "wall_s": result.wall_s,
            "cpu_s": result.cpu_s,
            "peak_rss_bytes": result.peak_rss_bytes,
            "exit_code": getattr(result, "exit_code", None),
            "time_limit_s": getattr(result, "time_limit_s", None),
            "sandbox": getattr(result, "sandbox", ""),
            "memory_limit_mode": getattr(result, "memory_limit_mode", ""),
            "program_sha256": result.program_sha256,
            "program": request.program,
            "stdout": result.stdout,
            "stderr": result.stderr,
            "stdout_bytes": getattr(result, "stdout_bytes", None),
            "stderr_bytes": getattr(result, "stderr_bytes", None),
            "error": result.error,
            "grade_s": getattr(result, "grade_s", None),
            "grade_peak_rss_bytes": getattr(result, "grade_peak_rss_bytes", None),
            "started_at": _iso(getattr(result, "started_at", 0.0)),
            "finished_at": _iso(getattr(result, "started_at", 0.0) + result.wall_s)
            if getattr(result, "started_at", 0.0) else None,
            "logged_at": _iso(time.time()),
            "meta": json.dumps(request.log_meta(), default=str, sort_keys=True),
        }
        names = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        values = tuple(_utf8(v) for v in row.values())
        with self._lock:
            cur = self._conn.execute(f"INSERT INTO executions ({names}) VALUES ({marks})", values)
            assert cur.lastrowid is not None  # set by every successful INSERT
            return cur.lastrowid

    def claim(self, request_id: str, task_id: str, program_sha256: str) -> int:
        """Record that ``request_id`` is being started, in its own committed transaction; returns how many times it
        has been started so far, this one included (1 the first time; more after a process died while running it).

        Raises:
            ValueError: ``request_id`` is empty.
        """
        if not request_id:
            raise ValueError("claim needs a request id")
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.execute(
                    "INSERT INTO claims VALUES (?, ?, ?, 1, ?) ON CONFLICT(request_id) DO UPDATE SET "
                    "attempts = attempts + 1, claimed_at = excluded.claimed_at",
                    (_utf8(request_id), _utf8(task_id), program_sha256, _iso(time.time())))
                n = int(self._conn.execute("SELECT attempts FROM claims WHERE request_id = ?",
                                           (_utf8(request_id),)).fetchone()[0])
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return n

    def claimed(self, request_id: str) -> dict[str, Any] | None:
        """The claim of ``request_id`` (``task_id``, ``program_sha256``, ``attempts``, ``claimed_at``) or None."""
        with self._lock:
            cur = self._conn.execute("SELECT * FROM claims WHERE request_id = ?", (_utf8(request_id),))
            names = [d[0] for d in cur.description]
            row = cur.fetchone()
        return dict(zip(names, row)) if row else None

    def result(self, request_id: str) -> ExecutionResult | None:
        """The logged outcome of ``request_id`` (its latest row) as an :class:`ExecutionResult`, or None when the id
        never finished. Timestamps come back as Unix seconds; ``stdout``/``stderr`` as stored (truncated)."""
        with self._lock:
            cur = self._conn.execute("SELECT * FROM executions WHERE request_id = ? ORDER BY id DESC LIMIT 1",
                                     (_utf8(request_id),))
            names = [d[0] for d in cur.description]
            row = cur.fetchone()
        if row is None:
            return None
        d = dict(zip(names, row))
        started = datetime.fromisoformat(d["started_at"]).timestamp() if d.get("started_at") else 0.0
        return ExecutionResult(
            request_id=d["request_id"], task_id=d["task_id"], status=ExecutionStatus(d["status"]), score=d["score"],
            reward=d["reward"], wall_s=float(d["wall_s"] or 0.0), cpu_s=float(d["cpu_s"] or 0.0),
            peak_rss_bytes=int(d["peak_rss_bytes"] or 0), stdout=d["stdout"] or "", stderr=d["stderr"] or "",
            program_sha256=d["program_sha256"], error=d["error"] or "", medal=d["medal"],
            above_median=None if d["above_median"] is None else bool(d["above_median"]), exit_code=d["exit_code"],
            started_at=started, time_limit_s=float(d["time_limit_s"] or 0.0), sandbox=d["sandbox"] or "",
            memory_limit_mode=d["memory_limit_mode"] or "", stdout_bytes=int(d["stdout_bytes"] or 0),
            stderr_bytes=int(d["stderr_bytes"] or 0),
            grade_s=float(d["grade_s"] or 0.0), grade_peak_rss_bytes=int(d["grade_peak_rss_bytes"] or 0),
            validation_score=d["validation_score"])

    def records(self, where: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Rows as dicts in insertion order, ``meta`` parsed back to a dict and ``trajectory`` the
        :class:`~wmrl.trajectory.Trajectory` it holds (None for a program that is not a policy's sample).

        Args:
            where: equality filters on columns, e.g. ``{"task_id": "x", "status": "ok"}``.

        Raises:
            KeyError: a filter names an unknown column (the message lists the known ones).
        """
        where = where or {}
        unknown = [k for k in where if k not in COLUMNS]
        if unknown:
            raise KeyError(f"unknown execution-log column(s) {unknown}; known: {sorted(COLUMNS)}")
        clause = " AND ".join(f"{k} IS ?" for k in where)
        sql = "SELECT * FROM executions" + (f" WHERE {clause}" if clause else "") + " ORDER BY id"
        values = tuple(getattr(v, "value", v) for v in where.values())
        with self._lock:
            cur = self._conn.execute(sql, values)
            names = [d[0] for d in cur.description]
            rows = cur.fetchall()
        out = []
        for r in rows:
            d = dict(zip(names, r))
            d["meta"] = json.loads(d["meta"]) if d.get("meta") else {}
            d["trajectory"] = Trajectory.from_dict(d["meta"])
            if d.get("above_median") is not None:
                d["above_median"] = bool(d["above_median"])
            out.append(d)
        return out

    def to_frame(self, where: dict[str, Any] | None = None):
        """The rows of :meth:`records` as a pandas DataFrame (``meta`` stays a dict column)."""
        import pandas as pd  # noqa: PLC0415 - heavy (pandas)

        return pd.DataFrame(self.records(where), columns=list(COLUMNS))

    def count(self, where: dict[str, Any] | None = None) -> int:
        """Number of rows (matching ``where``, as in :meth:`records`)."""
        where = where or {}
        unknown = [k for k in where if k not in COLUMNS]
        if unknown:
            raise KeyError(f"unknown execution-log column(s) {unknown}; known: {sorted(COLUMNS)}")
        clause = " AND ".join(f"{k} IS ?" for k in where)
        sql = "SELECT COUNT(*) FROM executions" + (f" WHERE {clause}" if clause else "")
        with self._lock:
            return int(self._conn.execute(sql, tuple(getattr(v, "value", v) for v in where.values())).fetchone()[0])

    def truncate_after_step(self, step: int) -> int:
        """Delete the executions of training steps after ``step`` (rows whose ``meta.step`` is a number
        greater than ``step``: anchors and evaluations of steps a resumed run will redo); rows without a
        step (warm-up, ``wmrl exec``) stay. Returns how many rows were deleted, in one transaction."""
        with self._lock:
            rows = self._conn.execute("SELECT id, meta FROM executions").fetchall()
            drop = []
            for rid, meta in rows:
                try:
                    s = json.loads(meta or "{}").get("step")
                except (ValueError, AttributeError):
                    continue
                if isinstance(s, (int, float)) and not isinstance(s, bool) and s > step:
                    drop.append((rid,))
            if drop:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    self._conn.executemany("DELETE FROM executions WHERE id = ?", drop)
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
            return len(drop)

    def close(self) -> None:
        """Checkpoint the WAL and close the connection (idempotent)."""
        with self._lock:
            if self._conn is None:
                return
            try:
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error:
                pass
            self._conn.close()
            self._conn = None  # type: ignore[assignment]

    def __enter__(self) -> ExecutionLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __len__(self) -> int:
        return self.count()

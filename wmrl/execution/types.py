"""Execution requests and outcomes (seed; the execution package owns and extends it)."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from wmrl.core.infra import usable_outcome
from wmrl.program_text import text_sha256
from wmrl.tasks.spec import Task
from wmrl.trajectory import Trajectory


#: Longest ``ExecutionResult.error``, characters (longer messages are cut, saying how long they were).
MAX_ERROR_CHARS = 500


class ExecutionStatus(str, Enum):  # noqa: UP042 - StrEnum would change str() and f-strings of a status
    """How one execution ended. Only ``INFRA_ERROR`` is not the program's doing."""

    OK = "ok"
    INVALID_SUBMISSION = "invalid_submission"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    MEMORY_EXCEEDED = "memory_exceeded"
    INFRA_ERROR = "infra_error"


def program_hash(program: str) -> str:
    """SHA-256 hex digest of the program text (UTF-8; a lone surrogate, which no program can hold, is hashed as
    its code point so that hashing never raises)."""
    return text_sha256(program)


@dataclass
class ExecutionRequest:
    """One program to run on one task.

    ``trajectory`` (:class:`wmrl.trajectory.Trajectory`) is the policy's sample the program came from
    (prompt, completion, run, step, group, stream); the execution log stores it, with its schema
    version, so that a world model can be fitted from the log later. ``meta`` is free-form provenance for
    programs that are not a policy's sample (``wmrl exec``), stored beside it.
    """

    task: Task
    program: str
    request_id: str = ""
    time_limit_s: float | None = None  # None: the task's own limit
    meta: dict[str, Any] = field(default_factory=dict)
    trajectory: Trajectory | None = None

    def log_meta(self) -> dict[str, Any]:
        """What the execution log stores in its ``meta`` column: ``meta`` plus the trajectory record."""
        return {**self.meta, **(self.trajectory.to_dict() if self.trajectory is not None else {})}


@dataclass
class ExecutionResult:
    """The typed outcome of one execution.

    Units: seconds for ``wall_s``; CPU-seconds (user+sys of the whole process tree, from rusage)
    for ``cpu_s``; bytes for ``peak_rss_bytes`` (the whole process tree's peak memory). ``score`` is the raw metric
    value and ``reward`` the leaderboard percentile in [0, 1] (both on the test rows); ``validation_score`` is the
    task's metric on the harness-held-out rows of train.csv when the task is a validation view
    (:func:`wmrl.tasks.validation.validation_view`; what a competitor sees), else ``None``; for program failures
    ``reward`` is the task's failure reward; for ``INFRA_ERROR`` both are ``None`` and the trainer must leave the sample
    out. ``error`` is at most :data:`MAX_ERROR_CHARS` characters.
    """

    request_id: str
    task_id: str
    status: ExecutionStatus
    score: float | None
    reward: float | None
    wall_s: float
    cpu_s: float
    peak_rss_bytes: int
    stdout: str
    stderr: str
    program_sha256: str
    error: str = ""
    medal: str | None = None
    above_median: bool | None = None
    exit_code: int | None = None  # the program's exit status; 128+N when killed by signal N
    started_at: float = 0.0  # Unix time (seconds) when the sandbox was started
    time_limit_s: float = 0.0  # the wall-clock limit the program ran under, seconds
    sandbox: str = ""  # isolation used: "bwrap", "bwrap-userns" or "unsandboxed"
    # how the process tree's memory limit was held: "cgroup-v2", "cgroup-v1" or "supervisor" ("" when it never ran)
    memory_limit_mode: str = ""
    stdout_bytes: int = 0  # total bytes the program wrote to stdout (before truncation)
    stderr_bytes: int = 0  # total bytes the program wrote to stderr (before truncation)
    grade_s: float = 0.0  # wall seconds the driver spent grading the submission (0: not graded)
    # the driver process's peak resident memory while it graded, bytes (its high-water mark, reset
    # when grading starts where Linux allows; process-wide: concurrent work in the driver counts too)
    grade_peak_rss_bytes: int = 0
    # the metric on a validation view's held-out rows (None: not a view, not graded, or undefined there)
    validation_score: float | None = None

    @property
    def is_infra_error(self) -> bool:
        """True when the outcome is not the program's doing and must be left out of training."""
        return self.status == ExecutionStatus.INFRA_ERROR

    @property
    def usable(self) -> bool:
        """True when the outcome can train: not an infrastructure error and a finite reward
        (:func:`wmrl.core.infra.usable_outcome`)."""
        return usable_outcome(self.status, self.reward)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict of all fields (``status`` as its string value)."""
        d = dict(self.__dict__)
        d["status"] = self.status.value
        return d

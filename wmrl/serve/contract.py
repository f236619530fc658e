"""The HTTP contract shared by ``wmrl serve sandbox`` and ``wmrl serve world-model`` (docs/services.md).

Both services answer the same requests on the same paths, so a trainer swaps real execution for the world model by
changing a URL:

=======================  ================================================================================
``GET  /v1/health``      :class:`Health`: capacity (workers, max concurrency, max batch) and load (in flight,
                         queued, served totals); no token needed (it holds no task data)
``GET  /v1/tasks``       :class:`TaskList`: the task ids the service knows (token needed)
``POST /v1/grade``       one :class:`GradeRequest` -> :class:`GradeResponse` (sandbox) or
                         :class:`PredictResponse` (world model)
``POST /v1/grade/batch`` :class:`BatchRequest` -> :class:`BatchResponse` (the items' answers, in order)
=======================  ================================================================================

Errors are :class:`ErrorBody` with an HTTP status: 401 (missing or wrong bearer token), 404 (unknown task), 408 (the
body did not arrive in time), 409 (a request id reused for another program), 413 (body over the size limit, or a batch
with more new items than the service's ``max_concurrency``: it could never be admitted), 422
(malformed JSON or a field out of range: the message names the field), 503 with ``Retry-After`` (at capacity; retry
the same request), 504 (no answer within the service's per-request timeout; a sandbox execution keeps running and a
retry with the same request id gets its result). Every model refuses unknown fields, so a typo is a 422, not a
silently ignored option.

Pydantic models only; nothing of wmrl is imported, so a client needs nothing but this module and an HTTP library.
"""
from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: the version of the contract: the path prefix (``/v1``) and the ``contract`` field of every answer
API_VERSION = "v1"
CONTRACT = f"wmrl.serve/{API_VERSION}"
PREFIX = f"/{API_VERSION}"

#: the outcome classes of a world model's status distribution, in order (``wmrl.world_model.outcome.STATUS_CLASSES``)
OUTCOME_CLASSES: tuple[str, ...] = ("syntax_error", "runtime_error", "no_submission", "valid")

#: a request id: 1-200 characters of letters, digits and ``._:/-``, nothing else (the whole id must match: a
#: trailing newline is refused)
REQUEST_ID_PATTERN = r"[A-Za-z0-9._:/-]{1,200}"
_REQUEST_ID = re.compile(REQUEST_ID_PATTERN)

ServiceName = Literal["sandbox", "world-model"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ValidationSpec(_Model):
    """Run on the task's validation view (``wmrl.tasks.validation.validation_view``: a share of train.csv held out
    and graded as ``validation_score``; multi-turn episodes' feedback). The service builds the view with its own
    installation secret (``WMRL_VIEW_SECRET``)."""

    fraction: float = Field(..., gt=0.0, lt=1.0, description="Held-out share of train.csv's rows.")
    seed: int = Field(0, description="Seed of the split (salted with the service's secret).")


class GradeRequest(_Model):
    """One program to grade (sandbox) or score (world model).

    The sandbox runs ``program`` on ``task_id``. The world model scores ``prompt`` + ``completion``: ``completion``
    defaults to ``program`` and ``prompt`` to the task's prompt under the service's scaffold, so a request written
    for the sandbox is a valid world-model request too; a trainer that has its own prompts (multi-turn histories)
    sends them.
    """

    request_id: str = Field("", description=(
        "Idempotency key: a retried request with the same id is never executed twice (the sandbox answers a "
        "finished id from its execution log). Empty: the service assigns one and the request is not idempotent. "
        f"The whole id matches {REQUEST_ID_PATTERN}."))
    task_id: str | None = Field(None, min_length=1, max_length=500, description=(
        "The task (as `wmrl tasks list` names it); required by the sandbox, and by the world model unless a "
        "prompt is given."))
    program: str = Field(..., description=(
        "The solution program (Python source, UTF-8); required by both services (the world model scores it as the "
        "completion unless `completion` is given)."))
    time_limit_s: float | None = Field(None, gt=0.0, le=30 * 24 * 3600.0, description=(
        "Sandbox: wall-clock limit of the program, seconds (null: the task's own)."))
    trajectory: dict[str, Any] | None = Field(None, description=(
        "The trajectory record (wmrl.trajectory v1: prompt, completion, run, step, group, stream) the execution "
        "log keeps beside the execution."))
    meta: dict[str, Any] = Field(default_factory=dict, description="Free-form provenance kept in the execution log.")
    validation: ValidationSpec | None = Field(None, description=(
        "Sandbox: run on the task's validation view instead of the task (null: the task)."))
    prompt: str | None = Field(None, description="World model: the prompt the completion answers (null: the task's).")
    completion: str | None = Field(None, description="World model: the policy's completion (null: the program).")

    @field_validator("request_id")
    @classmethod
    def _check_id(cls, v: str) -> str:
        if v and not _REQUEST_ID.fullmatch(v):
            raise ValueError(f"request_id must match {REQUEST_ID_PATTERN} as a whole (letters, digits and ._:/-, at "
                             f"most 200 characters, nothing else, no newline); got {v[:60]!r}")
        return v


class BatchRequest(_Model):
    """Several requests answered together (the world model scores them in one batch)."""

    items: list[GradeRequest] = Field(..., min_length=1, description="The requests, answered in this order.")


class GradeResponse(_Model):
    """The sandbox's answer: the outcome of one execution (``wmrl.execution.types.ExecutionResult``).

    Units: seconds (``wall_s``), CPU-seconds of the program's process tree (``cpu_s``), bytes
    (``peak_rss_bytes``). ``reward`` is the leaderboard percentile in [0, 1] (the task's failure reward for a
    program failure, null for ``infra_error``); ``validation_score`` the metric on a validation view's held-out rows.
    """

    contract: str = CONTRACT
    request_id: str
    task_id: str
    status: str = Field(..., description="ok, invalid_submission, runtime_error, timeout, memory_exceeded, "
                                         "infra_error")
    score: float | None = None
    reward: float | None = None
    validation_score: float | None = None
    medal: str | None = None
    above_median: bool | None = None
    wall_s: float = 0.0
    cpu_s: float = 0.0
    peak_rss_bytes: int = 0
    exit_code: int | None = None
    time_limit_s: float = 0.0
    sandbox: str = ""
    stdout: str = ""
    stderr: str = ""
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    grade_s: float = 0.0
    error: str = ""
    program_sha256: str
    started_at: float = Field(0.0, description="Unix time (seconds) the sandbox started.")
    replayed: bool = Field(False, description="Answered from the execution log (the id had finished before).")
    attempt: int = Field(1, description="How many times the service has started this request id (1 = first).")


class PredictResponse(_Model):
    """The world model's answer (``wmrl.world_model.outcome.OutcomePrediction``, one row)."""

    contract: str = CONTRACT
    request_id: str
    task_id: str | None = None
    reward: float = Field(..., description="Predicted reward (leaderboard percentile scale).")
    reward_std: float = Field(..., ge=0.0, description="Predictive standard deviation of the reward.")
    status_probs: dict[str, float] = Field(..., description=f"P(outcome class), classes {list(OUTCOME_CLASSES)}.")
    status: str = Field(..., description="The most likely outcome class.")
    program_sha256: str = Field(..., description="SHA-256 of the completion the prediction is for.")
    batch_size: int = Field(..., ge=1, description="Rows of the model call this prediction was part of.")


class BatchResponse(_Model):
    """The answers of a :class:`BatchRequest`, in its order."""

    contract: str = CONTRACT
    results: list[GradeResponse] | list[PredictResponse]


class Capacity(_Model):
    """What the service can take: concurrent executions (sandbox) or rows per model call (world model)."""

    workers: int = Field(..., description="Sandbox: concurrent executions. World model: model threads (1).")
    max_concurrency: int = Field(..., description="Admitted requests (items) at once; beyond: 503 + Retry-After.")
    max_batch: int = Field(1, description="World model: most rows per model call.")
    max_body_bytes: int
    timeout_s: float = Field(..., description="Longest a request is answered in, seconds (then 504).")


class Load(_Model):
    """What the service is doing and has done since it started."""

    in_flight: int = Field(..., description="Admitted items not answered yet (running or queued).")
    queued: int = Field(..., description="Admitted items waiting for a worker or a batch.")
    served: int = Field(..., description="Items answered (replays included).")
    replayed: int = Field(0, description="Sandbox: items answered from the execution log.")
    executed: int = Field(0, description="Sandbox: executions started. World model: rows predicted.")
    rejected: int = Field(0, description="Requests refused (4xx/503).")
    batches: int = Field(0, description="World model: model calls.")


class Health(_Model):
    """``GET /v1/health``."""

    contract: str = CONTRACT
    api_version: str = API_VERSION
    service: ServiceName
    ok: bool = True
    capacity: Capacity
    load: Load
    uptime_s: float
    n_tasks: int
    detail: dict[str, Any] = Field(default_factory=dict, description=(
        "Service facts: the sandbox mode and log path; the world model's kind, backbone and scaffold."))


class TaskList(_Model):
    """``GET /v1/tasks``."""

    contract: str = CONTRACT
    tasks: list[str]


class ErrorBody(_Model):
    """Every error answer."""

    contract: str = CONTRACT
    error: str = Field(..., description="unauthorized, not_found, conflict, too_large, invalid, timeout, "
                                        "busy, body_timeout, internal")
    detail: Any = Field(..., description="What was wrong and how to fix it.")

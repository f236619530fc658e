"""One execution end to end: sandboxed run, then grading in the trusted driver, then the typed outcome.

:func:`execute` = :func:`wmrl.execution.sandbox.run_program` + :func:`outcome`. The Ray backend runs
the first half on a worker and calls :func:`outcome` in the driver, so grading (which reads the
private answers) never leaves the driver process.

Status rules (:func:`classify`), first match wins:

==========================  ==========================================================================
``infra_error``             the sandbox did not start, the driver failed, the run was cancelled, or
                            the grader fails on the task's own reference submission too (the task or
                            the grader is broken: :func:`grader_fault`)
``timeout``                 wall-clock limit reached (killed), or the CPU-time limit (SIGXCPU, or
                            SIGKILL with the CPU limit used up)
``memory_exceeded``         the whole process tree reached its memory limit (killed), or a non-zero exit
                            with an allocation failure on stderr (``MemoryError``, ``Unable to
                            allocate``, ``Cannot allocate memory``, ``std::bad_alloc``)
``runtime_error``           any other non-zero exit, or killed for exceeding the disk quota or the
                            folder depth limit
``invalid_submission``      exit 0 but no regular ``submission.csv``, or the grader refused it or
                            failed on it (whatever the exception) while grading the reference works
``ok``                      graded: score, reward (leaderboard percentile), medal, above-median
==========================  ==========================================================================

Program failures get ``task.failure_reward``; ``infra_error`` gets ``score = reward = None`` and
must be left out of training. A program can cause none of the
``infra_error`` causes above: the fault is located (the grader is probed on a file no program can
change), never read off an exception's type.
"""
from __future__ import annotations

import logging
import math
import os
import re
import resource
import signal
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wmrl.execution.scratch import remove_tree, make_scratch
from wmrl.execution.sandbox import MAX_TIME_LIMIT_S, SUBMISSION_NAME, SandboxConfig, SandboxRun, run_program
from wmrl.execution.types import MAX_ERROR_CHARS, ExecutionRequest, ExecutionResult, ExecutionStatus, program_hash
from wmrl.tasks.spec import InvalidSubmission, UnreadableSubmission

log = logging.getLogger(__name__)

Grader = Callable[[Any, Path], Any]
"""``grader(task, submission_path) -> Grade`` with ``score``, ``reward``, ``medal``, ``above_median``;
raises :class:`wmrl.tasks.spec.InvalidSubmission` (a ``ValueError``) for a bad submission."""

MEMORY_SIGNATURES = ("MemoryError", "Unable to allocate", "Cannot allocate memory", "std::bad_alloc",
                     "out of memory", "OutOfMemory")


def default_grader(task, path: Path):
    """:func:`wmrl.tasks.grading.grade_submission` (imported lazily: it pulls pandas); messages name
    the file ``submission.csv``."""
    from wmrl.tasks.grading import grade_submission  # noqa: PLC0415 - heavy: loads pandas

    return grade_submission(task, path, name=SUBMISSION_NAME)


def cap_error(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``text`` cut to ``limit`` characters (saying how long it was): no message can carry a whole
    submission or id column into the result, the execution log or ``--json``."""
    text = str(text)
    if len(text) <= limit:
        return text
    return text[: max(0, limit - 40)] + f" ... [{len(text)} characters in all]"


def _reset_peak_rss() -> bool:
    """Reset this process's resident-memory high-water mark (Linux ``/proc/self/clear_refs``)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_rss() -> int:
    """This process's resident-memory high-water mark, bytes (``VmHWM``; ``ru_maxrss`` elsewhere)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def time_limit_of(request: ExecutionRequest) -> float:
    """The wall-clock limit of ``request``, seconds: its own, else the task's.

    Raises:
        ValueError: the limit is not a positive number.
    """
    limit = request.time_limit_s if request.time_limit_s is not None else request.task.time_limit_s
    try:
        value = float(limit) if limit is not None else math.nan
    except (TypeError, ValueError):
        value = math.nan
    if not 0 < value <= MAX_TIME_LIMIT_S:
        raise ValueError(f"time limit for task {request.task.id!r} must be > 0 seconds and at most "
                         f"{MAX_TIME_LIMIT_S:g} (30 days), got {limit!r}; "
                         "set ExecutionRequest.time_limit_s or the task's time_limit_s")
    return value


def classify(run: SandboxRun) -> tuple[ExecutionStatus | None, str]:
    """Status from the sandbox alone (``None``: exit 0 with a submission, so grading decides)."""
    if run.infra_error:
        return ExecutionStatus.INFRA_ERROR, run.infra_error
    if run.killed == "cancelled":
        return ExecutionStatus.INFRA_ERROR, "cancelled by the driver"
    if run.killed == "timeout":
        return (ExecutionStatus.TIMEOUT,
                f"wall-clock limit of {run.time_limit_s:g} s reached; the process tree was killed")
    code = run.exit_code
    if run.killed == "memory":
        return ExecutionStatus.MEMORY_EXCEEDED, (
            f"memory limit of {run.memory_bytes} bytes for the whole process tree reached (peak "
            f"{run.peak_rss_bytes} bytes, {run.memory_limit_mode}); the process tree was killed")
    if run.killed == "disk":
        return ExecutionStatus.RUNTIME_ERROR, "disk quota exceeded; the process tree was killed"
    if run.killed == "depth":
        return ExecutionStatus.RUNTIME_ERROR, ("folders nested deeper than the sandbox's max_depth; "
                                               "the process tree was killed")
    if code not in (0, None):
        if code == 128 + signal.SIGXCPU or (code == 128 + signal.SIGKILL and run.cpu_s >= run.cpu_limit_s - 0.05):
            return ExecutionStatus.TIMEOUT, f"CPU-time limit of {run.cpu_limit_s:g} s per process reached"
        tail = run.stderr[-4000:]
        if any(s in tail for s in MEMORY_SIGNATURES):
            return ExecutionStatus.MEMORY_EXCEEDED, (f"memory limit of {run.memory_bytes} bytes "
                                                     f"(address space) exceeded (exit {code})")
        if code > 128:
            return ExecutionStatus.RUNTIME_ERROR, f"killed by signal {code - 128} ({_signame(code - 128)})"
        exception = exception_line(tail)
        return ExecutionStatus.RUNTIME_ERROR, f"exit code {code}" + (f": {exception}" if exception else "")
    if run.submission is None:
        return ExecutionStatus.INVALID_SUBMISSION, run.submission_error or "no submission.csv"
    return None, ""


#: The last line of a Python traceback: the exception's (dotted) class name, then its message.
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure)\b(?::.*)?)$")


def exception_line(stderr: str) -> str:
    """The exception a Python program died of, read from the end of its ``stderr`` (the traceback's last line,
    e.g. ``ValueError: Input X contains NaN``), or ``''`` when the output ends without a traceback. The status
    classifier appends it to ``exit code N`` so that a world model predicting failure classes (and a user reading
    the execution log) sees the exception's type without the full stderr."""
    if "Traceback (most recent call last)" not in stderr:
        return ""
    for line in reversed(stderr.splitlines()):
        m = _EXCEPTION_LINE.match(line.strip())
        if m:
            return m.group(1)
    return ""


def _signame(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return "unknown"


def outcome(request: ExecutionRequest, run: SandboxRun, grader: Grader | None = None,
            request_id: str | None = None) -> ExecutionResult:
    """Grade ``run`` (in this, trusted, process) and build the :class:`ExecutionResult`.

    The submission bytes are written to a fresh driver-owned temporary file and passed to
    ``grader`` (default :func:`default_grader`). The grading's wall time and the driver's peak
    resident memory during it go into ``grade_s`` and ``grade_peak_rss_bytes``; ``error`` is capped
    at :data:`~wmrl.execution.types.MAX_ERROR_CHARS` characters. Never raises.
    """
    task = request.task
    rid = request_id or request.request_id or uuid.uuid4().hex[:16]
    status, error = classify(run)
    result = ExecutionResult(
        request_id=rid, task_id=task.id, status=ExecutionStatus.INFRA_ERROR, score=None, reward=None,
        wall_s=run.wall_s, cpu_s=run.cpu_s, peak_rss_bytes=run.peak_rss_bytes, stdout=run.stdout,
        stderr=run.stderr, program_sha256=program_hash(request.program), error=error,
        exit_code=run.exit_code, started_at=run.started_at, time_limit_s=run.time_limit_s,
        sandbox=run.mode, stdout_bytes=run.stdout_bytes, stderr_bytes=run.stderr_bytes,
        memory_limit_mode=run.memory_limit_mode)
    if status is None:
        assert run.submission is not None  # classify gives no status only to a run with a submission
        t0 = time.perf_counter()
        _reset_peak_rss()
        status, error, grade = _grade(task, run.submission, grader or default_grader)
        result.grade_s = time.perf_counter() - t0
        result.grade_peak_rss_bytes = _peak_rss()
        result.error = error
        if grade is not None:
            result.score = float(grade.score)
            result.reward = float(grade.reward)
            vs = getattr(grade, "validation_score", None)
            result.validation_score = None if vs is None else float(vs)
            result.medal = getattr(grade, "medal", None)
            above = getattr(grade, "above_median", None)
            result.above_median = None if above is None else bool(above)
    result.status = status
    result.error = cap_error(result.error)
    if status not in (ExecutionStatus.OK, ExecutionStatus.INFRA_ERROR):
        result.reward = float(task.failure_reward)
    return result


def _grade(task, submission: bytes | bytearray, grader: Grader):
    """Write the bytes to ``submission.csv`` in a fresh locked execution folder (``make_scratch``: a driver killed
    mid-grading leaves it to the next sweep) and grade that; messages name it ``submission.csv`` (never the
    driver's temporary path) and are capped.

    Where the fault lies decides the status, not the exception's type: ``InvalidSubmission`` is the
    grader's verdict on the submission; any other failure while the grader handles these bytes is the
    submission's fault too (``invalid_submission``) unless the same grader also fails on the task's own
    reference submission (:func:`grader_works`), which no program can touch: then the task or the
    grader is broken and the result is an ``infra_error``. So no submission can turn its grade into an
    excluded outcome.
    """
    root, lock_fd = make_scratch()  # a locked execution folder: the sweep removes it if this driver is killed
    folder = str(root)
    name = os.path.join(folder, SUBMISSION_NAME)

    def say(exc: BaseException) -> str:
        return cap_error(str(exc).replace(name, SUBMISSION_NAME).replace(folder, "."), MAX_ERROR_CHARS - 60)

    try:
        with open(name, "wb") as f:
            f.write(submission)
        try:
            grade = grader(task, Path(name))
        except Exception as exc:  # noqa: BLE001 - the fault is located here, never by the exception's type
            what = say(exc) if isinstance(exc, InvalidSubmission) else f"{type(exc).__name__}: {say(exc)}"
            if isinstance(exc, InvalidSubmission) and not isinstance(exc, UnreadableSubmission):
                return ExecutionStatus.INVALID_SUBMISSION, f"invalid submission: {what}", None  # the grader's verdict
            broken = grader_fault(task, grader)
            if broken:
                log.error("grader of task %s fails on its reference submission too: %s", task.id, broken)
                return ExecutionStatus.INFRA_ERROR, (f"grader failed: {what} (it fails on the task's reference "
                                                     f"submission too: {cap_error(broken, 120)})"), None
            return (ExecutionStatus.INVALID_SUBMISSION, f"invalid submission: the grader could not process it ({what})",
                    None)
        return ExecutionStatus.OK, "", grade
    finally:
        remove_tree(root)
        os.close(lock_fd)


def reference_submission(task) -> Path | None:
    """The task's own reference submission: ``public/sample_submission.csv`` (or the benchmark's other
    spelling of it, e.g. ``sampleSubmission.csv``), or ``None`` when the task has none."""
    public = Path(task.public_dir)
    for p in (public / "sample_submission.csv", public / "sampleSubmission.csv",
              *sorted(public.glob("*sample*ubmission*.csv")), *sorted(public.glob("sample_solution*.csv"))):
        if p.is_file():
            return p
    return None


_grader_ok: dict[tuple, bool] = {}
_grader_ok_lock = threading.Lock()


def grader_fault(task, grader: Grader) -> str:
    """Why ``grader`` cannot grade ``task`` at all, or ``""`` when it grades the task's reference submission.

    The reference submission (:func:`reference_submission`) is the task's own file, which no program
    can change; if the grader fails on it (an exception, ``InvalidSubmission`` included), the task or the
    grader is broken: an infrastructure fault. A task without a reference submission cannot be probed,
    and its grader is taken to work (a failure on a program's submission is then the submission's). A
    success is cached per task, answers file (path and modification time) and grader. Never raises.
    """
    ref = reference_submission(task)
    if ref is None:
        return ""
    try:
        answers = Path(task.answers_path)
        key = (task.id, str(answers), answers.stat().st_mtime_ns if answers.exists() else -1, str(ref), id(grader))
    except (OSError, TypeError, ValueError) as exc:
        return f"the task's answers cannot be read ({type(exc).__name__}: {exc})"
    with _grader_ok_lock:
        if _grader_ok.get(key):
            return ""
    try:
        grader(task, ref)
    except Exception as exc:  # noqa: BLE001 - any failure on the task's own file is the grader's
        return f"{type(exc).__name__}: {cap_error(str(exc), 300)}"
    with _grader_ok_lock:
        _grader_ok[key] = True
    return ""


def infra_result(request: ExecutionRequest, error: str, request_id: str | None = None) -> ExecutionResult:
    """An ``infra_error`` result for a request that could not be run at all (no reward)."""
    return ExecutionResult(
        request_id=request_id or request.request_id or uuid.uuid4().hex[:16], task_id=request.task.id,
        status=ExecutionStatus.INFRA_ERROR, score=None, reward=None, wall_s=0.0, cpu_s=0.0,
        peak_rss_bytes=0, stdout="", stderr="", program_sha256=program_hash(request.program), error=error)


def execute(request: ExecutionRequest, config: SandboxConfig | None = None,
            cancel: threading.Event | None = None, grader: Grader | None = None) -> ExecutionResult:
    """Run ``request`` in the sandbox and grade it; never raises for what the program does.

    Raises:
        SandboxUnavailable: bwrap is missing and ``config.allow_unsandboxed`` is off.
        ValueError: the request's time limit is not positive or the task's ``public_dir`` is missing.
    """
    run = run_program(request.program, request.task.public_dir, time_limit_of(request), config, cancel)
    return outcome(request, run, grader)

"""Outcome classification and grading (pure: synthetic sandbox runs and graders)."""
from __future__ import annotations

import math
import signal
from types import SimpleNamespace

import pytest

from wmrl.execution.runner import classify, exception_line, outcome, time_limit_of
from wmrl.execution.sandbox import SandboxRun
from wmrl.execution.types import ExecutionRequest, ExecutionStatus, program_hash
from wmrl.tasks.spec import InvalidSubmission


def run(**kw) -> SandboxRun:
    base = dict(mode="bwrap", started=True, exit_code=0, time_limit_s=10.0, cpu_limit_s=10.0,
                memory_bytes=2**30, wall_s=1.0, cpu_s=0.5, submission=b"id,y\n1,0.5\n")
    base.update(kw)
    return SandboxRun(**base)


@pytest.mark.parametrize("kw, status", [
    (dict(infra_error="bwrap failed", started=False), ExecutionStatus.INFRA_ERROR),
    (dict(killed="cancelled", exit_code=137), ExecutionStatus.INFRA_ERROR),
    (dict(killed="timeout", exit_code=137), ExecutionStatus.TIMEOUT),
    (dict(exit_code=128 + signal.SIGXCPU), ExecutionStatus.TIMEOUT),
    (dict(exit_code=137, cpu_s=10.0), ExecutionStatus.TIMEOUT),
    (dict(exit_code=137, cpu_s=1.0), ExecutionStatus.RUNTIME_ERROR),
    (dict(exit_code=1, stderr="Traceback ...\nMemoryError\n"), ExecutionStatus.MEMORY_EXCEEDED),
    (dict(exit_code=1, stderr="numpy.core._exceptions._ArrayMemoryError: Unable to allocate 12 GiB"),
     ExecutionStatus.MEMORY_EXCEEDED),
    (dict(exit_code=1, stderr="ValueError: bad"), ExecutionStatus.RUNTIME_ERROR),
    (dict(exit_code=126, stderr="bwrap: fake\nwmrl-launcher: fake"), ExecutionStatus.RUNTIME_ERROR),
    (dict(killed="disk", exit_code=137), ExecutionStatus.RUNTIME_ERROR),
    (dict(submission=None, submission_error="no submission.csv"), ExecutionStatus.INVALID_SUBMISSION),
    (dict(), None),
])
def test_classify(kw, status):
    assert classify(run(**kw))[0] == status


TRACEBACK = """Traceback (most recent call last):
  File "/work/solution.py", line 9, in <module>
    model.fit(X, y)
sklearn.utils._param_validation.InvalidParameterError: The 'penalty' parameter of LogisticRegression must be ...
"""


@pytest.mark.parametrize("stderr, line", [
    (TRACEBACK, "sklearn.utils._param_validation.InvalidParameterError: The 'penalty' parameter of "
                "LogisticRegression must be ..."),
    ("Traceback (most recent call last):\n  File \"x.py\", line 1\nKeyboardInterrupt\n", "KeyboardInterrupt"),
    ("Traceback (most recent call last):\nValueError: Input X contains NaN.\nwarning printed after\n",
     "ValueError: Input X contains NaN."),
    ("ValueError: printed by the program, no traceback\n", ""),
    ("Traceback (most recent call last):\n  File \"x.py\", line 1\n", ""),
    ("", ""),
])
def test_exception_line(stderr, line):
    assert exception_line(stderr) == line


def test_a_runtime_error_names_its_exception():
    status, error = classify(run(exit_code=1, stderr=TRACEBACK))
    assert status == ExecutionStatus.RUNTIME_ERROR
    assert error.startswith("exit code 1: sklearn.utils._param_validation.InvalidParameterError: The 'penalty'")
    assert classify(run(exit_code=3, stderr="no traceback here"))[1] == "exit code 3"


def _req(tiny_task, **kw):
    return ExecutionRequest(task=tiny_task, program="print(1)", request_id="r1", **kw)


def test_outcome_ok_uses_the_grade(tiny_task):
    grade = SimpleNamespace(score=0.8, reward=0.6, medal="bronze", above_median=True)
    res = outcome(_req(tiny_task), run(), grader=lambda task, path: grade)
    assert res.status == ExecutionStatus.OK and res.score == 0.8 and res.reward == 0.6
    assert res.medal == "bronze" and res.above_median is True
    assert res.program_sha256 == program_hash("print(1)") and res.request_id == "r1"


def test_outcome_grader_gets_a_private_copy_of_the_bytes(tiny_task):
    seen = {}

    def grader(task, path):
        seen["text"] = path.read_text()
        seen["path"] = path
        return SimpleNamespace(score=1.0, reward=1.0, medal=None, above_median=False)

    outcome(_req(tiny_task), run(submission=b"id,y\n7,1\n"), grader=grader)
    assert seen["text"] == "id,y\n7,1\n" and not seen["path"].exists()


class LeaderboardError(ValueError):
    pass


FAULTS = [InvalidSubmission("extra ids"), UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"),
          LeaderboardError("broken board"), FileNotFoundError("answers missing"), RuntimeError("grader bug"),
          OverflowError("int too large"), RecursionError("deep"), MemoryError(), KeyError("y"), ZeroDivisionError()]


@pytest.mark.parametrize("exc", FAULTS, ids=lambda e: type(e).__name__)
def test_a_failure_on_the_submission_alone_is_the_submissions_fault(tiny_task, exc):
    """Whatever the exception, a grader that grades the task's reference submission but fails on this one
    gives ``invalid_submission`` with the failure reward: no submission can make its outcome missing."""
    def grader(task, path):
        if path.name == "sample_submission.csv":
            return SimpleNamespace(score=0.5, reward=0.5, medal=None, above_median=False)
        raise exc

    res = outcome(_req(tiny_task), run(), grader=grader)
    assert res.status == ExecutionStatus.INVALID_SUBMISSION and res.reward == tiny_task.failure_reward
    assert type(exc).__name__ in res.error or isinstance(exc, InvalidSubmission)


@pytest.mark.parametrize("exc", FAULTS[1:], ids=lambda e: type(e).__name__)
def test_a_grader_that_fails_on_the_reference_too_is_an_infra_error(tiny_task, exc):
    def grader(task, path):
        raise exc

    res = outcome(_req(tiny_task), run(), grader=grader)
    assert res.status == ExecutionStatus.INFRA_ERROR and res.score is None and res.reward is None
    assert "reference submission" in res.error


def test_the_graders_own_verdict_needs_no_probe(tiny_task):
    calls = []

    def grader(task, path):
        calls.append(path.name)
        raise InvalidSubmission("extra ids")

    res = outcome(_req(tiny_task), run(), grader=grader)
    assert res.status == ExecutionStatus.INVALID_SUBMISSION and calls == ["submission.csv"]


def test_failures_get_the_failure_reward_and_infra_gets_none(tiny_task):
    import dataclasses

    task = dataclasses.replace(tiny_task, failure_reward=-1.0)
    assert outcome(_req(task), run(exit_code=1)).reward == -1.0
    infra = outcome(_req(task), run(infra_error="x", started=False))
    assert infra.reward is None and infra.score is None and infra.is_infra_error


def test_real_grader_scores_the_tiny_task(tiny_task):
    import pandas as pd

    test = pd.read_csv(tiny_task.public_dir / "test.csv")
    sub = pd.DataFrame({"id": test["id"], "y": (test["x1"] > 0).astype(float)}).to_csv(index=False).encode()
    res = outcome(_req(tiny_task), run(submission=sub))
    assert res.status == ExecutionStatus.OK and res.score == pytest.approx(1.0) and res.reward == 1.0


def test_time_limit_of(tiny_task):
    assert time_limit_of(_req(tiny_task)) == tiny_task.time_limit_s
    assert time_limit_of(_req(tiny_task, time_limit_s=3)) == 3.0
    with pytest.raises(ValueError, match="must be > 0"):
        time_limit_of(_req(tiny_task, time_limit_s=0))
    for bad in (float("inf"), float("nan"), 1e308, -1):  # inf was an OverflowError traceback in `wmrl exec`
        with pytest.raises(ValueError, match="must be > 0 seconds and at most"):
            time_limit_of(_req(tiny_task, time_limit_s=bad))


def test_result_to_dict_is_json_ready(tiny_task):
    import json

    res = outcome(_req(tiny_task), run(exit_code=2))
    d = res.to_dict()
    assert d["status"] == "runtime_error" and json.loads(json.dumps(d))["reward"] == 0.0
    assert not math.isnan(d["wall_s"])

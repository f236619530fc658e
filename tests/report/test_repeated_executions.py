"""The sandbox CPU a run spent re-running programs: what the exact execution cache saves, read from the run's log."""
from __future__ import annotations

import math
from concurrent.futures import Future

import pytest

from tests.support.fakes import fake_task
from wmrl.execution.cache import CachingExecutor
from wmrl.execution.log import ExecutionLog
from wmrl.execution.types import ExecutionRequest, ExecutionResult, ExecutionStatus, program_hash
from wmrl.report.runs import repeated_sandbox_cpu_s
from wmrl.trajectory import Trajectory

TASKS = {name: fake_task(i) for i, name in enumerate(("a", "b"))}


def _request(n: int, task: str, program: str, stream: str = "anchor") -> ExecutionRequest:
    t = TASKS[task]
    traj = Trajectory(stream=stream, run="r", step=n, group_id=0, sample=0, task_id=t.id, prompt="p",
                      completion=program, split="train" if stream == "eval" else None)
    return ExecutionRequest(t, program, request_id=f"q{n}", trajectory=traj)


class _Logging:
    """A fake executor that runs at once, costs ``cost[program]`` CPU-seconds and logs what it ran."""

    def __init__(self, log: ExecutionLog, cost: dict[str, float], infra: set[int] = frozenset()) -> None:
        self.log, self.cost, self.infra, self.n = log, cost, infra, 0

    def submit(self, request: ExecutionRequest) -> Future[ExecutionResult]:
        self.n += 1
        bad = int(request.request_id[1:]) in self.infra
        status = ExecutionStatus.INFRA_ERROR if bad else ExecutionStatus.OK
        res = ExecutionResult(request.request_id, request.task.id, status, 0.5, None if bad else 0.7, 1.0,
                              self.cost[request.program], 10, "", "", program_hash(request.program),
                              time_limit_s=request.task.time_limit_s)
        self.log.append(request, res)
        fut: Future[ExecutionResult] = Future()
        fut.set_result(res)
        return fut

    def close(self) -> None:
        pass


# (task, program, stream): p repeats on a (and once on b, another task); q first runs in an evaluation, which the
# cache of a training run does not see; r first fails with an infrastructure error (never cached), then runs twice
PLAN = [("a", "p", "anchor"), ("a", "p", "anchor"), ("b", "p", "anchor"), ("a", "q", "eval"), ("a", "q", "anchor"),
        ("a", "r", "anchor"), ("a", "r", "anchor"), ("a", "r", "verify"), ("a", "p", "warmup")]
COST = {"p": 1.0, "q": 4.0, "r": 16.0}
INFRA = {5}


def _run(path, cached: bool) -> float:
    """Run PLAN through the fake executor (with the cache in front for training streams); the training CPU paid."""
    log = ExecutionLog(path)
    inner = _Logging(log, COST, INFRA)
    cache = CachingExecutor(inner, log)
    paid = 0.0
    for n, (task, program, stream) in enumerate(PLAN):
        ex = cache if cached and stream != "eval" else inner
        res = ex.submit(_request(n, task, program, stream)).result(5)
        paid += res.cpu_s if stream != "eval" else 0.0
    log.close()
    return paid


def test_repeats_by_hand(tmp_path):
    _run(tmp_path / "run" / "executions.sqlite", cached=False)
    # repeats: p on a (row 1: 1.0, row 8: 1.0); r on a after its first real run (row 7: 16.0)
    assert repeated_sandbox_cpu_s(tmp_path / "run") == pytest.approx(18.0)


def test_the_repeats_are_what_the_cache_saves(tmp_path):
    """The figure read from an uncached run's log equals the uncached minus the cached run's training CPU."""
    uncached = _run(tmp_path / "u" / "executions.sqlite", cached=False)
    cached = _run(tmp_path / "c" / "executions.sqlite", cached=True)
    assert uncached - cached == pytest.approx(repeated_sandbox_cpu_s(tmp_path / "u"))
    assert repeated_sandbox_cpu_s(tmp_path / "c") == pytest.approx(0.0)  # the cache's own rows cost nothing


def test_a_run_without_its_log_has_no_figure(tmp_path):
    assert math.isnan(repeated_sandbox_cpu_s(tmp_path))

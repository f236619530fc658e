"""Every grade says which code graded it, and a task whose wmrl metric disagrees with the benchmark's own grading
code is graded by that code with a warning in `wmrl tasks check` (a metric off by 10 % shows both)."""
from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import wmrl.tasks.grading as grading
from wmrl.tasks.fixtures import build_benchmark_fixtures
from wmrl.tasks.loader import TaskSuite
from wmrl.tasks.probes import probe_submissions


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bench")
    build_benchmark_fixtures(out)
    return out


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A fresh WMRL_HOME, so that no decision kept by an earlier process is read."""
    monkeypatch.setenv("WMRL_HOME", str(tmp_path / "home"))
    grading._fast_path_cached.cache_clear()
    yield tmp_path / "home"
    grading._fast_path_cached.cache_clear()


def _check(bench: Path, tid: str):
    from wmrl.cli import app

    return CliRunner().invoke(app, ["tasks", "check", tid, "--root", str(bench)])


def test_a_metric_off_by_ten_percent_is_graded_by_the_benchmarks_code_with_a_warning(bench, home, monkeypatch):
    task = TaskSuite(bench).get("dsb-concrete")  # RMSE: wmrl's metric and the benchmark's code agree
    good = probe_submissions(task, grading.read_answers(task), seed=3)["good"]
    assert grading.graded_by(task) == grading.GRADED_BY_WMRL
    assert grading.grade_submission(task, good).graded_by == "wmrl"
    assert grading.metric_disagreement(task) is None
    assert "warning" not in _check(bench, "dsb-concrete").output

    real = grading.metric_score
    monkeypatch.setattr(grading, "metric_score", lambda *a, **k: 1.1 * real(*a, **k))
    monkeypatch.setenv("WMRL_HOME", str(home / "mutated"))
    grading._fast_path_cached.cache_clear()
    assert grading.graded_by(task) == grading.GRADED_BY_CODE
    g = grading.grade_submission(task, good)
    assert g.graded_by == "benchmark" and g.as_dict()["graded_by"] == "benchmark"
    line = grading.metric_disagreement(task)
    assert line is not None and "disagrees with the benchmark's grading code" in line
    out = _check(bench, "dsb-concrete").output
    assert f"dsb-concrete: warning: {line}" in out.replace("\n", " ") or "dsb-concrete: warning:" in out

"""The benchmark's metric code in children forked from one long-lived interpreter: what a run does to its
interpreter (a patched module, a killed parent, a run past its limit) never reaches the driver or the next run."""
from __future__ import annotations

import pytest

from wmrl.tasks.benchcode import MetricCodeError, run_metric_code

_GRADE = '''import os, signal, time
import pandas as pd


def grade(submission, answers):
    {extra}
    return float((submission["y"] == answers["y"]).mean())
'''


def _files(tmp_path, extra: str):
    code = tmp_path / f"grade_{len(list(tmp_path.glob('grade_*.py')))}.py"
    code.write_text(_GRADE.format(extra=extra))
    (tmp_path / "answers.csv").write_text("id,y\na,1\nb,0\nc,1\nd,1\n")
    (tmp_path / "sub.csv").write_text("id,y\na,1\nb,1\nc,1\nd,1\n")
    return code, tmp_path / "answers.csv", tmp_path / "sub.csv"


def test_a_patched_module_ends_with_its_run(tmp_path):
    code, ans, sub = _files(tmp_path, "pd.read_csv = None; pd.Series.mean = lambda self: 123.0")
    assert run_metric_code("mlebench", code, ans, sub).score == 123.0
    clean, ans, sub = _files(tmp_path, "pass")
    assert run_metric_code("mlebench", clean, ans, sub).score == 0.75


def test_a_run_that_kills_its_parent_fails_alone(tmp_path):
    code, ans, sub = _files(tmp_path, "os.kill(os.getppid(), signal.SIGKILL); time.sleep(5)")
    with pytest.raises(MetricCodeError):
        run_metric_code("mlebench", code, ans, sub, timeout_s=60)
    clean, ans, sub = _files(tmp_path, "pass")
    assert run_metric_code("mlebench", clean, ans, sub).score == 0.75


def test_a_run_past_its_limit_is_stopped_in_one_line(tmp_path):
    code, ans, sub = _files(tmp_path, "time.sleep(600)")
    with pytest.raises(MetricCodeError, match="ran longer than 3 s"):
        run_metric_code("mlebench", code, ans, sub, timeout_s=3)
    clean, ans, sub = _files(tmp_path, "pass")
    assert run_metric_code("mlebench", clean, ans, sub).score == 0.75

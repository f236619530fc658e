"""Small benchmark folders in the real on-disk layouts of MLE-Dojo, MLE-bench and DSBench, made offline.

Nothing can be downloaded here, so :func:`build_benchmark_fixtures` takes built-in tasks (real tables
from installed packages, the committed leaderboards of real reference solutions on exactly that split)
and writes them as each benchmark's prepare step or release leaves them::

    <out>/mle-dojo/mledojo/competitions/<id>/{info/description.txt, info/*_leaderboard.csv, utils/metric.py}
    <out>/mle-dojo/data/prepared/<id>/data/public/{train,test,sample_submission}.csv + description.txt
    <out>/mle-dojo/data/prepared/<id>/data/private/{test_answer,public_leaderboard,private_leaderboard}.csv
    <out>/mle-bench/mlebench/competitions/<id>/{config.yaml, description.md, leaderboard.csv, grade.py}
    <out>/mle-bench-data/<id>/prepared/public/...  prepared/private/test.csv
    <out>/dsbench/data_modeling/data/{task/<id>.txt, data_resplit/<id>/*.csv, answers/<id>/test_answer.csv}
    <out>/dsbench/data_modeling/evaluation/<id>_eval.py
    <out>/dsbench/data_modeling/save_performance/{baseline,GT}/<id>/result.txt

The metric code follows each benchmark's convention (a ``CompetitionMetrics`` subclass, ``grade(submission,
answers)``, an ``--answer_file/--predict_file`` script) and is written here, not copied. Answers are
written only to the private places of each layout (``data/private``, ``prepared/private``,
``data/answers``), never next to the public files. DSBench's baseline score is the constant sample
submission's; its GT score is the answers graded against themselves (how DSBench's GT results arise).
"""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from wmrl.tasks import leaderboard as lb
from wmrl.tasks.build import build_suite, make_public_readable
from wmrl.tasks.grading import score_submission


@dataclass(frozen=True)
class FixtureDef:
    """One fixture: ``benchmark`` (``mledojo``, ``mlebench``, ``dsbench``), its id, the built-in task it is
    made from, and (MLE-bench) whether the competition awards medals."""

    benchmark: str
    id: str
    source_task: str
    awards_medals: bool = True


FIXTURES: tuple[FixtureDef, ...] = (
    FixtureDef("mledojo", "dojo-titanicp", "vcdextra-titanicp"),
    FixtureDef("mledojo", "dojo-houseprices", "aer-houseprices"),
    FixtureDef("mlebench", "mleb-attrition", "modeldata-attrition"),
    FixtureDef("mlebench", "mleb-seattle-weather", "vega-seattle_weather", awards_medals=False),
    FixtureDef("dsbench", "dsb-concrete", "modeldata-concrete"),
    FixtureDef("dsbench", "dsb-diabetes", "sklearn-diabetes"),
)

#: MLE-bench grader names of the fixture metrics (as MLE-bench's config.yaml files spell them).
_MLEBENCH_GRADER = {"accuracy": "accuracy", "log_loss": "log-loss", "roc_auc": "auc-roc", "rmse": "rmse"}

# Metric code, one expression per wmrl metric: y (truth) and p (prediction) as pandas Series aligned by id.
_EXPR = {
    "accuracy": "accuracy_score(y.astype(str), p.astype(str))",
    "r2": "r2_score(y.astype(float), p.astype(float))",
    "rmse": "float(np.sqrt(mean_squared_error(y.astype(float), p.astype(float))))",
}
_IMPORT = {"accuracy": "accuracy_score", "r2": "r2_score", "rmse": "mean_squared_error", "log_loss": "log_loss"}


def _dojo_metric(cls: str, target: str, metric: str, higher: bool) -> str:
    return f'''import numpy as np
import pandas as pd
from sklearn.metrics import {_IMPORT[metric]}

from mledojo.metrics.base import CompetitionMetrics, InvalidSubmissionError


class {cls}(CompetitionMetrics):
    """Fixture metric ({metric}) in MLE-Dojo's convention: evaluate(y_true, y_pred) on DataFrames."""

    def __init__(self, value: str = "{target}", higher_is_better: bool = {higher}):
        super().__init__(higher_is_better)
        self.value = value

    def evaluate(self, y_true: pd.DataFrame, y_pred: pd.DataFrame) -> float:
        key = y_true.columns[0]
        t = y_true.astype({{key: str}}).set_index(key)
        s = y_pred.astype({{key: str}}).set_index(key).loc[t.index]
        y, p = t[self.value], s[self.value]
        return {_EXPR[metric]}

    def validate_submission(self, submission: pd.DataFrame, ground_truth: pd.DataFrame) -> str:
        if len(submission) != len(ground_truth):
            raise InvalidSubmissionError("the submission must have one row per test id")
        if set(submission.columns) != set(ground_truth.columns):
            raise InvalidSubmissionError("the submission must have the columns of the sample submission")
        return "Submission is valid."
'''


def _mlebench_grade(target: str, metric: str, classes: tuple[str, ...]) -> str:
    if metric == "log_loss":
        body = (f"    p = s[{target!r}].astype(float).clip(1e-15, 1 - 1e-15)\n"
                f"    return float(log_loss(y.astype(str), np.column_stack([1 - p, p]), labels={list(classes)!r}))\n")
    else:
        body = f"    p = s[{target!r}]\n    return {_EXPR[metric]}\n"
    return f'''import numpy as np
import pandas as pd
from sklearn.metrics import {_IMPORT[metric]}

from mlebench.grade_helpers import InvalidSubmissionError


def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    """Fixture grader ({metric}) in MLE-bench's convention: grade(submission, answers) -> float."""
    key = answers.columns[0]
    if len(submission) != len(answers):
        raise InvalidSubmissionError("the submission must have one row per test id")
    t = answers.astype({{key: str}}).set_index(key)
    s = submission.astype({{key: str}}).set_index(key).loc[t.index]
    y = t[{target!r}]
{body}'''


def _dsbench_eval(target: str, metric: str) -> str:
    return f'''import argparse
import os

import numpy as np
import pandas as pd
from sklearn.metrics import {_IMPORT[metric]}

parser = argparse.ArgumentParser()
parser.add_argument("--path", type=str, required=True)
parser.add_argument("--name", type=str, required=True)
parser.add_argument("--answer_file", type=str, required=True)
parser.add_argument("--predict_file", type=str, required=True)
parser.add_argument("--value", type=str, default={target!r})
args = parser.parse_args()

answers = pd.read_csv(args.answer_file)
predictions = pd.read_csv(args.predict_file)
key = answers.columns[0]
t = answers.astype({{key: str}}).set_index(key)
s = predictions.astype({{key: str}}).set_index(key).loc[t.index]
y, p = t[args.value], s[args.value]
performance = {_EXPR[metric]}
with open(os.path.join(args.path, args.name, "result.txt"), "w") as f:
    f.write(str(performance))
'''


def _class_name(task_id: str) -> str:
    return "".join(w.capitalize() for w in task_id.replace("_", "-").split("-")) + "Metrics"


def _copy_public(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for name in ("train.csv", "test.csv", "sample_submission.csv"):
        shutil.copyfile(src / name, dst / name)


def build_benchmark_fixtures(out: Path | str, benchmarks: tuple[str, ...] = ("mledojo", "mlebench", "dsbench"),
                             ids: tuple[str, ...] | None = None) -> dict[str, Path]:
    """Write the :data:`FIXTURES` of ``benchmarks`` (or only ``ids``) under ``out`` (see the module docstring).

    Returns:
        ``{fixture id: task folder}`` (the folder a loader reads; the package metadata lies apart).

    Raises:
        ImportError: the data packages are missing (``pip install 'wmrl[datasets]'``).
        KeyError: an unknown fixture id.
    """
    out = Path(out)
    known = {f.id: f for f in FIXTURES}
    if ids is not None:
        unknown = [i for i in ids if i not in known]
        if unknown:
            raise KeyError(f"unknown fixture(s) {unknown}; known: {', '.join(known)}")
    defs = [f for f in FIXTURES if f.benchmark in benchmarks and (ids is None or f.id in ids)]
    made: dict[str, Path] = {}
    with tempfile.TemporaryDirectory(prefix="wmrl-fixture-src-") as td:
        built = {t.id: t for t in build_suite(Path(td), sorted({f.source_task for f in defs}))}
        for f in defs:
            t = built[f.source_task]
            src = Path(t.root)
            desc = (src / "description.md").read_text(encoding="utf-8").replace(t.title, f"{t.title} ({f.id})", 1)
            board = lb.read_leaderboard(src / "leaderboard.csv")
            answers = pd.read_csv(src / "private" / "answers.csv")
            higher = not t.lower_is_better
            if f.benchmark == "mledojo":
                pkg = out / "mle-dojo" / "mledojo" / "competitions" / f.id
                data = out / "mle-dojo" / "data" / "prepared" / f.id / "data"
                (pkg / "info").mkdir(parents=True, exist_ok=True)
                (pkg / "utils").mkdir(parents=True, exist_ok=True)
                (pkg / "info" / "description.txt").write_text(desc, encoding="utf-8")
                public_board = pd.DataFrame({"rank": range(1, len(board[::2]) + 1), "score": board[::2]})
                private_board = pd.DataFrame({"rank": range(1, len(board) + 1), "score": board})
                public_board.to_csv(pkg / "info" / "public_leaderboard.csv", index=False)
                private_board.to_csv(pkg / "info" / "private_leaderboard.csv", index=False)
                (pkg / "utils" / "metric.py").write_text(_dojo_metric(_class_name(f.id), t.target, t.metric, higher))
                _copy_public(src / "public", data / "public")
                (data / "public" / "description.txt").write_text(desc, encoding="utf-8")  # prepare/mle.py copies it
                (data / "private").mkdir(parents=True, exist_ok=True)
                answers.to_csv(data / "private" / "test_answer.csv", index=False)
                for n in ("public_leaderboard.csv", "private_leaderboard.csv"):  # prepare/mle.py copies both
                    shutil.copyfile(pkg / "info" / n, data / "private" / n)
                make_public_readable(data / "public")
                made[f.id] = data.parent
            elif f.benchmark == "mlebench":
                pkg = out / "mle-bench" / "mlebench" / "competitions" / f.id
                data = out / "mle-bench-data" / f.id / "prepared"
                pkg.mkdir(parents=True, exist_ok=True)
                config = {"id": f.id, "name": f"{t.title} ({f.id})", "competition_type": "simple",
                          "awards_medals": f.awards_medals, "prizes": None,
                          "description": f"mlebench/competitions/{f.id}/description.md",
                          "dataset": {"answers": f"{f.id}/prepared/private/test.csv",
                                      "sample_submission": f"{f.id}/prepared/public/sample_submission.csv"},
                          "grader": {"name": _MLEBENCH_GRADER[t.metric],
                                     "grade_fn": f"mlebench.competitions.{f.id}.grade:grade"},
                          "preparer": f"mlebench.competitions.{f.id}.prepare:prepare"}
                (pkg / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
                (pkg / "description.md").write_text(desc, encoding="utf-8")
                # Kaggle's leaderboard export as MLE-bench ships it: best first, no rank column.
                pd.DataFrame({"scoreNullable": board, "teamId": range(1000, 1000 + len(board)),
                              "teamName": [f"team {i + 1}" for i in range(len(board))],
                              "submissionDate": "2024-01-01 00:00:00", "score": board}
                             ).to_csv(pkg / "leaderboard.csv", index=False)
                (pkg / "grade.py").write_text(_mlebench_grade(t.target, t.metric, t.classes))
                _copy_public(src / "public", data / "public")
                (data / "private").mkdir(parents=True, exist_ok=True)
                answers.to_csv(data / "private" / "test.csv", index=False)
                make_public_readable(data / "public")
                made[f.id] = data.parent
            else:
                home = out / "dsbench" / "data_modeling"
                resplit = home / "data" / "data_resplit" / f.id
                _copy_public(src / "public", resplit)
                (home / "data" / "task").mkdir(parents=True, exist_ok=True)
                (home / "data" / "task" / f"{f.id}.txt").write_text(desc, encoding="utf-8")
                (home / "data" / "answers" / f.id).mkdir(parents=True, exist_ok=True)
                answers.to_csv(home / "data" / "answers" / f.id / "test_answer.csv", index=False)
                (home / "evaluation").mkdir(parents=True, exist_ok=True)
                (home / "evaluation" / f"{f.id}_eval.py").write_text(_dsbench_eval(t.target, t.metric))
                base = float(score_submission(t, src / "public" / "sample_submission.csv"))
                gt = float(score_submission(t, answers.astype({t.id_column: str})))
                for kind, v in (("baseline", base), ("GT", gt)):
                    d = home / "save_performance" / kind / f.id
                    d.mkdir(parents=True, exist_ok=True)
                    (d / "result.txt").write_text(repr(v))
                make_public_readable(resplit)
                made[f.id] = resplit
    return made

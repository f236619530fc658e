"""A task's type comes from the benchmark's metric where the metric fixes it (a regression metric means
regression, whatever the target's cardinality); where only the benchmark's code knows the metric and the type
is guessed from a numeric target, the task carries a warning that names the hints key that settles it."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from wmrl.tasks.grading import grade_submission
from wmrl.tasks.loader import discover

_EVAL = '''import argparse
import os

import numpy as np
import pandas as pd
{imports}

parser = argparse.ArgumentParser()
parser.add_argument("--path", type=str, required=True)
parser.add_argument("--name", type=str, required=True)
parser.add_argument("--answer_file", type=str, required=True)
parser.add_argument("--predict_file", type=str, required=True)
args = parser.parse_args()
y = pd.read_csv(args.answer_file)["count"].to_numpy(float)
p = pd.read_csv(args.predict_file)["count"].to_numpy(float)
performance = {expr}
with open(os.path.join(args.path, args.name, "result.txt"), "w") as f:
    f.write(str(performance))
'''


def _dsbench_counts(home: Path, tid: str, imports: str, expr: str, baseline: float, gt: float) -> None:
    """A DSBench-layout task whose target is a count with 14 distinct values."""
    rng = np.random.default_rng(0)
    n = 200
    x = rng.normal(size=n)
    count = np.clip(np.round(5 + 3 * x + rng.normal(size=n)), 0, 15).astype(int)
    df = pd.DataFrame({"id": np.arange(n), "x": x, "count": count})
    train, test = df.iloc[:150], df.iloc[150:]
    resplit = home / "data" / "data_resplit" / tid
    resplit.mkdir(parents=True)
    train.to_csv(resplit / "train.csv", index=False)
    test.drop(columns=["count"]).to_csv(resplit / "test.csv", index=False)
    pd.DataFrame({"id": test["id"], "count": 5}).to_csv(resplit / "sample_submission.csv", index=False)
    (home / "data" / "answers" / tid).mkdir(parents=True)
    test[["id", "count"]].to_csv(home / "data" / "answers" / tid / "test_answer.csv", index=False)
    (home / "evaluation").mkdir(parents=True, exist_ok=True)
    (home / "evaluation" / f"{tid}_eval.py").write_text(_EVAL.format(imports=imports, expr=expr))
    for kind, v in (("baseline", baseline), ("GT", gt)):
        d = home / "save_performance" / kind / tid
        d.mkdir(parents=True)
        (d / "result.txt").write_text(repr(v))


def test_count_target_under_rmsle_is_regression_and_fractions_grade(tmp_path):
    home = tmp_path / "DSBench" / "data_modeling"
    _dsbench_counts(home, "bike-counts", "from sklearn.metrics import mean_squared_log_error",
                    "float(np.sqrt(mean_squared_log_error(y, p)))", baseline=0.6, gt=0.0)
    disc = discover([tmp_path])
    assert not disc.refused, disc.summary()
    task = disc.tasks["bike-counts"]
    assert task.type == "regression" and task.metric == "rmsle"
    assert task.warnings == ()
    answers = pd.read_csv(home / "data" / "answers" / "bike-counts" / "test_answer.csv")
    sub = answers.assign(count=answers["count"] + 0.37)
    g = grade_submission(task, sub)
    assert 0 < g.score < 0.6 and g.rpg is not None and g.rpg > 0


def test_type_guessed_for_a_code_only_metric_is_a_warning(tmp_path):
    home = tmp_path / "DSBench" / "data_modeling"
    _dsbench_counts(home, "odd-metric", "", "float(np.median(np.abs(np.cbrt(y) - np.cbrt(p))))", baseline=0.5,
                    gt=0.0)
    disc = discover([tmp_path])
    assert not disc.refused, disc.summary()
    task = disc.tasks["odd-metric"]
    assert task.metric.startswith("code_")
    assert len(task.warnings) == 1
    w = task.warnings[0]
    assert "type multiclass inferred from the answers (14 distinct integer values)" in w
    assert "set 'type' in the hints file" in w and "odd-metric.yaml" in w
    assert "warning: " + w in disc.summary()

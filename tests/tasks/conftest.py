"""Fixtures: tiny task folders in the three layouts (wmrl, prepared MLE-bench, prepared MLE-Dojo), built here."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml


def _binary_frames(n: int = 40, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    y = np.where(x + rng.normal(scale=0.5, size=n) > 0, "yes", "no")
    ids = np.arange(100, 100 + n)
    df = pd.DataFrame({"id": ids, "x": x, "colour": rng.choice(["red", "blue"], size=n), "label": y})
    train, test = df.iloc[: n // 2], df.iloc[n // 2:]
    return train, test


def write_board(path: Path, scores) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"rank": range(1, len(scores) + 1), "score": scores}).to_csv(path, index=False)


@pytest.fixture
def wmrl_binary_task(tmp_path: Path) -> Path:
    """A wmrl-layout binary task with metric accuracy, answers under private/, one leaderboard of 10 entries."""
    root = tmp_path / "toy-binary"
    train, test = _binary_frames()
    (root / "public").mkdir(parents=True)
    (root / "private").mkdir()
    train.to_csv(root / "public" / "train.csv", index=False)
    test.drop(columns=["label"]).to_csv(root / "public" / "test.csv", index=False)
    pd.DataFrame({"id": test["id"], "label": "no"}).to_csv(root / "public" / "sample_submission.csv", index=False)
    test[["id", "label"]].to_csv(root / "private" / "answers.csv", index=False)
    write_board(root / "leaderboard.csv", [1.0, 0.95, 0.9, 0.85, 0.8, 0.75, 0.7, 0.65, 0.6, 0.5])
    (root / "description.md").write_text("# Toy\n\nA toy task.\n")
    meta = {"id": "toy-binary", "type": "binary", "metric": "accuracy", "target": "label", "id_column": "id",
            "classes": ["no", "yes"], "time_limit_s": 30, "split": "heldout", "baseline_score": 0.5,
            "gold_score": 1.0, "leaderboards": ["leaderboard.csv"]}
    (root / "task.yaml").write_text(yaml.safe_dump(meta))
    return root


@pytest.fixture
def mlebench_task(tmp_path: Path) -> Path:
    """A prepared MLE-bench competition: config.yaml (grader auc-roc), prepared/{public,private}, leaderboard.csv."""
    root = tmp_path / "toy-mlebench"
    train, test = _binary_frames(seed=1)
    train = train.assign(label=(train["label"] == "yes").astype(int))
    test = test.assign(label=(test["label"] == "yes").astype(int))
    pub, priv = root / "prepared" / "public", root / "prepared" / "private"
    pub.mkdir(parents=True)
    priv.mkdir(parents=True)
    train.to_csv(pub / "train.csv", index=False)
    test.drop(columns=["label"]).to_csv(pub / "test.csv", index=False)
    pd.DataFrame({"id": test["id"], "label": 0.5}).to_csv(pub / "sample_submission.csv", index=False)
    test[["id", "label"]].to_csv(priv / "test.csv", index=False)
    config = {"id": "toy-mlebench", "name": "Toy MLE-bench", "competition_type": "simple", "awards_medals": True,
              "description": "mlebench/competitions/toy-mlebench/description.md",
              "dataset": {"answers": "toy-mlebench/prepared/private/test.csv",
                          "sample_submission": "toy-mlebench/prepared/public/sample_submission.csv"},
              "grader": {"name": "auc-roc", "grade_fn": "mlebench.competitions.toy.grade:grade"}}
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    (root / "description.md").write_text("# Toy MLE-bench competition\n")
    # Kaggle-export style leaderboard: extra columns, no rank, best first.
    pd.DataFrame({"scoreNullable": [0.99, 0.9, 0.8, 0.7, 0.6], "teamId": [1, 2, 3, 4, 5],
                  "score": [0.99, 0.9, 0.8, 0.7, 0.6]}).to_csv(root / "leaderboard.csv", index=False)
    return root


@pytest.fixture
def mledojo_task(tmp_path: Path) -> Path:
    """A prepared MLE-Dojo competition: data/public, data/private/test_answer.csv, two rank,score boards (RMSE)."""
    root = tmp_path / "toy-dojo"
    rng = np.random.default_rng(2)
    n = 30
    df = pd.DataFrame({"Id": [f"r{i}" for i in range(n)], "a": rng.normal(size=n), "b": rng.integers(0, 5, n)})
    df["y"] = 3.0 * df["a"] + df["b"] + rng.normal(scale=0.1, size=n)
    train, test = df.iloc[:20], df.iloc[20:]
    pub, priv = root / "data" / "public", root / "data" / "private"
    pub.mkdir(parents=True)
    priv.mkdir(parents=True)
    train.to_csv(pub / "train.csv", index=False)
    test.drop(columns=["y"]).to_csv(pub / "test.csv", index=False)
    pd.DataFrame({"Id": test["Id"], "y": 0.0}).to_csv(pub / "sample_submission.csv", index=False)
    test[["Id", "y"]].to_csv(priv / "test_answer.csv", index=False)
    (root / "info").mkdir()
    (root / "info" / "description.txt").write_text("Toy MLE-Dojo regression.\n")
    write_board(root / "info" / "public_leaderboard.csv", [0.1, 0.5, 1.0, 2.0])  # lower is better
    write_board(root / "info" / "private_leaderboard.csv", [0.2, 0.4, 0.8, 1.6, 3.2])
    # The metric comes from the competition's own code (MLE-Dojo keeps it in utils/metric.py); without it
    # the task is refused rather than given a guessed metric.
    (root / "utils").mkdir()
    (root / "utils" / "metric.py").write_text(
        "import numpy as np\nfrom sklearn.metrics import mean_squared_error\n"
        "from mledojo.metrics.base import CompetitionMetrics\n\n\n"
        "class ToyDojoMetrics(CompetitionMetrics):\n"
        "    def __init__(self, value='y', higher_is_better=False):\n"
        "        super().__init__(higher_is_better)\n        self.value = value\n\n"
        "    def evaluate(self, y_true, y_pred):\n"
        "        return float(np.sqrt(mean_squared_error(y_true[self.value], y_pred[self.value])))\n")
    return root

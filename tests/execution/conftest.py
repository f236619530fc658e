"""Fixtures of the execution tests: a tiny binary task built in a temp folder, graded by the real grader."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from wmrl.execution.sandbox import SandboxConfig, find_bwrap
from wmrl.tasks.spec import Task

SECRET_ANSWER_MARK = "CANARY-7f3a9c"


def make_tiny_task(root: Path, seed: int = 0, n_train: int = 60, n_test: int = 40) -> Task:
    """A binary ROC-AUC task: ``y = 1`` iff ``x1 > 0``, ids 0..N-1, a 20-entry leaderboard.

    ``private/test.csv`` holds the answers plus a canary column so tests can detect a leak.
    """
    rng = np.random.default_rng(seed)
    pub = root / "public"
    priv = root / "private"
    pub.mkdir(parents=True, exist_ok=True)
    priv.mkdir(parents=True, exist_ok=True)
    n = n_train + n_test
    x1 = rng.normal(size=n)
    x2 = rng.normal(size=n)
    y = (x1 > 0).astype(int)
    df = pd.DataFrame({"id": np.arange(n), "x1": x1.round(4), "x2": x2.round(4), "y": y})
    train, test = df.iloc[:n_train], df.iloc[n_train:]
    train.to_csv(pub / "train.csv", index=False)
    test.drop(columns="y").to_csv(pub / "test.csv", index=False)
    pd.DataFrame({"id": test["id"], "y": 0.5}).to_csv(pub / "sample_submission.csv", index=False)
    ans = test[["id", "y"]].assign(canary=SECRET_ANSWER_MARK)
    ans.to_csv(priv / "test.csv", index=False)
    board = root / "leaderboard.csv"
    scores = np.linspace(0.99, 0.5, 20)
    pd.DataFrame({"rank": np.arange(1, 21), "score": scores}).to_csv(board, index=False)
    for p in [root, pub, priv, *pub.iterdir(), *priv.iterdir(), board]:
        mode = os.stat(p).st_mode
        os.chmod(p, mode | stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(mode) else 0))
    return Task(
        id="tiny-binary", type="binary", metric="roc_auc", lower_is_better=False, target="y",
        id_column="id", root=root, public_dir=pub, answers_path=priv / "test.csv",
        leaderboard_paths=(board,), time_limit_s=20.0, split="train", description="tiny test task",
        failure_reward=0.0, classes=("0", "1"), n_train=n_train, n_test=n_test)


# A correct solution: reads the public data, predicts P(y=1) from x1 (perfect AUC).
GOOD_PROGRAM = """
import pandas as pd
test = pd.read_csv("input/test.csv")
pd.DataFrame({"id": test["id"], "y": (test["x1"] > 0).astype(float)}).to_csv("submission.csv", index=False)
print("done", len(test))
"""

# A mediocre one: P(y=1) from x2 (AUC near 0.5).
WEAK_PROGRAM = """
import csv
rows = list(csv.DictReader(open("input/test.csv")))
with open("submission.csv", "w") as f:
    f.write("id,y\\n")
    for r in rows:
        f.write(f"{r['id']},{1 / (1 + 2.718281828 ** -float(r['x2'])):.6f}\\n")
"""


@pytest.fixture(scope="session")
def tiny_task(tmp_path_factory) -> Task:
    return make_tiny_task(tmp_path_factory.mktemp("tiny-task"))


@pytest.fixture(scope="session")
def bwrap_available() -> bool:
    return find_bwrap() is not None


@pytest.fixture()
def small_sandbox() -> SandboxConfig:
    """Small limits so that hostile programs are stopped fast."""
    return SandboxConfig(memory_bytes=512 * 1024**2, nproc=64, fsize_bytes=16 * 1024**2, nofile=64,
                         output_bytes=8 * 1024, disk_bytes=64 * 1024**2, max_files=2000)


def require_bwrap():
    if find_bwrap() is None:
        pytest.skip("bubblewrap not installed (apt-get install -y bubblewrap)")

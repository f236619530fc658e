"""Fixtures for the models tests: small offline tasks and the tiny random backbone."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from wmrl.tasks.spec import Task


def make_task(root: Path, kind: str = "binary", n: int = 200, seed: int = 0, extra_numeric: int = 0) -> Task:
    """A small synthetic task folder (wmrl layout) with train/test CSVs and answers; ``extra_numeric`` more
    standard-normal columns ``x0, x1, ...`` make a wide table."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    df = pd.DataFrame(X, columns=["age", "income", "score", "tenure"])
    df["region"] = rng.choice(["north", "south", "east"], size=n)
    if extra_numeric:
        df = pd.concat([df, pd.DataFrame(rng.normal(size=(n, extra_numeric)).round(3),
                                         columns=[f"x{i}" for i in range(extra_numeric)])], axis=1)
    if kind == "regression":
        y = X[:, 0] * 2 + X[:, 1] + rng.normal(scale=0.1, size=n)
        metric, lower, classes = "rmse", True, ()
    else:
        y = np.where(X[:, 0] + X[:, 1] > 0, "yes", "no")
        metric, lower, classes = "roc_auc", False, ("no", "yes")
    df.insert(0, "id", np.arange(n))
    df["target"] = y
    public = root / "public"
    private = root / "private"
    public.mkdir(parents=True)
    private.mkdir(parents=True)
    cut = int(n * 0.75)
    df.iloc[:cut].to_csv(public / "train.csv", index=False)
    df.iloc[cut:].drop(columns=["target"]).to_csv(public / "test.csv", index=False)
    df.iloc[cut:][["id", "target"]].to_csv(private / "test.csv", index=False)
    return Task(
        id=f"synthetic-{kind}",
        type=kind,  # type: ignore[arg-type]
        metric=metric,
        lower_is_better=lower,
        target="target",
        id_column="id",
        root=root,
        public_dir=public,
        answers_path=private / "test.csv",
        leaderboard_paths=(),
        time_limit_s=60.0,
        split="train",
        description=f"# Synthetic {kind} task\nPredict the target from four numeric features and a region.",
        n_rows=n,
        n_features=5 + extra_numeric,
        classes=classes,
    )


@pytest.fixture(scope="session")
def tasks(tmp_path_factory) -> list[Task]:
    root = tmp_path_factory.mktemp("tasks")
    return [make_task(root / "bin", "binary"), make_task(root / "reg", "regression", seed=1)]


@pytest.fixture(scope="session")
def tiny():
    from wmrl.models.backbone import tiny_backbone

    return tiny_backbone(seed=0)


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    """One intra-op thread: on a shared 2-core machine more threads oversubscribe and crawl."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def task_factory():
    """:func:`make_task` as a fixture (test modules cannot import conftest)."""
    return make_task

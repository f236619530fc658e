"""The answer-copy scan finds a task's test rows planted in csv, csv.gz and arff.gz form, and does not
flag a file of unrelated numbers. Scans only a temporary folder (roots=[...]), so each test takes
well under a second."""
from __future__ import annotations

import gzip

from pathlib import Path

import numpy as np
import pandas as pd
import pytest


from conftest import make_tiny_task

from wmrl.execution.leakscan import scan_file, fingerprint, scan_tasks


@pytest.fixture()
def task(tmp_path):
    return make_tiny_task(tmp_path / "task", seed=3, n_train=60, n_test=80)


def _plant(folder: Path, task) -> list[Path]:
    test = pd.read_csv(task.test_path)
    full = pd.read_csv(task.train_path).drop(columns="y")
    rows = pd.concat([full, test]).sample(frac=1.0, random_state=0)
    folder.mkdir()
    csv = folder / "table.csv"
    rows.to_csv(csv, index=False)
    with gzip.open(folder / "table.csv.gz", "wt") as f:
        rows.assign(extra="x").to_csv(f, index=False)
    arff = ["@relation t", "@attribute x1 numeric", "@attribute x2 numeric", "@data"]
    arff += [f"{a:.6f},{b}" for a, b in zip(rows["x1"], rows["x2"])]  # other formatting, no ids
    with gzip.open(folder / "table.arff.gz", "wt") as f:
        f.write("\n".join(arff) + "\n")
    return [csv, folder / "table.csv.gz", folder / "table.arff.gz"]


def test_planted_copies_are_found_in_every_form(task, tmp_path):
    planted = _plant(tmp_path / "site", task)
    found = scan_tasks([task], roots=[str(tmp_path / "site")], masked=[], cache=False)
    assert sorted(c.path for c in found) == sorted(str(p) for p in planted)
    for c in found:
        assert c.task_id == task.id and c.rows == c.n_test == 80 and c.share == 1.0
        assert "holds 80 of the 80 test rows" in c.message()


def test_unrelated_numbers_are_not_a_copy(task, tmp_path):
    rng = np.random.default_rng(1)
    f = tmp_path / "noise.csv"
    pd.DataFrame(rng.normal(size=(2000, 3)).round(4), columns=["x1", "x2", "x3"]).to_csv(f, index=False)
    assert scan_file(str(f), [fingerprint(task)]) == {}
    assert scan_tasks([task], roots=[str(tmp_path)], masked=[str(tmp_path / "task")], cache=False) == []


def test_masked_paths_are_not_scanned(task, tmp_path):
    _plant(tmp_path / "site", task)
    assert scan_tasks([task], roots=[str(tmp_path / "site")], masked=[str(tmp_path / "site")], cache=False) == []


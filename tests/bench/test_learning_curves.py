"""The learning-curve table of docs/benchmark.md is what ``studies/benchmark/learning_curves.py`` computes from the
committed ``metrics.jsonl`` files, and its block means are the means of those files' values."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

STUDIES = Path(__file__).resolve().parents[2] / "studies" / "benchmark"
BENCH = STUDIES / "cpu-small-rerun"


def _module():
    spec = importlib.util.spec_from_file_location("learning_curves", STUDIES / "learning_curves.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(("bench", "methods"), [
    ("cpu-small-rerun", ["grpo", "wmrl", "wmrl-no-recall", "wm"]),
    ("cpu-small-fine", ["grpo", "wmrl", "wmrl-no-recall", "wm"]),
    ("cpu-small-neighbours", ["wmrl-no-recall"]),
    ("cpu-small-neighbours-own", ["wmrl-no-recall", "wmrl"]),
])
def test_the_committed_table_is_recomputed_from_the_committed_runs(bench, methods):
    lc = _module()
    committed = (STUDIES / bench / "learning_curves.md").read_text(encoding="utf-8")
    assert lc.table(STUDIES / bench, methods, 10) in committed


def test_a_block_mean_is_the_mean_over_its_steps_and_seeds():
    lc = _module()
    rows = dict(lc.block_means(BENCH, "wmrl-no-recall", 10))
    vals = [json.loads(line)["policy_distinct_programs"]
            for p in sorted((BENCH / "wmrl-no-recall").glob("seed*/metrics.jsonl"))
            for line in p.read_text(encoding="utf-8").splitlines() if 31 <= json.loads(line)["step"] <= 40]
    assert len(vals) == 40  # 4 seeds x 10 steps
    mean, n = rows["31-40"][3]
    assert n == 40 and mean == pytest.approx(np.mean(vals))
    assert rows["1-10"][1] == (0.0, 40)  # no recall: no world-model sample was answered by an execution
    assert all(cells[1] is None for _, cells in lc.block_means(BENCH, "grpo", 10))  # GRPO: no world-model samples


def test_a_method_without_runs_is_a_clear_error():
    with pytest.raises(FileNotFoundError, match="no seed"):
        _module().block_means(BENCH, "no-such-method", 10)

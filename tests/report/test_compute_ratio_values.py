"""The compute ratios of the bench table, checked against values computed by hand (not only their range)."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from wmrl.report.bench_page import bench_table
from wmrl.report.bench_stats import aggregate


def _row(method: str, seed: int, compute: float, corpus: float, train: float) -> dict:
    return {"method": method, "seed": seed, "heldout_percentile": 0.5, "heldout_valid_rate": 1.0,
            "train_percentile": train, "initial_train_percentile": 0.4, "train_executions": 10,
            "train_sandbox_cpu_s": 1.0, "train_compute_cpu_s": compute, "total_cpu_s": compute + 1.0,
            "wall_s": 10.0, "corpus_cpu_s": corpus}


def test_compute_ratios_equal_the_hand_computed_values():
    results = pd.DataFrame([_row("grpo", 0, 100.0, 0.0, 0.9), _row("grpo", 1, 300.0, 0.0, 0.7),
                            _row("wmrl", 0, 20.0, 50.0, 0.8), _row("wmrl", 1, 30.0, 50.0, 0.8)])
    rows = {r.method: r for r in aggregate(results)}
    # grpo: mean 200 CPU-s; wmrl: mean 25 CPU-s, + the 50 CPU-s corpus charged in full
    assert rows["wmrl"].compute_ratio == pytest.approx(25.0 / 200.0)  # 0.125
    assert rows["wmrl"].compute_ratio_corpus == pytest.approx(75.0 / 200.0)  # 0.375
    assert rows["grpo"].compute_ratio == pytest.approx(1.0)
    # paired train difference: seed 0 0.8 - 0.9 = -0.1, seed 1 0.8 - 0.7 = +0.1: mean 0, SE 0.1
    assert rows["wmrl"].train_paired.mean == pytest.approx(0.0, abs=1e-12)
    assert rows["wmrl"].train_paired.se == pytest.approx(math.sqrt(0.02 / 2))
    table = bench_table(list(rows.values())).to_frame().set_index("method")
    assert table.loc["wmrl", "compute vs grpo"] == "0.12x (8.0x less)"  # 0.125 formats as 0.12 (half to even)
    assert table.loc["wmrl", "compute vs grpo, corpus charged"] == "0.38x (2.7x less)"


def test_the_ratio_against_cached_grpo_equals_the_hand_computed_value():
    """The cached reference: GRPO's training compute less the sandbox CPU of its repeats (mean over seeds)."""
    rows = [_row("grpo", 0, 100.0, 0.0, 0.9), _row("grpo", 1, 300.0, 0.0, 0.7),
            _row("wmrl", 0, 20.0, 50.0, 0.8), _row("wmrl", 1, 30.0, 50.0, 0.8)]
    for r, rep in zip(rows, (40.0, 60.0, 0.0, 2.0)):
        r["train_repeat_sandbox_cpu_s"] = rep
    got = {r.method: r for r in aggregate(pd.DataFrame(rows))}
    # cached grpo: 200 - 50 = 150 CPU-s; wmrl with its corpus charged: 75 CPU-s
    assert got["wmrl"].compute_ratio_cached == pytest.approx(75.0 / 150.0)
    assert got["grpo"].compute_ratio_cached == pytest.approx(200.0 / 150.0)
    table = bench_table(list(got.values())).to_frame().set_index("method")
    assert table.loc["wmrl", "compute vs cached grpo, corpus charged"] == "0.50x (2.0x less)"
    # one GRPO run without its execution log: no cached reference, and no column
    rows[1]["train_repeat_sandbox_cpu_s"] = math.nan
    got = {r.method: r for r in aggregate(pd.DataFrame(rows))}
    assert got["wmrl"].compute_ratio_cached is None
    assert "compute vs cached grpo, corpus charged" not in bench_table(list(got.values())).to_frame()

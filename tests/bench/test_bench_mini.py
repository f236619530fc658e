"""CI miniature of `wmrl bench`: two methods (grpo, wmrl), one seed, two steps, the tiny model, two small
real tasks, through the real trainer and the CLI. Checks the table's columns and that its numbers are
plausible."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pandas as pd
import pytest
from typer.testing import CliRunner

from wmrl.cli import app
from wmrl.training import bench

pytestmark = pytest.mark.slow

EXPECTED_COLUMNS = [
    "method", "seeds", "held-out percentile", "Δ vs grpo (paired)", "valid rate", "real executions",
    "sandbox CPU-h", "train compute CPU-h", "total CPU-h", "wall h", "compute vs grpo",
]


@pytest.fixture(scope="module")
def mini_bench():
    from _real_runs import mini_bench as build

    return build()


def test_table_columns_and_numbers(mini_bench):
    out, output = mini_bench
    table = pd.read_csv(out / "table.csv")
    assert list(table.columns) == EXPECTED_COLUMNS
    assert list(table["method"]) == ["grpo", "wmrl"]
    res = pd.read_csv(out / "results.csv").set_index("method")
    for m in ("grpo", "wmrl"):
        assert 0.0 <= res.loc[m, "heldout_percentile"] <= 1.0
        assert 0.0 <= res.loc[m, "heldout_valid_rate"] <= 1.0
        assert res.loc[m, "train_compute_cpu_s"] > 0 and res.loc[m, "wall_s"] > 0
        assert res.loc[m, "steps"] == 2
    # grpo executes every group (2 steps x 2 tasks x 2 samples); wmrl only its anchors (+ warm-up)
    assert res.loc["grpo", "train_executions"] == 8
    assert 0 < res.loc["wmrl", "train_executions"] < res.loc["grpo", "train_executions"]
    rows = {r.method: r for r in bench.aggregate(bench.collect(out))}
    assert rows["grpo"].compute_ratio == pytest.approx(1.0)
    assert rows["wmrl"].compute_ratio > 0
    # the world model's quality on wmrl's anchors; grpo has no world model
    assert res.loc["grpo", "wm_anchor_pairs"] == 0 and pd.isna(res.loc["grpo", "wm_spearman"])
    assert res.loc["wmrl", "wm_anchor_pairs"] > 0 and 0.0 <= res.loc["wmrl", "alpha_mean"] <= 1.0
    md = (out / "bench.md").read_text()
    assert "wmrl bench" in md and "--preset" in md and "Machine." in md and "tiny random backbone" in md
    assert "Standard errors" in md and "World model on the training anchors" in md
    assert (out / "bench.html").read_text().count("data:image/png;base64,") >= 1
    assert "held-out percentile" in output


def test_rerun_skips_finished_runs(mini_bench):
    out, _ = mini_bench
    bench_json = out / "bench.json"
    before = {p: p.stat().st_mtime for p in out.glob("*/seed0/summary.json")}
    res = CliRunner().invoke(app, ["bench", "--preset", str(out.parent / "mini.yaml"), "--out", str(out),
                                   "--steps", "2"])
    assert res.exit_code == 0, res.output
    assert "skipped" in res.output or "finished earlier" in res.output
    assert {p: p.stat().st_mtime for p in out.glob("*/seed0/summary.json")} == before
    assert bench_json.is_file()

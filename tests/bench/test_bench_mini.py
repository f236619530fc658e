"""CI miniature of `wmrl bench`: two methods (grpo, wmrl), one seed, two steps, the tiny model, two small
real tasks, through the real trainer and the CLI. Checks the table's columns and that its numbers are
plausible."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from wmrl.cli import app
from wmrl.report.bench_results import collect
from wmrl.report.bench_stats import aggregate

pytestmark = pytest.mark.slow

EXPECTED_COLUMNS = [
    "method", "seeds", "train-task percentile", "train Δ vs initial", "train Δ vs grpo", "held-out percentile",
    "held-out Δ vs grpo (paired)", "valid rate", "real executions", "sandbox CPU-h", "train compute CPU-h",
    "total CPU-h", "wall h", "compute vs grpo", "compute vs grpo, corpus charged",
    "compute vs cached grpo, corpus charged",
]


@pytest.fixture(scope="module")
def mini_bench():
    from tests.support.real_runs import mini_bench as build

    return build()


def test_table_columns_and_numbers(mini_bench):
    out, output = mini_bench
    table = pd.read_csv(out / "table.csv")
    assert list(table.columns) == EXPECTED_COLUMNS
    assert list(table["method"]) == ["grpo", "wmrl", "initial policy (step 0)"]
    res = pd.read_csv(out / "results.csv").set_index("method")
    for m in ("grpo", "wmrl"):
        assert 0.0 <= res.loc[m, "heldout_percentile"] <= 1.0
        assert 0.0 <= res.loc[m, "heldout_valid_rate"] <= 1.0
        assert res.loc[m, "train_compute_cpu_s"] > 0 and res.loc[m, "wall_s"] > 0
        assert res.loc[m, "steps"] == 2
    # grpo executes every group (2 steps x 2 tasks x 2 samples); wmrl only its anchors: its world model
    # fits on the bench's shared corpus (2 tasks x 2 programs, executed once, its cost recorded once)
    assert res.loc["grpo", "train_executions"] == 8
    assert 0 < res.loc["wmrl", "train_executions"] < res.loc["grpo", "train_executions"]
    corpus = json.loads((out / "corpus" / "corpus.json").read_text())
    assert corpus["executions"] == 4 and corpus["compute_cpu_s"] > 0
    assert res.loc["grpo", "corpus_cpu_s"] == 0
    assert res.loc["wmrl", "corpus_cpu_s"] == pytest.approx(corpus["compute_cpu_s"])
    assert "Shared warm-up corpus" in (out / "bench.md").read_text()
    rows = {r.method: r for r in aggregate(collect(out))}
    assert rows["grpo"].compute_ratio == pytest.approx(1.0)
    assert rows["wmrl"].compute_ratio > 0
    assert rows["wmrl"].compute_ratio_corpus > rows["wmrl"].compute_ratio
    # the train tasks are evaluated at step 0 and at the end: paired gains exist per method
    # (the step-0 evaluation runs once per seed, in the grpo run: every method of a seed starts there)
    assert 0.0 <= res.loc["grpo", "initial_train_percentile"] <= 1.0
    assert rows["grpo"].train_gain.n == 1 and rows["wmrl"].train_gain.n == 1 and rows["wmrl"].train_paired.n == 1
    # committed artifacts name no absolute paths of the machine that wrote them
    meta = json.loads((out / "bench.json").read_text())
    assert all(not r["run_dir"].startswith("/") for r in meta["runs"])
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


def test_where_each_run_converged(mini_bench):
    """The real runs' final evaluations, logs and world model (refitted, in the last checkpoint) give one
    convergence row per (run, train task), the same in convergence.json, convergence.csv and bench.md."""
    out, _ = mini_bench
    docs = {m: json.loads((out / m / "seed0" / "convergence.json").read_text()) for m in ("grpo", "wmrl")}
    assert not docs["grpo"]["world_model"]["uses"]
    wm = docs["wmrl"]["world_model"]
    assert wm["loaded"] and wm["source"].startswith("checkpoints/step_") and wm["source"].endswith("/world_model")
    # every candidate of the train tasks (and no other task's) scored once, in one batch
    assert docs["wmrl"]["n_scored"] >= sum(r["n_candidates"] for r in docs["wmrl"]["tasks"]) > 0
    csv = pd.read_csv(out / "convergence.csv")
    for m, d in docs.items():
        assert len(d["tasks"]) == 2 and d["eval_step"] == 2 and sum(d["counts"].values()) == 2
        assert list(csv[csv["method"] == m]["verdict"]) == [r["verdict"] for r in d["tasks"]]
        for r in d["tasks"]:
            assert r["verdict"] in ("best", "wm-led", "other", "n/a")
            assert r["best_true"] + 1e-9 >= r["modal_true"]
            assert (r["modal_rank"] is not None) == (m == "wmrl")
    md = (out / "bench.md").read_text()
    assert "**Where each run converged.**" in md and "**Where the runs converged.**" in md

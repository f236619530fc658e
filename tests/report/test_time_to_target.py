"""Time-to-target of a bench, computed by hand on a small bench folder: the targets, the first evaluation at or
above them, the corpus charged to world-model runs, the compute-matched level, and the page's outputs."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from wmrl.report import time_to_target as TT


def _run(out: Path, method: str, seed: int, evals: dict[int, float], cpu_per_step: float, exec_per_step: int,
         steps: int = 4) -> None:
    rd = out / method / f"seed{seed}"
    rd.mkdir(parents=True)
    (rd / "config.yaml").write_text(f"method: {method}\n")
    (rd / "summary.json").write_text("{}")
    # 10 CPU-s spent before step 1 (set-up), then cpu_per_step a step
    lines = [{"step": s, "cum_compute_cpu_s": 10.0 + cpu_per_step * s, "step_cpu_s": cpu_per_step / 2,
              "exec_sandbox_cpu_s": cpu_per_step / 2, "cum_exec_count": exec_per_step * s} for s in range(1, steps + 1)]
    (rd / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (rd / "eval.jsonl").write_text("".join(json.dumps({"step": s, "split": "train", "mean_percentile": p}) + "\n"
                                           for s, p in evals.items())
                                   + json.dumps({"step": steps, "split": "heldout", "mean_percentile": 0.0}) + "\n")


@pytest.fixture()
def bench(tmp_path):
    out = tmp_path / "bench"
    (out / "corpus").mkdir(parents=True)
    (out / "corpus" / "corpus.json").write_text(json.dumps({"compute_cpu_s": 36.0, "executions": 8}))
    # grpo: 16 executions and 100 CPU-s a step; final 0.8 and 0.9 -> target 0.85; initial 0.5 -> gain90 0.815
    _run(out, "grpo", 0, {0: 0.5, 2: 0.7, 4: 0.8}, 100.0, 16)
    _run(out, "grpo", 1, {0: 0.5, 2: 0.86, 4: 0.9}, 100.0, 16)
    # wmrl: 2 executions and 20 CPU-s a step (+ the corpus: 36 CPU-s, 8 executions)
    _run(out, "wmrl", 0, {2: 0.82, 4: 0.86}, 20.0, 2)   # its step 0 comes from grpo seed 0's evaluation
    _run(out, "wmrl", 1, {0: 0.5, 2: 0.6, 4: 0.7}, 20.0, 2)
    return out


def test_curves_charge_the_corpus_to_world_model_runs_only(bench):
    curves = {(c.method, c.seed): c for c in TT.train_curves(bench)}
    g, w = curves[("grpo", 0)], curves[("wmrl", 0)]
    assert g.steps.tolist() == [0, 2, 4] and g.compute_cpu_s.tolist() == [10.0, 210.0, 410.0]
    assert g.executions.tolist() == [0, 32, 64]
    assert w.steps.tolist() == [0, 2, 4] and w.percentile.tolist() == [0.5, 0.82, 0.86]
    assert w.compute_cpu_s.tolist() == [46.0, 86.0, 126.0] and w.executions.tolist() == [8, 12, 16]
    assert (w.final_compute_cpu_s, w.final_executions) == (126.0, 16)
    assert TT.targets(list(curves.values())) == pytest.approx({"final": 0.85, "gain90": 0.5 + 0.9 * 0.35})


def test_time_to_target_and_same_compute_by_hand(bench):
    f = TT.time_to_target_frame(TT.train_curves(bench)).set_index(["method", "target"])
    g, w = f.loc[("grpo", "final")], f.loc[("wmrl", "final")]
    # grpo reaches 0.85 only at seed 1, step 2 (210 CPU-s, 32 executions); wmrl only at seed 0, step 4
    assert (g["reached"], g["step_mean"], g["executions_mean"]) == (1, 2, 32)
    assert g["compute_cpu_h_mean"] == pytest.approx(210 / 3600)
    assert (w["reached"], w["step_mean"], w["executions_mean"]) == (1, 4, 16)
    assert w["compute_vs_reference"] == pytest.approx(126 / 210)
    # gain90 = 0.815: grpo seed 1 at step 2, seed 0 never; wmrl seed 0 at step 2 (0.82), seed 1 never
    w90 = f.loc[("wmrl", "gain90")]
    assert (w90["reached"], w90["seeds"], w90["step_mean"]) == (1, 2, 2)
    # same compute: wmrl spent 126 CPU-s; grpo seed 0 at 126 CPU-s: 0.5 + (0.7 - 0.5) * 116 / 200 = 0.616;
    # seed 1: 0.5 + 0.36 * 116 / 200 = 0.7088. Paired: 0.86 - 0.616, 0.70 - 0.7088
    assert w["reference_at_same_compute"] == pytest.approx((0.616 + 0.7088) / 2)
    assert w["matched_diff_mean"] == pytest.approx(((0.86 - 0.616) + (0.70 - 0.7088)) / 2)
    assert w["matched_seeds"] == 2
    assert g["matched_diff_mean"] == pytest.approx(0.0)  # grpo against itself at its own final compute


def test_a_level_outside_the_reference_curve_is_not_extrapolated(bench):
    c = {(c.method, c.seed): c for c in TT.train_curves(bench)}[("grpo", 0)]
    assert TT.level_at(c, 5.0) is None and TT.level_at(c, 500.0) is None
    assert TT.level_at(c, 310.0) == pytest.approx(0.75)
    assert TT.first_reach(c, 0.95) is None


def test_the_bench_page_shows_time_to_target_only_with_evaluations_along_the_run(bench, tmp_path):
    frame, paths = TT.write_time_to_target(bench)
    assert set(paths) == {"csv", "plot"} and paths["plot"].stat().st_size > 0
    assert len(pd.read_csv(paths["csv"])) == len(frame) == 4
    table = TT.time_to_target_table(frame).to_frame().set_index(["method", "target"])
    assert table.loc[("wmrl", "grpo final (0.850)"), "compute vs grpo"] == "0.60x"
    assert table.loc[("wmrl", "grpo final (0.850)"), "reached"] == "1 of 2"
    # evaluated only at the start and the end: nothing to read, nothing written
    flat = tmp_path / "flat"
    _run(flat, "grpo", 0, {0: 0.5, 4: 0.8}, 100.0, 16)
    frame, paths = TT.write_time_to_target(flat)
    assert frame.empty and paths == {} and not (flat / "time_to_target.csv").exists()

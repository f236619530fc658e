"""End to end with the real parts: the tiny random model, the grammar scaffold, two small built-in tasks
executed for real in the sandbox. Every method trains a few steps; a run killed with SIGKILL resumes
from its saved step with its saved calibrator state."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from wmrl.training.config import ConfigError, load_config
from wmrl.runs.rundir import RunDir, read_jsonl
from wmrl.core.recipe import CALIBRATION_GRID as CAL_GRID
from wmrl.training.console import print_summary
from wmrl.training.run import resume_training, run_training

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny.yaml"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fitted_wm(small_suite, tmp_path_factory):
    """One wmrl run that fits its world model on a real warm-up corpus; later runs reuse that model."""
    run = tmp_path_factory.mktemp("runs") / "wmrl-fit"
    cfg = load_config(TINY, [f"tasks.root={small_suite}", f"run_dir={run}", "optim.steps=2"])
    summary = run_training(cfg)
    return run, summary


def _check_run(run: Path, method: str, steps: int, evaluated: bool = True) -> dict:
    rd = RunDir(run)
    m = read_jsonl(rd.metrics)
    assert [r["step"] for r in m] == list(range(1, steps + 1))
    led = json.loads(rd.ledger.read_text())
    from wmrl.execution.log import ExecutionLog

    recs = ExecutionLog(rd.executions).records()
    anchors = [r for r in recs if r["trajectory"] and r["trajectory"].stream == "anchor"]
    assert len(anchors) == led["executions"]["anchor"]["count"] == sum(r["exec_count"] for r in m)
    assert all(r["cpu_s"] >= 0 and r["program_sha256"] for r in anchors)
    ev = read_jsonl(rd.eval)
    if evaluated:
        assert ev and ev[-1]["step"] == steps and ev[-1]["n_samples"] > 0
        assert ev[-1]["valid_rate"] is not None
    summary = json.loads(rd.summary.read_text())
    assert summary["status"] == "completed" and summary["method"] == method
    return {"metrics": m, "ledger": led, "anchors": anchors, "records": recs}


def test_wmrl_fits_world_model_on_warmup_and_trains(fitted_wm):
    run, summary = fitted_wm
    out = _check_run(run, "wmrl", 2)
    led = out["ledger"]
    assert led["executions"]["warmup"]["count"] == 4  # 2 tasks x 2 samples, executed for real
    assert led["phases"]["warmup"]["wall_s"] > 0 and led["phases"]["wm_fit"]["cpu_s"] > 0
    assert (run / "world_model" / "world_model.json").is_file()
    assert len(out["anchors"]) >= 2  # anchor_fraction 0.5 of 2 groups x 2 steps, 2 samples per group
    m = out["metrics"]
    assert all(r["reward_wm_mean"] is not None for r in m)
    assert sum(r["n_anchor_groups"] for r in m) == 2
    assert len(read_jsonl(run / "calibration.jsonl")) == 2
    assert summary.final_eval["train"]["n_samples"] == 2
    # `wmrl eval RUN_DIR --checkpoint 1 --tasks ...` on a saved checkpoint
    from wmrl.training.evaluate_cli import evaluate_run

    recs = evaluate_run(run, checkpoint=1, task_ids=["aer-houseprices"], samples_per_task=1)
    assert [(r["split"], r["checkpoint"], r["step"], r["n_samples"]) for r in recs] == [("custom", "step_000001", 1, 1)]
    assert read_jsonl(run / "eval_cli.jsonl")[-1]["checkpoint"] == "step_000001"


@pytest.mark.parametrize("method, extra", [("grpo", []), ("wm", []), ("wmrl-ppi", [])])
def test_each_method_runs(small_suite, fitted_wm, tmp_path, method, extra):
    wm_dir = fitted_wm[0] / "world_model"
    run = tmp_path / method
    cfg = load_config(TINY, [f"tasks.root={small_suite}", f"run_dir={run}", f"method={method}", "optim.steps=2",
                             f"world_model.path={wm_dir}", f"eval.at_end={method == 'grpo'}", *extra])
    run_training(cfg)
    out = _check_run(run, method, 2, evaluated=method == "grpo")
    m = out["metrics"]
    if method == "grpo":
        assert all(r["n_anchor_groups"] == 2 and r["alpha"] == 1.0 for r in m)
        assert len(out["anchors"]) == 8 and out["ledger"]["executions"]["warmup"]["count"] == 0
        assert out["ledger"]["executions"]["eval"]["count"] == 2
    elif method == "wm":
        assert all(r["n_anchor_groups"] == 0 and r["alpha"] == 0.0 for r in m) and not out["anchors"]
    else:
        assert sum(r["n_anchor_groups"] for r in m) == 2
        assert any(r["fusion_mode"] for r in m)


def test_sigkill_then_resume_continues_from_saved_step(small_suite, fitted_wm, tmp_path):
    wm_dir = fitted_wm[0] / "world_model"
    run = tmp_path / "killed"
    env = dict(os.environ)
    cmd = [sys.executable, "-m", "wmrl.cli", "train", "--config", str(TINY), "--set", f"tasks.root={small_suite}",
           "--set", f"run_dir={run}", "--set", "optim.steps=3", "--set", f"world_model.path={wm_dir}",
           "--set", "eval.at_end=false", "--no-progress"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    rd = RunDir(run)
    deadline = time.time() + 240
    try:
        while time.time() < deadline:
            latest = rd.latest_checkpoint() if rd.checkpoints.is_dir() else None
            if latest is not None and latest.name >= "step_000001":
                break
            if proc.poll() is not None:
                pytest.fail(f"training exited early ({proc.returncode}): {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.2)
        else:
            pytest.fail("no checkpoint at step 1 within 240 s")
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    latest = rd.latest_checkpoint()
    saved = json.loads((latest / "trainer_state.json").read_text())
    k = saved["step"]
    assert 1 <= k < 3
    resume_training(run)
    m = read_jsonl(rd.metrics)
    assert [r["step"] for r in m] == [1, 2, 3]  # nothing lost before k, nothing counted twice
    assert f"resumed from {latest.name} (step {k})" in rd.log.read_text()
    # the first resumed step was calibrated with the calibrator state saved at step k
    from wmrl.core.calibration import IsotonicCalibrator

    cal = IsotonicCalibrator.from_state_dict(saved["recipe"]["calibrator"])
    rec = next(r for r in read_jsonl(rd.calibration) if r["step"] == k + 1)
    assert rec["n_window"] == cal.n_anchors
    assert np.allclose(rec["map_y"], cal.transform(CAL_GRID))
    led = json.loads(rd.ledger.read_text())
    assert led["steps"] == 3 and led["groups"]["total"] == 6


def test_wmrl_eval_reproduces_the_trainers_evaluations_and_rebuilds_the_initial_policy(small_suite, tmp_path):
    """`wmrl eval --checkpoint initial --train-tasks` is the policy before training (step 0, rebuilt from the
    config after its checkpoint was pruned) and `--checkpoint latest` the final one: both reproduce, sample for
    sample, the evaluations the trainer made at those steps (same policy, same sampling seed)."""
    from wmrl.training.evaluate_cli import evaluate_run

    run = tmp_path / "grpo"
    cfg = load_config(TINY, [f"tasks.root={small_suite}", f"run_dir={run}", "method=grpo", "optim.steps=2",
                             "optim.lr=0.05", "keep_checkpoints=1", "eval.at_start=true",
                             "tasks.train=[aer-houseprices]", "tasks.heldout=[vcdextra-titanicp]"])
    summary = run_training(cfg)
    assert not (run / "checkpoints" / "step_000000").exists()  # pruned: only the final checkpoint is kept
    trainer_evals = {(r["step"], r["split"]): r for r in read_jsonl(RunDir(run).eval)}
    # the summary holds the step-0 baseline beside the final evaluation, and prints both
    for split in ("train", "heldout"):
        assert summary.initial_eval[split] == trainer_evals[(0, split)]
        assert summary.final_eval[split] == trainer_evals[(2, split)]
    from io import StringIO

    from rich.console import Console

    buf = StringIO()
    print_summary(summary, Console(file=buf, width=200))
    p0, p1 = trainer_evals[(0, "train")]["mean_percentile"], trainer_evals[(2, "train")]["mean_percentile"]
    text = buf.getvalue()
    assert "train: mean percentile, step 0 -> step 2" in text and f"{p0:.3f} -> {p1:.3f} ({p1 - p0:+.3f})" in text
    # the built-in tasks give a baseline and a gold score, so DSBench's RPG is printed beside the percentile
    r0, r1 = trainer_evals[(0, "train")]["mean_rpg_tasks"], trainer_evals[(2, "train")]["mean_rpg_tasks"]
    assert r0 is not None and r1 is not None and trainer_evals[(2, "train")]["rpg_missing"] == {}
    assert "train: RPG (DSBench), step 0 -> step 2" in text and f"{r0:.3f} -> {r1:.3f} ({r1 - r0:+.3f})" in text
    keys = ("n_samples", "mean_percentile", "mean_rpg_tasks", "valid_rate", "per_task")
    recs = evaluate_run(run, checkpoint="initial", train_tasks=True)  # the train tasks only
    recs += evaluate_run(run, checkpoint="latest")  # held-out, then train (tiny.yaml: eval.train_tasks)
    assert [(r["split"], r["step"]) for r in recs] == [("train", 0), ("heldout", 2), ("train", 2)]
    for r in recs:
        want = trainer_evals[(r["step"], r["split"])]
        assert {k: r[k] for k in keys} == {k: want[k] for k in keys}
    assert [r["checkpoint"] for r in read_jsonl(run / "eval_cli.jsonl")] == ["initial", "step_000002", "step_000002"]
    with pytest.raises(ConfigError, match="not both"):
        evaluate_run(run, task_ids=["aer-houseprices"], train_tasks=True)

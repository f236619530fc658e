"""Where each run of a bench converged (wmrl.bench.convergence) on a tiny bench folder: fake runs with
hand-written execution logs, one real world model (the tiny backbone with a ridge head, fitted to like a
program that is not the best) saved in a checkpoint, one world-model run whose world model is missing.
Checks convergence.json, convergence.csv, the table section and the report against each other."""
from __future__ import annotations

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from tests.support.fake_run import write_fake_run
from wmrl.bench.convergence import diagnose_bench, write_bench_outputs
from wmrl.bench.presets import load_preset
from wmrl.bench.run import run_bench
from wmrl.execution.log import ExecutionLog
from wmrl.execution.types import ExecutionRequest, ExecutionResult, ExecutionStatus, program_hash
from wmrl.report import convergence as C
from wmrl.tasks.spec import Task
from wmrl.training.config import save_config
from wmrl.trajectory import Trajectory

TASKS = ("task-a", "task-b")
LIKED, BEST, MID, LOW = ("make_pipeline(Lasso(alpha=0.001))", "make_pipeline(HistGradientBoostingClassifier())",
                         "make_pipeline(StandardScaler(), LogisticRegression())", "make_pipeline(GaussianNB())")
#: true reward of each program (the same on both tasks, minus 0.05 on task-b)
TRUE = {LIKED: 0.60, BEST: 0.95, MID: 0.80, LOW: 0.30}
STEPS = 3


def prompt(task: str) -> str:
    return f"Task: {task}. Predict the target for every row of test.csv."


def true_reward(task: str, prog: str) -> float:
    return TRUE[prog] - (0.05 if task == "task-b" else 0.0)


def _task(tid: str) -> Task:
    p = Path(f"/nonexistent/{tid}")
    return Task(id=tid, type="binary", metric="roc_auc", lower_is_better=False, target="y", id_column="id",
                root=p, public_dir=p, answers_path=p / "a.csv", leaderboard_paths=(), time_limit_s=10.0,
                split="train", description="fake")


def write_log(path: Path, rows: list[tuple[str, str, str, int, float | None, str | None]]) -> None:
    """rows: (task, completion, stream, step, reward, split)."""
    with ExecutionLog(path) as lg:
        for i, (tid, comp, stream, step, reward, split) in enumerate(rows):
            traj = Trajectory(stream=stream, run=path.parent.name, step=step, group_id=i // 4, sample=i, task_id=tid,
                              prompt=prompt(tid), completion=comp, scaffold="grammar", split=split)
            ok = reward is not None
            lg.append(ExecutionRequest(_task(tid), comp, f"r{i}", trajectory=traj),
                      ExecutionResult(request_id=f"r{i}", task_id=tid,
                                      status=ExecutionStatus.OK if ok else ExecutionStatus.RUNTIME_ERROR,
                                      score=reward, reward=reward, wall_s=0.1, cpu_s=0.1, peak_rss_bytes=1,
                                      stdout="", stderr="", program_sha256=program_hash(comp)))


def final_eval(modal: str, other: str) -> list[tuple]:
    """8 samples per task at the last step: 6 of ``modal``, 2 of ``other``."""
    return [(t, p, "eval", STEPS, true_reward(t, p), "train") for t in TASKS for p in [modal] * 6 + [other] * 2]


def fit_world_model(cfg, liked: str, directory: Path) -> None:
    """A regression world model on the run's own backbone that likes ``liked`` (reward 1) over the rest."""
    from wmrl.training import parts
    from wmrl.world_model.factory import new_world_model

    model, tok = parts.load_policy_backbone(cfg)
    wm = new_world_model("regression", parts.world_model_backbone(model, parts.policy_lora(cfg)), tok, lora=None,
                         max_length=cfg.world_model.max_length)
    recs = [{"status": "ok", "reward": 1.0 if p == liked else 0.1 + 0.2 * k,
             "trajectory": Trajectory(stream="warmup", run="fit", step=-1, group_id=j, sample=k, task_id=t,
                                      prompt=prompt(t), completion=p)}
            for t in TASKS for j in range(3) for k, p in enumerate([LIKED, BEST, MID, LOW])]
    wm.fit(recs, heldout_fraction=0.0, seed=0)
    wm.save(directory)
    (directory / "DONE").write_text("ok\n")


def fake_train(out: Path):
    def train(cfg, resume):
        rd = Path(cfg.run_dir)
        write_fake_run(rd, cfg.method, steps=STEPS, seed=cfg.seed)
        save_config(cfg, rd / "config.yaml")
        anchors = [(t, p, "anchor", s, true_reward(t, p), None) for s in (1, 2) for t in TASKS for p in (MID, LOW)]
        if cfg.method == "grpo":  # grpo found the best program and converged to it
            write_log(rd / "executions.sqlite", anchors + [(t, BEST, "anchor", 3, true_reward(t, BEST), None)
                                                           for t in TASKS] + final_eval(BEST, MID))
        elif cfg.method == "wm":  # its world model likes LIKED, and the policy converged to it
            write_log(rd / "executions.sqlite", final_eval(LIKED, BEST))
            fit_world_model(cfg, BEST, rd / "world_model")  # the initial fit: replaced by the checkpoint's
            ck = rd / "checkpoints" / "step_000003"
            fit_world_model(cfg, LIKED, ck / "world_model")
            from wmrl.core.calibration import IsotonicCalibrator

            cal = IsotonicCalibrator(min_anchors=2)
            cal.update(np.array([0.1, 0.5, 0.9]), np.array([0.2, 0.5, 0.8]), step=1)
            (ck / "trainer_state.json").write_text(json.dumps({"step": STEPS, "world_model_in_checkpoint": True,
                                                               "recipe": {"calibrator": cal.state_dict()}}))
            (rd / "checkpoints" / "latest").write_text("step_000003")
        else:  # wmrl: world model files missing
            write_log(rd / "executions.sqlite", anchors + final_eval(MID, LOW))
    return train


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    root = tmp_path_factory.mktemp("conv")
    p = root / "mini.yaml"
    p.write_text(yaml.safe_dump({"preset": "mini", "description": "test preset", "backbone_note": "tiny", "seeds": 1,
                                 "methods": ["grpo", "wm", "wmrl"],
                                 "config": {"model": {"name": "tiny"}, "optim": {"steps": STEPS}}}))
    out = root / "out"
    # the shared corpus: every program once on each task, one without a reward
    write_log(out / "corpus" / "executions.sqlite", [(t, q, "warmup", -1, true_reward(t, q), None) for t in TASKS
                                                     for q in TRUE] + [("task-a", "crash()", "warmup", -1, None, None)])
    logged: list[str] = []
    paths = run_bench(load_preset(p), out, train_fn=fake_train(out), log=logged.append)
    assert not json.loads((out / "bench.json").read_text())["failures"]
    return out, paths, logged, p


def load(out: Path, method: str) -> dict:
    return json.loads((out / method / "seed0" / "convergence.json").read_text())


def test_convergence_files_and_verdicts(bench):
    out, paths, logged, _ = bench
    assert paths["convergence"] == out / "convergence.csv"
    grpo, wm, wmrl = (load(out, m) for m in ("grpo", "wm", "wmrl"))
    # candidates: 4 programs x 2 tasks with a reward (the crash has none)
    assert grpo["n_candidates"] == wm["n_candidates"] == 8
    for doc in (grpo, wm, wmrl):
        assert [r["task_id"] for r in doc["tasks"]] == list(TASKS) and doc["eval_step"] == STEPS
        for r in doc["tasks"]:
            assert r["best_program"] == BEST and r["best_true"] == pytest.approx(true_reward(r["task_id"], BEST))
            assert r["best_found_in"] == "corpus, grpo seed 0, wm seed 0"  # wm evaluated it too
            assert r["modal_share"] == pytest.approx(0.75) and r["n_samples"] == 8
            assert r["verdict"] == C.verdict(r["modal_true"], r["best_true"], r["modal_program"] == r["best_program"],
                                             r["modal_pred"], r["best_pred"])
            assert sum(doc["counts"].values()) == 2
    # grpo: no world model, converged to the best program
    assert not grpo["world_model"]["uses"] and [r["verdict"] for r in grpo["tasks"]] == ["best", "best"]
    assert all(r["modal_pred"] is None and r["best_rank"] is None for r in grpo["tasks"])
    # wm: the checkpoint's world model (not the initial fit) scored every candidate; it likes LIKED
    assert wm["world_model"] == {"uses": True, "loaded": True, "source": "checkpoints/step_000003/world_model",
                                 "calibrated": True}
    assert wm["n_scored"] == 8 and wm["score_seconds"] >= 0
    for r in wm["tasks"]:
        assert r["modal_program"] == LIKED and r["modal_true"] == pytest.approx(true_reward(r["task_id"], LIKED))
        assert 1 <= r["modal_rank"] <= 4 and 1 <= r["best_rank"] <= 4 and r["modal_pred_calibrated"] is not None
        assert r["wm_favourite_program"] in TRUE
    assert [r["verdict"] for r in wm["tasks"]] == ["wm-led", "wm-led"]
    assert all(r["modal_rank"] == 1 and r["wm_favourite_program"] == LIKED for r in wm["tasks"])
    # wmrl: its world model is missing: a note, no predictions, verdicts from true rewards
    assert not wmrl["world_model"]["loaded"] and any("could not be loaded" in n for n in wmrl["notes"])
    assert [r["verdict"] for r in wmrl["tasks"]] == ["other", "other"]
    assert all(r["modal_pred"] is None for r in wmrl["tasks"])
    assert any("scored 8 programs of 2 tasks in" in m for m in logged)


def test_predictions_are_the_checkpoint_world_models(bench):
    out = bench[0]
    from wmrl.bench.convergence import final_checkpoint, load_final_world_model

    rd = out / "wm" / "seed0"
    wm, src = load_final_world_model(rd, final_checkpoint(rd))
    doc = load(out, "wm")
    for r in doc["tasks"]:
        cands = list(TRUE)
        pred = wm.predict([prompt(r["task_id"])] * len(cands), cands)
        assert r["modal_pred"] == pytest.approx(float(pred[cands.index(r["modal_program"])]), abs=1e-6)
        assert r["best_rank"] == C.rank_of(float(pred[cands.index(BEST)]), pred)


def test_table_csv_and_page(bench):
    out = bench[0]
    csv = pd.read_csv(out / "convergence.csv")
    assert len(csv) == 6 and list(csv.columns[:2]) == ["method", "seed"]
    assert list(csv["verdict"]) == ["best", "best", "wm-led", "wm-led", "other", "other"]
    md = (out / "bench.md").read_text()
    assert "**Where the runs converged.**" in md and "**Where each run converged.**" in md
    assert "grpo — (no world model); wm 2 of 2; wmrl — of 2 (world model not loaded)." in md
    assert "At the best program found (within 0.02): grpo 2 of 2; wm 0 of 2; wmrl 0 of 2." in md
    assert "| wm | 0 | task-a | wm-led | make_pipeline(Lasso(alpha=0.001)) | 0.75 |" in md
    assert "wmrl seed 0: the final world model could not be loaded" in md
    assert "Where each run converged" in (out / "bench.html").read_text()
    from wmrl.report.report import write_report

    html = write_report([out / "wm" / "seed0"], out / "report.html").read_text()
    assert "Where each run converged" in html and "wm-led" in html


def test_recomputed_only_when_the_candidates_or_the_run_change(bench):
    out, *_ , preset = bench
    files = [out / m / "seed0" / "convergence.json" for m in ("grpo", "wm", "wmrl")]
    before = [f.stat().st_mtime_ns for f in files]
    diagnose_bench(out, log=lambda s: None)
    assert [f.stat().st_mtime_ns for f in files] == before
    (out / "grpo" / "seed0" / "summary.json").touch()
    os.utime(out / "grpo" / "seed0" / "summary.json", ns=(before[0] + 10**9, before[0] + 10**9))
    diagnose_bench(out, log=lambda s: None)
    assert files[0].stat().st_mtime_ns != before[0] and files[1].stat().st_mtime_ns == before[1]
    # a new, better program in the corpus: every run is recomputed against it
    write_log(out / "corpus" / "executions.sqlite", [("task-a", "make_pipeline(RandomForestClassifier())", "warmup",
                                                      -1, 0.99, None)])
    from typer.testing import CliRunner

    from wmrl.cli import app

    res = CliRunner().invoke(app, ["bench", "--preset", str(preset), "--out", str(out), "--table-only"])
    assert res.exit_code == 0, res.output
    grpo = load(out, "grpo")
    assert grpo["tasks"][0]["best_program"] == "make_pipeline(RandomForestClassifier())"
    assert grpo["tasks"][0]["verdict"] == "other" and grpo["n_candidates"] == 9
    assert load(out, "wm")["n_scored"] == 9


def test_a_failing_diagnosis_still_writes_the_table(bench, monkeypatch):
    out = bench[0]
    import wmrl.bench.convergence as BC

    def boom(*a, **k):
        raise RuntimeError("broken log")

    monkeypatch.setattr(BC, "diagnose_bench", boom)
    said = []
    paths = write_bench_outputs(out, log=said.append)
    assert paths["markdown"].is_file() and any("not computed (RuntimeError: broken log)" in s for s in said)


def test_unusable_predictions_leave_the_true_rewards(bench, monkeypatch):
    out = bench[0]
    import wmrl.bench.convergence as BC

    class Broken:
        def predict(self, prompts, completions):
            return np.full(len(completions), np.nan)

    monkeypatch.setattr(BC, "load_final_world_model", lambda rd, ck: (Broken(), rd / "world_model"))
    diagnose_bench(out, log=lambda s: None, force=True)
    doc = load(out, "wm")
    assert not doc["world_model"]["loaded"] and any("predictions failed" in n for n in doc["notes"])
    assert all(r["modal_pred"] is None and r["verdict"] in ("best", "other") for r in doc["tasks"])

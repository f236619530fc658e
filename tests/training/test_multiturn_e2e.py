"""Multi-turn episodes end to end: 2-step, K = 2 runs of ``grpo`` and ``wmrl`` on the tiny model and
two real tasks, executed in the sandbox. Checked: the observation tokens are outside the loss; every anchor turn
was executed; the world-model turns executed nothing; the feedback holds no test-set information (re-grading a
logged program against permuted private answers leaves its feedback unchanged)."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from wmrl.step.multiturn import MultiTurnKaggleEnvironment
from wmrl.training.config import ConfigError, load_config
from wmrl.runs.rundir import RunDir, read_jsonl
from wmrl.training.run import run_training

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
OBSERVATION_KEYS = {"turn", "source", "status", "validation_score", "metric", "lower_is_better", "wall_s",
                    "error_tail", "validation_fraction"}

pytestmark = pytest.mark.slow


def _run(small_suite, tmp_path_factory, method: str, captured: list) -> Path:
    run = tmp_path_factory.mktemp("mt") / method
    cfg = load_config(TINY, [f"tasks.root={small_suite}", f"run_dir={run}", f"method={method}", "optim.steps=2",
                             "episode.max_turns=2", "episode.validation_fraction=0.25",
                             f"eval.at_end={method == 'grpo'}"])
    real = MultiTurnKaggleEnvironment.extend

    def spy(env, policy, rollouts, is_anchor, predict, ledger=None):
        ext = real(env, policy, rollouts, is_anchor, predict, ledger)
        captured.append((policy.tokenizer, ext.episodes))
        return ext

    mp = pytest.MonkeyPatch()
    mp.setattr(MultiTurnKaggleEnvironment, "extend", spy)
    try:
        run_training(cfg)
    finally:
        mp.undo()
    return run


@pytest.fixture(scope="module")
def runs(small_suite, tmp_path_factory):
    out = {}
    for method in ("grpo", "wmrl"):
        cap: list = []
        out[method] = (_run(small_suite, tmp_path_factory, method, cap), cap)
    return out


def _anchor_records(run: Path) -> list[dict]:
    from wmrl.execution.log import ExecutionLog

    recs = ExecutionLog(RunDir(run).executions).records()
    return [r for r in recs if r["trajectory"] is not None and r["trajectory"].stream == "anchor"]


@pytest.mark.parametrize("method", ["grpo", "wmrl"])
def test_observation_tokens_are_masked_out_of_the_loss(runs, method):
    run, captured = runs[method]
    assert len(captured) == 2
    n_checked = 0
    for tok, ep in captured:
        assert len(ep.turns) >= 2
        for j, (batch, rows) in enumerate(zip(ep.turns, ep.rows)):
            P = batch.prompt_len
            mask = batch.loss_mask
            assert not mask[:, :P].any()  # nothing of a prompt (task, history, observations) is in the loss
            for r, e in enumerate(rows):
                comp_ids = batch.input_ids[r][batch.completion_mask[r]].tolist()
                assert tok.decode(comp_ids, skip_special_tokens=True).strip() == batch.completions[r].strip()
                if j == 0:
                    continue
                prev = ep.feedback[e][j - 1]
                prompt_text = tok.decode(batch.input_ids[r][:P][batch.attention_mask[r][:P].bool()].tolist())
                assert prev.observation.render() in prompt_text  # the observation is a prompt token, masked
                assert ep.completion(e, j) in prompt_text
                n_checked += 1
    assert n_checked > 0
    m = read_jsonl(RunDir(run).metrics)
    assert all(r["update_rows"] > 0 for r in m)


@pytest.mark.parametrize("method", ["grpo", "wmrl"])
def test_every_anchor_turn_is_executed_and_world_model_turns_execute_nothing(runs, method):
    run, _ = runs[method]
    rd = RunDir(run)
    samples = read_jsonl(rd.samples)
    anchors = _anchor_records(run)
    logged = {(r["trajectory"].step, r["trajectory"].sample, r["trajectory"].extra["turn"]) for r in anchors}
    assert len(logged) == len(anchors)
    wm_turns = 0
    for s in samples:
        assert s["turns"] and s["n_turns"] <= 2
        for t in s["turns"]:
            if s["stream"] == "anchor":
                assert t["executed"] and t["observation"]["source"] == "execution"
            else:
                assert not t["executed"] and t["observation"]["source"] == "world_model"
                wm_turns += 1
    # one execution per anchor (episode, turn) with a program, none for the world-model episodes
    anchor_lines = [s for s in samples if s["stream"] == "anchor"]
    assert len(anchors) == sum(len(s["turns"]) for s in anchor_lines)
    ids = {r["request_id"] for r in anchors}
    for s in anchor_lines:
        for t in s["turns"]:
            assert any(re.fullmatch(rf"s{s['step']}-g{s['group']}-i\d+-t{t['turn']}", i) for i in ids)
    led = json.loads(rd.ledger.read_text())
    assert sum(led["turn_executions"].values()) == led["executions"]["anchor"]["count"] == len(anchors)
    m = read_jsonl(rd.metrics)
    assert sum(r.get("exec_count_turn1", 0) + r.get("exec_count_turn2", 0) for r in m) == len(anchors)
    if method == "grpo":
        assert wm_turns == 0 and all(s["stream"] == "anchor" for s in samples)
        ev = read_jsonl(rd.eval)[-1]
        assert ev["max_turns"] == 2 and len(ev["mean_percentile_turn"]) == 2
    else:
        assert wm_turns > 0
        cal = read_jsonl(rd.calibration)
        assert any(c.get("earlier_turns_true") for c in cal)  # the turn-1 anchor pairs reach the calibrator
        assert any(r["feedback_n_turns"] for r in m)


@pytest.mark.parametrize("method", ["grpo", "wmrl"])
def test_feedback_never_holds_test_set_information(runs, method, small_suite, tmp_path):
    from wmrl.execution.runner import execute
    from wmrl.execution.types import ExecutionRequest
    from wmrl.episodes.observation import observation_from_result
    from wmrl.tasks.loader import load_task
    from wmrl.tasks.validation import validation_view

    run, _ = runs[method]
    samples = read_jsonl(RunDir(run).samples)
    for s in samples:
        for t in s["turns"]:
            assert set(t["observation"]) == OBSERVATION_KEYS  # no score, reward or medal of the test rows
            assert t["observation"]["validation_fraction"] == 0.25  # the configured split, as the view made it
    rec = next(r for r in _anchor_records(run) if r["status"] == "ok")
    task = load_task(Path(small_suite) / rec["task_id"])
    view = validation_view(task, 0.25)
    # the validation rows are training rows: their ids are train.csv ids and none is a test id
    idmap = pd.read_csv(view.validation.idmap_path, dtype=str)
    train = pd.read_csv(task.train_path, dtype=str)
    answers = pd.read_csv(task.answers_path, dtype=str)
    val_orig = set(idmap.loc[idmap["part"] == "val", "original_id"])
    assert val_orig and val_orig <= set(train[task.id_column]) and not val_orig & set(answers[task.id_column])
    # the same program graded against permuted private test answers: the feedback does not change
    perm = answers.copy()
    perm[task.target] = np.random.default_rng(0).permutation(perm[task.target].to_numpy())
    (tmp_path / "private").mkdir()
    perm.to_csv(tmp_path / "private" / "answers.csv", index=False)
    other = validation_view(dataclasses.replace(task, answers_path=tmp_path / "private" / "answers.csv"), 0.25)
    res_a = execute(ExecutionRequest(task=view, program=rec["program"]))
    res_b = execute(ExecutionRequest(task=other, program=rec["program"]))
    obs_a, obs_b = (dataclasses.replace(observation_from_result(r, view, 1), wall_s=None) for r in (res_a, res_b))
    assert obs_a == obs_b and obs_a.validation_score == pytest.approx(rec["validation_score"])
    assert res_a.reward != res_b.reward or res_a.score != res_b.score  # the test grade did see the answers


def test_multiturn_needs_synchronous_anchors():
    with pytest.raises(ConfigError, match="episode.max_turns=2 needs synchronous anchors"):
        load_config(TINY, ["episode.max_turns=2", "wmrl.asynchronous.staleness=2"])


def test_report_and_bench_read_multiturn_runs(runs, tmp_path):
    from wmrl.report.bench_page import multiturn_table
    from wmrl.report.bench_results import collect
    from wmrl.report.report import render_report
    from wmrl.report.runs import load_run, turn_rows

    grpo = load_run(runs["grpo"][0])
    rows = turn_rows(grpo)
    assert [(r["split"], r["K"]) for r in rows] == [("train", 2)]
    assert rows[0]["gain"] == pytest.approx(rows[0]["turn K"] - rows[0]["turn 1"])
    assert "Multi-turn episodes: from turn 1 to turn K" in render_report([grpo])
    out = tmp_path / "bench"
    for method in ("grpo", "wmrl"):
        (out / method).mkdir(parents=True)
        (out / method / "seed0").symlink_to(runs[method][0])
    df = collect(out).set_index("method")
    assert df["max_turns"].tolist() == [2, 2]
    assert df.loc["wmrl", "feedback_turns"] > 0 and 0 <= df.loc["wmrl", "feedback_status_accuracy"] <= 1
    assert df.loc["grpo", "feedback_turns"] is None or np.isnan(df.loc["grpo", "feedback_turns"])
    table = multiturn_table(df.reset_index())
    assert not table.empty and "held-out gain turn 1 -> K" in table.to_markdown()

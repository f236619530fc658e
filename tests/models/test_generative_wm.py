"""The generative world model on the tiny backbone: answer format, expected-value decoding by hand,
fitting, save/load through the factory, bad inputs, the config switch and a trainer run with it."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from wmrl.world_model.generative import (OUTCOME_CUE, QUALITY_BUCKETS, QUALITY_POSITIONS, GenerativeWorldModel,
                                         answer_text, answer_tokens, quality_bucket)
from wmrl.world_model.outcome import LADDERS
from wmrl.models.types import LoraSettings
from wmrl.world_model.factory import load_world_model, new_world_model, saved_world_model_kind
from wmrl.world_model.data import fit_split
from wmrl.world_model.regression import RegressionWorldModel

LORA = LoraSettings(r=4, alpha=8)
COMPS = {  # completion -> reward
    "make_pipeline(StandardScaler(), RandomForestClassifier(n_estimators=200, max_depth=8))": 0.85,
    "make_pipeline(HistGradientBoostingClassifier(max_iter=100))": 0.7,
    "make_pipeline(GaussianNB())": 0.25,
    "make_pipeline(KNeighborsClassifier(n_neighbors=1))": 0.1,
}


def _records(n_groups: int = 8, g: int = 4, seed: int = 0, failing: bool = False) -> list[dict]:
    """Execution-log-style rows: ``n_groups`` groups of ``g`` over 2 prompts; with ``failing`` the last family
    crashes (reward 0)."""
    rng = np.random.default_rng(seed)
    out = []
    for grp in range(n_groups):
        for _ in range(g):
            c = list(COMPS)[rng.integers(len(COMPS))]
            crash = failing and c == list(COMPS)[3]
            out.append({"status": "runtime_error" if crash else "ok", "reward": 0.0 if crash else COMPS[c],
                        "meta": {"prompt": f"Task: task-{grp % 2}. Predict churn.", "completion": c, "group_id": grp,
                                 "task_id": f"task-{grp % 2}", "step": 0}})
    return out


def _write_log(path, tasks, n_groups: int = 8, g: int = 4):
    """An execution log of :func:`_records` rows (group i on ``tasks[i % len(tasks)]``), as a warm-up corpus."""
    from wmrl.execution.log import ExecutionLog
    from wmrl.execution.types import ExecutionRequest, ExecutionResult, ExecutionStatus

    log = ExecutionLog(path)
    for i, rec in enumerate(_records(n_groups=n_groups, g=g)):
        task = tasks[rec["meta"]["group_id"] % len(tasks)]
        req = ExecutionRequest(task=task, program="print(1)", request_id=f"w{i}",
                               meta={**rec["meta"], "task_id": task.id, "stream": "warmup"})
        log.append(req, ExecutionResult(request_id=req.request_id, task_id=task.id, status=ExecutionStatus.OK,
                                        score=0.5, reward=rec["reward"], wall_s=1.0, cpu_s=1.0, peak_rss_bytes=0,
                                        stdout="", stderr="", program_sha256="x"))
    log.close()
    return path


def _wm(seed: int = 0, randomise: bool = True, **kw) -> GenerativeWorldModel:
    """A generative world model on a fresh tiny backbone; ``randomise`` gives its adapter non-zero weights
    (peft initialises LoRA B to 0, i.e. the identity)."""
    from wmrl.models.backbone import tiny_backbone

    model, tok = tiny_backbone(seed=seed)
    wm = GenerativeWorldModel(model, tok, lora=LORA, **kw)
    if randomise:
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in wm.trainable_parameters():
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
    return wm


PROMPTS = ["Task: a. Predict y."] * 3 + ["Task: b. Predict z."] * 2 + ["Task: c."]
COMPLETIONS = [list(COMPS)[0], list(COMPS)[2], "x", list(COMPS)[1], "", list(COMPS)[3]]


def test_answer_format_and_buckets(tiny):
    _, tok = tiny
    t = answer_tokens(tok)
    assert answer_text("valid", "high") == '{"status": "valid", "quality": "high"}'
    assert answer_text("runtime_error") == '{"status": "runtime_error"}'
    assert tok.decode(t.status_prefix) == OUTCOME_CUE + '{"status": "'
    assert [tok.decode([i]) for i in t.status_ids] == ["runtime", "no", "valid"]  # SmolLM2's first tokens
    assert [tok.decode([i]) for i in t.quality_ids] == list(QUALITY_BUCKETS)
    assert tok.decode(t.quality_prefix) == 'valid", "quality": "'
    assert tok.decode(t.answers[("valid", "mid")]) == 'valid", "quality": "mid"}'
    assert [quality_bucket(p) for p in (0.0, 0.099, 0.1, 0.29, 0.3, 0.59, 0.6, 1.0)] == [0, 0, 1, 1, 2, 2, 3, 3]
    with pytest.raises(ValueError, match="finite"):
        quality_bucket(float("nan"))
    with pytest.raises(ValueError, match="a valid program has a quality"):
        answer_text("valid")
    with pytest.raises(ValueError, match="writes a status among"):
        answer_text("syntax_error")


def test_a_tokenizer_that_merges_the_status_words_is_refused_by_name(tiny):
    from wmrl.models.backbone import tiny_backbone

    _, tok = tiny

    class SameFirstToken:
        name_or_path = "fake-merging-tokenizer"
        pad_token_id = tok.pad_token_id

        def __call__(self, text, add_special_tokens=False):
            ids = tok(text.replace("no_submission", "runtime_submission"), add_special_tokens=False)["input_ids"]
            return {"input_ids": ids}

        def decode(self, ids):
            return tok.decode(ids)

    with pytest.raises(ValueError, match=r"fake-merging-tokenizer.*three distinct tokens"):
        answer_tokens(SameFirstToken())
    model, _ = tiny_backbone(seed=0)
    with pytest.raises(ValueError, match="fake-merging-tokenizer"):
        GenerativeWorldModel(model, SameFirstToken(), lora=LORA)
    assert not hasattr(model, "peft_config")  # refused before the adapter was attached


def test_predict_outcome_shape_gate_determinism_and_shared_prompts():
    wm = _wm(seed=1)
    out = wm.predict_outcome(PROMPTS, COMPLETIONS)
    assert len(out) == 6 and out.status_probs.shape == (6, 4)
    # "x" compiles (a bare name), "" does not: the gate answers it without the model
    assert out.status[4] == "syntax_error" and out.reward[4] == 0.0 and out.reward_std[4] == 0.0
    assert (out.status_probs[[0, 1, 2, 3, 5], 0] == 0).all()
    assert np.all((out.reward >= 0.0) & (out.reward <= QUALITY_POSITIONS[-1])) and np.ptp(out.reward) > 0
    pred = wm.predict(PROMPTS, COMPLETIONS)
    assert np.array_equal(pred, out.reward) and np.array_equal(pred, wm.predict(PROMPTS, COMPLETIONS))  # no sampling
    # the shared-prompt path (prompt run once, KV cache) equals separate passes
    assert np.allclose(pred, wm.predict(PROMPTS, COMPLETIONS, share_prompts=False), atol=1e-6)
    ps, pq = wm.outcome_distributions(PROMPTS, COMPLETIONS)
    assert ps.shape == (6, 3) and pq.shape == (6, 4) and np.allclose(ps.sum(1), 1) and np.allclose(pq.sum(1), 1)
    assert wm.predict([], []).shape == (0,)


def test_outcome_decoding_by_hand_from_the_logits():
    """P(status) over the three status tokens after the prefix, P(quality | valid) after the valid prefix,
    the expected ladder reward and its std, from the full model's logits on hand-built token ids, for a single
    input (plain path) and for each member of a group (shared-prompt path), under both ladders."""
    wm = _wm(seed=2)
    tok = wm.tokenizer
    t = wm.tokens

    def enc(s):
        return tok(s, add_special_tokens=False)["input_ids"]

    def by_hand(prompt, completion, ladder):
        ids = enc(f"{prompt}\n### Solution\n") + enc(completion) + t.status_prefix
        with torch.no_grad():
            ps = torch.softmax(wm.peft_model(input_ids=torch.tensor([ids])).logits[0, -1][t.status_ids].double(), 0)
            lq = wm.peft_model(input_ids=torch.tensor([ids + t.quality_prefix])).logits[0, -1]
            pq = torch.softmax(lq[t.quality_ids].double(), 0)
        ps, pq = ps.numpy(), pq.numpy()
        lad = LADDERS[ladder]
        vals = np.array([lad.runtime_error, lad.no_submission, *lad.valid_reward(np.array(QUALITY_POSITIONS))])
        p = np.array([ps[0], ps[1], *(ps[2] * pq)])
        mean = float(p @ vals)
        return mean, float(np.sqrt(p @ vals ** 2 - mean ** 2)), ps, pq

    mean, std, ps, pq = by_hand("Task: c.", list(COMPS)[3], "percentile")
    out = wm.predict_outcome(["Task: c."], [list(COMPS)[3]])
    assert out.reward[0] == pytest.approx(mean, abs=1e-6) and out.reward_std[0] == pytest.approx(std, abs=1e-6)
    assert np.allclose(out.status_probs[0], [0.0, *ps], atol=1e-6)
    qs, qq = wm.outcome_distributions(["Task: c."], [list(COMPS)[3]])
    assert np.allclose(qs[0], ps, atol=1e-6) and np.allclose(qq[0], pq, atol=1e-6)
    group = PROMPTS[:3], COMPLETIONS[:3]  # one prompt, completions of different lengths
    assert np.allclose(wm.predict(*group), [by_hand(p, c, "percentile")[0] for p, c in zip(*group)], atol=1e-6)
    wm.ladder = LADDERS["paper"]
    assert np.allclose(wm.predict(*group), [by_hand(p, c, "paper")[0] for p, c in zip(*group)], atol=1e-6)


def test_fit_learns_statuses_and_buckets_and_changes_only_the_adapter():
    from wmrl.models.backbone import tiny_backbone
    from wmrl.models.policy import Policy

    torch.manual_seed(0)
    model, tok = tiny_backbone(seed=0)
    pol = Policy(model, tok, lora=LORA)
    wm = GenerativeWorldModel(model, tok, lora=LORA, batch_size=8)
    assert wm.peft_model is pol.peft_model  # one shared base model
    base = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    policy_before = [p.detach().clone() for p in pol.trainable_parameters()]
    wm_before = [p.detach().clone() for p in wm.trainable_parameters()]
    records = _records(seed=0, failing=True)
    train, _, _ = fit_split(records, 0.25, seed=0)
    args = ([e["prompt"] for e in train], [e["completion"] for e in train], [e["reward"] for e in train],
            [e["status"] for e in train])
    with torch.no_grad():
        loss0 = float(wm.loss(*args))
    assert loss0 < 2.0  # a softmax over 3 or 4 candidates, not the vocabulary
    res = wm.fit(records, epochs=10, lr=1e-2, batch_size=8, heldout_fraction=0.25, seed=0)
    with torch.no_grad():
        loss1 = float(wm.loss(*args))
    assert loss1 < loss0 - 0.3, (loss0, loss1)
    assert res["n_train"] == 24 and res["n_heldout"] == 8 and res["n_judged"] == 24 and res["steps"] == 30
    assert math.isfinite(res["train_loss"]) and res["predictions_per_s"] > 0
    # the learnt outcomes: the crashing family is a runtime error, the good family valid and 'high'
    comps = list(COMPS)
    out = wm.predict_outcome(["Task: task-0. Predict churn."] * 4, comps)
    assert out.status[3] == "runtime_error" and out.status[0] == "valid"
    assert out.reward[0] > out.reward[2] > out.reward[3]
    _, pq = wm.outcome_distributions(["Task: task-0. Predict churn."], [comps[0]])
    assert QUALITY_BUCKETS[int(pq[0].argmax())] == "high"
    # only the world model's adapter changed
    assert all(torch.equal(p, base[n]) for n, p in model.named_parameters() if "lora_" not in n)
    assert all(torch.equal(a, b.detach()) for a, b in zip(policy_before, pol.trainable_parameters()))
    changed = [not torch.equal(a, b.detach()) for a, b in zip(wm_before, wm.trainable_parameters())]
    assert sum(changed) == len(changed)  # every LoRA matrix of the world model moved


def test_save_load_round_trip_through_the_factory(tmp_path):
    from wmrl.models.backbone import tiny_backbone

    wm = _wm(seed=3)
    pred = wm.predict(PROMPTS, COMPLETIONS)
    wm.save(tmp_path / "gen")
    cfg = json.loads((tmp_path / "gen" / "world_model.json").read_text())
    assert cfg["kind"] == "generative" and cfg["answer"]["status_token_ids"] == wm.tokens.status_ids
    assert saved_world_model_kind(tmp_path / "gen") == "generative"
    sd = wm.state_dict()
    assert set(sd) == {"config", "adapter"} and len(sd["adapter"]) > 0

    model2, tok2 = tiny_backbone(seed=3)
    wm2 = load_world_model(tmp_path / "gen", model2, tok2)
    assert type(wm2) is GenerativeWorldModel
    assert np.array_equal(wm2.predict(PROMPTS, COMPLETIONS), pred)
    # instance form (trainer checkpoints): load the saved adapter into an existing world model
    wm3 = _wm(seed=3, randomise=False)
    assert not np.allclose(wm3.predict(PROMPTS, COMPLETIONS), pred)
    assert wm3.load(tmp_path / "gen") is wm3
    assert np.array_equal(wm3.predict(PROMPTS, COMPLETIONS), pred)

    # a regression folder comes back as a regression world model; kinds are never mixed up
    model4, tok4 = tiny_backbone(seed=4)
    RegressionWorldModel(model4, tok4, lora=None).save(tmp_path / "reg")
    assert type(load_world_model(tmp_path / "reg", *tiny_backbone(seed=4))) is RegressionWorldModel
    with pytest.raises(ValueError, match="holds a 'generative' world model"):
        load_world_model(tmp_path / "gen", *tiny_backbone(seed=3), kind="regression")
    with pytest.raises(ValueError, match="'generative'"):
        RegressionWorldModel.load(tmp_path / "gen", *tiny_backbone(seed=3))
    with pytest.raises(ValueError, match="'regression'"):
        wm3.load(tmp_path / "reg")
    with pytest.raises(FileNotFoundError, match="world_model.json"):
        load_world_model(tmp_path / "nothing", *tiny_backbone(seed=3))


def test_bad_inputs_are_clear_errors():
    from wmrl.models.backbone import tiny_backbone

    wm = _wm(seed=5, randomise=False)
    with pytest.raises(TypeError, match="list of strings"):
        wm.predict("Task: a.", "x")
    with pytest.raises(TypeError, match=r"completions\[1\]"):
        wm.predict(["a", "b"], ["x", 3])
    with pytest.raises(ValueError, match="2 prompts but 1 completions"):
        wm.predict(["a", "b"], ["x"])
    with pytest.raises(ValueError, match="finite"):
        wm.loss(["a"], ["x"], [float("nan")], ["valid"])
    with pytest.raises(ValueError, match="1 prompts but 2 rewards"):
        wm.loss(["a"], ["x"], [0.1, 0.2], ["valid"])
    with pytest.raises(ValueError, match="not one the judge writes"):
        wm.loss(["a"], ["x"], [0.1], ["syntax_error"])
    with pytest.raises(ValueError, match="unknown reward ladder"):
        GenerativeWorldModel(*tiny_backbone(seed=5), lora=LORA, ladder="steep")
    with pytest.raises(ValueError, match="warmup"):
        wm.fit([{"status": "infra_error", "reward": None, "meta": {}}])
    with pytest.raises(ValueError, match="lr > 0"):
        wm.fit(_records(), lr=0.0)
    model, tok = tiny_backbone(seed=5)
    with pytest.raises(ValueError, match="LoRA adapter"):
        GenerativeWorldModel(model, tok, lora=None)
    with pytest.raises(ValueError, match="max_length"):
        GenerativeWorldModel(model, tok, lora=LORA, max_length=6)
    with pytest.raises(ValueError, match="unknown world model kind 'classifier'.*registered: regression, generative"):
        new_world_model("classifier", model, tok)


def test_config_selects_the_kind():
    from wmrl.training.config import ConfigError, load_config

    assert load_config(None).world_model.kind == "regression"
    assert load_config(None, ["world_model.kind=generative"]).world_model.kind == "generative"
    with pytest.raises(ConfigError, match="world_model.kind"):
        load_config(None, ["world_model.kind=classifier"])
    with pytest.raises(ConfigError, match="adapter=true"):
        load_config(None, ["world_model.kind=generative", "world_model.adapter=false"])


def test_trainer_runs_with_a_generative_world_model(small_suite, tmp_path):
    """`method: wm` on the tiny config with world_model.kind=generative: the world model is fitted on a
    warm-up corpus read from an execution log (no sandbox needed), saved with its kind, and scores every
    trajectory of 2 steps; a saved generative world model given as world_model.path of the other kind is
    refused before training."""
    from pathlib import Path

    from wmrl.tasks.loader import TaskSuite
    from wmrl.training.config import ConfigError, load_config
    from wmrl.runs.rundir import read_jsonl
    from wmrl.training.run import run_training

    suite = TaskSuite(small_suite)
    corpus = _write_log(tmp_path / "warmup.sqlite", [suite.get("vcdextra-titanicp"), suite.get("aer-houseprices")],
                        n_groups=4, g=2)
    tiny_yaml = Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml"
    common = [f"tasks.root={small_suite}", "method=wm", "optim.steps=2", "eval.at_end=false",
              "world_model.adapter=true", "world_model.fit_epochs=1"]
    run = tmp_path / "run"
    cfg = load_config(tiny_yaml, [*common, f"run_dir={run}", "world_model.kind=generative",
                                  f"world_model.warmup_corpus={corpus}"])
    summary = run_training(cfg)
    assert summary.status == "completed" and summary.steps == 2
    assert json.loads((run / "world_model" / "world_model.json").read_text())["kind"] == "generative"
    fit = json.loads((run / "world_model_fit.json").read_text())
    assert fit["n_train"] == 8 and fit["steps"] == 1 and math.isfinite(fit["train_loss"])
    m = read_jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in m] == [1, 2]
    assert all(0.0 <= r["reward_wm_mean"] <= QUALITY_POSITIONS[-1] and r["n_anchor_groups"] == 0 for r in m)
    led = json.loads((run / "ledger.json").read_text())
    assert led["phases"]["wm_fit"]["wall_s"] > 0 and led["executions"]["anchor"]["count"] == 0

    cfg2 = load_config(tiny_yaml, [*common, f"run_dir={tmp_path / 'run2'}", "world_model.kind=regression",
                                   f"world_model.path={run / 'world_model'}"])
    with pytest.raises(ConfigError, match="world_model.path: .* holds a 'generative' world model"):
        run_training(cfg2)


def test_cli_fit_generative_then_eval(tmp_path, task_factory):
    from typer.testing import CliRunner

    from wmrl.cli import app

    runner = CliRunner()
    logp = _write_log(tmp_path / "ex.sqlite", [task_factory(tmp_path / "task", "binary")])
    out = tmp_path / "wm"
    r = runner.invoke(app, ["wm", "fit", "--kind", "generative", "--log", str(logp), "--out", str(out), "--model",
                            "tiny", "--epochs", "1", "--lr", "3e-3", "--lora-r", "4"])
    assert r.exit_code == 0, r.output
    assert "fitting the generative world model" in r.output and "predictions/s" in r.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["kind"] == "generative" and metrics["n_heldout"] == 8 and metrics["steps"] == 3
    assert saved_world_model_kind(out) == "generative"
    r = runner.invoke(app, ["wm", "eval", "--wm", str(out), "--log", str(logp), "--model", "tiny"])
    assert r.exit_code == 0, r.output
    assert "generative world model: 32 predictions" in r.output and "MAE" in r.output
    r = runner.invoke(app, ["wm", "fit", "--kind", "generative", "--lora-r", "0", "--log", str(logp), "--out",
                            str(tmp_path / "o"), "--model", "tiny"])
    assert r.exit_code != 0 and "--lora-r" in r.output
    r = runner.invoke(app, ["wm", "fit", "--kind", "classifier", "--log", str(logp), "--out", str(tmp_path / "o"),
                            "--model", "tiny"])
    assert r.exit_code != 0 and "classifier" in r.output

"""The generative world model on the tiny backbone: answer format, expected-value decoding by hand,
fitting, save/load through the factory, bad inputs, the config switch and a trainer run with it."""
from __future__ import annotations

import json
import math
from typing import get_args, get_type_hints

import numpy as np
import pytest
import torch

from wmrl.world_model.generative import SCORE_CUE, GenerativeWorldModel, digit_token_ids, score_digits, score_text
from wmrl.models.types import LoraSettings
from wmrl.world_model.factory import WORLD_MODEL_KINDS, load_world_model, new_world_model, saved_world_model_kind
from wmrl.world_model.data import fit_split
from wmrl.world_model.regression import RegressionWorldModel

LORA = LoraSettings(r=4, alpha=8)
COMPS = {  # completion -> reward
    "make_pipeline(StandardScaler(), RandomForestClassifier(n_estimators=200, max_depth=8))": 0.85,
    "make_pipeline(HistGradientBoostingClassifier(max_iter=100))": 0.7,
    "make_pipeline(GaussianNB())": 0.25,
    "make_pipeline(KNeighborsClassifier(n_neighbors=1))": 0.1,
}


def _records(n_groups: int = 8, g: int = 4, reward: float | None = None, seed: int = 0) -> list[dict]:
    """Execution-log-style rows: ``n_groups`` groups of ``g`` over 2 prompts (constant ``reward`` if given)."""
    rng = np.random.default_rng(seed)
    out = []
    for grp in range(n_groups):
        for _ in range(g):
            c = list(COMPS)[rng.integers(len(COMPS))]
            out.append({"status": "ok", "reward": COMPS[c] if reward is None else reward,
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


def test_digit_tokens_and_answer_format(tiny):
    _, tok = tiny
    ids = digit_token_ids(tok)
    assert ids == [32, 33, 34, 35, 36, 37, 38, 39, 40, 41]  # SmolLM2: '0'..'9' are consecutive single tokens
    assert [tok.decode([i]) for i in ids] == list("0123456789")
    assert tok("0.73", add_special_tokens=False)["input_ids"] == [32, 30, 39, 35]  # '0' '.' '7' '3'
    assert score_digits(0.734) == (7, 3) and score_digits(0.46) == (4, 6) and score_digits(0.05) == (0, 5)
    assert score_digits(1.0) == (9, 9) and score_digits(-0.2) == (0, 0)  # clipped to [0, 0.99]
    assert score_text(0.999) == "0.99" and score_text(0.3) == "0.30"
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite"):
            score_digits(bad)


def test_a_tokenizer_that_splits_a_digit_is_refused_by_name(tiny):
    from wmrl.models.backbone import tiny_backbone

    _, tok = tiny

    class SplitsSeven:
        name_or_path = "fake-splitting-tokenizer"
        pad_token_id = tok.pad_token_id

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [39, 39] if text == "7" else tok(text, add_special_tokens=False)["input_ids"]}

        def decode(self, ids):
            return tok.decode(ids)

    with pytest.raises(ValueError, match=r"fake-splitting-tokenizer.*digit '7'.*2 tokens"):
        digit_token_ids(SplitsSeven())
    model, _ = tiny_backbone(seed=0)
    with pytest.raises(ValueError, match="fake-splitting-tokenizer"):
        GenerativeWorldModel(model, SplitsSeven(), lora=LORA)
    assert not hasattr(model, "peft_config")  # refused before the adapter was attached


def test_predict_shape_dtype_range_and_determinism():
    wm = _wm(seed=1)
    pred = wm.predict(PROMPTS, COMPLETIONS)
    assert pred.shape == (6,) and pred.dtype == np.float64
    assert np.all((pred >= 0.0) & (pred <= 0.99)) and np.ptp(pred) > 0  # distinct inputs, distinct predictions
    assert np.array_equal(pred, wm.predict(PROMPTS, COMPLETIONS))  # no sampling: bit-identical
    # the shared-prompt path (prompt run once, KV cache) equals separate passes
    assert np.allclose(pred, wm.predict(PROMPTS, COMPLETIONS, share_prompts=False), atol=1e-6)
    p1, p2 = wm.digit_distributions(PROMPTS, COMPLETIONS)
    assert p1.shape == p2.shape == (6, 10) and np.allclose(p1.sum(1), 1) and np.allclose(p2.sum(1), 1)
    assert np.allclose(pred, 0.1 * p1 @ np.arange(10) + 0.01 * p2 @ np.arange(10))
    assert wm.predict([], []).shape == (0,)


def test_expected_value_decoding_by_hand_from_the_logits():
    """r_hat = 0.1 E[d1] + 0.01 E[d2 | argmax d1], from the full model's logits on hand-built token ids,
    for a single input (plain path) and for each member of a group (shared-prompt path)."""
    wm = _wm(seed=2)
    tok = wm.tokenizer
    assert SCORE_CUE == "\n### Score\n"
    digits = [tok(str(d), add_special_tokens=False)["input_ids"][0] for d in range(10)]

    def enc(s):
        return tok(s, add_special_tokens=False)["input_ids"]

    def by_hand(prompt, completion):
        ids = enc(f"{prompt}\n### Solution\n") + enc(completion) + enc("\n### Score\n") + enc("0.")
        with torch.no_grad():
            logits = wm.peft_model(input_ids=torch.tensor([ids])).logits[0, -1]  # adapter 'world_model' active
            p1 = torch.softmax(logits[digits].double(), 0)
            d1 = int(p1.argmax())
            logits2 = wm.peft_model(input_ids=torch.tensor([ids + [digits[d1]]])).logits[0, -1]
            p2 = torch.softmax(logits2[digits].double(), 0)
        k = torch.arange(10, dtype=torch.float64)
        return float(0.1 * (p1 * k).sum() + 0.01 * (p2 * k).sum()), p1.numpy(), p2.numpy()

    expected, p1, p2 = by_hand("Task: c.", list(COMPS)[3])
    assert wm.predict(["Task: c."], [list(COMPS)[3]])[0] == pytest.approx(expected, abs=1e-6)
    q1, q2 = wm.digit_distributions(["Task: c."], [list(COMPS)[3]])
    assert np.allclose(q1[0], p1, atol=1e-6) and np.allclose(q2[0], p2, atol=1e-6)
    group = PROMPTS[:3], COMPLETIONS[:3]  # one prompt, completions of different lengths
    assert np.allclose(wm.predict(*group), [by_hand(p, c)[0] for p, c in zip(*group)], atol=1e-6)


def test_fit_lowers_the_loss_and_changes_only_the_adapter():
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
    records = _records(reward=0.83)  # every trajectory scored 0.83: the answer to learn is '0.83'
    train, _, _ = fit_split(records, 0.25, seed=0)
    args = ([e["prompt"] for e in train], [e["completion"] for e in train], [e["reward"] for e in train])
    with torch.no_grad():
        loss0 = float(wm.loss(*args))
    assert loss0 == pytest.approx(math.log(len(tok)), abs=0.5)  # untrained tiny model: about uniform
    res = wm.fit(records, epochs=2, lr=3e-3, batch_size=8, heldout_fraction=0.25, seed=0)
    with torch.no_grad():
        loss1 = float(wm.loss(*args))
    assert loss1 < loss0 - 0.5, (loss0, loss1)
    assert res["n_train"] == 24 and res["n_heldout"] == 8 and res["steps"] == 6
    assert math.isfinite(res["train_loss"]) and res["predictions_per_s"] > 0
    assert res["heldout"]["n"] == 8 and len(res["heldout_pred"]) == 8
    # the learnt answer is the most likely one: first decimal 8, then second decimal 3
    p1, p2 = wm.digit_distributions(args[0][:4], args[1][:4])
    assert (p1.argmax(1) == 8).all() and (p2.argmax(1) == 3).all()
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
    assert cfg["kind"] == "generative" and cfg["answer"]["digit_token_ids"] == wm.digit_ids
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
        wm.loss(["a"], ["x"], [float("nan")])
    with pytest.raises(ValueError, match="1 prompts but 2 rewards"):
        wm.loss(["a"], ["x"], [0.1, 0.2])
    with pytest.raises(ValueError, match="warmup"):
        wm.fit([{"status": "infra_error", "reward": None, "meta": {}}])
    with pytest.raises(ValueError, match="lr > 0"):
        wm.fit(_records(), lr=0.0)
    model, tok = tiny_backbone(seed=5)
    with pytest.raises(ValueError, match="LoRA adapter"):
        GenerativeWorldModel(model, tok, lora=None)
    with pytest.raises(ValueError, match="max_length"):
        GenerativeWorldModel(model, tok, lora=LORA, max_length=6)
    with pytest.raises(ValueError, match="known kinds: regression, generative"):
        new_world_model("classifier", model, tok)


def test_config_selects_the_kind():
    from wmrl.training.config import ConfigError, WorldModelConfig, load_config

    assert set(get_args(get_type_hints(WorldModelConfig)["kind"])) == set(WORLD_MODEL_KINDS)
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
    from wmrl.training.rundir import read_jsonl
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
    assert all(0.0 <= r["reward_wm_mean"] <= 0.99 and r["n_anchor_groups"] == 0 for r in m)
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

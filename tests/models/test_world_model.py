"""World model on the tiny backbone: fit, predict, metrics, save/load, shared base model."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from wmrl.models.types import LoraSettings
from wmrl.world_model.data import examples_from_records, split_by_group
from wmrl.world_model.metrics import world_model_metrics
from wmrl.world_model.feature_cache import FeatureCache, trajectory_key
from wmrl.world_model.regression import RegressionWorldModel

_FAMILIES = {
    "make_pipeline(StandardScaler(), RandomForestClassifier(n_estimators=200, max_depth=8, min_samples_leaf=1))": 0.85,
    "make_pipeline(HistGradientBoostingClassifier(max_iter=100, learning_rate=0.1, max_leaf_nodes=31))": 0.7,
    "make_pipeline(GaussianNB())": 0.25,
    "make_pipeline(KNeighborsClassifier(n_neighbors=1, weights='uniform'))": 0.1,
}


def _records(n_groups=12, g=4, seed=0):
    rng = np.random.default_rng(seed)
    comps = list(_FAMILIES)
    recs = []
    for grp in range(n_groups):
        task = f"task-{grp % 3}"
        for _ in range(g):
            c = comps[rng.integers(len(comps))]
            recs.append({
                "status": "ok",
                "reward": float(np.clip(_FAMILIES[c] + rng.normal(scale=0.05), 0, 1)),
                "meta": {"prompt": f"Task: {task}. Predict churn.", "completion": c, "group_id": grp,
                         "task_id": task, "step": 0},
            })
    recs.append({"status": "infra_error", "reward": None, "meta": {"prompt": "x", "completion": "y", "group_id": 99}})
    return recs


def test_metrics_known_values():
    pred = np.array([0.1, 0.2, 0.3, 0.4])
    true = np.array([0.0, 0.3, 0.2, 0.5])
    m = world_model_metrics(pred, true, ["a", "a", "b", "b"])
    assert m["mae"] == pytest.approx(np.mean([0.1, 0.1, 0.1, 0.1]))
    assert m["pairwise_accuracy"] == 1.0 and m["n_pairs"] == 2
    assert m["spearman"] == pytest.approx(0.8)
    assert len(m["bias_by_decile"]) == 4
    m2 = world_model_metrics(pred, true, ["a"] * 4)
    # pairs (0.2,0.3) vs true (0.3,0.2) disagree: 5 of 6 agree
    assert m2["pairwise_accuracy"] == pytest.approx(5 / 6)
    with pytest.raises(ValueError):
        world_model_metrics(pred, true[:3])


def test_examples_skip_infra_errors_and_split_by_group():
    ex, counts = examples_from_records(_records())
    assert counts["skipped_infra"] == 1 and counts["used"] == 48
    tr, he = split_by_group([e["group"] for e in ex], 0.25, seed=0)
    assert not {ex[i]["group"] for i in tr} & {ex[i]["group"] for i in he}
    assert len(he) == 12 and len(tr) == 36


def test_fit_predict_save_load_and_shared_backbone(tiny, tmp_path):
    from wmrl.models.backbone import tiny_backbone
    from wmrl.models.policy import Policy

    model, tok = tiny_backbone(seed=0)
    pol = Policy(model, tok, lora=LoraSettings(r=4, alpha=8))
    n_base = sum(p.numel() for n, p in pol.model.named_parameters() if "lora_" not in n)
    wm = RegressionWorldModel(model, tok, lora=LoraSettings(r=4, alpha=8), batch_size=8)
    # one copy of the base weights: the world model's adapter sits on the policy's peft model
    assert wm.peft_model is pol.peft_model
    assert sum(p.numel() for n, p in pol.model.named_parameters() if "lora_" not in n) == n_base
    policy_before = [p.detach().clone() for p in pol.trainable_parameters()]
    res = wm.fit(_records(), epochs=4, lr=2e-3, batch_size=8, heldout_fraction=0.25, seed=0)
    assert res["n_train"] == 36 and res["n_heldout"] == 12
    assert res["heldout"]["spearman"] > 0.5, res["heldout"]
    assert res["heldout"]["mae"] < 0.2
    # fitting the world model leaves the policy's adapter untouched
    assert all(torch.equal(a, b.detach()) for a, b in zip(policy_before, pol.trainable_parameters()))
    comps = list(_FAMILIES)
    pred = wm.predict(["Task: task-0. Predict churn."] * 4, comps)
    assert pred.dtype == np.float64 and pred.shape == (4,) and ((0 <= pred) & (pred <= 1)).all()
    assert pred[0] > pred[3]
    wm.save(tmp_path / "wm")
    model2, tok2 = tiny_backbone(seed=0)
    wm2 = RegressionWorldModel.load(tmp_path / "wm", model2, tok2)
    assert np.allclose(wm2.predict(["Task: task-0. Predict churn."] * 4, comps), pred, atol=1e-5)
    # instance form (trainer checkpoints): load saved weights into an existing world model
    model3, tok3 = tiny_backbone(seed=0)
    wm3 = RegressionWorldModel(model3, tok3, lora=LoraSettings(r=4, alpha=8), batch_size=8)
    assert wm3.load(tmp_path / "wm") is wm3
    assert np.allclose(wm3.predict(["Task: task-0. Predict churn."] * 4, comps), pred, atol=1e-5)
    sd = wm.state_dict()
    assert set(sd) == {"config", "head", "adapter"} and sd["adapter"]


def test_head_only_variant(tiny):
    from wmrl.models.backbone import tiny_backbone

    model, tok = tiny_backbone(seed=1)
    wm = RegressionWorldModel(model, tok, lora=None)
    res = wm.fit(_records(seed=1), epochs=2, batch_size=8, heldout_fraction=0.25, seed=0)
    assert res["heldout"]["spearman"] > 0.3
    assert not any(p.requires_grad for p in model.parameters())


def test_fit_needs_records(tiny):
    from wmrl.models.backbone import tiny_backbone

    model, tok = tiny_backbone(seed=0)
    wm = RegressionWorldModel(model, tok, lora=None)
    with pytest.raises(ValueError, match="warmup"):
        wm.fit([{"status": "infra_error", "reward": None, "meta": {}}])


def test_collect_warmup_groups_and_meta(tasks):
    """collect_warmup with a fake executor: groups, meta and records, no sandbox needed."""
    from concurrent.futures import Future

    from wmrl.execution.types import ExecutionResult, ExecutionStatus
    from wmrl.models.backbone import tiny_backbone
    from wmrl.models.policy import Policy
    from wmrl.models.corpus import collect_warmup

    class FakeExecutor:
        def __init__(self):
            self.requests = []

        def submit(self, req):
            self.requests.append(req)
            f = Future()
            f.set_result(ExecutionResult(request_id=req.request_id, task_id=req.task.id, status=ExecutionStatus.OK,
                                         score=1.0, reward=0.5, wall_s=2.0, cpu_s=1.5, peak_rss_bytes=0, stdout="",
                                         stderr="", program_sha256="x"))
            return f

    model, tok = tiny_backbone(seed=0)
    ex = FakeExecutor()
    recs, results = collect_warmup(Policy(model, tok), "grammar", tasks, ex, samples_per_task=4, group_size=2,
                                   max_new_tokens=128, tasks_per_batch=1)
    assert len(recs) == len(results) == 8
    assert [r["meta"]["group_id"] for r in recs] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert [r["task_id"] for r in recs] == [tasks[0].id] * 4 + [tasks[1].id] * 4
    assert all(r["meta"]["stream"] == "warmup" and r["meta"]["step"] == -1 for r in recs)
    assert all(req.program == r_prog for req, r_prog in zip(ex.requests, [q.program for q in ex.requests]))
    assert all("def build_model" in q.program for q in ex.requests)
    ex_examples, counts = examples_from_records(recs)
    assert counts["used"] == 8 and len({e["group"] for e in ex_examples}) == 4
    with pytest.raises(ValueError, match="divide"):
        collect_warmup(Policy(*tiny_backbone(seed=0)), "grammar", tasks, ex, samples_per_task=4, group_size=3)


def test_shared_prompt_features_equal_separate_passes(tiny):
    from wmrl.models.backbone import tiny_backbone

    model, tok = tiny_backbone(seed=2)
    wm = RegressionWorldModel(model, tok, lora=LoraSettings(r=4, alpha=8), batch_size=3)
    for p in wm.trainable_parameters():  # a non-trivial adapter and head
        torch.nn.init.normal_(p, std=0.05)
    prompts = ["Task: a. Predict y."] * 4 + ["Task: b. Predict z."] * 2 + ["Task: c."]
    comps = list(_FAMILIES) + ["make_pipeline(GaussianNB())", "make_pipeline(Ridge(alpha=1.0))", "x"]
    wm.feature_cache = FeatureCache(max_bytes=0)  # both passes computed, none recalled
    shared = wm.features(prompts, comps)
    separate = wm.features(prompts, comps, share_prompts=False)
    assert torch.allclose(shared, separate, atol=1e-5)
    assert np.allclose(wm.predict(prompts, comps), np.clip(wm.head(separate).detach().numpy(), 0, 1), atol=1e-5)


def test_fit_on_a_single_training_example_gives_finite_predictions(tiny):
    """One training row (a tiny warm-up): the head's standardisation must not produce NaN."""
    from wmrl.models.backbone import tiny_backbone

    model, tok = tiny_backbone(seed=0)
    wm = RegressionWorldModel(model, tok, lora=None)
    recs = [r for r in _records(n_groups=2, g=1) if r["status"] == "ok"]  # 1 train + 1 held out
    res = wm.fit(recs, epochs=1, batch_size=1, heldout_fraction=0.5, seed=0)
    assert res["n_train"] == 1, res
    pred = wm.predict(["Task: task-0. Predict churn."] * 2, list(_FAMILIES)[:2])
    assert pred.shape == (2,) and np.all(np.isfinite(pred)) and np.all((0 <= pred) & (pred <= 1))


def test_program_tokens_and_hashed_features():
    from wmrl.world_model.program_features import program_features, program_tokens, task_key

    assert program_tokens("make_pipeline(StandardScaler(), Ridge(alpha = 1.0, alpha=1.0))") == [
        "make_pipeline", "StandardScaler", "Ridge", "alpha=1.0"]
    assert task_key("\n  Task: churn\nrest") == "Task: churn" and task_key("") == ""
    p = ["Task: a\nx", "Task: b\nx", "Task: a\ny"]
    c = ["Ridge(alpha=1.0)", "Ridge(alpha=1.0)", "Lasso(alpha=1.0)"]
    X = program_features(p, c, 256)
    assert X.shape == (3, 256) and X.dtype == np.float32 and set(np.unique(X)) <= {0.0, 1.0}
    # same program on another task: the global columns agree, the task columns do not
    assert 0 < (X[0] * X[1]).sum() < X[0].sum()
    assert np.array_equal(program_features(p, c, 256), X)  # MurmurHash: the same in every call and process
    with pytest.raises(ValueError, match=">= 1"):
        program_features(p, c, 0)


def test_program_features_tell_apart_one_choice_and_survive_save_load(tiny, tmp_path):
    """Two programs that differ in one argument, with opposite rewards on two tasks: the head with program
    features ranks them per task; a saved world model loads back with the same predictions."""
    model, tok = tiny
    recs = []
    for grp in range(16):
        task = f"task-{grp % 2}"
        for k in range(4):
            c = f"make_pipeline(Ridge(alpha={'1.0' if k % 2 else '0.01'}))"
            good = (k % 2 == 1) == (task == "task-0")
            recs.append({"status": "ok", "reward": 0.9 if good else 0.2,
                         "meta": {"prompt": f"Task: {task}. Predict y.\nmore", "completion": c, "group_id": grp,
                                  "task_id": task, "step": 0}})
    wm = RegressionWorldModel(model, tok, lora=None, program_features=512)
    wm.fit(recs, heldout_fraction=0.0)
    prompts = ["Task: task-0. Predict y.\nmore"] * 2 + ["Task: task-1. Predict y.\nmore"] * 2
    comps = ["make_pipeline(Ridge(alpha=1.0))", "make_pipeline(Ridge(alpha=0.01))"] * 2
    r = wm.predict(prompts, comps)
    assert r[0] > r[1] + 0.3 and r[3] > r[2] + 0.3
    wm.save(tmp_path / "wm")
    back = RegressionWorldModel.load(tmp_path / "wm", model, tok)
    assert back.program_features == 512 and np.allclose(back.predict(prompts, comps), r)
    with pytest.raises(ValueError, match=">= 0"):
        RegressionWorldModel(model, tok, lora=None, program_features=-1)


def _failing_records(n_groups=16, g=4, seed=0):
    """Programs of three outcomes: one family always crashes, one never writes a submission, two are valid."""
    rng = np.random.default_rng(seed)
    outcomes = {
        "make_pipeline(LogisticRegression(penalty='l1', solver='lbfgs'))": ("runtime_error", 0.0),
        "make_pipeline(NearestCentroid())": ("invalid_submission", 0.0),
        "make_pipeline(StandardScaler(), RandomForestClassifier(n_estimators=200, max_depth=8, min_samples_leaf=1))":
            ("ok", 0.85),
        "make_pipeline(GaussianNB())": ("ok", 0.3),
    }
    comps = list(outcomes)
    recs = []
    for grp in range(n_groups):
        for _ in range(g):
            c = comps[rng.integers(len(comps))]
            status, r = outcomes[c]
            recs.append({"status": status, "reward": r, "meta": {"prompt": "Task: t. Predict churn.", "completion": c,
                                                                  "group_id": grp, "task_id": "t", "step": 0}})
    return recs, outcomes


def test_regression_kind_predicts_status_and_uncertainty_and_keeps_them_on_save(tiny, tmp_path):
    from wmrl.models.backbone import tiny_backbone
    from wmrl.world_model.outcome import STATUS_CLASSES

    model, tok = tiny_backbone(seed=0)
    wm = RegressionWorldModel(model, tok, lora=None)
    comps = ["make_pipeline(LogisticRegression(penalty='l1', solver='lbfgs'))", "make_pipeline(NearestCentroid())",
             "make_pipeline(GaussianNB())", "make_pipeline(GaussianNB("]
    before = wm.predict_outcome(["Task: t. Predict churn."] * 4, comps)
    assert np.allclose(before.status_probs[:3, 1:], 1 / 3) and (before.reward_std == 0).all()  # unfitted: uniform
    recs, outcomes = _failing_records()
    wm.fit(recs, heldout_fraction=0.0, seed=0)
    out = wm.predict_outcome(["Task: t. Predict churn."] * 4, comps)
    assert out.status == ["runtime_error", "no_submission", "valid", "syntax_error"]
    assert out.status_probs[3].tolist() == [1.0, 0.0, 0.0, 0.0] and out.reward[3] == 0.0  # the gate, no model
    assert (out.status_probs[:3, 0] == 0).all()  # past the gate, never a syntax error
    assert (out.reward_std[:3] > 0).all() and out.reward_std[3] == 0
    assert np.array_equal(wm.predict(["Task: t. Predict churn."] * 4, comps), out.reward)
    # a program far from every training row is less certain than one the model has seen many times
    far = wm.predict_outcome(["Task: a table of images. Predict species."], ["make_pipeline(SVC(kernel='poly'))"])
    assert far.reward_std[0] > out.reward_std[2]
    wm.save(tmp_path / "wm")
    model2, tok2 = tiny_backbone(seed=0)
    wm2 = RegressionWorldModel.load(tmp_path / "wm", model2, tok2)
    out2 = wm2.predict_outcome(["Task: t. Predict churn."] * 4, comps)
    assert np.allclose(out2.status_probs, out.status_probs, atol=1e-5)
    assert np.allclose(out2.reward_std, out.reward_std, atol=1e-5)
    assert len(STATUS_CLASSES) == out.status_probs.shape[1]


def test_one_seen_status_gets_add_one_smoothing(tiny):
    from wmrl.models.backbone import tiny_backbone

    model, tok = tiny_backbone(seed=0)
    wm = RegressionWorldModel(model, tok, lora=None)
    recs = _records()
    wm.fit(recs, heldout_fraction=0.0, seed=0)  # every row valid
    out = wm.predict_outcome(["Task: task-0. Predict churn."], [list(_FAMILIES)[0]])
    n = sum(1 for r in recs if r["status"] == "ok")
    assert out.status_probs[0, 3] == pytest.approx((n + 1) / (n + 3), abs=1e-5)
    assert out.status_probs[0, 1] == pytest.approx(1 / (n + 3), abs=1e-5)


def _count_backbone_rows(wm, monkeypatch):
    """How many trajectories go through the backbone (both the shared-prompt and the separate passes)."""
    seen = []
    shared, separate = wm._shared_prompt_features, wm._features

    def count_shared(p_ids, comp_ids):
        seen.append(len(comp_ids))
        return shared(p_ids, comp_ids)

    def count_separate(enc):
        seen.append(int(enc["input_ids"].shape[0]))
        return separate(enc)

    monkeypatch.setattr(wm, "_shared_prompt_features", count_shared)
    monkeypatch.setattr(wm, "_features", count_separate)
    return seen


def test_feature_cache_runs_only_new_trajectories_through_a_frozen_backbone(tiny, monkeypatch):
    from wmrl.models.backbone import tiny_backbone
    from wmrl.models.policy import Policy

    model, tok = tiny_backbone(seed=3)
    pol = Policy(model, tok, lora=LoraSettings(r=4, alpha=8))
    wm = RegressionWorldModel(model, tok, lora=None, batch_size=4)  # frozen base, shared with the LoRA policy
    seen = _count_backbone_rows(wm, monkeypatch)
    prompts = ["Task: a. Predict y."] * 4 + ["Task: b."] * 2
    comps = list(_FAMILIES) + ["make_pipeline(GaussianNB())", "x"]
    first = wm.features(prompts, comps)
    assert sum(seen) == 6 and len(wm.feature_cache) == 6
    seen.clear()
    again = wm.features(prompts[::-1] + ["Task: c."], comps[::-1] + ["y"])  # 6 seen (in another order), 1 new
    assert sum(seen) == 1
    assert torch.equal(again[:6], first.flip(0))
    fresh = RegressionWorldModel(model, tok, lora=None, batch_size=4)
    fresh.feature_cache = FeatureCache(max_bytes=0)
    assert torch.allclose(again, fresh.features(prompts[::-1] + ["Task: c."], comps[::-1] + ["y"]), atol=1e-5)
    # the policy's adapter trains: the world model's features (adapters disabled) do not change, nor does the cache
    with torch.no_grad():
        for p in pol.trainable_parameters():
            p.add_(0.1)
    seen.clear()
    wm.features(prompts, comps)
    assert sum(seen) == 0
    # the base weights change, in place or behind the version counter (.data): everything is computed again
    with torch.no_grad():
        next(iter(model.parameters())).mul_(1.01)
    seen.clear()
    changed = wm.features(prompts, comps)
    assert sum(seen) == 6 and not torch.allclose(changed, first)
    some = [p for n, p in model.named_parameters() if "lora_" not in n and p.dim() == 2][-1]
    some.data.mul_(0.5)
    seen.clear()
    wm.features(prompts, comps)
    assert sum(seen) == 6


def test_feature_cache_follows_the_world_models_own_adapter(tiny, monkeypatch):
    from wmrl.models.backbone import tiny_backbone

    model, tok = tiny_backbone(seed=4)
    wm = RegressionWorldModel(model, tok, lora=LoraSettings(r=4, alpha=8), batch_size=4)
    seen = _count_backbone_rows(wm, monkeypatch)
    prompts, comps = ["Task: a."] * 2, list(_FAMILIES)[:2]
    wm.features(prompts, comps)
    wm.features(prompts, comps)
    assert sum(seen) == 2
    with torch.no_grad():
        for p in wm.trainable_parameters():  # the adapter (and head) trained
            p.add_(0.05)
    wm.features(prompts, comps)
    assert sum(seen) == 4


def test_feature_cache_is_bounded_in_bytes_least_recently_used_first():
    cache = FeatureCache(max_bytes=3 * 8 * 4)  # three rows of 8 float32
    keys = [trajectory_key("p", str(i)) for i in range(4)]
    cache.validate(("weights", 1))
    cache.put(keys[:3], torch.arange(24, dtype=torch.float32).view(3, 8))
    cache.get([keys[0]])  # key 0 used: key 1 is now the least recently used
    cache.put([keys[3]], torch.ones(1, 8))
    rows, missing = cache.get(keys)
    assert missing == [1] and len(cache) == 3 and torch.equal(rows[0], torch.arange(8, dtype=torch.float32))
    cache.validate(("weights", 2))
    assert len(cache) == 0 and cache.get(keys)[1] == [0, 1, 2, 3]
    assert trajectory_key("ab", "c") != trajectory_key("a", "bc")
    with pytest.raises(ValueError, match="max_bytes"):
        FeatureCache(max_bytes=-1)


def test_residual_neighbours_pull_executed_programs_toward_their_rewards_and_survive_save_load(tiny, tmp_path):
    """Rewards drawn at random per (task, program): nothing a head on backbone features can generalise, so its
    penalty shrinks it toward the mean; the residual of the executed rows of the same prompt moves each program's
    prediction toward its measured reward, and a saved world model predicts the same after loading."""
    model, tok = tiny
    rng = np.random.default_rng(0)
    comps = [f"make_pipeline(Ridge(alpha={a}))" for a in ("0.01", "0.1", "1.0", "10.0", "100.0")]
    truth = {(t, c): float(rng.uniform(0.1, 0.9)) for t in range(4) for c in comps}
    recs = [{"status": "ok", "reward": truth[(grp % 4, c)],
             "meta": {"prompt": f"Task: task-{grp % 4}. Predict y.\nmore", "completion": c, "group_id": grp,
                      "task_id": f"task-{grp % 4}", "step": 0}}
            for grp in range(12) for c in comps]
    prompts = [f"Task: task-{t}. Predict y.\nmore" for t, _ in truth]
    y = np.array(list(truth.values()))
    plain = RegressionWorldModel(model, tok, lora=None)
    plain.fit(recs, heldout_fraction=0.0)
    wm = RegressionWorldModel(model, tok, lora=None, residual_neighbours=8)
    wm.fit(recs, heldout_fraction=0.0)
    r0, r = plain.predict(prompts, [c for _, c in truth]), wm.predict(prompts, [c for _, c in truth])
    assert np.abs(r - y).mean() < 0.7 * np.abs(r0 - y).mean()
    wm.save(tmp_path / "wm")
    back = RegressionWorldModel.load(tmp_path / "wm", model, tok)
    assert back.neighbours is not None and back.neighbours.k == 8 and back.neighbours.own_program
    assert np.allclose(back.predict(prompts, [c for _, c in truth]), r)
    # without the program's own rows, only the other programs of its task correct it: less close to the truth
    blind = RegressionWorldModel(model, tok, lora=None, residual_neighbours=8, neighbours_own_program=False)
    blind.fit(recs, heldout_fraction=0.0)
    rb = blind.predict(prompts, [c for _, c in truth])
    assert np.abs(r - y).mean() < np.abs(rb - y).mean()
    blind.save(tmp_path / "blind")
    assert not RegressionWorldModel.load(tmp_path / "blind", model, tok).neighbours.own_program
    with pytest.raises(ValueError, match=">= 0"):
        RegressionWorldModel(model, tok, lora=None, residual_neighbours=-1)

"""The registered step recipes (wmrl.core.recipe): every method on the same arrays, the fusion branches'
weights and advantages, PPI++'s merged rows against the duplicated batch, the anchor window and the state, and
the registries of recipes and of their axes (wmrl.core.axes)."""
from __future__ import annotations


import numpy as np
import pytest
import torch

from wmrl.core.recipe import (
    BASELINE,
    RECIPES,
    WMRL,
    AnchorWindow,
    Recipe,
    RecipeSettings,
    StepInputs,
    get_recipe,
    recipe_names,
    recipes_with,
    register_recipe,
)

LOOSE = RecipeSettings(fusion_min_pairs=2, alpha_floor=0.0, alpha_ceiling=1.0, calibrator_min_anchors=2)


def _inputs(step=1, seed=0, m=4, g=4, anchors=(0,), all_anchor=False, no_anchor=False):
    rng = np.random.default_rng([seed, step])
    gid = np.repeat(np.arange(m), g)
    anc = np.ones(m * g, bool) if all_anchor else (np.zeros(m * g, bool) if no_anchor else np.isin(gid, anchors))
    r = rng.random(m * g)
    r_hat = np.clip(r + 0.2 * rng.standard_normal(m * g), 0, 1)
    return StepInputs(step=step, group_ids=gid, is_anchor=anc, valid=np.ones(m * g, bool),
                      reward_true=np.where(anc, r, np.nan), reward_wm=r_hat, reward_wm_repeat=np.clip(
                          r_hat + 0.05 * rng.standard_normal(m * g), 0, 1))


def _for(name, step=1, seed=0):
    rec = get_recipe(name)
    return _inputs(step, seed, anchors=(0, 1), all_anchor=rec.anchors == "all", no_anchor=rec.anchors == "none")


def test_registry_lists_every_method_and_each_runs_on_the_same_arrays():
    names = recipe_names()
    assert names == ["grpo", "wm", "wmrl", "wmrl-raw", "wmrl-no-recall", "wmrl-no-debias", "wmrl-no-denoise",
                     "wmrl-ppi", "wmrl-cv", "wmrl-bias-aware",
                     "anchor-only", "wmrl-flat"]
    outs = {}
    for name in names:
        rec = get_recipe(name)
        st = rec.init_state(LOOSE)
        for t in (1, 2, 3):
            out = rec.step(_for(name, t), st, LOOSE)
        outs[name] = out
        assert out.weights.shape == out.advantages.shape == (16,)
        assert np.all(np.isfinite(out.advantages)) and np.all(out.weights >= 0)
        # PPI++: 1/n_A on each anchor and lambda/n_W on each world-model sample sum to 1 + lambda; cv: 1/n each
        lam = out.stats["ppi_lambda"] if rec.fusion == "ppi" else None
        assert out.weights.sum() == pytest.approx(1.0 + (lam or 0.0))
        assert (st.calibrator is not None) == rec.debias
    assert outs["grpo"].stats["alpha"] == 1.0 and outs["wm"].stats["alpha"] == 0.0
    # the same anchor arrays: methods with both streams differ only in what they do with them
    assert not np.allclose(outs["wmrl"].weights, outs["wmrl-no-denoise"].weights)
    assert not np.allclose(outs["wmrl"].reward_used, outs["wmrl-no-debias"].reward_used)
    assert outs["wmrl-ppi"].stats["fusion_mode"] == "ppi"
    assert outs["wmrl-bias-aware"].stats["fusion_mode"] == "bias_aware"
    # anchor-only leaves the world-model samples out of the loss
    ao = outs["anchor-only"]
    x = _for("anchor-only", 3)
    assert np.all(ao.weights[~x.is_anchor] == 0) and np.all(ao.advantages[~x.is_anchor] == 0)
    assert np.allclose(ao.weights[x.is_anchor], 1 / 8)


def test_every_caller_looks_methods_up_in_the_registry():
    from wmrl.sim.engine import METHODS as SIM
    from wmrl.bench.presets import METHODS as BENCH
    from wmrl.training.config import load_config

    assert list(SIM) == list(BENCH) == recipe_names()
    for name in recipe_names():
        assert load_config(None, [f"method={name}"]).method == name
    with pytest.raises(KeyError, match=r"unknown recipe 'wmrl_ba'.*; registered: grpo, wm, wmrl,"):
        get_recipe("wmrl_ba")


def test_ivw_weights_sum_to_one_and_split_alpha():
    x = _inputs()
    out = get_recipe("wmrl").step(x, get_recipe("wmrl").init_state(LOOSE), LOOSE)
    a = out.stats["alpha"]
    assert out.weights[x.is_anchor].sum() == pytest.approx(a) and out.stats["fusion_mode"] == "ivw"
    assert out.stats["var_wm"] >= out.stats["var_anchor"]
    # the first step has no calibration yet (identity): anchors train on r, the rest on r_hat
    assert np.allclose(out.reward_used[x.is_anchor], x.reward_true[x.is_anchor])
    assert np.allclose(out.reward_used[~x.is_anchor], x.reward_wm[~x.is_anchor])


def test_equal_weights_and_clear_errors():
    x = _inputs()
    out = get_recipe("wmrl-no-denoise").step(x, get_recipe("wmrl-no-denoise").init_state(), RecipeSettings())
    assert np.allclose(out.weights, 1 / 16) and out.stats["alpha"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="executes every group"):
        get_recipe("grpo").step(x, get_recipe("grpo").init_state())
    with pytest.raises(ValueError, match="has no anchors"):
        get_recipe("wm").step(x, get_recipe("wm").init_state())
    bad = StepInputs(1, x.group_ids, x.is_anchor, x.valid, np.full(16, np.nan), x.reward_wm)
    with pytest.raises(ValueError, match="finite true reward"):
        get_recipe("wmrl").step(bad, get_recipe("wmrl").init_state())
    with pytest.raises(ValueError, match="reward_wm must have shape"):
        StepInputs(1, x.group_ids, x.is_anchor, x.valid, x.reward_true, x.reward_wm[:3])


def test_debiasing_uses_only_earlier_steps_anchors():
    rec = get_recipe("wmrl")
    st = rec.init_state(LOOSE)
    rec.step(_inputs(1), st, LOOSE)
    x2 = _inputs(2)
    before = st.calibrator.transform(x2.reward_wm)
    out = rec.step(x2, st, LOOSE)
    assert np.allclose(out.reward_wm_calibrated, before)  # mapped with the fit of step 1 only
    assert st.calibrator.n_anchors == 8 and out.calibration["n_window"] == 4
    assert len(st.window) == 8 and st.window.steps.tolist() == [1] * 4 + [2] * 4


def test_ppi_merged_rows_give_the_duplicated_batch_gradient():
    """One row per anchor with A_r - lambda*A_f equals the three-set PPI++ batch at ratio 1."""
    from wmrl.core.advantages import group_advantages
    from wmrl.core.fusion import ppi_samples
    from wmrl.core.losses import grpo_loss

    x = _inputs(seed=3, anchors=(0, 1))
    out = get_recipe("wmrl-ppi").step(x, get_recipe("wmrl-ppi").init_state(LOOSE), LOOSE)
    lam = out.stats["ppi_lambda"]
    assert 0 < lam <= 1
    anc, gid, rt, rw = x.is_anchor, x.group_ids, x.reward_true, out.reward_wm_calibrated
    B, T = 16, 3
    torch.manual_seed(0)
    base = torch.randn(B, T, dtype=torch.float64)
    mask = torch.ones(B, T, dtype=torch.bool)

    def grad_of(rows, adv, w):
        lp = base.clone().requires_grad_(True)
        sub = lp[rows]
        loss, _ = grpo_loss(sub, sub.detach(), torch.as_tensor(adv), mask[rows], sample_weights=torch.as_tensor(w),
                            aggregation="seq_mean")
        loss.backward()
        return lp.grad

    g_merged = grad_of(torch.arange(B), out.advantages, out.weights)
    ps = ppi_samples(rt[anc], rw[anc], rw[~anc], lam)
    a_idx, w_idx = np.flatnonzero(anc), np.flatnonzero(~anc)
    rows, advs, ws = [], [], []
    for s, idx in ((0, a_idx), (1, w_idx), (2, a_idx)):
        sel = ps.stream == s
        src = idx[ps.source_index[sel]]
        rows += src.tolist()
        advs += group_advantages(ps.rewards[sel], gid[src]).tolist()
        ws += ps.weights[sel].tolist()
    g_dup = grad_of(torch.as_tensor(rows), np.asarray(advs), np.asarray(ws))
    assert torch.allclose(g_merged, g_dup, atol=1e-12)


def test_invalid_samples_get_no_weight():
    x = _inputs()
    valid, rt = x.valid.copy(), x.reward_true.copy()
    valid[[0, 5]] = False
    rt[0] = np.nan
    x = StepInputs(1, x.group_ids, x.is_anchor, valid, rt, x.reward_wm)
    out = get_recipe("wmrl").step(x, get_recipe("wmrl").init_state(LOOSE), LOOSE)
    assert out.weights[0] == 0 and out.weights[5] == 0 and out.advantages[0] == 0
    assert np.isnan(out.reward_used[0]) and out.weights.sum() == pytest.approx(1.0)
    assert out.stats["n_anchor_samples"] == 3 and out.stats["n_wm_samples"] == 11


def test_anchor_window_trims_clusters_and_round_trips():
    w = AnchorWindow(max_pairs=5)
    w.add(1, np.array([0, 0, 1]), np.r_[.1, .2, .3], np.r_[.1, .1, .1])
    w.add(2, np.array([0, 0, 1]), np.r_[.4, .5, .6], np.r_[.2, .2, .2], repeat=np.r_[.25, .2, .2])
    assert len(w) == 5 and w.steps.tolist() == [1, 1, 2, 2, 2]
    assert w.clusters().tolist() == [0, 1, 2, 2, 3]  # (step, group) pairs, lexicographic
    assert w.noise_var() == pytest.approx(0.5 * (0.05 ** 2) / 3)
    w2 = AnchorWindow(max_pairs=5)
    w2.load_state_dict(w.state_dict())
    assert w2.state_dict() == w.state_dict()
    ws = AnchorWindow(max_steps=1)
    ws.add(1, np.array([0]), np.r_[.1], np.r_[.1])
    ws.add(3, np.array([0, 1]), np.r_[.1, .2], np.r_[.1, .2])
    assert ws.steps.tolist() == [3, 3]
    legacy = AnchorWindow()
    legacy.load_state_dict({"true": [.1, .2], "cal": [.3, .4], "group": [100001, 200000]})
    assert legacy.steps.tolist() == [1, 2] and legacy.groups.tolist() == [1, 0]
    with pytest.raises(ValueError, match="not an anchor window state"):
        legacy.load_state_dict({"x": []})


def test_state_round_trip_continues_identically():
    for name in ("wmrl", "wmrl-ppi", "wmrl-bias-aware"):
        rec = get_recipe(name)
        a, b = rec.init_state(LOOSE), rec.init_state(LOOSE)
        for t in (1, 2):
            rec.step(_inputs(t), a, LOOSE)
        b.load_state_dict(a.state_dict())
        oa, ob = rec.step(_inputs(3), a, LOOSE), rec.step(_inputs(3), b, LOOSE)
        assert np.array_equal(oa.weights, ob.weights) and np.array_equal(oa.advantages, ob.advantages)
    assert set(RECIPES) == set(recipe_names())


def test_axes_are_registries_and_recipes_are_compositions_of_them():
    from wmrl.core.axes import debiasing_names, fusion_names, get_debiasing, get_fusion

    assert debiasing_names() == ["none", "isotonic"]
    assert fusion_names() == ["equal", "anchor-only", "ivw", "bias-aware", "ppi", "cv"]
    for name in recipe_names():
        rec = get_recipe(name)
        assert rec.debiasing in debiasing_names() and rec.fusion in fusion_names()
        assert rec.denoises == get_fusion(rec.fusion).denoises
        assert (get_debiasing(rec.debiasing).make_state is not None) == rec.debias
    with pytest.raises(KeyError, match="registered: equal, anchor-only, ivw"):
        get_fusion("inverse-variance")
    with pytest.raises(KeyError, match="registered: none, isotonic"):
        get_debiasing("platt")
    with pytest.raises(ValueError, match=r"recipe 'x': unknown fusion 'ivw2' \(did you mean 'ivw'\?\); registered"):
        Recipe("x", "x", "fraction", fusion="ivw2")
    with pytest.raises(ValueError, match="anchors must be one of all, none, fraction"):
        Recipe("x", "x", "some")
    with pytest.raises(ValueError, match="asks no world model"):
        Recipe("x", "x", "fraction", debiasing="isotonic", fusion="anchor-only")
    with pytest.raises(ValueError, match="tie_break needs a debiasing"):
        Recipe("x", "x", "fraction", fusion="ivw", tie_break=0.1)


def test_recipes_with_selects_by_axis_and_flag():
    assert recipes_with(uses_world_model=False) == ["grpo", "anchor-only"]
    assert recipes_with(anchors="none") == ["wm"]
    assert recipes_with(fusion="ppi") == ["wmrl-ppi"]
    assert recipes_with(fuses=True, debias=True, denoises=True, recall=True) == [
        "wmrl", "wmrl-ppi", "wmrl-cv", "wmrl-bias-aware", "wmrl-flat"]
    assert recipes_with() == recipe_names()
    assert get_recipe(BASELINE).anchors == "all" and get_recipe(WMRL).fuses
    with pytest.raises(ValueError, match="unknown flags \\['fussion'\\]; use any of name, anchors"):
        recipes_with(fussion="ivw")


def test_a_registered_fusion_composes_into_a_recipe_that_a_config_accepts():
    """A new fusion is a registered function; a recipe naming it trains like any other, and the config's
    ``method`` is checked against the registry when it is validated (not when the config module was imported)."""
    from wmrl.core.advantages import group_advantages
    from wmrl.core.axes import FUSIONS, FusionInputs, FusionOutputs, register_fusion
    from wmrl.core.fusion import fusion_weights
    from wmrl.training.config import ConfigError, load_config

    def half(x: FusionInputs) -> FusionOutputs:
        use = x.anchor_ok | x.wm_ok
        used = np.where(use, np.where(x.is_anchor, x.reward_true, x.reward_wm_used), np.nan)
        adv = group_advantages(np.where(use, used, 0.0), x.group_ids, valid=use)
        w = np.zeros(x.group_ids.size)
        w[use] = fusion_weights(x.is_anchor[use], 0.5)
        return FusionOutputs(used, adv, w, {"alpha": 0.5, "fusion_mode": "half"})

    with pytest.raises(ConfigError, match="method: unknown recipe 'wmrl-half'.*; registered: grpo, wm, wmrl,"):
        load_config(None, ["method=wmrl-half"])
    register_fusion("test-half", help="alpha fixed at 1/2")(half)
    try:
        with pytest.raises(ValueError, match="a fusion named 'test-half' is registered already"):
            register_fusion("test-half", help="again")(lambda x: half(x))
        rec = register_recipe(Recipe("wmrl-half", "isotonic debiasing, alpha 1/2", "fraction",
                                     debiasing="isotonic", fusion="test-half"))
        x = _inputs()
        out = rec.step(x, rec.init_state(LOOSE), LOOSE)
        assert out.weights[x.is_anchor].sum() == pytest.approx(0.5) and out.stats["fusion_mode"] == "half"
        assert out.stats["calibrator_mode"] == "identity" and out.stats["calibrator_n_anchors"] == 4
        assert "wmrl-half" in recipes_with(fusion="test-half", fuses=True)
        assert load_config(None, ["method=wmrl-half"]).method == "wmrl-half"
    finally:
        RECIPES.unregister("wmrl-half")
        FUSIONS.unregister("test-half")

"""The staleness logic of the asynchronous anchor stream (wmrl.core.staleness) and the late-pair path of the
recipe (Recipe.learn_late)."""
from __future__ import annotations

import numpy as np
import pytest

from wmrl.core.recipe import RecipeSettings, StepInputs, get_recipe
from wmrl.core.staleness import (AT_BOUND_MODES, PAPER_LATENCY, LatencyModel, arrival_steps, check_at_bound,
                                 check_staleness, is_due)


def test_latency_model_is_seeded_bounded_and_scales():
    m = LatencyModel(median_s=120, sigma=0.9, floor_s=10, cap_s=600)
    a, b = m.sample(np.random.default_rng(3), 5000), m.sample(np.random.default_rng(3), 5000)
    assert np.array_equal(a, b) and a.dtype == np.float64 and a.shape == (5000,)
    assert a.min() >= 10 and a.max() <= 600 and (a == 600).any()  # the cap binds on the heavy tail
    assert abs(np.median(a) - 120) < 10
    s = m.scaled(0.01)
    assert (s.median_s, s.floor_s, s.cap_s, s.sigma) == pytest.approx((1.2, 0.1, 6.0, 0.9))
    mo = PAPER_LATENCY.moments(n=80_000)
    assert 120 < mo["mean_s"] < 200 and mo["p50_s"] == pytest.approx(120, rel=0.05)
    assert mo["group_max_s"] > mo["p90_s"] > mo["p50_s"] and mo["max_s"] == 600.0
    assert LatencyModel(2.0, 0.0, 0.0, 5.0).sample(np.random.default_rng(0), 3).tolist() == [2.0, 2.0, 2.0]


@pytest.mark.parametrize("kw, word", [({"median_s": 0}, "median_s"), ({"sigma": -1}, "sigma"),
                                      ({"cap_s": 50}, "cap_s"), ({"floor_s": 200}, "floor_s")])
def test_latency_model_rejects_bad_parameters(kw, word):
    with pytest.raises(ValueError, match=word):
        LatencyModel(**{"median_s": 120.0, "sigma": 0.9, "floor_s": 10.0, "cap_s": 600.0, **kw})


def test_skips_update_only_for_a_step_whose_anchors_are_late():
    from wmrl.core.staleness import skips_update

    assert skips_update("skip", 5, "gradient", 2, 0, 0)  # own groups running, nothing arrived
    assert not skips_update("skip", 5, "gradient", 2, 8, 0)  # a late group arrived: anchors in the loss
    assert not skips_update("skip", 5, "gradient", 0, 0, 0)  # routed none: the synchronous step had none either
    assert not skips_update("skip", 0, "gradient", 2, 0, 0)  # synchronous: infrastructure failures, not lateness
    assert not skips_update("skip", 5, "calibration", 2, 0, 0)  # in-flight groups train as world-model groups
    assert not skips_update("update", 5, "gradient", 2, 0, 0)
    assert skips_update("skip", 5, "gradient", 2, 0, 4) and not skips_update("skip", 5, "gradient", 2, 0, 5)
    with pytest.raises(ValueError, match="skip"):
        skips_update("wait", 5, "gradient", 2, 0, 0)
    with pytest.raises(ValueError, match=">= 0"):
        skips_update("skip", 5, "gradient", -1, 0, 0)
    with pytest.raises(ValueError, match="late_anchors"):  # a typo was silently "never skip"
        skips_update("skip", 5, "gradient ", 2, 0, 0)


def test_unanchored_steps_counts_runs_of_skips():
    from wmrl.core.staleness import UnanchoredSteps

    u = UnanchoredSteps("skip", 2, "gradient")
    # fill: 2 skips, then the third anchorless step updates (at most k in a row); an anchored step resets
    assert [u.decide(1, 0), u.decide(1, 0), u.decide(1, 0), u.decide(1, 8), u.decide(1, 0)] == [
        True, True, False, False, True]
    assert (u.total, u.in_a_row) == (3, 1)
    assert not UnanchoredSteps("update", 2, "gradient").decide(1, 0)


def test_simulation_skips_updates_without_anchors():
    """A skipped step leaves the run's parameters and optimiser as they are: a run whose anchors never arrive in
    time skips exactly its first k steps (at most k in a row), then updates; ``update`` never skips."""
    from wmrl.sim.bandit import WorldModelSpec
    from wmrl.sim.engine import RunSpec, SimConfig, simulate

    cfg = SimConfig(n_tasks=6, n_arms=12, steps=12, log_every=1, min_every=2)
    wm = WorldModelSpec("exploit", 0.5, 0.1)
    kw = dict(staleness=3, late="gradient", at_bound="calibration", latency_steps=1000.0, latency_sigma=0.0)
    runs = [RunSpec("wmrl", wm, 0.5, 0, steps_without_anchors=m, **kw) for m in ("skip", "update")]
    curves, f = simulate(runs, cfg)
    assert f["updates_skipped"].tolist() == [3, 0]
    j = curves[curves["run"] == 0].sort_values("step")["J"].to_numpy()
    assert np.all(j[:4] == j[0]) and j[4] != j[0]  # steps 0-2 skipped: J unchanged until step 3's update
    ju = curves[curves["run"] == 1].sort_values("step")["J"].to_numpy()
    assert ju[1] != ju[0]
    with pytest.raises(ValueError, match="steps_without_anchors"):
        RunSpec("wmrl", wm, 0.5, 0, steps_without_anchors="wait", **kw)
    with pytest.raises(ValueError, match="floor_s=5.0.*floor_s latency_floor_steps"):
        RunSpec("wmrl", wm, 0.5, 0, staleness=3, latency_steps=3.0, latency_floor_steps=5.0)


def test_regime_study_table(tmp_path):
    from wmrl.sim.staleness import horizon_config, regime_latency, run_regime_study

    lat = regime_latency(10.0)
    assert lat.moments()["mean_s"] == pytest.approx(10.0, rel=1e-6) and lat.sigma == 0.9
    assert lat.cap_s == pytest.approx(lat.median_s * 5.0)  # PAPER_LATENCY: cap 600 s = 5 x the median 120 s
    c = horizon_config(1600)
    assert c.steps == 1600 and c.lr * c.steps == pytest.approx(0.05 * 200) and c.log_every == 40
    res = run_regime_study(tmp_path, seeds=2, methods=("wmrl",), horizons=(6, 12), mean_steps=2.0)
    md = res["markdown"]
    assert "| 6 | exploit | wmrl | skip |" in md and "| 12 | exploit | wmrl | update |" in md
    assert (tmp_path / "regime.md").read_text() == md and (tmp_path / "regime_finals.csv").exists()
    s = res["summary"]
    assert set(s["steps_without_anchors"]) == {"-", "skip", "update"}
    assert (s[s["steps_without_anchors"] == "update"]["updates_skipped"] == 0).all()
    with pytest.raises(ValueError, match="shapes"):
        run_regime_study(tmp_path, seeds=1, shapes=("nope",), horizons=(2,))


def test_arrival_steps_respect_the_bound():
    lat = np.array([0.0, 0.2, 1.0, 2.5, 40.0])
    assert arrival_steps(7, lat, 0).tolist() == [7] * 5  # synchronous: every group at its own step
    assert arrival_steps(7, lat, 3).tolist() == [7, 8, 8, 10, 10]
    assert arrival_steps(7, lat, 100).tolist() == [7, 8, 8, 10, 47]
    assert arrival_steps(0, lat, 3).dtype == np.int64
    assert arrival_steps(7, lat, 3, wait=False).tolist() == [7, 8, 8, 10, 47]  # not waited for: over the bound
    assert arrival_steps(7, lat, 0, wait=False).tolist() == [7] * 5  # k = 0 always waits
    assert AT_BOUND_MODES == ("wait", "calibration", "drop") and check_at_bound("drop") == "drop"
    with pytest.raises(ValueError, match="wait"):
        check_at_bound("skip")
    with pytest.raises(ValueError, match="finite"):
        arrival_steps(0, np.array([-1.0]), 3)
    with pytest.raises(ValueError, match="integer"):
        check_staleness(1.5)
    with pytest.raises(ValueError, match=">= 0"):
        check_staleness(-1)
    assert [is_due(5, t, 2) for t in (5, 6, 7, 8)] == [False, False, True, True]
    assert is_due(5, 5, 0)


def _recipe_state(name="wmrl", min_anchors=4):
    r = get_recipe(name)
    s = RecipeSettings(calibrator_min_anchors=min_anchors, fusion_min_pairs=2)
    return r, r.init_state(s), s


def test_learn_late_feeds_window_out_of_sample_then_the_calibrator():
    r, st, s = _recipe_state()
    rng = np.random.default_rng(0)
    # step 1: 2 groups of 4, group 0 an anchor; the calibrator learns its 4 pairs (isotonic from 4 on)
    rt = rng.random(8)
    x = StepInputs(1, np.repeat([0, 1], 4), np.repeat([True, False], 4), np.ones(8, bool),
                   np.where(np.repeat([True, False], 4), rt, np.nan), 0.5 * rt + 0.3)
    r.step(x, st, s)
    assert st.calibrator.n_anchors == 4 and len(st.window) == 4
    before = st.calibrator.transform(np.array([0.31, 0.5, 0.79]))
    # late pairs of step 1 group 1 consumed at step 2: mapped by the map of before, then learned under step 2
    late_wm, late_true = np.array([0.31, 0.5, 0.79, 0.6]), np.array([0.0, 0.4, 1.0, 0.6])
    tilde = r.learn_late(st, 2, np.full(4, 1), np.full(4, 1), late_true, late_wm)
    assert np.allclose(tilde[:3], before)  # out of sample: the calibrator had not seen them
    assert st.calibrator.n_anchors == 8 and st.calibrator.fitted_through_step == 2
    assert len(st.window) == 8 and np.allclose(st.window.calibrated[-4:], tilde)
    assert st.window.steps[-4:].tolist() == [1] * 4 and np.unique(st.window.clusters()).size == 2
    assert not np.allclose(st.calibrator.transform(late_wm[:3]), before)  # it learned them
    with pytest.raises(ValueError, match="step 2"):
        st.calibrator.transform(late_wm, step=2)  # step 2 must not be calibrated by pairs learned at step 2
    st.calibrator.transform(late_wm, step=3)


def test_learn_late_validates_its_inputs():
    r, st, s = _recipe_state()
    with pytest.raises(ValueError, match="length N"):
        r.learn_late(st, 2, [1, 1], [0], [0.1, 0.2], [0.3, 0.4])
    with pytest.raises(ValueError, match="finite"):
        r.learn_late(st, 2, [1], [0], [np.nan], [0.3])
    with pytest.raises(ValueError, match="cannot be consumed"):
        r.learn_late(st, 2, [3], [0], [0.1], [0.3])
    g, gst, gs = _recipe_state("grpo")
    with pytest.raises(ValueError, match="staleness bound of 0"):
        g.learn_late(gst, 2, [1], [0], [0.1], [0.3])
    # a recipe without a calibrator (no debiasing) still fills the window, with raw scores
    nd, ndst, _ = _recipe_state("wmrl-no-debias")
    out = nd.learn_late(ndst, 1, [1, 1], [0, 0], [0.2, 0.9], [0.3, 0.4])
    assert out.tolist() == [0.3, 0.4] and len(ndst.window) == 2 and ndst.calibrator is None


def test_late_groups_in_the_gradient_move_alpha_like_any_anchor():
    """The gradient mode passes late groups to Recipe.step as extra anchor groups: they get anchor weights and
    advantages of their own group, and the fused weights still sum to 1."""
    r, st, s = _recipe_state()
    rng = np.random.default_rng(1)
    B = 12  # 3 fresh world-model groups of 4, then one late anchor group of 4 (id 3)
    anc = np.repeat([False, False, False, True], 4)
    rt = np.where(anc, rng.random(16), np.nan)
    rw = rng.random(16)
    out = r.step(StepInputs(2, np.repeat(np.arange(4), 4), anc, np.ones(16, bool), rt, rw), st, s)
    assert out.weights.sum() == pytest.approx(1.0)
    assert np.all(out.weights[B:] == out.weights[B]) and out.stats["n_anchor_samples"] == 4
    assert out.advantages[B:].mean() == pytest.approx(0.0, abs=1e-12)
    assert np.allclose(out.reward_used[B:], rt[B:])


def test_simulation_staleness_axis():
    from wmrl.sim.bandit import WorldModelSpec
    from wmrl.sim.engine import RunSpec, SimConfig, simulate

    cfg = SimConfig(n_tasks=6, n_arms=12, steps=30, log_every=10, min_every=2)
    wm = WorldModelSpec("exploit", 0.5, 0.1)
    runs = [RunSpec("wmrl", wm, 0.3, 0), RunSpec("wmrl", wm, 0.3, 0, staleness=0, late="gradient"),
            RunSpec("wmrl", wm, 0.3, 0, staleness=3, late="calibration"),
            RunSpec("wmrl", wm, 0.3, 0, staleness=3, late="gradient")]
    _, f = simulate(runs, cfg)
    assert f.loc[0, "J_final"] == f.loc[1, "J_final"]  # k = 0: the late mode changes nothing
    assert f.loc[0, "staleness_mean"] == 0 and f.loc[0, "staleness_max"] == 0
    for i in (2, 3):
        assert 1 <= f.loc[i, "staleness_mean"] <= 3 and f.loc[i, "staleness_max"] == 3
    assert len({f.loc[i, "J_final"] for i in (0, 2, 3)}) == 3  # both late modes change the run
    with pytest.raises(ValueError, match="both streams"):
        RunSpec("grpo", wm, 1.0, 0, staleness=2)
    with pytest.raises(ValueError, match="late"):
        RunSpec("wmrl", wm, 0.3, 0, staleness=2, late="drop")


def test_simulation_at_bound_axis():
    """A group over the bound is not waited for (calibration, drop): with k = 1 and a 3-step latency nearly every
    group is over it; the in-bound staleness stays <= k; the modes differ from wait and from each other."""
    from wmrl.sim.bandit import WorldModelSpec
    from wmrl.sim.engine import RunSpec, SimConfig, simulate

    cfg = SimConfig(n_tasks=6, n_arms=12, steps=30, log_every=10, min_every=2)
    wm = WorldModelSpec("exploit", 0.5, 0.1)
    runs = [RunSpec("wmrl", wm, 0.3, 0, staleness=1, late="gradient", at_bound=b) for b in AT_BOUND_MODES]
    runs.append(RunSpec("wmrl", wm, 0.3, 0, staleness=1, late="gradient"))  # the default is wait
    _, f = simulate(runs, cfg)
    assert f.loc[0, "J_final"] == f.loc[3, "J_final"]
    assert all(f.loc[i, "over_bound_frac"] > 0.8 for i in range(3))
    assert f.loc[0, "staleness_max"] == 1 and f.loc[0, "staleness_mean"] == pytest.approx(1.0, abs=0.2)
    assert all(np.isnan(f.loc[i, "staleness_max"]) or f.loc[i, "staleness_max"] <= 1 for i in (1, 2))
    assert len({f.loc[i, "J_final"] for i in range(3)}) == 3
    with pytest.raises(ValueError, match="wait"):
        RunSpec("wmrl", wm, 0.3, 0, staleness=2, at_bound="skip")


def test_staleness_study_table_has_the_at_bound_column(tmp_path):
    from wmrl.sim.staleness import build_runs, run_staleness_study

    runs = build_runs((0, 3), 1, extra_ks=(6,))
    assert {(r.staleness, r.at_bound) for r in runs if r.method == "wmrl"} == {
        (0, "wait"), (3, "wait"), (3, "calibration"), (3, "drop"), (6, "wait"), (6, "calibration"), (6, "drop")}
    assert {(r.staleness, r.at_bound) for r in runs if r.steps_without_anchors == "update"} == {
        (3, "wait"), (3, "calibration"), (3, "drop"), (6, "wait"), (6, "calibration"), (6, "drop")}
    res = run_staleness_study(tmp_path, ks=(0, 3), seeds=2, steps=4, extra_ks=(6,))
    md = res["markdown"]
    assert "| at bound |" in md and "| groups over the bound |" in md
    assert "| exploit | wmrl | 6 | gradient, ratio <= 2 | drop |" in md
    assert set(res["summary"]["at_bound"]) == {"-", "wait", "calibration", "drop"}
    assert "| without anchors |" in md and "| updates skipped |" in md
    assert set(res["summary"]["steps_without_anchors"]) == {"-", "skip", "update"}


def test_projection_of_step_times():
    from wmrl.core.staleness import late_clip, project_step_times

    fixed = LatencyModel(10.0, 0.0, 0.0, 10.0)  # every execution takes 10 s
    p = project_step_times(1.0, 0.5, 0.5, 8, 4, 8, fixed, k=20)
    assert p["t_sync"] == pytest.approx(1.0 + 10.0 + 0.5)  # the world model runs inside the 10 s
    assert p["t_async"] == pytest.approx(10.0)  # 8 x 10 s on 8 slots: executor-bound, 10 s a step
    assert p["wait"] == 0.0 and p["utilisation_async"] == pytest.approx(1.0)
    q = project_step_times(1.0, 0.5, 0.5, 8, 4, 4, fixed, k=20)  # two waves on 4 slots
    assert q["t_sync"] == pytest.approx(1.0 + 20.0 + 0.5) and q["t_async"] == pytest.approx(20.0)
    r = project_step_times(1.0, 0.5, 0.5, 4, 4, 64, fixed, k=2)  # LM-bound steps: the bound forces waits
    # T = 2 + (10 - 2 T): two steps of T = 4 s last 8 s, and a group waits the 2 s left of its 10
    assert r["t_async"] == pytest.approx(4.0, rel=1e-6) and r["wait"] == pytest.approx(2.0, rel=1e-6)
    assert project_step_times(1.0, 0.5, 0.5, 4, 4, 64, fixed, k=10)["wait"] == 0.0
    with pytest.raises(ValueError, match="multiple of group"):
        project_step_times(1.0, 0.5, 0.5, 6, 4, 8, fixed, k=1)
    assert late_clip(2.0) == (0.999, 1.0) and late_clip(float("inf"))[1] > 1e9
    with pytest.raises(ValueError, match="> 1"):
        late_clip(1.0)

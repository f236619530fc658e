"""The ``cv`` fusion (inverse-probability-weighted difference estimator) and the ranking / concentration figures."""
from __future__ import annotations

import copy

import numpy as np
import pytest

from wmrl.core.advantages import group_advantages
from wmrl.core.ranking import policy_concentration, ranking_errors
from wmrl.core.recipe import RecipeSettings, StepInputs, get_recipe

M, G = 4, 4
SETTINGS = RecipeSettings(calibrator_min_anchors=4, fusion_min_pairs=2, anchor_fraction=1 / M)


def _warm_state(rng: np.random.Generator, name: str = "wmrl-cv"):
    """A state of recipe ``name`` that has learned two steps of anchors of a world model that orders them
    roughly right (so lambda > 0 and the calibrator is fitted)."""
    rec = get_recipe(name)
    st = rec.init_state(SETTINGS)
    gid = np.repeat(np.arange(M), G)
    for t in (1, 2):
        r = rng.random(M * G)
        anc = gid == t % M
        rec.step(StepInputs(t, gid, anc, np.ones(M * G, bool), np.where(anc, r, np.nan),
                            np.clip(r + 0.3 * rng.standard_normal(M * G), 0, 1)), st, SETTINGS)
    return rec, st


def test_cv_advantages_are_the_inverse_probability_weighted_difference_estimator():
    rng = np.random.default_rng(3)
    rec, st = _warm_state(rng)
    gid = np.repeat(np.arange(M), G)
    r = rng.random(M * G)
    r_hat = np.clip(1 - r + 0.1 * rng.standard_normal(M * G), 0, 1)  # a world model that reverses the order
    anc = gid == 1
    out = rec.step(StepInputs(3, gid, anc, np.ones(M * G, bool), np.where(anc, r, np.nan), r_hat), st, SETTINGS)
    f = out.reward_wm_calibrated
    a_f, a_r = group_advantages(f, gid), group_advantages(r, gid)
    expected = np.where(anc, a_f + (a_r - a_f) * M, a_f)
    assert out.stats["fusion_mode"] == "cv" and out.stats["ppi_lambda"] is None
    assert np.allclose(out.advantages, expected)
    assert np.allclose(out.weights, 1 / (M * G))


def test_cv_is_unbiased_over_the_routers_draws_whatever_the_world_models_order():
    """With one anchor group of M drawn uniformly (rho = 1/M), the mean over the M draws of weight x advantage is
    GRPO's on the executed rewards for every sample, although the world model reverses every group's order."""
    rng = np.random.default_rng(5)
    rec, st0 = _warm_state(rng)
    gid = np.repeat(np.arange(M), G)
    r = rng.random(M * G)
    r_hat = np.clip(1 - r, 0, 1)
    contributions = []
    for k in range(M):
        st = copy.deepcopy(st0)
        anc = gid == k
        out = rec.step(StepInputs(3, gid, anc, np.ones(M * G, bool), np.where(anc, r, np.nan), r_hat), st, SETTINGS)
        contributions.append(out.weights * out.advantages)
    grpo = group_advantages(r, gid) / (M * G)
    assert np.allclose(np.mean(contributions, axis=0), grpo)
    # the per-step PPI++ estimator of the same draws is not: its world-model rows keep the reversed order
    ppi, st_p = _warm_state(np.random.default_rng(5), "wmrl-ppi")
    ppi_mean = np.mean([(lambda o: o.weights * o.advantages)(ppi.step(
        StepInputs(3, gid, gid == k, np.ones(M * G, bool), np.where(gid == k, r, np.nan), r_hat),
        copy.deepcopy(st_p), SETTINGS)) for k in range(M)], axis=0)
    assert not np.allclose(ppi_mean / np.abs(ppi_mean).max(), grpo / np.abs(grpo).max())


def test_anchor_fraction_must_be_a_probability():
    with pytest.raises(ValueError, match="anchor_fraction"):
        RecipeSettings(anchor_fraction=0.0)


def test_ranking_errors_by_hand():
    g = np.array([0, 0, 0, 1, 1, 1])
    r = np.array([0.1, 0.5, 0.9, 0.2, 0.4, 0.6])
    w = np.array([0.3, 0.2, 0.1, 0.1, 0.2, 0.3])  # group 0 reversed, group 1 right
    e = ranking_errors(g, r, w)
    assert e.kendall_tau == pytest.approx(0.0)  # (-1 + 1) / 2
    assert e.favourite_regret == pytest.approx((0.9 - 0.1 + 0.0) / 2)
    assert e.n_groups == 2
    # ties among the favourites share; a constant group has no tau but a regret
    e2 = ranking_errors(np.zeros(3, int), np.array([0.2, 0.8, 0.5]), np.array([0.7, 0.7, 0.1]))
    assert e2.favourite_regret == pytest.approx(0.8 - 0.5)
    assert ranking_errors(np.zeros(2, int), np.array([0.5, 0.5]), np.array([0.1, 0.2])).kendall_tau is None
    assert ranking_errors(np.zeros(1, int), np.array([0.5]), np.array([0.1])).favourite_regret is None


def test_recipe_step_reports_the_ranking_error_on_its_anchors():
    rng = np.random.default_rng(0)
    rec, st = _warm_state(rng)
    gid = np.repeat(np.arange(M), G)
    r = np.tile([0.1, 0.4, 0.6, 0.9], M)
    anc = gid == 2
    out = rec.step(StepInputs(3, gid, anc, np.ones(M * G, bool), np.where(anc, r, np.nan), 1 - r), st, SETTINGS)
    assert out.stats["wm_kendall_tau"] == pytest.approx(-1.0)
    assert out.stats["wm_favourite_regret"] == pytest.approx(0.8)
    out = rec.step(StepInputs(4, gid, np.zeros(M * G, bool), np.ones(M * G, bool), np.full(M * G, np.nan), r), st,
                   SETTINGS)
    assert out.stats["wm_kendall_tau"] is None and out.stats["wm_favourite_regret"] is None


def test_policy_concentration():
    out = policy_concentration(np.array([0, 0, 0, 1, 1, 1]), ["a", "a", "a", "b", "c", "b"],
                               np.array([-0.1, -0.1, -0.1, -1.0, -2.0, -1.0]))
    assert out["policy_distinct_programs"] == pytest.approx(1.5)
    assert out["policy_entropy"] == pytest.approx(4.3 / 6)
    assert policy_concentration(np.array([0]), ["a"])["policy_entropy"] is None
    with pytest.raises(ValueError):
        policy_concentration(np.array([0, 1]), ["a"])


def test_the_engine_gives_the_cv_fusion_the_routers_current_fraction():
    from wmrl.step.engine import StepEngine

    eng = StepEngine("wmrl-cv", RecipeSettings(), anchor_fraction=0.2)
    assert eng.settings.anchor_fraction == pytest.approx(0.2)
    eng.router.fraction = 0.4  # what the exploitation alarm's raise_anchors response does
    assert eng.settings.anchor_fraction == pytest.approx(0.4)
    assert StepEngine("grpo", RecipeSettings(anchor_fraction=0.3)).settings.anchor_fraction == pytest.approx(0.3)

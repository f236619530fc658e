"""``estimate_fusion``'s cases that its surviving mutants showed untested (docs/testing.md, "Mutation testing")."""
from __future__ import annotations

import math

import numpy as np
import pytest

from wmrl.core.fusion import estimate_fusion


def test_bias_aware_weight_is_the_documented_formula_of_the_estimated_variances():
    rng = np.random.default_rng(0)
    g = np.repeat(np.arange(4), 8)
    r = rng.random(32)
    f = r + 0.3 * rng.standard_normal(32)
    est = estimate_fusion(r, f, g, n_anchor=32, n_wm=288, bias_aware=True, noise_var=0.01, alpha_max=1.0)
    # alpha = (V_W / n_W + B^2) / (V_A / n_A + V_W / n_W + B^2), B^2 = sigma_xi^2 - noise_var
    assert est.bias2 == pytest.approx(est.sigma2_xi - 0.01)
    ew = est.var_wm / 288 + est.bias2
    assert est.alpha == pytest.approx(ew / (est.var_anchor / 32 + ew))


def test_without_one_stream_nothing_is_estimated():
    edge = estimate_fusion(np.zeros(0), np.zeros(0), None, n_anchor=0, n_wm=36)
    assert (edge.alpha, edge.mode, edge.bias2, edge.n_pairs) == (0.0, "edge", 0.0, 0)
    assert all(math.isnan(v) for v in (edge.var_anchor, edge.var_wm, edge.sigma2_xi))


def test_a_nan_world_model_reward_is_named():
    with pytest.raises(ValueError, match="^reward_wm_calibrated contains NaN/inf$"):
        estimate_fusion(np.zeros(3), np.array([0.0, np.nan, 0.0]), None, n_anchor=3, n_wm=9)

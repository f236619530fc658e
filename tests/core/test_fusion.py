"""Fusion: IVW alpha, bias-aware alpha, weights, residual variance, PPI++ lambda and samples."""
import numpy as np
import pytest

from wmrl.core.fusion import (
    bias_aware_alpha,
    estimate_bias2,
    estimate_fusion,
    fusion_weights,
    ivw_alpha,
    ppi_lambda,
    ppi_samples,
    residual_variance,
    within_group_variance,
)


def test_ivw_alpha_hand_values_and_edges():
    # n_A=10, V_A=1 -> precision 10; n_W=90, V_W=3 -> 30; alpha = 10/40
    assert ivw_alpha(10, 90, 1.0, 3.0) == pytest.approx(0.25)
    assert ivw_alpha(10, 90, 1.0, 3.0, alpha_min=0.3) == pytest.approx(0.3)
    assert ivw_alpha(10, 90, 1.0, 1.0, alpha_max=0.05) == pytest.approx(0.05)
    assert ivw_alpha(0, 90, 1.0, 3.0, alpha_min=0.2) == 0.0
    assert ivw_alpha(10, 0, 1.0, 3.0, alpha_max=0.5) == 1.0
    assert ivw_alpha(10, 90, 0.0, 3.0) == 1.0
    assert ivw_alpha(10, 90, 1.0, 0.0) == 0.0
    with pytest.raises(ValueError, match="var_wm"):
        ivw_alpha(10, 90, 1.0, float("nan"))
    with pytest.raises(ValueError, match="alpha_min"):
        ivw_alpha(10, 90, 1.0, 1.0, alpha_min=0.6, alpha_max=0.5)


def test_bias_aware_alpha_hand_values():
    # V_A/n_A = 0.1, V_W/n_W = 3/90, B^2 = 0: equals IVW
    assert bias_aware_alpha(10, 90, 1.0, 3.0, 0.0) == pytest.approx(ivw_alpha(10, 90, 1.0, 3.0))
    # B^2 = 0.1: alpha = (1/30 + .1) / (.1 + 1/30 + .1) = 0.5714...
    a = bias_aware_alpha(10, 90, 1.0, 3.0, 0.1)
    assert a == pytest.approx((1 / 30 + 0.1) / (0.1 + 1 / 30 + 0.1))
    with pytest.raises(ValueError, match="bias2"):
        bias_aware_alpha(10, 90, 1.0, 3.0, -1.0)


def test_fusion_weights_sum_and_edges():
    w = fusion_weights(np.array([True, False, False, False]), 0.4)
    np.testing.assert_allclose(w, [0.4, 0.2, 0.2, 0.2])
    np.testing.assert_allclose(fusion_weights(np.array([False, False]), 0.9), [0.5, 0.5])
    np.testing.assert_allclose(fusion_weights(np.array([True, True]), 0.1), [0.5, 0.5])
    assert fusion_weights(np.zeros(0, dtype=bool), 0.5).shape == (0,)
    with pytest.raises(ValueError, match="bool"):
        fusion_weights(np.array([1, 0]), 0.5)
    with pytest.raises(ValueError, match="alpha"):
        fusion_weights(np.array([True]), 1.5)


def test_within_group_and_residual_variance_hand_values():
    # groups {1,3} and {10,14}: SS = 2 + 8 = 10, dof = 4 - 2 -> 5
    assert within_group_variance([1, 3, 10, 14], [0, 0, 1, 1]) == pytest.approx(5.0)
    assert within_group_variance([1, 3], None) == pytest.approx(2.0)
    assert np.isnan(within_group_variance([1.0], None))
    # a group-level offset in the world model cancels within groups
    r = np.array([0.1, 0.3, 0.5, 0.7])
    f = r + np.array([0.2, 0.2, -0.1, -0.1])
    assert residual_variance(r, f, np.array([0, 0, 1, 1])) == pytest.approx(0.0, abs=1e-15)
    assert residual_variance(r, f) > 0


def test_estimate_fusion_modes():
    rng = np.random.default_rng(0)
    g = np.repeat(np.arange(4), 8)
    r = rng.random(32)
    f = r + 0.3 * rng.standard_normal(32)
    est = estimate_fusion(r, f, g, n_anchor=32, n_wm=288)
    va = within_group_variance(r, g)
    s2 = residual_variance(r, f, g)
    assert est.mode == "ivw"
    assert est.alpha == pytest.approx(ivw_alpha(32, 288, va, va + s2, 0.05, 0.95))
    assert est.var_wm == pytest.approx(va + s2)
    few = estimate_fusion(r[:4], f[:4], g[:4], n_anchor=4, n_wm=36, min_pairs=8)
    assert few.mode == "pooled" and few.alpha == pytest.approx(0.1)
    edge = estimate_fusion(r[:0], f[:0], g[:0], n_anchor=0, n_wm=36)
    assert edge.mode == "edge" and edge.alpha == 0.0
    ba = estimate_fusion(r, f, g, n_anchor=32, n_wm=288, bias_aware=True, noise_var=0.0)
    assert ba.mode == "bias_aware" and ba.bias2 == pytest.approx(s2) and ba.alpha > est.alpha
    assert estimate_bias2(r, f, g, noise_var=1.0) == 0.0


def test_ppi_lambda_hand_value():
    r = np.array([0.0, 1.0, 2.0, 3.0])
    f = np.array([0.0, 2.0, 4.0, 6.0])  # f = 2r: Cov = 2 Var(r), Var(f) = 4 Var(r) -> 0.5/(1+n_A/n_W)
    assert ppi_lambda(r, f, n_anchor=4, n_wm=36) == pytest.approx(0.5 / (1 + 4 / 36))
    assert ppi_lambda(r, -f, n_anchor=4, n_wm=36) == 0.0  # clipped at 0
    assert ppi_lambda(r, np.ones(4), n_anchor=4, n_wm=36) == 0.0  # Var(f) = 0
    assert ppi_lambda(r, r, n_anchor=4, n_wm=0) == 0.0


def test_ppi_samples_layout_and_unbiased_mean():
    ra, fa, fw = np.array([1.0, 2.0]), np.array([1.5, 2.5]), np.array([3.0, 4.0, 5.0])
    s = ppi_samples(ra, fa, fw, lam=0.5)
    np.testing.assert_allclose(s.rewards, [1, 2, 3, 4, 5, 1.5, 2.5])
    np.testing.assert_allclose(s.weights, [0.5, 0.5, 0.5 / 3, 0.5 / 3, 0.5 / 3, -0.25, -0.25])
    assert s.stream.tolist() == [0, 0, 1, 1, 1, 2, 2]
    assert s.source_index.tolist() == [0, 1, 0, 1, 2, 0, 1]
    # the weighted sum is the PPI mean estimate: mean(r_A) + lam (mean(f_W) - mean(f_A))
    assert np.dot(s.weights, s.rewards) == pytest.approx(1.5 + 0.5 * (4.0 - 2.0))
    only_wm = ppi_samples(ra[:0], fa[:0], fw, lam=0.5)
    np.testing.assert_allclose(only_wm.weights, [1 / 3] * 3)
    only_a = ppi_samples(ra, fa, fw[:0], lam=0.5)
    np.testing.assert_allclose(only_a.weights, [0.5, 0.5])

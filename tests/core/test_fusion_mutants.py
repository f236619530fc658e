"""Fusion formulas at the points mutation testing found unchecked (docs/testing.md, "Mutation testing"): the
edge cases of the bias-aware weight and of the PPI++ sets, the within-group centring of lambda and of B^2, and
the boundaries of the weights' arguments. Each value is computed by hand in the test."""
from __future__ import annotations

import numpy as np
import pytest

from wmrl.core.fusion import (
    bias_aware_alpha,
    estimate_bias2,
    fusion_weights,
    ivw_alpha,
    ppi_lambda,
    ppi_samples,
)


def test_bias_aware_alpha_without_one_stream_is_the_other_streams_weight():
    assert bias_aware_alpha(0, 90, 1.0, 3.0, 0.5) == 0.0
    assert bias_aware_alpha(10, 0, 1.0, 3.0, 0.5) == 1.0


def test_bias_aware_alpha_with_one_anchor_is_the_bias_aware_formula():
    # ea = V_A / n_A = 2, ew = V_W / n_W + B^2 = 3 / 3 + 1 = 2: alpha = 2 / 4, not IVW's (1/2) / (1/2 + 1) = 1/3.
    assert bias_aware_alpha(1, 3, 2.0, 3.0, 1.0) == pytest.approx(0.5)


def test_bias_aware_alpha_of_two_exact_unbiased_streams_is_alpha_max():
    assert bias_aware_alpha(4, 4, 0.0, 0.0, 0.0, alpha_min=0.1, alpha_max=0.9) == 0.9


def test_ivw_alpha_refuses_one_negative_count():
    with pytest.raises(ValueError, match="sample counts must be >= 0"):
        ivw_alpha(-1, 5, 1.0, 1.0)
    with pytest.raises(ValueError, match="sample counts must be >= 0"):
        ivw_alpha(5, -1, 1.0, 1.0)


def test_estimate_bias2_is_the_within_group_residual_variance_minus_the_noise():
    r = np.array([0.0, 1.0, 10.0, 12.0])
    f = np.zeros(4)
    g = np.array([0, 0, 1, 1])
    # within groups: residuals (0, 1) and (10, 12) -> squares about the group means 0.5 + 2 = 2.5 over N - 2 = 2
    assert estimate_bias2(r, f, g) == pytest.approx(1.25)
    assert estimate_bias2(r, f, g, noise_var=0.0) == pytest.approx(1.25)
    assert estimate_bias2(r, f, g, noise_var=0.25) == pytest.approx(1.0)
    # without groups the offsets between groups count: variance of (0, 1, 10, 12) with ddof 1
    assert estimate_bias2(r, f) == pytest.approx(float(np.var(r, ddof=1)))


def test_estimate_bias2_is_zero_when_the_residual_variance_cannot_be_estimated():
    assert estimate_bias2(np.array([1.0, 2.0]), np.zeros(2), np.array([0, 1])) == 0.0


def test_fusion_weights_accept_alpha_at_both_ends():
    m = np.array([True, False, False])
    np.testing.assert_allclose(fusion_weights(m, 0.0), [0.0, 0.5, 0.5])
    np.testing.assert_allclose(fusion_weights(m, 1.0), [1.0, 0.0, 0.0])
    assert fusion_weights(m, 0.5).dtype == np.float64


def test_ppi_lambda_centres_within_groups():
    # Within each group f rises with r (slope 1: Cov = Var(f)); across groups f falls where r rises, which a pooled
    # estimate would read as a negative relation (clipped to 0).
    r = np.array([0.0, 1.0, 10.0, 11.0])
    f = np.array([1.0, 2.0, 0.0, 1.0])
    g = np.array([0, 0, 1, 1])
    assert ppi_lambda(r, f, n_anchor=4, n_wm=4, group_ids=g) == pytest.approx(1.0 / (1 + 4 / 4))
    assert ppi_lambda(r, f, n_anchor=4, n_wm=4) == 0.0


def test_ppi_lambda_at_the_smallest_sizes():
    r, f = np.array([0.0, 1.0]), np.array([0.0, 2.0])  # Cov / Var(f) = 1/2 at any dof
    assert ppi_lambda(r, f, n_anchor=1, n_wm=1) == pytest.approx(0.5 / 2)   # two samples, one dof
    assert ppi_lambda(r, f, n_anchor=2, n_wm=1) == pytest.approx(0.5 / 3)
    # each sample its own group: no dof left
    assert ppi_lambda(r, f, n_anchor=2, n_wm=8, group_ids=np.array([0, 1])) == 0.0


def test_ppi_samples_records_lambda_and_each_edge_case_in_full():
    ra, fa, fw = np.array([1.0, 2.0]), np.array([1.5, 2.5]), np.array([3.0, 4.0, 5.0])
    assert ppi_samples(ra, fa, fw, lam=0.25).lam == 0.25
    only_wm = ppi_samples(ra[:0], fa[:0], fw, lam=0.5)
    np.testing.assert_allclose(only_wm.rewards, fw)
    assert only_wm.stream.tolist() == [1, 1, 1] and only_wm.stream.dtype == np.int8
    assert only_wm.source_index.tolist() == [0, 1, 2] and only_wm.lam == 0.0
    nothing = ppi_samples(ra[:0], fa[:0], fw[:0], lam=0.5)
    assert nothing.weights.shape == (0,) and nothing.rewards.shape == (0,)
    only_a = ppi_samples(ra, fa, fw[:0], lam=0.5)
    np.testing.assert_allclose(only_a.rewards, ra)
    assert only_a.stream.tolist() == [0, 0] and only_a.stream.dtype == np.int8
    assert only_a.source_index.tolist() == [0, 1] and only_a.lam == 0.5
    assert ppi_samples(ra, fa, fw, lam=0.5).stream.dtype == np.int8


@pytest.mark.parametrize("which", ["reward_true", "reward_wm_calibrated", "calibrated_wm"])
def test_ppi_samples_names_the_array_holding_nan(which):
    arrays = {"reward_true": np.array([1.0, 2.0]), "reward_wm_calibrated": np.array([1.5, 2.5]),
              "calibrated_wm": np.array([3.0, 4.0])}
    arrays[which] = arrays[which].copy()
    arrays[which][0] = np.nan
    with pytest.raises(ValueError, match=f"^{which} contains NaN/inf$"):
        ppi_samples(arrays["reward_true"], arrays["reward_wm_calibrated"], arrays["calibrated_wm"], lam=0.5)


@pytest.mark.parametrize("noise_var", [-1.0, float("nan")])
def test_estimate_bias2_refuses_a_negative_or_non_finite_noise_variance(noise_var):
    with pytest.raises(ValueError, match="noise_var must be a finite variance >= 0"):
        estimate_bias2(np.array([0.0, 1.0]), np.zeros(2), noise_var=noise_var)


def test_ppi_lambda_without_anchors_in_the_loss_is_zero():
    r, f = np.array([0.0, 1.0, 2.0]), np.array([0.0, 2.0, 4.0])
    assert ppi_lambda(r, f, n_anchor=0, n_wm=4) == 0.0


@pytest.mark.parametrize("which", ["reward_true", "reward_wm_calibrated"])
def test_ppi_lambda_names_the_array_holding_nan(which):
    arrays = {"reward_true": np.array([1.0, 2.0]), "reward_wm_calibrated": np.array([1.5, 2.5])}
    arrays[which][0] = np.nan
    with pytest.raises(ValueError, match=f"^{which} contains NaN/inf$"):
        ppi_lambda(arrays["reward_true"], arrays["reward_wm_calibrated"], n_anchor=2, n_wm=2)


def test_mismatched_anchor_arrays_and_a_non_finite_lambda_are_named():
    with pytest.raises(ValueError, match="must have the same length, got 2 and 1"):
        ppi_lambda(np.array([1.0, 2.0]), np.array([1.0]), n_anchor=2, n_wm=2)
    with pytest.raises(ValueError, match="must have the same length, got 2 and 1"):
        ppi_samples(np.array([1.0, 2.0]), np.array([1.0]), np.array([3.0]), lam=0.5)
    with pytest.raises(ValueError, match="lam must be finite, got nan"):
        ppi_samples(np.array([1.0]), np.array([1.0]), np.array([3.0]), lam=float("nan"))

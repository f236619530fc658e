"""Online isotonic calibrator: fallback, fit, strict monotonicity, leakage guard, state, diagnostics."""
import json

import numpy as np
import pytest

from wmrl.core.calibration import IsotonicCalibrator


def test_identity_fallback_below_min_anchors_clips_and_keeps_order():
    cal = IsotonicCalibrator(min_anchors=5, tie_break=0.0)
    cal.update([0.2, 0.4], [0.5, 0.9], step=0)
    assert cal.mode == "identity"
    np.testing.assert_allclose(cal.transform([-0.5, 0.3, 1.7]), [0.0, 0.3, 1.0])


def test_affine_fallback_hand_values():
    cal = IsotonicCalibrator(min_anchors=10, fallback="affine", tie_break=0.0)
    cal.update([0.0, 0.5, 1.0], [0.1, 0.35, 0.6], step=0)  # r = 0.1 + 0.5 r_hat exactly
    assert cal.mode == "affine"
    np.testing.assert_allclose(cal.transform([0.2, 0.8]), [0.2, 0.5])
    neg = IsotonicCalibrator(min_anchors=10, fallback="affine", tie_break=0.0)
    neg.update([0.0, 1.0], [1.0, 0.0], step=0)  # slope < 0 -> identity
    assert neg.mode == "identity"


def test_isotonic_fit_hand_values_pav():
    cal = IsotonicCalibrator(min_anchors=4, tie_break=0.0)
    # PAV on y = [0.1, 0.5, 0.3, 0.9] at x = [0, 1, 2, 3]: pool (0.5, 0.3) -> 0.4
    cal.update([0.0, 1.0, 2.0, 3.0], [0.1, 0.5, 0.3, 0.9], step=0)
    assert cal.mode == "isotonic"
    np.testing.assert_allclose(cal.transform([0.0, 1.0, 2.0, 3.0]), [0.1, 0.4, 0.4, 0.9])
    # out of range: clipped to the end values; interpolation in between
    np.testing.assert_allclose(cal.transform([-5.0, 2.5, 10.0]), [0.1, 0.65, 0.9])
    assert cal.n_blocks == 3


def test_strictly_increasing_applied_map_breaks_ties_inside_bounds():
    cal = IsotonicCalibrator(min_anchors=4, tie_break=1e-3)
    cal.update([0.0, 1.0, 2.0, 3.0], [0.1, 0.5, 0.3, 0.9], step=0)
    x = np.array([-3.0, 0.0, 1.0, 1.5, 2.0, 3.0, 7.0])
    y = cal.transform(x)
    assert np.all(np.diff(y) > 0)  # flat block and clipped tails are strictly ordered
    assert np.all((y >= 0) & (y <= 1))
    base = IsotonicCalibrator(min_anchors=4, tie_break=0.0)
    base.update([0.0, 1.0, 2.0, 3.0], [0.1, 0.5, 0.3, 0.9], step=0)
    assert np.max(np.abs(y - base.transform(x))) <= 1e-3 + 1e-12
    rng = np.random.default_rng(0)
    z = np.sort(rng.random(2000).astype(np.float32).astype(np.float64))
    z = np.unique(z)
    assert np.all(np.diff(cal.transform(z)) > 0)


def test_learns_monotone_bias_and_diagnostics_improve():
    rng = np.random.default_rng(0)
    cal = IsotonicCalibrator(window=400, min_anchors=16)
    f = lambda r: r**3  # world model is a monotone distortion of the truth  # noqa: E731
    for step in range(10):
        r = rng.random(40)
        cal.update(f(r), r, step=step)
    r = rng.random(200)
    d = cal.diagnostics(f(r), r)
    assert d["mode"] == 2 and d["n_anchors"] == 400 and d["n_heldout"] == 200
    assert d["mae_before"] > 0.15 and d["mae_after"] < 0.03
    assert abs(d["bias_after"]) < abs(d["bias_before"])


def test_window_and_recency_weights():
    cal = IsotonicCalibrator(window=3, min_anchors=1, tie_break=0.0)
    cal.update([0.1, 0.2], [0.1, 0.2], step=0)
    cal.update([0.3, 0.4], [0.3, 0.4], step=1)
    assert cal.n_anchors == 3
    # recency: old anchors say 0.9, new anchors say 0.1 at the same x; halflife 1 step, age 3 -> w=1/8
    rc = IsotonicCalibrator(recency_halflife=1.0, min_anchors=1, tie_break=0.0)
    rc.update([0.5, 0.6], [0.9, 0.9], step=0)
    rc.update([0.5, 0.6], [0.1, 0.1], step=3)
    np.testing.assert_allclose(rc.transform([0.5]), [(0.9 * 0.125 + 0.1) / 1.125])


def test_only_earlier_steps_guard():
    cal = IsotonicCalibrator(min_anchors=1)
    cal.transform([0.5], step=0)  # empty: fine
    cal.update([0.5], [0.4], step=0)
    cal.transform([0.5], step=1)  # fitted through step 0: fine for step 1
    with pytest.raises(ValueError, match="before update"):
        cal.transform([0.5], step=0)
    with pytest.raises(ValueError, match="earlier"):
        cal.update([0.5], [0.4], step=-1)


def test_state_dict_json_roundtrip_gives_same_map():
    rng = np.random.default_rng(1)
    cal = IsotonicCalibrator(window=50, recency_halflife=5.0, min_anchors=8, fallback="affine")
    for s in range(6):
        x = rng.random(12)
        cal.update(x, np.sqrt(x) + 0.05 * rng.standard_normal(12), step=s)
    state = json.loads(json.dumps(cal.state_dict()))
    cal2 = IsotonicCalibrator.from_state_dict(state)
    x = rng.random(30)
    np.testing.assert_array_equal(cal.transform(x), cal2.transform(x))


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        (dict(window=0), "window"),
        (dict(recency_halflife=-1.0), "recency_halflife"),
        (dict(min_anchors=0), "min_anchors"),
        (dict(fallback="spline"), "fallback"),
        (dict(bounds=(1.0, 0.0)), "bounds"),
        (dict(tie_break=1.0), "tie_break"),
    ],
)
def test_bad_config(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        IsotonicCalibrator(**kwargs)


def test_bad_update():
    cal = IsotonicCalibrator()
    with pytest.raises(ValueError, match="same length"):
        cal.update([0.1, 0.2], [0.1], step=0)
    with pytest.raises(ValueError, match="NaN"):
        cal.update([float("nan")], [0.1], step=0)


def test_applied_base_map_equals_sklearn_predict():
    rng = np.random.default_rng(3)
    cal = IsotonicCalibrator(min_anchors=8, tie_break=0.0)
    x = rng.random(200)
    cal.update(x, np.clip(x**2 + 0.1 * rng.standard_normal(200), 0, 1), step=0)
    q = np.concatenate([rng.random(100) * 1.4 - 0.2, x[:20]])
    from sklearn.isotonic import IsotonicRegression

    ref = IsotonicRegression(increasing=True, out_of_bounds="clip", y_min=0.0, y_max=1.0)
    ref.fit(cal._wm, np.clip(cal._true, 0, 1))
    np.testing.assert_allclose(cal.transform(q), ref.predict(q), atol=1e-12)
    # with duplicate x and recency weights too
    rc = IsotonicCalibrator(min_anchors=4, tie_break=0.0, recency_halflife=2.0)
    xs = np.round(rng.random(60), 1)
    rc.update(xs[:30], rng.random(30), step=0)
    rc.update(xs[30:], rng.random(30), step=4)
    ref.fit(rc._wm, rc._true, sample_weight=np.r_[np.full(30, 0.25), np.ones(30)])
    np.testing.assert_allclose(rc.transform(q), ref.predict(q), atol=1e-12)

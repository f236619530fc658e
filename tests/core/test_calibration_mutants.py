"""The calibrator's state round trip as the surviving mutants of ``IsotonicCalibrator.load_state_dict`` showed it
untested (docs/testing.md, "Mutation testing"): every setting restored, and the calibrator after a restore goes on
as the one saved."""
from __future__ import annotations

import json

import numpy as np
import pytest

from wmrl.core.calibration import IsotonicCalibrator

SETTINGS = dict(window=20, recency_halflife=3.0, min_anchors=5, fallback="affine", bounds=(-1.0, 2.0),
                tie_break=1e-3)


def _fed(steps: range, rng: np.random.Generator, *cals: IsotonicCalibrator) -> None:
    for s in steps:
        x = rng.random(12)
        y = np.sqrt(x) + 0.05 * rng.standard_normal(12)
        for cal in cals:
            cal.update(x, y, step=s)


def test_a_restored_calibrator_has_every_setting_and_goes_on_as_the_saved_one():
    rng = np.random.default_rng(3)
    saved = IsotonicCalibrator(**SETTINGS)
    _fed(range(6), rng, saved)  # 72 pairs: the window keeps the last 20
    restored = IsotonicCalibrator()  # every setting at its default, none of them the saved one's
    restored.load_state_dict(json.loads(json.dumps(saved.state_dict())))
    assert {k: getattr(restored, k) for k in SETTINGS} == SETTINGS
    assert restored.n_anchors == saved.n_anchors == 20 and restored.mode == saved.mode
    x = np.linspace(-1.5, 2.5, 41)
    np.testing.assert_array_equal(restored.transform(x), saved.transform(x))
    _fed(range(6, 9), rng, saved, restored)  # the window, the recency weights and the step go on the same way
    np.testing.assert_array_equal(restored.transform(x), saved.transform(x))
    with pytest.raises(ValueError, match="earlier"):
        restored.update([0.5], [0.4], step=7)


def test_two_anchor_pairs_are_enough_for_the_affine_fallback():
    cal = IsotonicCalibrator(min_anchors=10, fallback="affine", tie_break=0.0)
    cal.update([0.2, 0.6], [0.3, 0.5], step=4)  # r = 0.2 + 0.5 r_hat through both pairs
    assert cal.mode == "affine"
    np.testing.assert_allclose(cal.transform([0.0, 1.0]), [0.2, 0.7])


def test_diagnostics_report_the_step_and_the_bias_by_hand():
    cal = IsotonicCalibrator(min_anchors=10, tie_break=0.0)  # identity below 10 anchors
    cal.update([0.2, 0.6], [0.3, 0.5], step=4)
    d = cal.diagnostics(np.array([0.4, 0.8]), np.array([0.1, 0.3]))
    assert d["fitted_through_step"] == 4.0
    assert d["bias_before"] == pytest.approx(((0.4 - 0.1) + (0.8 - 0.3)) / 2)
    assert d["mae_after"] == pytest.approx(0.4)  # the identity map: the same errors

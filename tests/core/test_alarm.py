"""The exploitation alarm's sequential tests (wmrl.core.alarm): Kendall's tau, CUSUM detection, no alarm on a
calibrated world model, state round trip."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from wmrl.core.alarm import ExploitationMonitor, kendall_tau_a, tau_null_sd


def test_kendall_tau_a_known_values():
    assert kendall_tau_a([1, 2, 3, 4], [10, 20, 30, 40]) == (1.0, 6)
    assert kendall_tau_a([4, 3, 2, 1], [10, 20, 30, 40]) == (-1.0, 6)
    assert kendall_tau_a([1, 1, 2], [0, 1, 1]) == (0.5, 2)  # (1,1)|(0,1): tie in x = 0; (1,2)|(0,1): +1
    assert kendall_tau_a([1, 2], [5, 5]) == (0.0, 0)
    assert math.isclose(tau_null_sd(4), math.sqrt(26 / 108))
    with pytest.raises(ValueError, match="same length"):
        kendall_tau_a([1, 2], [1])
    with pytest.raises(ValueError, match="n >= 2"):
        tau_null_sd(1)


def _groups(rng, n_groups, G, shift, order_sign):
    """n_groups groups of G anchors: r ~ U(0, 1), r_tilde = r + shift + noise (over-rated by shift), r_hat ordered as
    order_sign * r."""
    gid = np.repeat(np.arange(n_groups), G)
    r = rng.random(n_groups * G)
    rt = r + shift + 0.05 * rng.standard_normal(r.size)
    rh = order_sign * r + 0.05 * rng.standard_normal(r.size)
    return gid, r, rt, rh


def test_a_calibrated_world_model_raises_no_alarm_and_an_over_rated_stream_raises_one():
    rng = np.random.default_rng(0)
    mon = ExploitationMonitor(threshold=8.0, drift=0.5)
    for t in range(200):  # in control: residual mean 0, the world model orders groups correctly
        assert not mon.update(t, *_groups(rng, 2, 4, 0.0, +1.0)).fired
    assert mon.n_alarms == 0 and 0.02 < mon.scale < 0.035  # the SD of a mean of 4 noises of SD 0.05: 0.025
    fired = [mon.update(200 + t, *_groups(rng, 2, 4, 0.15, +1.0)) for t in range(10)]  # now r < r_tilde by 0.15
    first = next(i for i, c in enumerate(fired) if c.fired)
    assert first <= 3 and fired[first].reason.startswith("residual") and fired[first].mean_residual < -0.1
    assert mon.alarm_steps[0] == 200 + first and mon.residual_cusum == 0.0  # reset after the alarm


def test_an_order_reversal_fires_the_order_test_without_a_residual_shift():
    rng = np.random.default_rng(1)
    mon = ExploitationMonitor(threshold=5.0, drift=0.5, min_groups=2)
    checks = [mon.update(t, *_groups(rng, 1, 4, 0.0, -1.0)) for t in range(20)]
    assert any(c.fired and c.reason == "order" for c in checks)
    assert np.mean([c.tau for c in checks]) < -0.5


def test_no_alarm_before_the_scale_has_its_groups_and_errors_are_named():
    mon = ExploitationMonitor(threshold=0.1, drift=0.0, min_groups=4)
    g = np.zeros(4, dtype=int)
    r = np.array([0.1, 0.2, 0.3, 0.4])
    assert not any(mon.update(t, g, r, r + 0.5, -r).fired for t in range(4))  # burn-in: 4 groups
    assert mon.update(4, g, r, r + 0.5, -r).fired
    with pytest.raises(ValueError, match="length N"):
        mon.update(5, g, r[:3], r, r)
    with pytest.raises(ValueError, match="finite"):
        mon.update(5, g, np.array([np.nan, 0, 0, 0]), r, r)
    with pytest.raises(ValueError, match="threshold"):
        ExploitationMonitor(threshold=0.0)


def test_state_round_trip_through_json():
    rng = np.random.default_rng(2)
    a, b = ExploitationMonitor(), ExploitationMonitor()
    for t in range(30):
        a.update(t, *_groups(rng, 2, 4, 0.3 if t > 10 else 0.0, 1.0))
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert b.state_dict() == a.state_dict() and b.n_alarms >= 1
    x = _groups(np.random.default_rng(3), 2, 4, 0.2, 1.0)
    assert a.update(30, *x) == b.update(30, *x)

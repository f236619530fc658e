"""Anchor routers: exact long-run fraction, min_every, seeding, state, stratification."""
import json

import numpy as np
import pytest

from wmrl.core.routing import FractionRouter, StratifiedRouter, make_router


def test_carry_makes_fraction_exact_hand_sequence():
    r = FractionRouter(fraction=0.1, min_every=None, seed=0)
    counts = [int(r.route([f"t{i}" for i in range(4)], step=s).sum()) for s in range(10)]
    # expected anchors 0.4 per step: carry .4 .8 1.2->1 (.2) .6 1.0->1 (0) .4 .8 1.2->1 .6 1.0->1
    assert counts == [0, 0, 1, 0, 1, 0, 0, 1, 0, 1]
    assert r.total_anchors == 4 and r.realised_fraction == pytest.approx(0.1)


@pytest.mark.parametrize("fraction", [0.1, 0.25, 1 / 3, 0.05])
def test_long_run_fraction_within_one_anchor(fraction):
    r = FractionRouter(fraction=fraction, min_every=None, seed=1)
    rng = np.random.default_rng(0)
    total = anchors = 0
    for s in range(300):
        m = int(rng.integers(1, 20))
        anchors += int(r.route(["a"] * m, step=s).sum())
        total += m
        assert abs(anchors - fraction * total) < 1.0 + 1e-9


def test_min_every_forces_an_anchor():
    r = FractionRouter(fraction=0.01, min_every=3, seed=0)
    steps_with = [s for s in range(12) if r.route(["a", "b"], step=s).any()]
    assert steps_with == [2, 5, 8, 11]  # every window of 3 steps holds one anchor


def test_min_every_does_not_bias_fraction_when_compatible():
    r = FractionRouter(fraction=0.1, min_every=3, seed=0)  # 0.1 * 4 * 3 >= 1
    for s in range(1000):
        r.route(["a"] * 4, step=s)
    assert abs(r.total_anchors - 0.1 * r.total_groups) < 1.0 + 1e-9


def test_fraction_one_and_zero():
    ones = FractionRouter(fraction=1.0, seed=0)
    zeros = FractionRouter(fraction=0.0, min_every=1, seed=0)
    for s in range(5):
        assert ones.route(["a", "b", "c"], step=s).all()
        assert not zeros.route(["a", "b", "c"], step=s).any()
    assert FractionRouter(0.5).route([], step=0).shape == (0,)


def test_seeded_and_state_roundtrip_through_json():
    a = FractionRouter(fraction=0.3, seed=42)
    b = FractionRouter(fraction=0.3, seed=42)
    ids = [str(i) for i in range(10)]
    for s in range(5):
        assert np.array_equal(a.route(ids, s), b.route(ids, s))
    state = json.loads(json.dumps(a.state_dict()))
    c = FractionRouter(fraction=0.9, seed=0)
    c.load_state_dict(state)
    for s in range(5, 10):
        assert np.array_equal(a.route(ids, s), c.route(ids, s))
    with pytest.raises(ValueError, match="StratifiedRouter"):
        StratifiedRouter().load_state_dict(state)


def test_stratified_gives_each_task_its_fraction():
    r = StratifiedRouter(fraction=0.25, min_every=None, seed=0)
    ids = ["a"] * 4 + ["b"] * 2 + ["c"] * 1
    per_task = {"a": 0, "b": 0, "c": 0}
    for s in range(40):
        mask = r.route(ids, step=s)
        for t, m in zip(ids, mask):
            per_task[t] += int(m)
    assert per_task == {"a": 40, "b": 20, "c": 10}  # 0.25 * (160, 80, 40)
    state = json.loads(json.dumps(r.state_dict()))
    r2 = StratifiedRouter()
    r2.load_state_dict(state)
    assert np.array_equal(r.route(ids, 40), r2.route(ids, 40))


def test_bad_config_and_calls():
    with pytest.raises(ValueError, match="fraction"):
        FractionRouter(fraction=1.5)
    with pytest.raises(ValueError, match="min_every"):
        FractionRouter(min_every=0)
    with pytest.raises(ValueError, match="unknown router"):
        make_router("best")
    r = FractionRouter()
    r.route(["a"], step=3)
    with pytest.raises(ValueError, match="backwards"):
        r.route(["a"], step=2)

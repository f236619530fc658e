"""The synthetic problem and the world-model error shapes."""
import numpy as np
import pytest

from wmrl.sim.bandit import BanditProblem, WorldModelSpec, world_model_scores


def test_problem_is_seeded_and_bounded():
    a = BanditProblem.make(5, 20, seed=3)
    b = BanditProblem.make(5, 20, seed=3)
    np.testing.assert_array_equal(a.rewards, b.rewards)
    assert a.features.shape == (5, 20, 8) and a.rewards.shape == (5, 20)
    assert np.all((a.rewards > 0) & (a.rewards < 1))
    assert np.all(a.exploit.sum(axis=1) == 2)  # 10% of 20 arms per task
    assert a.optimum > a.uniform_value
    assert not np.array_equal(a.rewards, BanditProblem.make(5, 20, seed=4).rewards)


def test_monotone_shape_is_strictly_increasing_and_compresses_top():
    r = np.linspace(0, 1, 101)[None, :]
    rng = np.random.default_rng(0)
    h = world_model_scores(r, np.zeros_like(r, bool), WorldModelSpec("monotone", 0.9, 0.0), rng)
    assert np.all(np.diff(h[0]) > 0)
    assert (h[0, -1] - h[0, -2]) < 0.2 * (r[0, -1] - r[0, -2])  # slope ~ 1 - B at the top
    assert h[0, 0] == 0 and h[0, -1] == pytest.approx(1.0)


def test_offset_is_constant_within_a_group():
    r = np.random.default_rng(1).random((4, 8))
    h = world_model_scores(r, np.zeros_like(r, bool), WorldModelSpec("offset", 1.0, 0.0), np.random.default_rng(2))
    d = h - r
    assert np.allclose(d, d[:, :1]) and d[:, 0].std() > 0.1


def test_exploit_adds_bias_only_on_exploit_arms_and_noise_has_sigma():
    r = np.full((200, 50), 0.5)
    ex = np.zeros_like(r, bool)
    ex[:, :5] = True
    h = world_model_scores(r, ex, WorldModelSpec("exploit", 0.7, 0.2), np.random.default_rng(0))
    assert (h[:, :5] - r[:, :5]).mean() == pytest.approx(0.7, abs=0.01)
    assert (h[:, 5:] - r[:, 5:]).mean() == pytest.approx(0.0, abs=0.01)
    assert (h - r)[:, 5:].std() == pytest.approx(0.2, abs=0.01)


def test_bad_specs():
    with pytest.raises(ValueError, match="shape"):
        WorldModelSpec("wiggly", 0.1, 0.1)
    with pytest.raises(ValueError, match=">= 0"):
        WorldModelSpec("offset", -1.0, 0.1)
    with pytest.raises(ValueError, match="blend"):
        WorldModelSpec("monotone", 1.5, 0.0)


def test_rank_world_model_is_a_fixed_error_per_program():
    p = BanditProblem.make(3, 16, seed=1)
    q = BanditProblem.make(3, 16, seed=1)
    assert np.array_equal(p.rank_error, q.rank_error) and np.array_equal(p.rewards, q.rewards)
    rows, arms = np.arange(3)[:, None], np.tile(np.arange(16), (3, 1))
    spec = WorldModelSpec("rank", 0.3, 0.0)
    r = p.rewards[rows, arms]
    a = world_model_scores(r, p.exploit[rows, arms], spec, np.random.default_rng(0), p.rank_error[rows, arms])
    b = world_model_scores(r, p.exploit[rows, arms], spec, np.random.default_rng(9), p.rank_error[rows, arms])
    assert np.array_equal(a, b) and np.allclose(a - r, 0.3 * p.rank_error)  # the same answer every time
    with pytest.raises(ValueError, match="rank_error"):
        world_model_scores(r, p.exploit[rows, arms], spec, np.random.default_rng(0))
    # the world model's favourite programs are worse than the best ones, and no worse without error
    assert p.world_model_optimum(spec) < p.optimum
    assert p.world_model_optimum(WorldModelSpec("rank", 0.0, 0.0)) == pytest.approx(p.optimum)

"""Group-relative advantages against hand-computed values (formulas of GRPO, Shao et al. 2024; TRL, verl)."""
import math

import pytest
import numpy as np

from wmrl.core.advantages import group_advantages, group_stats


def test_one_group_unbiased_std_hand_values():
    r = np.array([1.0, 2.0, 3.0, 4.0])
    g = np.array([0, 0, 0, 0])
    adv = group_advantages(r, g)  # default: unbiased std, eps=1e-6
    std = math.sqrt((1.5**2 + 0.5**2 + 0.5**2 + 1.5**2) / 3)  # 1.2909944
    expected = np.array([-1.5, -0.5, 0.5, 1.5]) / (std + 1e-6)
    assert adv.dtype == np.float64
    np.testing.assert_allclose(adv, expected)


def test_population_std_and_eps():
    r = np.array([1.0, 2.0, 3.0, 4.0])
    g = np.zeros(4, dtype=np.int64)
    adv = group_advantages(r, g, std="population", eps=1e-4)  # TRL's eps
    std = math.sqrt(5 / 4)
    np.testing.assert_allclose(adv, np.array([-1.5, -0.5, 0.5, 1.5]) / (std + 1e-4))


def test_without_std_two_groups_trl_example():
    # Two prompts x 4 samples, rewards as in the GRPO "scale=none" example: group minus group mean.
    r = np.array([0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    g = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    adv = group_advantages(r, g, normalize_std=False)
    np.testing.assert_allclose(adv, np.array([-0.5, 0.5, -0.5, 0.5, 0.75, -0.25, -0.25, -0.25]))


def test_two_groups_normalised_interleaved_noncontiguous_ids():
    r = np.array([0.0, 10.0, 1.0, 30.0])
    g = np.array([7, 3, 7, 3])  # arbitrary ids, interleaved
    adv = group_advantages(r, g)
    # group 7: [0, 1] mean .5 std(unbiased)=sqrt(.5); group 3: [10, 30] mean 20 std=sqrt(200)
    s7, s3 = math.sqrt(0.5), math.sqrt(200.0)
    expected = np.array([-0.5 / (s7 + 1e-6), -10 / (s3 + 1e-6), 0.5 / (s7 + 1e-6), 10 / (s3 + 1e-6)])
    np.testing.assert_allclose(adv, expected)


def test_size_one_group_and_all_equal_group_give_zero():
    r = np.array([0.7, 0.3, 0.3, 0.3, 0.9, 0.1])
    g = np.array([0, 1, 1, 1, 2, 2])
    for norm in (True, False):
        adv = group_advantages(r, g, normalize_std=norm)
        assert adv[0] == 0.0  # size-1 group
        assert np.all(adv[1:4] == 0.0)  # all-equal group: exactly 0, not 0/eps noise
        assert adv[4] > 0 and adv[5] < 0


def test_all_equal_float_rounding_not_amplified():
    r = np.full((8,), 0.1, dtype=np.float32)  # mean has rounding error in float
    adv = group_advantages(r, np.zeros(8, dtype=np.int64))
    assert np.all(adv == 0.0)


def test_valid_mask_excludes_from_stats():
    r = np.array([1.0, 2.0, 100.0, 3.0])
    g = np.zeros(4, dtype=np.int64)
    valid = np.array([True, True, False, True])
    adv = group_advantages(r, g, valid=valid)
    # valid rewards [1, 2, 3]: mean 2, unbiased std 1
    np.testing.assert_allclose(adv, np.array([-1.0, 0.0, 0.0, 1.0]) / (1.0 + 1e-6))
    # invalid reward may even be NaN
    r2 = r.copy()
    r2[2] = float("nan")
    np.testing.assert_allclose(group_advantages(r2, g, valid=valid), adv)


def test_valid_mask_leaving_one_sample_gives_zero():
    r = np.array([1.0, 2.0])
    adv = group_advantages(r, np.array([0, 0]), valid=np.array([True, False]))
    assert np.all(adv == 0)


def test_group_stats_counts():
    mean, sd, cnt = group_stats(np.array([1.0, 3.0, 5.0]), np.array([0, 0, 1]), std="population")
    np.testing.assert_allclose(mean, np.array([2.0, 2.0, 5.0], dtype=np.float64))
    np.testing.assert_allclose(sd, np.array([1.0, 1.0, 0.0], dtype=np.float64))
    assert cnt.tolist() == [2, 2, 1]


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        (dict(rewards=np.ones((2, 2)), group_ids=np.zeros(4, dtype=np.int64)), "1-D"),
        (dict(rewards=np.ones(3), group_ids=np.zeros(2, dtype=np.int64)), "same length"),
        (dict(rewards=np.ones(2), group_ids=np.zeros(2)), "integer"),
        (dict(rewards=np.array([1.0, float("nan")]), group_ids=np.zeros(2, dtype=np.int64)), "NaN"),
        (dict(rewards=np.ones(2), group_ids=np.zeros(2, dtype=np.int64), std="bessel"), "unbiased"),
        (dict(rewards=np.ones(2), group_ids=np.zeros(2, dtype=np.int64), eps=0.0), "eps"),
    ],
)
def test_bad_inputs_raise_clear_errors(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        group_advantages(**kwargs)

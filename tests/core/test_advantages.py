"""Group-relative advantages against hand-computed values (formulas of DESIGN.md §4, TRL, verl)."""
import math

import pytest
import torch

from wmrl.core.advantages import group_advantages, group_stats


def test_one_group_unbiased_std_hand_values():
    r = torch.tensor([1.0, 2.0, 3.0, 4.0])
    g = torch.tensor([0, 0, 0, 0])
    adv = group_advantages(r, g)  # default: unbiased std, eps=1e-6
    std = math.sqrt((1.5**2 + 0.5**2 + 0.5**2 + 1.5**2) / 3)  # 1.2909944
    expected = torch.tensor([-1.5, -0.5, 0.5, 1.5]) / (std + 1e-6)
    assert adv.dtype == torch.float32
    torch.testing.assert_close(adv, expected)


def test_population_std_and_eps():
    r = torch.tensor([1.0, 2.0, 3.0, 4.0])
    g = torch.zeros(4, dtype=torch.int64)
    adv = group_advantages(r, g, std="population", eps=1e-4)  # TRL's eps
    std = math.sqrt(5 / 4)
    torch.testing.assert_close(adv, torch.tensor([-1.5, -0.5, 0.5, 1.5]) / (std + 1e-4))


def test_without_std_two_groups_trl_example():
    # Two prompts x 4 samples, rewards as in the GRPO "scale=none" example: group minus group mean.
    r = torch.tensor([0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    g = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    adv = group_advantages(r, g, normalize_std=False)
    torch.testing.assert_close(adv, torch.tensor([-0.5, 0.5, -0.5, 0.5, 0.75, -0.25, -0.25, -0.25]))


def test_two_groups_normalised_interleaved_noncontiguous_ids():
    r = torch.tensor([0.0, 10.0, 1.0, 30.0])
    g = torch.tensor([7, 3, 7, 3])  # arbitrary ids, interleaved
    adv = group_advantages(r, g)
    # group 7: [0, 1] mean .5 std(unbiased)=sqrt(.5); group 3: [10, 30] mean 20 std=sqrt(200)
    s7, s3 = math.sqrt(0.5), math.sqrt(200.0)
    expected = torch.tensor([-0.5 / (s7 + 1e-6), -10 / (s3 + 1e-6), 0.5 / (s7 + 1e-6), 10 / (s3 + 1e-6)])
    torch.testing.assert_close(adv, expected)


def test_size_one_group_and_all_equal_group_give_zero():
    r = torch.tensor([0.7, 0.3, 0.3, 0.3, 0.9, 0.1])
    g = torch.tensor([0, 1, 1, 1, 2, 2])
    for norm in (True, False):
        adv = group_advantages(r, g, normalize_std=norm)
        assert adv[0] == 0.0  # size-1 group
        assert torch.all(adv[1:4] == 0.0)  # all-equal group: exactly 0, not 0/eps noise
        assert adv[4] > 0 and adv[5] < 0


def test_all_equal_float_rounding_not_amplified():
    r = torch.full((8,), 0.1, dtype=torch.float32)  # mean has rounding error in float
    adv = group_advantages(r, torch.zeros(8, dtype=torch.int64))
    assert torch.all(adv == 0.0)


def test_valid_mask_excludes_from_stats():
    r = torch.tensor([1.0, 2.0, 100.0, 3.0])
    g = torch.zeros(4, dtype=torch.int64)
    valid = torch.tensor([True, True, False, True])
    adv = group_advantages(r, g, valid=valid)
    # valid rewards [1, 2, 3]: mean 2, unbiased std 1
    torch.testing.assert_close(adv, torch.tensor([-1.0, 0.0, 0.0, 1.0]) / (1.0 + 1e-6))
    # invalid reward may even be NaN
    r2 = r.clone()
    r2[2] = float("nan")
    torch.testing.assert_close(group_advantages(r2, g, valid=valid), adv)


def test_valid_mask_leaving_one_sample_gives_zero():
    r = torch.tensor([1.0, 2.0])
    adv = group_advantages(r, torch.tensor([0, 0]), valid=torch.tensor([True, False]))
    assert torch.all(adv == 0)


def test_group_stats_counts():
    mean, sd, cnt = group_stats(torch.tensor([1.0, 3.0, 5.0]), torch.tensor([0, 0, 1]), std="population")
    torch.testing.assert_close(mean, torch.tensor([2.0, 2.0, 5.0], dtype=torch.float64))
    torch.testing.assert_close(sd, torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64))
    assert cnt.tolist() == [2, 2, 1]


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        (dict(rewards=torch.ones(2, 2), group_ids=torch.zeros(4, dtype=torch.int64)), "1-D"),
        (dict(rewards=torch.ones(3), group_ids=torch.zeros(2, dtype=torch.int64)), "same length"),
        (dict(rewards=torch.ones(2), group_ids=torch.zeros(2)), "integer"),
        (dict(rewards=torch.tensor([1.0, float("nan")]), group_ids=torch.zeros(2, dtype=torch.int64)), "NaN"),
        (dict(rewards=torch.ones(2), group_ids=torch.zeros(2, dtype=torch.int64), std="bessel"), "unbiased"),
        (dict(rewards=torch.ones(2), group_ids=torch.zeros(2, dtype=torch.int64), eps=0.0), "eps"),
    ],
)
def test_bad_inputs_raise_clear_errors(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        group_advantages(**kwargs)

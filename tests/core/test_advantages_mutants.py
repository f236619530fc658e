"""Group-relative advantages at the points mutation testing found unchecked (docs/testing.md, "Mutation
testing"): the default std, a lone sample's std, exact zeros for all-equal groups, the empty batch, the count's
dtype."""
from __future__ import annotations

import numpy as np

from wmrl.core.advantages import group_advantages, group_stats


def test_group_stats_default_is_the_unbiased_std():
    r = np.array([0.0, 1.0, 3.0])
    _, sd, _ = group_stats(r, np.zeros(3, dtype=np.int64))
    np.testing.assert_allclose(sd, np.std(r, ddof=1))


def test_a_lone_sample_has_std_zero_under_the_unbiased_estimate():
    mean, sd, count = group_stats(np.array([0.7, 0.1, 0.3]), np.array([0, 1, 1]), std="unbiased")
    assert sd[0] == 0.0 and mean[0] == 0.7 and count[0] == 1
    assert count.dtype == np.int64


def test_an_all_equal_group_gets_exactly_zero_although_its_mean_rounds():
    r = np.full(3, 0.1)  # the float mean is 0.10000000000000002: r - mean is about 1e-17, not 0
    assert r.mean() != 0.1
    assert np.all(group_advantages(r, np.zeros(3, dtype=np.int64)) == 0.0)


def test_an_empty_batch_has_no_advantages():
    out = group_advantages(np.zeros(0), np.zeros(0, dtype=np.int64))
    assert out.shape == (0,) and out.dtype == np.float64

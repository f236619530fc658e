"""The infra alarm: an exact binomial upper tail, and which counts raise it."""
from __future__ import annotations

import math

import pytest
from scipy import stats

from wmrl.core.infra import binomial_upper_tail, check_infra, group_alarms


@pytest.mark.parametrize("k, n, p", [(0, 10, 0.1), (1, 4, 0.01), (2, 4, 0.01), (5, 200, 0.01), (30, 100, 0.2),
                                     (101, 100, 0.5), (3, 3, 0.999)])
def test_upper_tail_matches_scipy(k, n, p):
    assert math.isclose(binomial_upper_tail(k, n, p), float(stats.binom.sf(k - 1, n, p)), rel_tol=1e-9, abs_tol=1e-300)


def test_which_counts_raise_the_alarm():
    assert not check_infra(0, 16).alarm and not check_infra(1, 16).alarm  # one flaky execution is background
    assert check_infra(4, 16).alarm and check_infra(4, 16).rate == 0.25
    assert not check_infra(4, 16, background_rate=0.2).alarm  # a host known to be flaky
    assert group_alarms([True, True, False, False, False, True, False, False], [0, 0, 0, 0, 1, 1, 1, 1]) == [0]


def test_bad_counts_are_refused():
    with pytest.raises(ValueError, match="n_infra <= n"):
        check_infra(3, 2)
    with pytest.raises(ValueError, match="background_rate"):
        check_infra(0, 2, background_rate=1.0)
    with pytest.raises(ValueError, match="same length"):
        group_alarms([True], [0, 1])

"""The infra alarm's binomial tail at the edge that surviving mutants of ``wmrl/core/infra.py`` showed untested
(docs/testing.md, "Mutation testing")."""
from __future__ import annotations

from wmrl.core.infra import binomial_upper_tail


def test_upper_tail_of_a_certain_failure_is_one():
    # p = 1: every one of the n trials fails, so X = n >= k for every k <= n
    assert binomial_upper_tail(3, 5, 1.0) == 1.0
    assert binomial_upper_tail(5, 5, 1.0) == 1.0

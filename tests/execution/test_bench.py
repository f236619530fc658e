"""The benchmark helpers (small sizes; the figures themselves come from ``wmrl sandbox-bench``)."""
from __future__ import annotations

import pytest

from wmrl.execution.bench import Timing, pool_throughput, sandbox_overhead

from conftest import GOOD_PROGRAM, WEAK_PROGRAM, require_bwrap


def test_timing_stats():
    t = Timing("x", [0.3, 0.1, 0.2, 0.4])
    assert t.median == pytest.approx(0.25) and t.mean == pytest.approx(0.25) and t.p90 == 0.4
    assert t.as_dict()["min_s"] == 0.1


def test_overhead_measures_all_three_modes():
    require_bwrap()
    out = sandbox_overhead(repeats=2)
    assert set(out) == {"plain", "rlimit", "bwrap"} and all(len(t.wall_s) == 2 for t in out.values())
    with pytest.raises(ValueError):
        sandbox_overhead(repeats=0)


def test_pool_throughput_same_scores_at_each_level(tiny_task):
    require_bwrap()
    levels = pool_throughput(tiny_task, [GOOD_PROGRAM, WEAK_PROGRAM], concurrencies=(1, 2))
    assert [x.concurrency for x in levels] == [1, 2]
    assert all(x.statuses == {"ok": 2} for x in levels)
    assert levels[0].scores == levels[1].scores and levels[0].scores[0] == pytest.approx(1.0)
    assert levels[0].per_minute > 0 and levels[0].cpu_s > 0

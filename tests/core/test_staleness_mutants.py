"""The step-time projection's cases that surviving mutants of ``wmrl/core/staleness.py`` showed untested
(docs/testing.md, "Mutation testing")."""
from __future__ import annotations

import pytest

from wmrl.core.staleness import LatencyModel, project_step_times

FIXED = LatencyModel(10.0, 0.0, 0.0, 10.0)  # every execution takes 10 s


def test_staleness_mean_is_the_steps_a_group_spans_capped_at_the_bound():
    # executor-bound, T_async = 10 s: a 10 s group spans ceil(10 / 10) = 1 step
    assert project_step_times(1.0, 0.5, 0.5, 8, 4, 8, FIXED, k=20)["staleness_mean"] == pytest.approx(1.0)
    # LM-bound, T_async = T_LM = 2 s, no wait at k = 10: ceil(10 / 2) = 5 steps
    assert project_step_times(1.0, 0.5, 0.5, 4, 4, 64, FIXED, k=10)["staleness_mean"] == pytest.approx(5.0)
    # the bound k = 2 holds it at 2 (T_async = 4 s: ceil(10 / 4) = 3 > 2)
    assert project_step_times(1.0, 0.5, 0.5, 4, 4, 64, FIXED, k=2)["staleness_mean"] == pytest.approx(2.0)


def test_a_negative_world_model_time_is_refused():
    with pytest.raises(ValueError, match="times >= 0"):
        project_step_times(1.0, -0.5, 0.5, 8, 4, 8, FIXED, k=1)

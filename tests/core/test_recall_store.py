"""The store of measured rewards (wmrl.core.recall)."""
import math

import numpy as np
import pytest

from wmrl.core.recall import MeasuredRewards
from wmrl.trajectory import Trajectory


def _traj(task, comp, step):
    return Trajectory(stream="anchor", run="r", step=step, group_id=0, sample=0, task_id=task, prompt="p",
                      completion=comp, scaffold="grammar")


def test_lookup_by_task_and_completion_with_the_mean_of_repeats_and_failures_skipped():
    m = MeasuredRewards()
    m.add(["a", "a", "b", "a"], ["x", "x", "x", "y"], [0.2, 0.4, 0.9, float("nan")])
    m.add_records([{"trajectory": _traj("b", "y", 1), "reward": 0.7}, {"trajectory": None, "reward": 1.0},
                   {"trajectory": _traj("b", "z", 1), "reward": None}])
    got = m.lookup(["a", "b", "a", "b", "c", "b"], ["x", "x", "y", "y", "x", "z"])
    assert got[0] == pytest.approx(0.3) and got[1] == 0.9 and got[3] == 0.7
    assert math.isnan(got[2]) and math.isnan(got[4]) and math.isnan(got[5])
    assert len(m) == 3 and got.dtype == np.float64


def test_mismatched_lengths_are_refused():
    with pytest.raises(ValueError, match="one entry per execution"):
        MeasuredRewards().add(["a"], ["x", "y"], [0.1, 0.2])

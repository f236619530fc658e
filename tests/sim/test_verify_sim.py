"""The simulation's favourite verification (RunSpec.verify): refused without recall, one execution per world-model
group and step without recall, fewer with it, and the executed favourites change the run."""
from __future__ import annotations

import pytest

from wmrl.sim.bandit import WorldModelSpec
from wmrl.sim.engine import RunSpec, SimConfig, simulate


def test_verification_needs_a_recipe_with_recall():
    with pytest.raises(ValueError, match="recall"):
        RunSpec("wmrl-no-recall", verify=True)


def test_verification_costs_one_execution_per_world_model_group_and_step_without_recall():
    cfg = SimConfig(n_tasks=3, n_arms=16, group_size=4, steps=20, log_every=5)
    wm = WorldModelSpec("rank", 0.3, 0.0)
    runs = [RunSpec("wmrl-cv", wm, rho=0.2, seed=0, recall=False, verify=v) for v in (False, True)]
    runs += [RunSpec("wmrl-cv", wm, rho=0.2, seed=0, recall=True, verify=True)]
    _, finals = simulate(runs, cfg)
    plain, verified, recalled = finals.executions.tolist()
    anchor_groups = plain // cfg.group_size
    assert verified - plain == cfg.steps * cfg.n_tasks - anchor_groups  # every other group's favourite, every step
    assert recalled < verified  # a favourite executed before is recalled for free
    assert finals.J_final[0] != finals.J_final[1]

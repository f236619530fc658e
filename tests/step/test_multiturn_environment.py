"""Multi-turn episodes are an environment of the step engine: the ``extend`` hook runs turns 2..K of routed
trajectories with no trainer in sight, the engine writes the final submissions into the step batch, refuses
asynchronous anchors in one line, and a checkpoint keeps the environment's run times (old checkpoints, which kept
them at the top level, still load)."""
from __future__ import annotations

import numpy as np
import pytest
from tests.support.fakes import FakeExecutor, FakePolicy, FakeScaffold, FakeWorldModel
from tests.training.test_step_parity import _task_with_files

from wmrl.runs.checkpoint import environment_state
from wmrl.runs.ledger import Ledger
from wmrl.step.engine import StepEngine
from wmrl.step.environment import ExtendingEnvironment, StatefulEnvironment
from wmrl.step.multiturn import MultiTurnKaggleEnvironment


@pytest.fixture(autouse=True)
def _own_home(tmp_path, monkeypatch):
    monkeypatch.setenv("WMRL_HOME", str(tmp_path / "home"))  # validation views of the fake tasks


def _env(tmp_path, executor=None) -> MultiTurnKaggleEnvironment:
    tasks = [_task_with_files(tmp_path / "tasks", i) for i in range(2)]
    return MultiTurnKaggleEnvironment(tasks=tasks, scaffold=FakeScaffold(), executor=executor or FakeExecutor(),
                                      world_model=FakeWorldModel(), tasks_per_step=2, group_size=3, seed=0,
                                      max_turns=2)


def test_the_engine_steps_multi_turn_episodes_without_a_trainer(tmp_path):
    env, ledger = _env(tmp_path), Ledger()
    assert isinstance(env, ExtendingEnvironment)
    engine = StepEngine("wmrl", anchor_fraction=0.5, seed=0)
    ledger.begin_step()
    sb = engine.step(env, FakePolicy(0), 1, ledger)
    ep = sb.episodes
    assert ep is not None and ep.B == sb.B == 6 and sb.feedback is not None
    assert sb.anchor_groups.sum() == 1  # one of two groups
    assert ep.n_turns.max() == 2  # the later turn ran
    finals = [ep.final(e) for e in range(ep.B)]
    for e in range(sb.B):
        assert finals[e].executed == bool(sb.is_anchor[e])  # only anchor episodes ran in the sandbox
        assert np.isfinite(sb.reward_wm[e]) and sb.reward_wm[e] == finals[e].reward_wm
        if sb.is_anchor[e]:
            assert sb.status[e] == finals[e].status and sb.reward_true[e] == finals[e].reward_true
        else:
            assert np.isnan(sb.reward_true[e]) and sb.status[e] is None
    assert ledger.executions["anchor"].count == sum(fb is not None and fb.executed for fbs in ep.feedback for fb in fbs)
    assert set(ledger.turn_executions) == {"1", "2"}  # counted per turn
    assert sb.out.advantages.shape == (6,)


def test_an_extending_environment_with_asynchronous_anchors_is_refused_in_one_line(tmp_path):
    engine = StepEngine("wmrl", anchor_fraction=0.5, seed=0, anchor_staleness=2)
    with pytest.raises(ValueError) as e:
        engine.step(_env(tmp_path), FakePolicy(0), 1)
    assert "\n" not in str(e.value) and "synchronous anchors" in str(e.value)


def test_the_run_times_survive_a_checkpoint_of_either_shape(tmp_path):
    env = _env(tmp_path)
    assert isinstance(env, StatefulEnvironment)
    env.wall_times.record("t1", 2.0)
    saved_now = {"environment": env.state_dict(), "recipe": {}, "router": {}}
    saved_before = {"wall_times": {"t1": [3.0, 5.0]}, "recipe": {}, "router": {}}  # text checkpoints before
    for saved, want in ((saved_now, 2.0), (saved_before, 4.0)):
        fresh = _env(tmp_path)
        fresh.load_state_dict(environment_state(saved))
        assert fresh.wall_times.typical("t1") == want and fresh.wall_times.seeded
    assert environment_state({"recipe": {}, "router": {}, "wall_times": {}}) == {}

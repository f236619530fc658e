"""The episode loop (wmrl.episodes.rollout.run_episodes) with a fake policy and a scripted feedback function:
turns, the history in the prompt, the submit action, infrastructure failures, one-turn episodes = single-turn."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
from _training_fakes import FakePolicy, FakeScaffold, fake_task

from wmrl.episodes.observation import Observation
from wmrl.episodes.rollout import TurnFeedback, is_submit, run_episodes, turn_seed


def _obs(turn: int, score: float) -> Observation:
    return Observation(turn=turn, source="execution", status="ok", validation_score=score, metric="roc_auc",
                       lower_is_better=False, wall_s=1.0)


class Script:
    """Feedback that grades a program by its number of '3' tokens; fails the infrastructure on chosen calls."""

    def __init__(self, infra_at: set[tuple[int, int]] = frozenset()):
        self.calls: list[tuple[int, list[int], list[str]]] = []
        self.infra_at = infra_at

    def __call__(self, turn, eps, batch):
        self.calls.append((turn, list(eps), list(batch.prompts)))
        out = []
        for e, c in zip(eps, batch.completions):
            r = c.split().count("3") / 4
            ok = (e, turn) not in self.infra_at
            out.append(TurnFeedback(observation=_obs(turn, r), reward_true=r if ok else math.nan, status="ok",
                                    valid=ok, executed=True))
        return out


def test_k_turns_show_the_history_and_keep_the_groups():
    tasks = [fake_task(0), fake_task(1)]
    fb = Script()
    ep = run_episodes(FakePolicy(), FakeScaffold(), tasks, 3, 3, fb, seed=5)
    assert ep.B == 6 and len(ep.turns) == 3 and ep.n_turns.tolist() == [3] * 6
    assert ep.task_index.tolist() == [0, 0, 0, 1, 1, 1]
    # turn 2's prompt of episode e holds its turn-1 completion and that turn's rendered observation
    turn2 = fb.calls[1]
    for e, prompt in zip(turn2[1], turn2[2]):
        assert prompt.startswith("solve task") and ep.completion(e, 1) in prompt
        assert ep.feedback[e][0].observation.render() in prompt
    assert ep.turns[1].group_ids == ep.task_index[ep.rows[1]].tolist()  # later turns keep their episode's group
    np.testing.assert_array_equal(ep.final_array("reward_true"), ep.turn_array("reward_true")[:, 2])
    assert ep.tokens().tolist() == [12] * 6


def test_one_turn_is_the_single_turn_sample():
    tasks = [fake_task(0)]
    ep = run_episodes(FakePolicy(), FakeScaffold(), tasks, 4, 1, Script(), seed=11)
    single = FakePolicy().sample(tasks, FakeScaffold(), 4, generator_seed=11)
    assert ep.turns[0].completions == single.completions and turn_seed(11, 1) == 11


class RepeatPolicy(FakePolicy):
    """Repeats the previous attempt of episode 0 (the submit action); the others sample fresh tokens."""

    def sample(self, tasks, scaffold, group_size, generator_seed=None, prompts=None, **kw):
        b = super().sample(tasks, scaffold, group_size, generator_seed=generator_seed, prompts=prompts, **kw)
        if prompts is not None:
            for i, p in enumerate(prompts):
                if "REPEAT" in p:
                    prev = p.split("```python\n")[-1].split("\n```")[0]
                    b.completions[i] = prev
        return b


class RepeatScaffold(FakeScaffold):
    def prompt(self, task):
        return f"solve {task.id}" + (" REPEAT" if task.id == "task0" else "")


def test_repeating_the_last_attempt_submits_it():
    tasks = [fake_task(0), fake_task(1)]
    fb = Script()
    ep = run_episodes(RepeatPolicy(), RepeatScaffold(), tasks, 2, 3, fb, seed=3)
    assert ep.submitted.tolist() == [True, True, False, False]
    assert ep.final_turn.tolist() == [1, 1, 3, 3] and ep.n_turns.tolist() == [2, 2, 3, 3]
    assert [e for _, eps, _ in fb.calls[1:] for e in eps if e < 2] == []  # a submission runs nothing
    assert ep.feedback[0][1] is None and ep.rows[1].tolist() == [0, 1, 2, 3] and ep.rows[2].tolist() == [2, 3]
    assert is_submit(" x \n", "x") and not is_submit("x", "y")


def test_an_infrastructure_failure_ends_and_drops_the_episode():
    fb = Script(infra_at={(1, 1)})
    ep = run_episodes(FakePolicy(), FakeScaffold(), [fake_task(0)], 3, 2, fb, seed=0)
    assert ep.valid.tolist() == [True, False, True] and ep.final_turn.tolist() == [2, 1, 2]
    assert ep.rows[1].tolist() == [0, 2]


def test_a_feedback_function_must_answer_every_program():
    with pytest.raises(ValueError, match="returned 0 feedbacks for 2 programs"):
        run_episodes(FakePolicy(), FakeScaffold(), [fake_task(0)], 2, 2, lambda t, e, b: [], seed=0)
    with pytest.raises(ValueError, match="max_turns must be >= 1"):
        run_episodes(FakePolicy(), FakeScaffold(), [fake_task(0)], 2, 0, Script())


def test_no_feedback_ends_the_episode_with_its_program():
    def feedback(turn, eps, batch):
        return [TurnFeedback(observation=None if e % 2 else _obs(turn, 0.5), reward_true=0.5, valid=True)
                for e in eps]

    ep = run_episodes(FakePolicy(), FakeScaffold(), [fake_task(0)], 4, 3, feedback, seed=1)
    assert ep.final_turn.tolist() == [3, 1, 3, 1] and ep.valid.all() and not ep.submitted.any()
    assert ep.rows[1].tolist() == [0, 2]

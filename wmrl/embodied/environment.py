"""Meta-World as an environment of the step engine (:class:`wmrl.step.environment.Environment`, name ``metaworld``).

- ``sample``: M training initial states of the step (seeded by (seed, step)), G episodes each, run in lockstep with
  a ``torch.Generator`` seeded by (seed, step), so a resumed run draws the same episodes
  (:func:`wmrl.embodied.env.rollout`).
- ``submit``: the real reward of an anchor episode is the simulator's success, read for the anchors only
  (:func:`anchor_rewards`): no other episode's success can enter the gradient; done futures, so the step engine
  consumes them at their own step. Each label counts as one execution (status ``ok``) in the ledger (what needs a
  human or a trusted check on a real robot); its CPU is the trainer's own.
- ``predict``: the progress predictor scores every visited state of every episode and collapses each episode to
  r_hat (:func:`wmrl.embodied.progress.score_episodes`): the world model reads the episode's states.
"""
from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import numpy as np

from wmrl.embodied.env import InitialState, rollout
from wmrl.embodied.progress import Collapse, ProgressPredictor, score_episodes
from wmrl.step.environment import Outcome, Predictions, Rollouts, done, register_environment


def anchor_rewards(success: np.ndarray, is_anchor: np.ndarray) -> np.ndarray:
    """The true rewards the recipe may see: the simulator's success on anchor episodes, NaN on all others
    ([B] float64).

    Raises:
        ValueError: the two arrays differ in shape.
    """
    s = np.asarray(success, np.float64)
    a = np.asarray(is_anchor, bool)
    if s.shape != a.shape:
        raise ValueError(f"success {s.shape} and is_anchor {a.shape} must have the same shape [B]")
    return np.where(a, s, np.nan)


@register_environment("metaworld")
class MetaWorldEnvironment:
    """The embodied track's environment.

    Args:
        pool: the simulator pool (:func:`wmrl.embodied.env.shared_pool`).
        train_states: the training initial states the steps draw groups from.
        instruction_index: ``task -> index`` of the task's instruction in the policy's vocabulary.
        world_model: the progress predictor.
        wm_instruction_index: ``task -> index`` of the task's instruction in the predictor's vocabulary.
        groups_per_step: M. group_size: G. seed: the run's seed.
        collapse, k: how an episode's state scores become r_hat (:func:`score_episodes`).
    """

    name = "metaworld"

    def __init__(self, pool: Any, train_states: list[InitialState], instruction_index: Callable[[str], int],
                 world_model: ProgressPredictor, wm_instruction_index: Callable[[str], int], *, groups_per_step: int,
                 group_size: int, seed: int, collapse: Collapse = "shaping", k: int = 5) -> None:
        self.pool, self.train_states = pool, train_states
        self.instruction_index, self.wm = instruction_index, world_model
        self.wm_instruction_index = wm_instruction_index
        self.M, self.G, self.seed, self.collapse, self.k = groups_per_step, group_size, seed, collapse, k

    def groups(self, step: int) -> list[InitialState]:
        """The M initial states of ``step`` (drawn with replacement only when M exceeds the states)."""
        n, m = len(self.train_states), self.M
        idx = np.random.default_rng([self.seed, step, 11]).choice(n, size=m, replace=m > n)
        return [self.train_states[i] for i in idx]

    def sample(self, policy: Any, step: int) -> Rollouts:
        import torch  # noqa: PLC0415 - heavy

        groups = self.groups(step)
        states = [s for s in groups for _ in range(self.G)]
        gen = torch.Generator().manual_seed(int(np.random.default_rng([self.seed, step, 7]).integers(2**62)))
        eb = rollout(self.pool, states, policy.act, self.instruction_index, gen)
        return Rollouts(step=step, group_keys=[g.key for g in groups],
                        group_ids=np.repeat(np.arange(len(groups)), self.G), data=eb)

    def submit(self, rollouts: Rollouts, idx: np.ndarray) -> list[Future]:
        """The success of each anchor episode, at hand: done futures of :class:`~wmrl.step.environment.Outcome`."""
        eb = rollouts.data
        is_anchor = np.zeros(eb.B, bool)
        is_anchor[idx] = True
        r = anchor_rewards(eb.success, is_anchor)[idx]
        return done([Outcome(status="ok", reward=float(x)) for x in r])

    def predict(self, rollouts: Rollouts) -> Predictions:
        eb = rollouts.data
        sc = score_episodes(self.wm, [eb.visited(i) for i in range(eb.B)],
                            np.asarray([self.wm_instruction_index(s.task) for s in eb.states]), self.collapse, self.k)
        return Predictions(reward_wm=sc.r_hat, stats={"wm_states_scored": sc.n_states_scored,
                                                      "wm_episodes_scored": int(sc.r_hat.size)})

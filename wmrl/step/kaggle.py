"""Kaggle-style tasks as an environment of the step engine (:class:`wmrl.step.environment.Environment`, ``kaggle``).

A trajectory is a completion of the policy for a task's prompt; the scaffold renders it into a program. Its real
reward is the program run in the sandbox and graded in the trusted process (the leaderboard percentile of its
submission, :mod:`wmrl.execution`); the world model reads the prompt and the completion
(:meth:`wmrl.interfaces.WorldModel.predict_outcome`) and predicts the same reward without running anything.

- ``sample``: the M tasks of the step (:func:`select_tasks`, a seeded cycle through the train tasks), G
  completions each, sampled with the seed :func:`sampling_seed` (run seed, step), so a resumed run draws the same.
- ``submit``: anchor programs go to the executor (:func:`wmrl.step.anchors.anchor_request`); its futures, one per
  trajectory, are consumed by the step engine's anchor stream after the world model has scored the step; an
  execution that failed for infrastructure reasons (or has no reward) is an invalid outcome, dropped from the
  gradient, the baselines and the calibration.
- ``predict``: :func:`wmrl.world_model.outcome.predict_rewards`, which also checks the world model's output.

The text trainer (:mod:`wmrl.training.trainer`) runs its steps on this environment through the step engine; the TRL
and verl integrations (whose trainer samples) hand the engine trajectories they wrap in :class:`TextTrajectories`.

The text trainer trains any registered environment that is a :class:`TextEnvironment` (``environment:`` in its
config): its factory is called with the keyword arguments of :data:`TEXT_ENVIRONMENT_ARGS` (those of
:class:`KaggleEnvironment`), so the shortest new text environment is a subclass of :class:`KaggleEnvironment` that
replaces ``submit`` (another real reward) or ``predict`` (examples/lint_env.py).
"""
from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from wmrl.step.anchors import anchor_request
from wmrl.step.environment import Environment, Predictions, Rollouts, register_environment
from wmrl.world_model.outcome import predict_rewards


def select_tasks(task_ids: Sequence[str], m: int, step: int, seed: int) -> list[int]:
    """Indices of the M tasks of ``step`` (1-based): the task list is cycled through in a seeded
    shuffled order, reshuffled every pass (epoch). Pure function of its arguments, so a resumed run
    picks the same tasks.

    Raises:
        ValueError: no tasks.
    """
    n = len(task_ids)
    if n == 0:
        raise ValueError("no train tasks")
    out = []
    for j in range(m):
        k = (step - 1) * m + j
        epoch, pos = divmod(k, n)
        perm = np.random.default_rng([seed, epoch, 7919]).permutation(n)
        out.append(int(perm[pos]))
    return out


def sampling_seed(seed: int, step: int, stream: int = 0) -> int:
    """Seed of the policy's sampling at ``step`` (stream 0 = training, 1 = evaluation): a pure function,
    so a resumed run draws the same trajectories as an uninterrupted one."""
    return int(np.random.SeedSequence([seed, step, stream]).generate_state(1)[0])


@dataclass
class TextTrajectories:
    """Text trajectories sampled elsewhere (a foreign trainer's batch), in the shape the environment reads from a
    policy's ``RolloutBatch``: [B] ``task_ids``, ``prompts``, ``completions``; ``programs`` [B] or None (the
    scaffold renders them); ``completion_tokens`` [B] or None."""

    task_ids: list[str]
    prompts: list[str]
    completions: list[str]
    programs: list[str] | None = None
    completion_tokens: list[int] | None = None


#: The keyword arguments the text trainer calls an environment's factory with (:class:`KaggleEnvironment`'s).
TEXT_ENVIRONMENT_ARGS = ("tasks", "scaffold", "executor", "world_model", "tasks_per_step", "group_size",
                         "max_new_tokens", "temperature", "top_p", "seed", "run", "time_limit_s")


@runtime_checkable
class TextEnvironment(Environment, Protocol):
    """An environment the text trainer trains: the :class:`~wmrl.step.environment.Environment` protocol, whose
    ``sample`` returns the policy's ``RolloutBatch`` (``task_ids``, ``prompts``, ``completions`` [B]) as
    ``Rollouts.data``, plus the programs of the trajectories (hashed into samples.jsonl, classified for the
    world model's fidelity card)."""

    def programs(self, rollouts: Rollouts) -> list[str]:
        """The B programs of ``rollouts``, in order."""
        ...


@register_environment("kaggle")
class KaggleEnvironment:
    """Kaggle-style tasks (module docstring).

    Args:
        tasks: the train tasks (:class:`wmrl.tasks.spec.Task`; sampled by :func:`select_tasks`), or every task a
            foreign trainer's completions can belong to.
        scaffold: the :class:`~wmrl.interfaces.Scaffold` (prompt, rendering of completions into programs).
        executor: the :class:`~wmrl.interfaces.Executor` (sandbox pool).
        world_model: the :class:`~wmrl.interfaces.WorldModel`, or None for a method without one.
        tasks_per_step: M. group_size: G. max_new_tokens, temperature, top_p: sampling.
        seed: the run seed. run: the run name written into each anchor's trajectory record.
        time_limit_s: the wall limit of an execution (seconds; None: the task's own).
    """

    name = "kaggle"

    def __init__(self, tasks: Sequence[Any], scaffold: Any, executor: Any, world_model: Any = None, *,
                 tasks_per_step: int = 4, group_size: int = 4, max_new_tokens: int | None = None,
                 temperature: float = 1.0, top_p: float = 1.0, seed: int = 0, run: str = "wmrl",
                 time_limit_s: float | None = None) -> None:
        self.tasks = list(tasks)
        self.by_id = {t.id: t for t in self.tasks}
        self.scaffold, self.executor, self.world_model = scaffold, executor, world_model
        self.M, self.G, self.max_new_tokens = tasks_per_step, group_size, max_new_tokens
        self.temperature, self.top_p, self.seed = temperature, top_p, seed
        self.run, self.time_limit_s = run, time_limit_s

    def task(self, task_id: str) -> Any:
        """The task ``task_id``.

        Raises:
            KeyError: a task the environment was not given (the message lists the known ones).
        """
        try:
            return self.by_id[str(task_id)]
        except KeyError:
            raise KeyError(f"unknown task {task_id!r}; the environment knows {sorted(self.by_id)}") from None

    # ------------------------------------------------------------------ the protocol
    def sample(self, policy: Any, step: int) -> Rollouts:
        import torch  # noqa: PLC0415 - heavy

        idx = select_tasks([t.id for t in self.tasks], self.M, step, self.seed)
        tasks = [self.tasks[i] for i in idx]
        with torch.no_grad():
            batch = policy.sample(tasks, self.scaffold, group_size=self.G, max_new_tokens=self.max_new_tokens,
                                  temperature=self.temperature, top_p=self.top_p,
                                  generator_seed=sampling_seed(self.seed, step))
        return Rollouts(step=step, group_keys=[t.id for t in tasks], group_ids=np.asarray(batch.group_ids), data=batch,
                        tasks=tasks)

    def submit(self, rollouts: Rollouts, idx: np.ndarray) -> list[Future[Any]]:
        """Every trajectory of ``idx`` submitted to the executor: its futures, in the order of ``idx``."""
        return [self.executor.submit(req) for _, req in self.requests(rollouts, idx)]

    def predict(self, rollouts: Rollouts) -> Predictions:
        if self.world_model is None:
            raise RuntimeError("this method scores trajectories with a world model, but the environment has none: "
                               "pass world_model")
        d = rollouts.data
        r_hat, outcome = predict_rewards(self.world_model, d.prompts, d.completions)
        return Predictions(reward_wm=r_hat, outcome=outcome)

    # ------------------------------------------------------------------ what the text trainer shares
    def programs(self, rollouts: Rollouts) -> list[str]:
        """The B programs (the batch's, else the scaffold's rendering of each completion)."""
        d = rollouts.data
        if len(getattr(d, "programs", None) or []) == rollouts.B:
            return list(d.programs)
        return [self.scaffold.render(self.task(t), c) for t, c in zip(d.task_ids, d.completions)]

    def requests(self, rollouts: Rollouts, idx: np.ndarray, completion_tokens: np.ndarray | None = None
                 ) -> list[tuple[int, Any]]:
        """``[(index, ExecutionRequest)]`` of the trajectories ``idx`` ([n] int64)."""
        d, programs = rollouts.data, self.programs(rollouts)
        tokens = completion_tokens
        if tokens is None and getattr(d, "completion_tokens", None) is not None:
            tokens = np.asarray(d.completion_tokens)
        elif tokens is None and getattr(d, "completion_mask", None) is not None:  # a policy's RolloutBatch
            tokens = d.completion_mask.sum(dim=1).cpu().numpy()
        gid = rollouts.group_ids
        return [(int(i), anchor_request(
            self.task(d.task_ids[i]), programs[i], step=rollouts.step, group=int(gid[i]), sample=int(i), run=self.run,
            prompt=d.prompts[i], completion=d.completions[i], scaffold=getattr(self.scaffold, "name", ""),
            completion_tokens=None if tokens is None else int(tokens[i]), time_limit_s=self.time_limit_s))
            for i in np.asarray(idx, dtype=np.int64)]

"""A new environment for `wmrl train` in one file: Kaggle tasks whose real reward is a static review of the program.

The text trainer trains any registered environment (``environment:`` in its config). This one keeps the Kaggle
environment's sampling (the policy writes a program for each task's prompt) and its world model (the run's, on the
prompt and the program), and replaces the real reward: instead of running the program in the sandbox, a reviewer
(a worker thread here; a slow linter, a test suite or a human in a real setting) scores it in [0, 1] as the mean of
four checks: it parses as Python, it reads the task's training data, it writes ``submission.csv``, and it does not
repeat itself (the fraction of distinct tokens). ``submit`` returns one future per anchor, so the step engine's
anchor stream (synchronous, or asynchronous with ``wmrl.asynchronous.staleness``) overlaps the reviews with the world
model as it does sandbox executions.

Train it (from the repository root; the config names this file under ``plugins``, which registers ``lint``)::

    wmrl train --config examples/lint_env.yaml
    wmrl train --config configs/tiny.yaml --set plugins=[examples/lint_env.py] --set environment=lint

From a package instead, declare the factory as an entry point and leave ``plugins`` out (docs/plugins.md)::

    [project.entry-points."wmrl.environments"]
    lint = "my_package.lint_env:LintEnvironment"

What stays the sandbox's: the world model's warm-up corpus and the evaluations (``eval.*``) run the tasks'
programs for real; recall, favourite verification and multi-turn episodes read the sandbox, so the config refuses
the last two with another environment and the trainer recalls nothing.
"""
from __future__ import annotations

import ast
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from wmrl.step.environment import Outcome, Rollouts, register_environment
from wmrl.step.kaggle import KaggleEnvironment

#: What the reviewer checks, each worth a quarter of the reward.
CHECKS = ("parses", "reads the training data", "writes submission.csv", "distinct tokens")


def review(program: str) -> Outcome:
    """The real reward of ``program``: the mean of :data:`CHECKS` (each in [0, 1]), with the CPU-seconds and
    seconds the review took; ``error`` names the checks that failed."""
    t0, c0 = time.perf_counter(), time.thread_time()
    try:
        ast.parse(program)
        parses = 1.0
    except (SyntaxError, ValueError):
        parses = 0.0
    tokens = program.split()
    scores = (parses, float("train.csv" in program), float("submission.csv" in program),
              len(set(tokens)) / len(tokens) if tokens else 0.0)
    failed = [name for name, s in zip(CHECKS, scores) if s < 1.0]
    return Outcome(status="ok", reward=float(np.mean(scores)), error="; ".join(failed) or None,
                   cpu_s=time.thread_time() - c0, wall_s=time.perf_counter() - t0)


@register_environment("lint")
class LintEnvironment(KaggleEnvironment):
    """The Kaggle environment with :func:`review` as the real reward (module docstring); built by the text trainer
    with the Kaggle environment's arguments (``executor``, the sandbox, is kept for the trainer's evaluations)."""

    name = "lint"

    def __init__(self, tasks: Sequence[Any], scaffold: Any, executor: Any, world_model: Any = None,
                 **kwargs: Any) -> None:
        super().__init__(tasks, scaffold, executor, world_model, **kwargs)
        self.reviewer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lint-review")

    def submit(self, rollouts: Rollouts, idx: np.ndarray) -> list[Future]:
        """One review per trajectory of ``idx`` ([n] int64), in that order (futures of :class:`Outcome`)."""
        programs = self.programs(rollouts)
        return [self.reviewer.submit(review, programs[int(i)]) for i in np.asarray(idx, dtype=np.int64)]

"""The narrow interfaces between the trainer and its parts.

The trainer (``wmrl.training``) only talks to these protocols; each part has its implementations
in its own package. Shapes and units are in each method's docstring.
"""
from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any, Protocol, runtime_checkable

import numpy as np

from wmrl.execution.types import ExecutionRequest, ExecutionResult
from wmrl.tasks.spec import Task, Split


@runtime_checkable
class TaskSource(Protocol):
    """Where tasks come from (the built-in suite, an MLE-bench or MLE-Dojo folder)."""

    def tasks(self, split: Split | None = None) -> list[Task]:
        """All tasks, or those of one split, in a stable order."""
        ...

    def get(self, task_id: str) -> Task:
        """One task by id; raises ``KeyError`` naming the known ids when it is missing."""
        ...


@runtime_checkable
class Executor(Protocol):
    """Runs untrusted programs in a sandbox and grades them in the trusted process."""

    def submit(self, request: ExecutionRequest) -> "Future[ExecutionResult]":
        """Start one execution; the future can be cancelled."""
        ...

    def run_batch(self, requests: Sequence[ExecutionRequest]) -> list[ExecutionResult]:
        """Run all requests (concurrently up to the pool's limit); results in submission order."""
        ...

    def close(self) -> None:
        """Stop workers and kill anything still running."""
        ...


@runtime_checkable
class Scaffold(Protocol):
    """How a completion becomes a runnable solution program for a task."""

    name: str

    def prompt(self, task: Task) -> str:
        """The text the policy is conditioned on (chat template applied by the policy)."""
        ...

    def render(self, task: Task, completion: str) -> str:
        """The full Python program for ``completion``; never raises (broken code is left to fail)."""
        ...


@runtime_checkable
class WorldModel(Protocol):
    """Predicts the reward (leaderboard percentile in [0, 1]) of a program without running it."""

    def predict(self, prompts: Sequence[str], completions: Sequence[str]) -> np.ndarray:
        """Predicted rewards, float64 array of shape [N]; batched internally."""
        ...

    def state_dict(self) -> dict[str, Any]:
        ...

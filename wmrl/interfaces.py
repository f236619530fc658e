"""The narrow interfaces between the trainer and its parts.

The trainer (``wmrl.training``) only talks to these protocols; each part has its implementations
in its own package. Shapes and units are in each method's docstring.
"""
from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from wmrl.execution.types import ExecutionRequest, ExecutionResult
from wmrl.tasks.spec import Split, Task

if TYPE_CHECKING:
    import torch


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

    def submit(self, request: ExecutionRequest) -> Future[ExecutionResult]:
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
    """How a completion becomes a runnable solution program for a task (``wmrl.models.scaffolds``).

    Every attribute the policy reads is here: the policy never probes a scaffold for optional ones.
    """

    name: str
    #: Text the policy's response starts with, forced before sampling (e.g. an opened code block).
    response_prefix: str
    #: Completion budget (tokens) when the caller gives none.
    default_max_new_tokens: int

    def prompt(self, task: Task) -> str:
        """The text the policy is conditioned on (chat template applied by the policy)."""
        ...

    def render(self, task: Task, completion: str) -> str:
        """The full Python program for ``completion``; never raises (broken code is left to fail)."""
        ...

    def stop_at(self, text: str) -> int | None:
        """Character index where a completion ends (e.g. a closing fence), or None to keep it all."""
        ...

    def is_valid(self, task: Task, completion: str) -> bool:
        """Whether the completion is well formed for this scaffold (it may still fail when run)."""
        ...

    def grammar_key(self, task: Task) -> str | None:
        """The grammar of constrained decoding for ``task`` (e.g. ``classifier``), or None: free text."""
        ...

    def grammar_sentences(self, key: str) -> Sequence[str]:
        """Every sentence of grammar ``key`` (the policy builds its token trie from them)."""
        ...


@runtime_checkable
class Policy(Protocol):
    """The LM being post-trained (``wmrl.models.policy.Policy``)."""

    def sample(self, tasks: Sequence[Task], scaffold: Scaffold, group_size: int, max_new_tokens: int | None = None,
               temperature: float = 1.0, top_p: float = 1.0, generator_seed: int | None = None,
               prompts: Sequence[str] | None = None) -> Any:
        """G trajectories per task: a ``wmrl.models.types.RolloutBatch`` of B = len(tasks) * G rows
        (token ids [B, T] int64, masks [B, T] bool, sampling log-probs [B, T] float32, texts). ``prompts``
        (one per task) replaces ``scaffold.prompt(task)``: a later turn of a multi-turn episode."""
        ...

    def logprobs(self, batch: Any) -> torch.Tensor:
        """Per-token log-probs [B, T] float32 of the batch's tokens under the current weights, with grad."""
        ...

    def ref_logprobs(self, batch: Any) -> torch.Tensor:
        """The same under the reference (initial) weights, without grad (for the KL term)."""
        ...

    def trainable_parameters(self) -> list[Any]:
        """The parameters the optimiser updates."""
        ...

    def save(self, directory: str | Path) -> Path:
        """Write the trainable weights to ``directory``; returns it."""
        ...

    def load(self, directory: str | Path) -> None:
        """Restore what :meth:`save` wrote."""
        ...


@runtime_checkable
class WorldModel(Protocol):
    """Predicts the reward (leaderboard percentile in [0, 1]) of a program without running it
    (``wmrl.world_model.regression.RegressionWorldModel``, ``wmrl.world_model.generative.GenerativeWorldModel``)."""

    def predict(self, prompts: Sequence[str], completions: Sequence[str]) -> np.ndarray:
        """Predicted rewards r_hat, float64 array of shape [N]; batched internally (``predict_outcome(...).reward``)."""
        ...

    def predict_outcome(self, prompts: Sequence[str], completions: Sequence[str]) -> Any:
        """A :class:`wmrl.world_model.outcome.OutcomePrediction`: reward [N], status distribution [N, 4] over the
        outcome classes, predictive reward std [N]; gated completions (no code, a compile error) are certain
        syntax errors."""
        ...

    def fit(self, records: Sequence[Any], **kwargs: Any) -> dict[str, Any]:
        """Fit on execution-log records (their trajectories and rewards); returns the fit's report."""
        ...

    def save(self, directory: str | Path) -> Path:
        """Write the model to ``directory``; returns it."""
        ...

    def load(self, directory: str | Path) -> Any:
        """Restore what :meth:`save` wrote."""
        ...

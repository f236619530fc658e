"""Measured rewards of executed programs, recalled for world-model samples (recipes with ``recall``: ``wmrl``).

A program already executed on a task (the warm-up corpus, or an anchor of an earlier step) has a measured
reward; when the policy writes it again in a world-model group, predicting it throws the measurement away. For a
recipe with ``recall`` its caller looks each world-model sample up in a :class:`MeasuredRewards` and passes the
measured reward to the recipe (:attr:`wmrl.core.recipe.StepInputs.reward_recalled`), which trains the sample on
it instead of r_tilde. The trainer rebuilds its store from the run's execution log each step (the log is cut back
to the checkpoint on a resume, so no checkpoint state is needed); :class:`wmrl.integrations.driver.WMRLDriver`
fills one from its own anchors.

A program is keyed by its task id and its completion (the policy's text, from which the scaffold renders the
program deterministically). Executions of one program on one task give one reward in wmrl's sandbox (its seeds
are fixed); where several differ, the store keeps their mean.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np


class MeasuredRewards:
    """Rewards measured so far, by (task id, completion): the mean of every finite reward seen."""

    def __init__(self) -> None:
        self._sum: dict[tuple[str, str], float] = {}
        self._n: dict[tuple[str, str], int] = {}

    def __len__(self) -> int:
        return len(self._n)

    def add(self, task_ids: Sequence[str], completions: Sequence[str], rewards: Iterable[float | None]) -> None:
        """Record N executions (rewards that are None or not finite, such as infrastructure failures, are skipped).

        Raises:
            ValueError: ``task_ids`` and ``completions`` of different lengths.
        """
        if len(task_ids) != len(completions):
            raise ValueError(f"task_ids ({len(task_ids)}) and completions ({len(completions)}) must have one entry "
                             "per execution")
        for t, c, r in zip(task_ids, completions, rewards):
            if r is None or not math.isfinite(float(r)):
                continue
            k = (str(t), str(c))
            self._sum[k] = self._sum.get(k, 0.0) + float(r)
            self._n[k] = self._n.get(k, 0) + 1

    def add_records(self, records: Iterable[dict[str, Any]]) -> None:
        """Record execution-log records (dicts as ``wmrl.execution.log.ExecutionLog.records`` returns them: a
        ``trajectory`` with ``task_id`` and ``completion``, and a ``reward``); records without a trajectory are
        skipped."""
        recs = [r for r in records if r.get("trajectory") is not None]
        self.add([r["trajectory"].task_id for r in recs], [r["trajectory"].completion for r in recs],
                 [r.get("reward") for r in recs])

    def lookup(self, task_ids: Sequence[str], completions: Sequence[str]) -> np.ndarray:
        """[N] float64: the measured mean reward of each (task id, completion), NaN where none was measured."""
        out = np.full(len(completions), np.nan)
        for i, k in enumerate(zip(task_ids, completions)):
            n = self._n.get(k)
            if n:
                out[i] = self._sum[k] / n
        return out

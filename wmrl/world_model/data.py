"""The world model's data: execution-log records (their trajectories and rewards) as training examples, the
split of a fit by whole groups, the fit's settings check and its report metrics. Shared by every world model
(:mod:`wmrl.world_model.regression`, :mod:`wmrl.world_model.generative`)."""
from __future__ import annotations

import math
import random
import time
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from wmrl.trajectory import trajectory_of
from wmrl.world_model.metrics import world_model_metrics
from wmrl.world_model.outcome import outcome_class


class WorldModelExample(dict):
    """One training example: ``prompt``, ``completion``, ``reward`` (float), ``group`` (hashable), and ``status``:
    its outcome class (:data:`wmrl.world_model.outcome.STATUS_CLASSES`), or None where it is not known."""


def _field(rec: Any, key: str, default: Any = None) -> Any:
    """``rec[key]`` for a mapping, ``rec.key`` for a record object (e.g. an execution-log row)."""
    if isinstance(rec, dict):
        return rec.get(key, default)
    return getattr(rec, key, default)


def examples_from_records(records: Sequence[Any]) -> tuple[list[WorldModelExample], dict[str, int]]:
    """Turn execution-log records (dicts or record objects) into world-model examples.

    Rows with status ``infra_error``, a missing or non-finite reward (e.g. a task without a
    leaderboard), or no trajectory (:func:`wmrl.trajectory.trajectory_of`: no prompt or completion) are
    skipped (counted in the returned dict: ``used``, ``skipped_infra``, ``skipped_no_reward``,
    ``skipped_no_text``). The group of a row is the trajectory's ``(run, step, task id, group_id)``; its
    ``status`` the outcome class of :func:`wmrl.world_model.outcome.outcome_class` of the executed program (the
    completion where the record has no ``program``): a program that cannot compile is a syntax error, whatever
    the scaffold.
    """
    out: list[WorldModelExample] = []
    counts = {"used": 0, "skipped_infra": 0, "skipped_no_reward": 0, "skipped_no_text": 0}
    for r in records:
        status = _field(r, "status")
        status = getattr(status, "value", status)
        if status == "infra_error":
            counts["skipped_infra"] += 1
            continue
        reward = _field(r, "reward")
        if reward is None or not math.isfinite(float(reward)):
            counts["skipped_no_reward"] += 1
            continue
        traj = trajectory_of(r)
        if traj is None:
            counts["skipped_no_text"] += 1
            continue
        task_id = traj.task_id or _field(r, "task_id", "")
        out.append(WorldModelExample(prompt=str(traj.prompt), completion=str(traj.completion), reward=float(reward),
                                     group=(traj.run, traj.step, task_id, traj.group_id), task_id=task_id,
                                     status=outcome_class(str(_field(r, "program") or traj.completion), status)))
        counts["used"] += 1
    return out, counts


def split_by_group(groups: Sequence[Hashable], heldout_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Split row indices into (train, held-out) by whole groups, seeded.

    At least one group goes to each side when there are two or more groups.

    Raises:
        ValueError: ``heldout_fraction`` outside [0, 1).
    """
    if not 0.0 <= heldout_fraction < 1.0:
        raise ValueError(f"heldout_fraction must be in [0, 1), got {heldout_fraction}")
    keys = sorted(set(groups), key=repr)
    rng = random.Random(seed)
    rng.shuffle(keys)
    n_held = int(round(heldout_fraction * len(keys)))
    if heldout_fraction > 0 and len(keys) >= 2:
        n_held = min(max(n_held, 1), len(keys) - 1)
    held = set(keys[:n_held])
    train_idx = [i for i, g in enumerate(groups) if g not in held]
    held_idx = [i for i, g in enumerate(groups) if g in held]
    return train_idx, held_idx


def check_fit_settings(epochs: int, lr: float, batch_size: int) -> None:
    """Raise ``ValueError`` unless ``epochs >= 1``, ``batch_size >= 1`` and ``lr > 0`` (finite)."""
    if epochs < 1 or batch_size < 1 or not (lr > 0 and math.isfinite(lr)):
        raise ValueError(f"need epochs >= 1, batch_size >= 1 and lr > 0, got {epochs}, {batch_size}, {lr}")


def fit_split(records: Sequence[Any], heldout_fraction: float, seed: int
              ) -> tuple[list[WorldModelExample], list[WorldModelExample], dict[str, int]]:
    """The training and held-out examples of a fit: :func:`examples_from_records` (or the
    :class:`WorldModelExample` dicts as given), split by whole groups with :func:`split_by_group`.

    Returns:
        ``(train, held_out, counts)`` (``counts`` as in :func:`examples_from_records`).

    Raises:
        ValueError: fewer than 2 usable records, or ``heldout_fraction`` outside [0, 1).
    """
    if records and isinstance(records[0], WorldModelExample):
        examples, counts = list(records), {"used": len(records), "skipped_infra": 0, "skipped_no_reward": 0,
                                           "skipped_no_text": 0}
    else:
        examples, counts = examples_from_records(records)
    if len(examples) < 2:
        raise ValueError(
            f"the world model needs at least 2 executed trajectories with prompt and completion in "
            f"their meta, got {len(examples)} ({counts}); collect some with 'wmrl wm warmup'"
        )
    groups = [e["group"] for e in examples]
    train_idx, held_idx = split_by_group(groups, heldout_fraction, seed)
    return [examples[i] for i in train_idx], [examples[i] for i in held_idx], counts


def fit_metrics(wm: Any, train: Sequence[dict[str, Any]], held: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The metrics part of a fit report: ``wm.predict`` on both splits.

    Returns:
        dict with ``train`` and ``heldout`` metrics (:func:`world_model_metrics`; ``heldout`` and the
        held-out ``heldout_pred`` / ``heldout_true`` lists only when something is held out),
        ``predict_seconds`` (wall seconds of those predictions) and ``predictions_per_s``
        (trajectories per wall second over both splits).
    """
    t0 = time.perf_counter()
    tr_pred = wm.predict([e["prompt"] for e in train], [e["completion"] for e in train])
    out: dict[str, Any] = {"train": world_model_metrics(tr_pred,
                                                        np.array([e["reward"] for e in train], dtype=np.float64),
                                                        [e["group"] for e in train])}
    if held:
        h_pred = wm.predict([e["prompt"] for e in held], [e["completion"] for e in held])
        h_true = np.array([e["reward"] for e in held], dtype=np.float64)
        out["heldout"] = world_model_metrics(h_pred, h_true, [e["group"] for e in held])
        out["heldout_pred"] = h_pred.tolist()
        out["heldout_true"] = h_true.tolist()
    dt = time.perf_counter() - t0
    out["predict_seconds"] = dt
    out["predictions_per_s"] = (len(train) + len(held)) / dt if dt > 0 else float("nan")
    return out

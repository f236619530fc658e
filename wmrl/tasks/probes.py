"""Probe submissions made from a task's answers: the set on which wmrl's own metric must agree with the
benchmark's grading code before it may stand in for that code (:func:`wmrl.tasks.grading.fast_path`).

Trusted process only: every probe is built from the private answers and is never shown to a solution
program. Six kinds, each seeded:

* ``perfect``: the answers themselves (one-hot probabilities, the true labels or values);
* ``good``: a quarter of the labels replaced, probabilities mixing the true class 1:1 with uniform noise,
  values with noise of a third of the targets' spread;
* ``median``: 60 % of the labels replaced, probabilities 1:4 with noise, values with noise of the spread;
* ``bad``: wrong labels where the task has a wrong one, probabilities that favour a wrong class (for
  multiclass tasks rows that do not sum to 1, so that whether a grader renormalises is tested),
  values mirrored around their mean;
* ``constant``: one value for every row (the most frequent class, the class frequencies, the mean);
* ``malformed``: the ``good`` probe without its last half of rows (every grader must refuse it).

Values of a target that is never negative get multiplicative noise, so they stay valid for logarithmic
metrics (RMSLE).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from wmrl.tasks.metrics import prediction_kind, submission_columns
from wmrl.tasks.spec import Task

#: The probe kinds, in the order :func:`probe_submissions` returns them.
PROBE_KINDS = ("perfect", "good", "median", "bad", "constant", "malformed")
#: The probes every grader must score (the malformed one it must refuse).
VALID_PROBES = PROBE_KINDS[:-1]


def _values(y: np.ndarray, kind: str, rng: np.random.Generator) -> np.ndarray:
    sd = float(np.std(y)) or 1.0
    mean = float(np.mean(y))
    if kind == "perfect":
        return y.copy()
    if kind == "constant":
        return np.full_like(y, mean)
    if kind == "bad":
        out = 2 * mean - y
        return np.abs(out) if (y >= 0).all() else out
    scale = {"good": 1 / 3, "median": 1.0}[kind]
    if (y >= 0).all():
        return y * np.exp(rng.normal(scale=0.5 * scale, size=len(y))) + rng.random(len(y)) * scale * sd * 0.1
    return y + rng.normal(scale=scale * sd, size=len(y))


def _labels(y: np.ndarray, classes: np.ndarray, kind: str, rng: np.random.Generator) -> np.ndarray:
    if kind == "perfect":
        return y.copy()
    if kind == "constant":
        vals, counts = np.unique(y, return_counts=True)
        return np.full(len(y), vals[np.argmax(counts)], dtype=object)
    if kind == "bad":  # the next class in order: always wrong
        index = {c: i for i, c in enumerate(classes)}
        return np.asarray([classes[(index.get(v, 0) + 1) % len(classes)] for v in y], dtype=object)
    share = {"good": 0.25, "median": 0.6}[kind]
    out = y.astype(object).copy()
    swap = rng.random(len(out)) < share
    out[swap] = rng.choice(classes, size=int(swap.sum()))
    return out


def _probabilities(y: np.ndarray, classes: np.ndarray, kind: str, rng: np.random.Generator) -> np.ndarray:
    onehot = np.stack([(y == c).astype(np.float64) for c in classes], axis=1)
    if kind == "perfect":
        return onehot
    if kind == "constant":
        prior = onehot.mean(axis=0)
        return np.tile(prior / prior.sum(), (len(y), 1))
    if kind == "bad":
        wrong = np.roll(onehot, 1, axis=1)
        p = 0.7 * wrong + 0.3 * rng.random(onehot.shape)
        return p if len(classes) > 2 else p / p.sum(axis=1, keepdims=True)
    w = {"good": 0.5, "median": 0.2}[kind]
    p = w * onehot + (1 - w) * rng.random(onehot.shape)
    return p / p.sum(axis=1, keepdims=True)


def probe_submissions(task: Task, answers: pd.DataFrame, seed: int = 0) -> dict[str, pd.DataFrame]:
    """The six probe submissions of ``task`` (see the module docstring), each a DataFrame with exactly the
    task's submission columns, rows in the answers' order.

    Args:
        task: the task (its type, metric, classes and columns fix the format).
        answers: ``[id_column, target]`` as :func:`wmrl.tasks.grading.read_answers` returns them (labels str,
            values float64).
        seed: seed of the noise.

    Returns:
        ``{kind: DataFrame}`` for every kind in :data:`PROBE_KINDS`.

    Raises:
        ValueError: the task's metric does not apply to its type.
    """
    kind = prediction_kind(task.type, task.metric)
    cols = submission_columns(task.type, task.metric, task.id_column, task.target, task.classes)
    y = answers[task.target].to_numpy()
    classes = np.asarray([str(c) for c in task.classes], dtype=object)
    out: dict[str, pd.DataFrame] = {}
    for i, probe in enumerate(VALID_PROBES):
        rng = np.random.default_rng([seed, i])
        df = pd.DataFrame({task.id_column: answers[task.id_column].to_numpy()})
        if kind == "value":
            df[task.target] = _values(y.astype(np.float64), probe, rng)
        elif kind == "label":
            df[task.target] = _labels(y.astype(str), classes, probe, rng)
        else:
            p = _probabilities(y.astype(str), classes, probe, rng)
            if task.type == "binary":
                df[task.target] = p[:, 1]
            else:
                for j, c in enumerate(classes):
                    df[str(c)] = p[:, j]
        out[probe] = df[cols]
    good = out["good"]
    out["malformed"] = good.iloc[: max(1, len(good) // 2)].reset_index(drop=True)
    return out

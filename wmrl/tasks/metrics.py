"""Metrics of the task suite: names, directions, what a submission must contain, and scoring.

Every metric is computed with :mod:`sklearn.metrics`, the library the benchmarks' own grading code calls, with
its defaults (log loss clips probabilities at the float64 machine epsilon as scikit-learn does; ROC AUC sees the
probabilities unclipped). A metric name maps to

* a direction (``lower_is_better``),
* a prediction kind: ``"proba"`` (probabilities), ``"label"`` (class labels), ``"value"``
  (regression values) or ``"table"`` (the sample submission's columns and rows, graded only by the benchmark's
  code), which fixes the submission format (see :func:`submission_columns`).

Submission formats (one row per test id, ``id_column`` first):

* regression, or a label metric: ``id, <target>`` (the value or the predicted class label);
* binary with a probability metric: ``id, <target>`` holding P(target == positive class), where the
  positive class is ``task.classes[1]``;
* multiclass with a probability metric: ``id, <class_1>, ..., <class_K>``, one probability column per
  class in ``task.classes`` order (rows are renormalised to sum to 1 before scoring, as Kaggle does).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

PredictionKind = Literal["proba", "label", "value", "table"]

#: Each prediction kind and what a submission of that kind holds.
_KIND_WORDS: tuple[tuple[PredictionKind, str], ...] = (("proba", "probabilities"), ("label", "labels"),
                                                       ("value", "values"))


@dataclass(frozen=True)
class MetricInfo:
    """Static facts about one metric.

    Attributes:
        name: the metric's name in ``task.yaml``.
        lower_is_better: direction.
        kind: what the submission holds (``proba``, ``label``, ``value``).
        task_types: task types the metric applies to.
        description: one line for the competition page.
    """

    name: str
    lower_is_better: bool
    kind: PredictionKind
    task_types: tuple[str, ...]
    description: str


METRICS: dict[str, MetricInfo] = {
    m.name: m
    for m in (
        MetricInfo("accuracy", False, "label", ("binary", "multiclass"),
                   "Accuracy: the fraction of test rows whose predicted class equals the true class "
                   "(higher is better)."),
        MetricInfo("macro_f1", False, "label", ("binary", "multiclass"),
                   "Macro-averaged F1: the unweighted mean over classes of the F1 score (higher is better)."),
        MetricInfo("roc_auc", False, "proba", ("binary",),
                   "Area under the ROC curve of the predicted probability of the positive class (higher is better)."),
        MetricInfo("roc_auc_ovr", False, "proba", ("multiclass",),
                   "Macro-averaged one-vs-rest area under the ROC curve of the per-class probabilities (higher is "
                   "better)."),
        MetricInfo("log_loss", True, "proba", ("binary", "multiclass"),
                   "Log loss (cross-entropy) of the predicted probabilities, clipped to [eps, 1 - eps] with eps the "
                   "float64 machine epsilon, as scikit-learn clips (lower is better)."),
        MetricInfo("qwk", False, "label", ("binary", "multiclass"),
                   "Quadratic weighted kappa (Cohen's kappa with quadratic weights) between predicted and true ordinal "
                   "labels (higher is better; 1 is perfect agreement, 0 is chance)."),
        MetricInfo("rmse", True, "value", ("regression",),
                   "Root mean squared error, in the target's units (lower is better)."),
        MetricInfo("mae", True, "value", ("regression",),
                   "Mean absolute error, in the target's units (lower is better)."),
        MetricInfo("r2", False, "value", ("regression",),
                   "Coefficient of determination R^2 (higher is better; 1 is perfect, 0 is the mean predictor)."),
        MetricInfo("rmsle", True, "value", ("regression",),
                   "Root mean squared logarithmic error, sqrt(mean((log1p(y) - log1p(y_hat))^2)); needs values > -1 "
                   "(lower is better)."),
        *(MetricInfo(f"code_{k}", False, k, ("binary", "multiclass", "regression") if k != "proba" else
                     ("binary", "multiclass"),
                     f"Computed only by the benchmark's own grading code (the submission holds {what}); its direction "
                     "comes from the benchmark.")
          for k, what in _KIND_WORDS),
        MetricInfo("code_table", False, "table", ("binary", "multiclass", "regression"),
                   "Computed only by the benchmark's own grading code; the submission holds the sample submission's "
                   "columns and rows (several targets, several rows per id, text or encoded outputs); its direction "
                   "comes from the benchmark."),
    )
}

#: The metrics no wmrl code computes: a task with one of them is scored by its benchmark's own grading code.
CODE_METRICS = ("code_proba", "code_label", "code_value", "code_table")


def metric_info(name: str) -> MetricInfo:
    """The :class:`MetricInfo` of ``name``; raises ``ValueError`` listing the known metrics."""
    try:
        return METRICS[name]
    except KeyError:
        raise ValueError(f"unknown metric {name!r}; known metrics: {', '.join(sorted(METRICS))}") from None


def prediction_kind(task_type: str, metric: str) -> PredictionKind:
    """What a submission must hold for this task type and metric (``proba``, ``label``, ``value``).

    Raises ``ValueError`` when the metric does not apply to the task type.
    """
    info = metric_info(metric)
    if task_type not in info.task_types:
        raise ValueError(f"metric {metric!r} does not apply to {task_type!r} tasks "
                         f"(it applies to: {', '.join(info.task_types)})")
    return info.kind


def submission_columns(task_type: str, metric: str, id_column: str, target: str,
                       classes: Sequence[str], outputs: Sequence[str] = ()) -> list[str]:
    """The exact column list of a valid submission (see the module docstring); for a ``table`` metric the id
    column and ``outputs`` (the sample submission's value columns: :attr:`wmrl.tasks.spec.Task.outputs`)."""
    kind = prediction_kind(task_type, metric)
    if kind == "table":
        return [id_column, *[str(c) for c in (outputs or (target,))]]
    if kind == "proba" and task_type == "multiclass":
        return [id_column, *[str(c) for c in classes]]
    return [id_column, target]


def _clip_proba(p: np.ndarray) -> np.ndarray:
    """Probabilities clipped to [eps, 1 - eps], eps the float64 machine epsilon (scikit-learn's log loss clip)."""
    eps = np.finfo(np.float64).eps
    return np.clip(p, eps, 1 - eps)


def _normalise_rows(p: np.ndarray) -> np.ndarray:
    p = np.asarray(p, dtype=np.float64)
    return p / p.sum(axis=1, keepdims=True)


def score(metric: str, y_true: np.ndarray, y_pred: np.ndarray, classes: Sequence[str] = ()) -> float:
    """Compute one metric with scikit-learn.

    Args:
        metric: a name in :data:`METRICS`.
        y_true: shape ``[N]``; class labels (str) for classification, float64 for regression.
        y_pred: shape ``[N]`` (labels, values, or P(positive) for binary) or ``[N, K]`` (multiclass
            probabilities, columns in ``classes`` order).
        classes: class labels in order (binary: ``classes[1]`` is the positive class).

    Returns:
        The metric value as a Python float.

    Raises:
        ValueError: unknown metric, or inputs of the wrong shape.
    """
    from sklearn import metrics as skm  # noqa: PLC0415 - heavy (sklearn)

    info = metric_info(metric)
    y_true = np.asarray(y_true)
    y_pred = np.asarray(y_pred)
    if len(y_true) != len(y_pred):
        raise ValueError(f"y_true has {len(y_true)} rows but y_pred has {len(y_pred)}")
    if info.kind == "value":
        yt = y_true.astype(np.float64)
        yp = y_pred.astype(np.float64)
        fns: dict[str, Callable[[], float]] = {
            "rmse": lambda: float(np.sqrt(skm.mean_squared_error(yt, yp))),
            "mae": lambda: float(skm.mean_absolute_error(yt, yp)),
            "r2": lambda: float(skm.r2_score(yt, yp)),
            "rmsle": lambda: float(np.sqrt(skm.mean_squared_log_error(yt, yp))),
        }
        return fns[metric]()
    labels = [str(c) for c in classes]
    yt = y_true.astype(str)
    if info.kind == "label":
        yp = y_pred.astype(str)
        if metric == "accuracy":
            return float(skm.accuracy_score(yt, yp))
        if metric == "qwk":
            return float(skm.cohen_kappa_score(yt, yp, labels=labels or None, weights="quadratic"))
        return float(skm.f1_score(yt, yp, labels=labels or None, average="macro", zero_division=0))
    # probabilities
    if not labels:
        raise ValueError(f"metric {metric!r} needs the class labels")
    if y_pred.ndim == 1:  # binary: P(positive = classes[1])
        if len(labels) != 2:
            raise ValueError(f"a 1-D probability vector needs exactly 2 classes, got {len(labels)}")
        p1 = y_pred.astype(np.float64)
        if metric == "roc_auc":
            return float(skm.roc_auc_score((yt == labels[1]).astype(int), p1))
        if metric == "log_loss":
            p1 = _clip_proba(p1)
            return float(skm.log_loss(yt, np.column_stack([1 - p1, p1]), labels=labels))
    else:
        if y_pred.shape[1] != len(labels):
            raise ValueError(f"probability matrix has {y_pred.shape[1]} columns but there are {len(labels)} classes")
        p = _normalise_rows(y_pred)
        if metric == "log_loss":
            return float(skm.log_loss(yt, _clip_proba(p), labels=labels))
        if metric == "roc_auc_ovr":
            present = [i for i, c in enumerate(labels) if np.any(yt == c)]
            if len(present) < 2:
                raise ValueError("roc_auc_ovr needs at least two classes present in the answers")
            aucs = [skm.roc_auc_score((yt == labels[i]).astype(int), p[:, i]) for i in present]
            return float(np.mean(aucs))
    raise ValueError(f"metric {metric!r} cannot score predictions of shape {y_pred.shape}")

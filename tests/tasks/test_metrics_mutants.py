"""The task metrics' cases that surviving mutants of ``wmrl/tasks/metrics.py`` showed no test ran (docs/testing.md,
"Mutation testing"): each expected value is computed by hand from the metric's definition."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from wmrl.tasks.metrics import prediction_kind, score, submission_columns


def test_rmsle_hand_computed():
    y = np.array([0.0, 1.0, 3.0])
    p = np.array([0.0, 3.0, 1.0])
    # log1p: y -> 0, ln 2, ln 4; p -> 0, ln 4, ln 2; differences 0, -ln 2, ln 2
    assert score("rmsle", y, p) == pytest.approx(math.log(2) * math.sqrt(2 / 3))


def test_qwk_hand_computed_in_the_tasks_class_order():
    classes = ("low", "mid", "high")  # the ordinal order; sorted alphabetically it would be high, low, mid
    y = np.array(["low", "mid", "high", "high"])
    p = np.array(["low", "high", "high", "mid"])
    # as ranks 0, 1, 2: pairs (0,0) (1,2) (2,2) (2,1); weights (i - j)^2; sum w * observed = 0 + 1 + 0 + 1 = 2.
    # marginals true 1, 1, 2 and predicted 1, 1, 2: sum_ij r_i c_j (i - j)^2 = 9 + 3 + 10 = 22, expected 22 / 4
    assert score("qwk", y, p, classes) == pytest.approx(1 - 2 / 5.5)


def test_multiclass_probability_rows_are_renormalised_before_scoring():
    y = np.array(["a", "b", "c", "a"])
    raw = np.array([[2.0, 1.0, 1.0], [1.0, 2.0, 1.0], [1.0, 1.0, 6.0], [3.0, 1.0, 0.0]])
    # rows / row sums: (.5 .25 .25) (.25 .5 .25) (.125 .125 .75) (.75 .25 0); the true class's share: .5 .5 .75 .75
    assert score("log_loss", y, raw, ("a", "b", "c")) == pytest.approx(-np.mean(np.log([0.5, 0.5, 0.75, 0.75])))
    # P(b) unnormalised 3, 6, 1, 2 ranks the positives (rows 2, 4) differently from the renormalised
    # .75, .4, .25, 2/3: pairs (positive, negative) (.4, .75) wrong, (.4, .25) right, (2/3, .75) wrong,
    # (2/3, .25) right -> AUC_b = 2/4; P(a) = 1 - P(b) gives AUC_a = 2/4 the same way; their mean is 0.5
    # (unnormalised it would be (0.75 + 0.375) / 2)
    y2 = np.array(["a", "b", "a", "b"])
    raw2 = np.array([[1.0, 3.0], [9.0, 6.0], [3.0, 1.0], [1.0, 2.0]])
    assert score("roc_auc_ovr", y2, raw2, ("a", "b")) == pytest.approx(0.5)


def test_score_names_both_lengths_when_they_differ():
    with pytest.raises(ValueError, match="y_true has 3 rows but y_pred has 2"):
        score("rmse", np.zeros(3), np.zeros(2))


def test_prediction_kind_names_the_task_types_the_metric_applies_to():
    with pytest.raises(ValueError, match=r"it applies to: binary, multiclass\)"):
        prediction_kind("regression", "log_loss")


def test_a_table_metric_submits_the_sample_submissions_columns():
    assert submission_columns("regression", "code_table", "id", "y", (), outputs=("a", 1)) == ["id", "a", "1"]
    assert submission_columns("multiclass", "code_table", "id", "y", ("p", "q")) == ["id", "y"]


def test_macro_f1_averages_over_every_class_of_the_task():
    y = np.array(["a", "a", "b", "b"])
    p = np.array(["a", "b", "b", "b"])
    # F1: a 2/3, b 0.8 (test_label_metrics_hand_computed), c 0 (never true nor predicted: no precision or recall),
    # and no warning about it: a class no row holds is part of a valid submission
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert score("macro_f1", y, p, ("a", "b", "c")) == pytest.approx((2 / 3 + 0.8 + 0) / 3)


def test_log_loss_knows_the_classes_when_the_answers_hold_one():
    y = np.array(["yes", "yes"])
    assert score("log_loss", y, np.array([0.8, 0.6]), ("no", "yes")) == pytest.approx(-np.mean(np.log([0.8, 0.6])))
    p3 = np.array([[0.5, 0.25, 0.25], [0.25, 0.5, 0.25]])
    assert score("log_loss", np.array(["a", "b"]), p3, ("a", "b", "c")) == pytest.approx(-np.log(0.5))


def test_roc_auc_ovr_averages_over_the_classes_present_in_the_answers():
    y = np.array(["a", "b", "a", "b"])
    p = np.array([[0.6, 0.2, 0.2], [0.2, 0.6, 0.2], [0.3, 0.5, 0.2], [0.5, 0.3, 0.2]])
    # class a: positives .6 .3 against negatives .2 .5: (.6, .2) (.6, .5) (.3, .2) ranked right, (.3, .5) wrong
    # -> 3/4; class b: positives .6 .3 against .2 .5 -> 3/4 the same way; class c is in no answer and is left out
    assert score("roc_auc_ovr", y, p, ("a", "b", "c")) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="^roc_auc_ovr needs at least two classes present in the answers$"):
        score("roc_auc_ovr", np.array(["a", "a"]), p[:2], ("a", "b", "c"))


@pytest.mark.parametrize(("metric", "y_pred", "classes", "message"), [
    ("log_loss", np.array([0.5, 0.5]), (), "metric 'log_loss' needs the class labels"),
    ("log_loss", np.array([0.5, 0.5]), ("a", "b", "c"), "a 1-D probability vector needs exactly 2 classes, got 3"),
    ("log_loss", np.full((2, 2), 0.5), ("a", "b", "c"), "probability matrix has 2 columns but there are 3 classes"),
    ("roc_auc", np.full((2, 2), 0.5), ("a", "b"), r"metric 'roc_auc' cannot score predictions of shape \(2, 2\)"),
])
def test_score_says_what_is_wrong_with_probabilities(metric, y_pred, classes, message):
    with pytest.raises(ValueError, match=message):
        score(metric, np.array(["a", "b"]), y_pred, classes)


def test_an_unknown_metric_lists_the_known_ones():
    with pytest.raises(ValueError, match="known metrics: accuracy, code_label, code_proba"):
        score("nope", np.zeros(1), np.zeros(1))

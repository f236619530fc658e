"""Metrics and leaderboard scores against hand-computed values."""
from __future__ import annotations

import numpy as np
import pytest

from wmrl.tasks import leaderboard as lb
from wmrl.tasks.metrics import prediction_kind, score, submission_columns


def test_regression_metrics_hand_computed():
    y = np.array([1.0, 2.0, 3.0, 4.0])
    p = np.array([1.0, 2.0, 3.0, 6.0])  # errors 0, 0, 0, 2
    assert score("rmse", y, p) == pytest.approx(1.0)  # sqrt(4/4)
    assert score("mae", y, p) == pytest.approx(0.5)  # 2/4
    # R2 = 1 - SSE/SST = 1 - 4 / 5
    assert score("r2", y, p) == pytest.approx(0.2)


def test_label_metrics_hand_computed():
    y = np.array(["a", "a", "b", "b"])
    p = np.array(["a", "b", "b", "b"])
    assert score("accuracy", y, p, ("a", "b")) == pytest.approx(0.75)
    # class a: P=1, R=0.5, F1=2/3; class b: P=2/3, R=1, F1=0.8; macro = (2/3 + 0.8)/2
    assert score("macro_f1", y, p, ("a", "b")) == pytest.approx((2 / 3 + 0.8) / 2)


def test_probability_metrics_hand_computed():
    y = np.array(["no", "yes", "yes", "no"])
    p = np.array([0.2, 0.9, 0.4, 0.3])  # P(yes)
    # pairs (pos, neg): (0.9,0.2) (0.9,0.3) (0.4,0.2) (0.4,0.3) all ranked right -> AUC 1
    assert score("roc_auc", y, p, ("no", "yes")) == pytest.approx(1.0)
    expected = -np.mean(np.log([0.8, 0.9, 0.4, 0.7]))
    assert score("log_loss", y, p, ("no", "yes")) == pytest.approx(expected)
    y3 = np.array(["a", "b", "c"])
    p3 = np.array([[0.5, 0.25, 0.25], [0.25, 0.5, 0.25], [0.1, 0.1, 0.8]])
    assert score("log_loss", y3, p3, ("a", "b", "c")) == pytest.approx(-np.mean(np.log([0.5, 0.5, 0.8])))
    assert score("roc_auc_ovr", y3, p3, ("a", "b", "c")) == pytest.approx(1.0)


def test_submission_format_per_metric():
    assert prediction_kind("binary", "roc_auc") == "proba"
    assert prediction_kind("multiclass", "accuracy") == "label"
    assert submission_columns("multiclass", "log_loss", "id", "y", ("a", "b", "c")) == ["id", "a", "b", "c"]
    assert submission_columns("binary", "log_loss", "id", "y", ("a", "b")) == ["id", "y"]
    with pytest.raises(ValueError, match="does not apply"):
        prediction_kind("regression", "accuracy")
    with pytest.raises(ValueError, match="unknown metric"):
        prediction_kind("binary", "nope")


def test_position_score_mledojo_formula():
    board = [0.9, 0.8, 0.7, 0.6]  # higher is better, N = 4
    assert lb.position_score(0.95, board, False) == 1.0  # position 1 -> (4-1+1)/4
    assert lb.position_score(0.8, board, False) == 0.75  # ties count as at least as good: position 2
    assert lb.position_score(0.65, board, False) == 0.25  # position 4
    assert lb.position_score(0.1, board, False) == 0.0  # worse than all: position N+1
    assert lb.position_score(float("nan"), board, False) == 0.0
    low = [0.1, 0.2, 0.3]  # lower is better
    assert lb.position_score(0.15, low, True) == pytest.approx(2 / 3)
    assert lb.position(0.15, low, True) == 2


def test_medal_positions_kaggle_thresholds():
    assert lb.medal_positions(30) == (3, 6, 12)
    assert lb.medal_positions(5) == (1, 1, 2)  # max(1, int(0.5)) = 1
    assert lb.medal_positions(150) == (10, 30, 60)
    assert lb.medal_positions(500) == (11, 50, 100)
    assert lb.medal_positions(2000) == (14, 100, 200)


def test_medals_exclusive_gold_first_and_median_strict():
    board = list(np.linspace(1.0, 0.71, 30))  # 30 entries, best first
    assert lb.medal(board[0], board, False) == "gold"
    assert lb.medal(board[2], board, False) == "gold"  # position 3 = gold threshold
    assert lb.medal(board[3], board, False) == "silver"
    assert lb.medal(board[11], board, False) == "bronze"
    assert lb.medal(board[12], board, False) is None
    med = float(np.median(board))
    assert lb.above_median(med, board, False) is False  # strict
    assert lb.above_median(med + 1e-9, board, False) is True
    assert lb.above_median(med - 1e-9, board[::-1], True) is True


def test_direction_inferred_from_board_order():
    assert lb.infer_lower_is_better([0.1, 0.5], default=False) is True
    assert lb.infer_lower_is_better([0.5, 0.1], default=True) is False
    assert lb.infer_lower_is_better([0.3, 0.3], default=True) is True


def test_relative_performance_gap():
    # (0.8-0.5)/(1-0.5) = 0.6; lower-is-better task: (8-10)/(5-10) = 0.4; worse than baseline -> 0
    assert lb.relative_performance_gap([0.8], [0.5], [1.0]) == pytest.approx(0.6)
    assert lb.relative_performance_gap([0.8, 8.0, 0.1], [0.5, 10.0, 0.5], [1.0, 5.0, 1.0]) == pytest.approx(1.0 / 3)
    with pytest.raises(ValueError):
        lb.relative_performance_gap([1.0], [0.5], [0.5])


def test_write_and_read_leaderboard_roundtrip(tmp_path):
    scores = lb.write_leaderboard(tmp_path / "b.csv", [0.3, 0.1, 0.2], lower_is_better=True)
    assert list(scores) == [0.1, 0.2, 0.3]
    assert list(lb.read_leaderboard(tmp_path / "b.csv")) == [0.1, 0.2, 0.3]
    (tmp_path / "bad.csv").write_text("rank,points\n1,3\n")
    with pytest.raises(lb.LeaderboardError, match="no 'score' column"):
        lb.read_leaderboard(tmp_path / "bad.csv")


def test_ties_survive_csv_rounding(tmp_path):
    score = 0.16900977995110025
    (tmp_path / "b.csv").write_text(f"rank,score\n1,0.9\n2,{score:.10g}\n")  # an older 10-digit board
    board = lb.read_leaderboard(tmp_path / "b.csv")
    assert lb.position(score, board, False) == 2 and lb.position_score(score, board, False) == 0.5
    board2 = lb.write_leaderboard(tmp_path / "c.csv", [0.9, score], lower_is_better=False)
    assert list(lb.read_leaderboard(tmp_path / "c.csv")) == list(board2)  # full precision round trip
    assert lb.position(score * (1 - 1e-6), board, False) == 3  # a real difference is not a tie

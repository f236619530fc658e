"""The world model's feedback against the real one (wmrl.episodes.fidelity.feedback_fidelity)."""
from __future__ import annotations

import pytest

from wmrl.episodes.fidelity import feedback_fidelity


def _obs(status: str, v: float | None) -> dict:
    return {"status": status, "validation_score": v}


def test_errors_accuracy_and_the_order_of_revisions():
    turns = [
        {"episode": "a", "turn": 1, "executed": True, "observation": _obs("ok", 0.80),
         "observation_wm": _obs("ok", 0.70)},
        {"episode": "a", "turn": 2, "executed": True, "observation": _obs("ok", 0.90),
         "observation_wm": _obs("ok", 0.72)},
        {"episode": "b", "turn": 1, "executed": True, "observation": _obs("ok", 0.50),
         "observation_wm": _obs("ok", 0.60)},
        {"episode": "b", "turn": 2, "executed": True, "observation": _obs("ok", 0.40),
         "observation_wm": _obs("ok", 0.65)},
        {"episode": "c", "turn": 1, "executed": True, "observation": _obs("runtime_error", None),
         "observation_wm": _obs("ok", 0.5)},
        # not compared: a world-model turn, and a turn the world model did not score
        {"episode": "d", "turn": 1, "executed": False, "observation": _obs("ok", 0.5), "observation_wm": None},
        {"episode": "e", "turn": 1, "executed": True, "observation": _obs("ok", 0.5), "observation_wm": None},
    ]
    f = feedback_fidelity(turns)
    assert f["n_turns"] == 5
    assert f["status_accuracy"] == pytest.approx(4 / 5)
    rel = [0.1 / 0.8, 0.18 / 0.9, 0.1 / 0.5, 0.25 / 0.4]
    assert f["validation_rel_error"] == pytest.approx(sum(rel) / 4)
    assert f["validation_rel_error_median"] == pytest.approx((0.18 / 0.9 + 0.1 / 0.5) / 2)
    assert f["n_pairs_pairwise"] == 2 and f["pairwise_agreement"] == pytest.approx(0.5)  # a right, b wrong


def test_no_turns_gives_none():
    f = feedback_fidelity([])
    assert f == {"n_turns": 0, "validation_rel_error": None, "validation_rel_error_median": None,
                 "status_accuracy": None, "pairwise_agreement": None, "n_pairs_pairwise": 0}

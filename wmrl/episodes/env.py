"""A Gymnasium environment over wmrl's tasks, executor and world model, for users' own agents.

An external agent loop (an LLM agent, a scripted search, an RL learner) drives one research episode on one
task: it reads the task, tries programs on a harness-made validation split (``validate``), and submits one as
final (``submit``). With ``backend="execution"`` every program runs in the sandbox; with
``backend="world_model"`` nothing runs and the world model is the simulator::

    env = ResearchEnv(tasks, backend="execution")            # or backend="world_model", world_model=wm
    obs, info = env.reset(seed=0)                            # obs["text"]: the task prompt
    obs, reward, terminated, truncated, info = env.step({"action": "validate", "code": program})
    # obs["validation_score"], obs["wall_s"], obs["error_tail"], obs["text"] (the rendered feedback); reward 0
    obs, reward, terminated, truncated, info = env.step({"action": "submit", "code": program})
    # terminated; reward = the submission's leaderboard percentile in [0, 1]; info["grade"]
    env.close()

Conventions (docs/multiturn-env.md): the Gymnasium 1.x API (``reset(seed, options) -> (obs, info)``,
``step(action) -> (obs, reward, terminated, truncated, info)``, ``spaces.Dict`` / ``spaces.Text`` spaces,
``metadata`` / ``render_mode`` / ``close``; no NaN in observations, so Gymnasium's checker can compare them),
and MLE-Dojo's where Gymnasium has none: its action names
(``validate_code`` and ``execute_code`` are aliases of ``validate`` and ``submit``, ``request_info`` is
MLE-Dojo's), ``step(name, code=...)`` as its call form, the observation's latest feedback as text, and the
leaderboard percentile (MLE-Dojo's position score) as the reward of a graded submission. Unlike MLE-Dojo,
only the submission is graded on the test set and it ends the episode (MLE-bench's single final submission),
and a validation run shows a validation score on rows held out from train.csv, never a test score.

Why one file of about 580 lines: the action parsing, the two backends and the observation space must agree
on every field, and Gymnasium's checker tests them together.
"""
from __future__ import annotations

import dataclasses
import math
import string
from collections.abc import Mapping
from typing import Any, TypeGuard

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from wmrl.episodes.observation import (
    DEFAULT_ERROR_CHARS,
    Observation,
    observation_from_prediction,
    observation_from_result,
)
from wmrl.episodes.prompt import ACTION_INSTRUCTION, episode_prompt
from wmrl.models.scaffolds import ScriptScaffold, extract_code, get_scaffold
from wmrl.world_model.outcome import predict_rewards
from wmrl.tasks.spec import Task
from wmrl.execution.types import ExecutionRequest
from wmrl.execution.pool import result_or_infra
from wmrl.tasks.validation import validation_view
from wmrl.execution.pool import LocalExecutor

__all__ = ["ACTIONS", "ACTION_ALIASES", "ENV_ID", "ExecutionFailed", "ProgramScaffold", "ResearchEnv"]

#: The id under which :class:`ResearchEnv` is registered with Gymnasium (``gymnasium.make(ENV_ID, tasks=...)``).
ENV_ID = "wmrl/ResearchEnv-v0"
#: The actions, in the order of the integer index of ``action_space["action"]``.
ACTIONS: tuple[str, ...] = ("validate", "submit", "request_info")
#: MLE-Dojo's action names accepted for ours.
ACTION_ALIASES: dict[str, str] = {"validate_code": "validate", "execute_code": "submit"}
#: Default longest program accepted, characters.
MAX_CODE_CHARS = 200_000
#: Longest observation text, characters.
MAX_TEXT_CHARS = 1_000_000
#: What ``action_space.sample()`` draws code from (any Unicode is accepted).
_SAMPLE_CHARSET = string.ascii_letters + string.digits + " \n_()=.,:+-*/#'\"[]"
_BACKENDS = ("execution", "world_model")


class ExecutionFailed(RuntimeError):
    """The executor failed to run a program (``infra_error``: not the program's doing). The step did not
    happen: the turn is not used and the episode is unchanged, so the same action may be retried."""


class AnyText(spaces.Text):
    """A :class:`gymnasium.spaces.Text` whose members are any ``str`` of ``min_length..max_length``
    characters, any Unicode (programs, error messages and task descriptions are not alphanumeric);
    :meth:`sample` draws from ``charset`` as usual."""

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length


class ProgramScaffold(ScriptScaffold):
    """The default way code is given: the raw, complete Python program.

    The prompt is the ``script`` scaffold's (read ``input/train.csv`` and ``input/test.csv``, write
    ``submission.csv``); :meth:`render` returns the code as given, or the body of its first fenced code
    block when it has one, so an LLM's reply may be passed unchanged.
    """

    name = "program"
    response_prefix = ""

    def stop_at(self, text: str) -> int | None:
        """None: a program is given whole."""
        return None

    def render(self, task: Task, completion: str) -> str:
        """``completion`` itself, or its first fenced code block."""
        return extract_code(completion)


def resolve_scaffold(scaffold: Any) -> Any:
    """``None`` or ``"program"``: :class:`ProgramScaffold`; another name: :func:`wmrl.models.scaffolds.get_scaffold`
    (``script``, ``function``, ``grammar``); an object with ``prompt`` and ``render``: itself.

    Raises:
        ValueError: an unknown name, or an object without ``prompt``/``render``.
    """
    if scaffold is None or scaffold == "program":
        return ProgramScaffold()
    if isinstance(scaffold, str):
        try:
            return get_scaffold(scaffold)
        except ValueError as e:
            raise ValueError(f"{e} (or 'program', the default: code is a complete Python program)") from None
    if not (callable(getattr(scaffold, "prompt", None)) and callable(getattr(scaffold, "render", None))):
        raise ValueError(f"scaffold must be a name or an object with prompt(task) and render(task, code), "
                         f"got {type(scaffold).__name__}")
    return scaffold


def _finite(v: float | None) -> TypeGuard[float]:
    return v is not None and math.isfinite(float(v))


def _scalar(v: float | None) -> np.ndarray:
    """A 0-d float64 array: ``v``, or 0.0 when it is None or not finite."""
    return np.array(float(v) if _finite(v) else 0.0, dtype=np.float64)


class ResearchEnv(gym.Env):
    """One research episode per :meth:`reset`: validate programs, then submit one (module docstring).

    Args:
        tasks: the tasks (a sequence of :class:`~wmrl.tasks.spec.Task`, or a
            :class:`~wmrl.interfaces.TaskSource` such as :class:`wmrl.tasks.loader.TaskSuite`, all of whose
            tasks are used). Every task needs a reward source (a leaderboard).
        backend: ``"execution"`` (programs run in the sandbox) or ``"world_model"`` (nothing runs: the world
            model predicts each program's outcome).
        executor: the :class:`~wmrl.interfaces.Executor` of the execution backend; default a
            :class:`~wmrl.execution.pool.LocalExecutor` with one worker, created here and closed by
            :meth:`close` (one given is never closed here). Unused by the world-model backend.
        world_model: the world-model backend's :class:`~wmrl.interfaces.WorldModel` (``predict(prompts,
            completions)`` -> predicted leaderboard percentiles; e.g. from
            :func:`wmrl.world_model.factory.load_world_model`). It is given the single-turn prompt
            ``scaffold.prompt(task)`` and the code, as the trainer gives it (an execution's outcome depends on
            the program only).
        calibrator: optional map of the world model's raw predictions r_hat to calibrated ones: a callable
            ``f(np.ndarray [N]) -> np.ndarray [N]`` or an object with ``transform`` (e.g. the trainer's
            isotonic calibrator). Predictions are clipped to [0, 1] after it.
        scaffold: how ``code`` becomes a program: ``None``/``"program"`` (default; the complete Python program,
            :class:`ProgramScaffold`), a scaffold name (``"script"``, ``"function"``, ``"grammar"``: ``code`` is
            a completion of that scaffold, what a policy writes after its ``response_prefix``, rendered with
            ``scaffold.render(task, code)``) or a scaffold object.
        max_turns: K >= 1, the programs an episode may try: a submit at turn k <= K ends it (terminated); the
            K-th validate without a submit ends it too (truncated, reward 0).
        validation_fraction: the held-out share of train.csv that ``validate`` runs are scored on, in (0, 1)
            (:func:`wmrl.tasks.validation.validation_view`).
        validation_seed: seed of that split.
        error_chars: cap of the error tail an observation shows, characters (>= 0).
        wm_error_threshold: a predicted percentile below this is shown as a failed run (world-model backend).
        wm_wall_s: the run time the world-model backend's observations state, seconds: a number, a mapping
            task id -> seconds, or None ("unknown").
        time_limit_s: wall-clock limit of each execution, seconds (None: the task's own limit).
        max_code_chars: the longest ``code`` accepted, characters.
        render_mode: ``None``, ``"ansi"`` (:meth:`render` returns the latest observation text) or ``"human"``
            (it prints it).

    Raises:
        ValueError: no tasks, duplicate task ids, a task without a reward source, an unknown backend or
            scaffold, a world-model backend without a world model, a calibrator that is neither callable nor
            has ``transform``, or a bad number (``max_turns < 1``, ``validation_fraction`` outside (0, 1),
            negative ``error_chars``, ``max_code_chars < 1``), an unknown ``render_mode``.
        SandboxUnavailable: the default executor cannot sandbox on the local machine (bubblewrap missing).

    Attributes:
        executions: real executions over the environment's lifetime (failed ones included).
        history: the episode's ``(code, Observation)`` pairs of its validate steps, oldest first.
    """

    # render_fps is nominal (a text environment has no frame rate; Gymnasium's checker wants a positive number)
    metadata = {"render_modes": ["ansi", "human"], "render_fps": 1}

    def __init__(self, tasks: Any, *, backend: str = "execution", executor: Any = None,
                 world_model: Any = None, calibrator: Any = None, scaffold: Any = None, max_turns: int = 4,
                 validation_fraction: float = 0.2, validation_seed: int = 0,
                 error_chars: int = DEFAULT_ERROR_CHARS, wm_error_threshold: float = 0.05,
                 wm_wall_s: float | Mapping[str, float] | None = None, time_limit_s: float | None = None,
                 max_code_chars: int = MAX_CODE_CHARS, render_mode: str | None = None) -> None:
        super().__init__()
        task_list = list(tasks.tasks()) if callable(getattr(tasks, "tasks", None)) else list(tasks)
        if not task_list:
            raise ValueError("ResearchEnv needs at least one task (a list of Task or a TaskSource such as "
                             "wmrl.tasks.loader.TaskSuite(root))")
        ids = [t.id for t in task_list]
        if len(set(ids)) != len(ids):
            raise ValueError(f"duplicate task ids: {sorted({i for i in ids if ids.count(i) > 1})}")
        no_reward = [t.id for t in task_list if not t.has_reward]
        if no_reward:
            raise ValueError(f"tasks without a reward source (no leaderboard) cannot be graded: {no_reward}; "
                             "build them with leaderboards ('wmrl tasks build --leaderboards')")
        if backend not in _BACKENDS:
            raise ValueError(f"backend must be 'execution' or 'world_model', got {backend!r}")
        if backend == "world_model" and world_model is None:
            raise ValueError("backend='world_model' needs world_model=... (e.g. "
                             "wmrl.world_model.factory.load_world_model(directory, model, tokenizer))")
        if calibrator is not None and not (callable(calibrator) or callable(getattr(calibrator, "transform", None))):
            raise ValueError("calibrator must be a callable f(r_hat array) -> array or have transform(r_hat)")
        if int(max_turns) != max_turns or max_turns < 1:
            raise ValueError(f"max_turns must be an integer >= 1, got {max_turns!r}")
        if not 0.0 < float(validation_fraction) < 1.0:
            raise ValueError(f"validation_fraction must lie in (0, 1), got {validation_fraction!r}")
        if error_chars < 0:
            raise ValueError(f"error_chars must be >= 0, got {error_chars!r}")
        if max_code_chars < 1:
            raise ValueError(f"max_code_chars must be >= 1, got {max_code_chars!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.tasks: list[Task] = task_list
        self._by_id = {t.id: t for t in task_list}
        self.backend = backend
        self.world_model = world_model
        self.calibrator = calibrator
        self.scaffold = resolve_scaffold(scaffold)
        self.max_turns = int(max_turns)
        self.validation_fraction = float(validation_fraction)
        self.validation_seed = int(validation_seed)
        self.error_chars = int(error_chars)
        self.wm_error_threshold = float(wm_error_threshold)
        if not 0.0 <= self.wm_error_threshold <= 1.0:  # also refuses NaN
            raise ValueError(f"wm_error_threshold is a percentile in [0, 1], got {wm_error_threshold!r}")
        walls = wm_wall_s.values() if isinstance(wm_wall_s, Mapping) else [] if wm_wall_s is None else [wm_wall_s]
        for w in walls:
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
                raise ValueError(f"wm_wall_s must be seconds >= 0 (a number, or a {{task_id: seconds}} mapping), "
                                 f"got {w!r}")
        self.wm_wall_s = wm_wall_s
        self.time_limit_s = time_limit_s
        self.max_code_chars = int(max_code_chars)
        self.render_mode = render_mode
        self._owns_executor = False
        self.executor = executor
        if backend == "execution" and executor is None:
            self.executor = LocalExecutor(max_workers=1)
            self._owns_executor = True

        self.action_space = spaces.Dict({
            "action": spaces.Discrete(len(ACTIONS)),
            "code": AnyText(max_length=self.max_code_chars, min_length=1, charset=_SAMPLE_CHARSET),
        })
        self.observation_space = spaces.Dict({
            "text": AnyText(max_length=MAX_TEXT_CHARS, min_length=0),
            "turn": spaces.Discrete(self.max_turns + 1),
            "source": AnyText(max_length=16, min_length=0),
            "status": AnyText(max_length=64, min_length=0),
            "validation_score": spaces.Box(low=-np.inf, high=np.inf, shape=(), dtype=np.float64),
            "has_validation_score": spaces.Discrete(2),
            "wall_s": spaces.Box(low=0.0, high=np.inf, shape=(), dtype=np.float64),
            "error_tail": AnyText(max_length=max(self.error_chars, 1), min_length=0),
        })

        self.executions = 0
        self.history: list[tuple[str, Observation]] = []
        self._task: Task | None = None
        self._views: dict[str, Task] = {}
        self._turn = 0
        self._done = False
        self._closed = False
        self._episode = 0
        self._exec_turn: list[int] = []
        self._last_obs: dict[str, Any] | None = None

    # ------------------------------------------------------------------ Gymnasium API

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Start an episode on one task.

        Args:
            seed: seeds the environment's generator (``self.np_random``), which picks the task when none is
                named; the same seed picks the same task.
            options: ``{"task_id": id}`` names the task.

        Returns:
            ``(obs, info)``: ``obs["text"]`` is the task prompt (``scaffold.prompt(task)``), ``obs["turn"]`` 0,
            the feedback fields empty (``""``, 0); ``info`` holds ``task_id``, ``task_type``, ``metric``,
            ``lower_is_better``, ``direction`` (``"minimize"``/``"maximize"``), ``turn`` (0), ``max_turns``,
            ``turns_left``, ``backend``, ``scaffold``, ``validation_fraction`` and ``actions``.

        Raises:
            ValueError: an unknown option or task id (the message lists the known ones).
            RuntimeError: the environment is closed.
        """
        super().reset(seed=seed)
        if self._closed:
            raise RuntimeError("the environment is closed; create a new ResearchEnv")
        options = dict(options or {})
        unknown = set(options) - {"task_id"}
        if unknown:
            raise ValueError(f"unknown reset options {sorted(unknown)}; the only option is 'task_id'")
        tid = options.get("task_id")
        if tid is None:
            task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        elif tid in self._by_id:
            task = self._by_id[tid]
        else:
            raise ValueError(f"unknown task_id {tid!r}; known tasks: {', '.join(self._by_id)}")
        self._task, self._turn, self._done = task, 0, False
        self._episode += 1
        self._exec_turn = [0] * self.max_turns
        self.history = []
        obs = self._obs(self.scaffold.prompt(task), None)
        self._last_obs = self._copy_obs(obs)
        return obs, self._info()

    def step(self, action: Any, *, code: str | None = None
             ) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """Take one action.

        Args:
            action: ``{"action": name_or_index, "code": str}``, a tuple ``(name, code)``, or a name alone with
                ``code=`` (MLE-Dojo's ``env.step("execute_code", code=...)``). Names: ``validate`` (alias
                ``validate_code``), ``submit`` (alias ``execute_code``), ``request_info`` (no code); or their
                index in :data:`ACTIONS` (what ``action_space.sample()`` draws).
            code: the code, when ``action`` does not hold it.

        Returns:
            ``(obs, reward, terminated, truncated, info)``:

            * ``validate``: the program runs on the task's validation view (execution backend) or the world
              model predicts it (world-model backend; nothing runs); ``obs`` holds its feedback (``text``: the
              rendered :class:`~wmrl.episodes.observation.Observation`; ``validation_score`` in the metric's
              units with ``has_validation_score`` 1, or 0.0 with 0 when the run gave none; ``wall_s`` seconds,
              0.0 when unknown; ``status``, ``error_tail``, ``source``); reward 0;
              ``truncated`` when it was turn ``max_turns``. ``info`` holds the turn, the executions and the
              observation as a dict: never a test score, reward or medal.
            * ``submit``: the program is graded on the real task (execution) or predicted (world model);
              ``terminated``; the reward is its leaderboard percentile in [0, 1] (the task's failure reward when
              it fails; the world model's calibrated prediction on that backend); ``info["grade"]`` holds the
              grade (``score``, ``reward``, ``medal``, ``above_median``, ``status``; the world model's
              ``reward`` and raw ``reward_wm``) and ``info["reward_source"]`` says which
              (``"execution"``/``"world_model"``).
            * ``request_info``: ``obs["text"]`` is the task's full description, its public files and the sample
              submission's first rows; no turn is used; reward 0.

        Raises:
            RuntimeError: before :meth:`reset`, after the episode ended (call :meth:`reset`), or once closed.
            ValueError: an unknown action, a missing, empty, non-string or too long ``code``, or an action
                given in two places.
            ExecutionFailed: the executor failed (``infra_error``); the step did not happen and may be retried.
        """
        if self._closed:
            raise RuntimeError("the environment is closed; create a new ResearchEnv")
        if self._task is None:
            raise RuntimeError("call reset() before step(): no episode has started")
        if self._done:
            raise RuntimeError("the episode is over (ended by a submit, or truncated after max_turns programs); "
                               "call reset() to start a new one")
        name, code = self._parse(action, code)
        if name == "request_info":
            obs = self._copy_obs(self._last_obs or {}, text=self._task_info())
            return obs, 0.0, False, False, self._info(action="request_info")
        turn = self._turn + 1
        if name == "validate":
            fb = self._validate(code, turn)
            self._turn = turn
            self.history.append((code, fb))
            truncated = turn >= self.max_turns
            self._done = truncated
            obs = self._obs(fb.render(), fb)
            self._last_obs = self._copy_obs(obs)
            return obs, 0.0, False, truncated, self._info(action="validate", observation=fb.to_dict())
        fb, reward, grade = self._submit(code, turn)
        self._turn, self._done = turn, True
        obs = self._obs(self._submit_text(fb, reward), fb)
        self._last_obs = self._copy_obs(obs)
        return obs, float(reward), True, False, self._info(action="submit", observation=fb.to_dict(), grade=grade,
                                                            reward_source=self.backend)

    def render(self) -> str | None:
        """The latest observation text (``render_mode="ansi"``), printed (``"human"``), or None (no mode)."""
        text = None if self._last_obs is None else self._last_obs["text"]
        if self.render_mode == "human":
            print(text if text is not None else "(call reset() first)")
            return None
        return text if self.render_mode == "ansi" else None

    def close(self) -> None:
        """Close the executor this environment created (one given to it is left open); idempotent."""
        if self._owns_executor and self.executor is not None and not self._closed:
            self.executor.close()
        self._closed = True
        super().close()

    # ------------------------------------------------------------------ more for agents

    @property
    def task(self) -> Task | None:
        """The episode's task (the original, not its validation view); None before :meth:`reset`."""
        return self._task

    @property
    def turn(self) -> int:
        """Turns used in this episode (validate and submit steps)."""
        return self._turn

    def episode_prompt(self) -> str:
        """The prompt of the next turn for an LLM agent: the task prompt, then every validated program with its
        feedback (:func:`wmrl.episodes.prompt.episode_prompt`, the trainer's multi-turn prompt).

        Raises:
            RuntimeError: before :meth:`reset`.
        """
        if self._task is None:
            raise RuntimeError("call reset() first")
        return episode_prompt(self.scaffold, self._task, self.history, ACTION_INSTRUCTION)

    # ------------------------------------------------------------------ internals

    def _parse(self, action: Any, code: str | None) -> tuple[str, str]:
        known = ", ".join([*ACTIONS, *ACTION_ALIASES])
        if isinstance(action, Mapping):
            extra = set(action) - {"action", "code"}
            if extra or "action" not in action:
                raise ValueError(f"an action dict has the keys 'action' and 'code', got {sorted(action)}; "
                                 "e.g. {'action': 'validate', 'code': program}")
            raw, given = action["action"], action.get("code")
        elif isinstance(action, (tuple, list)):
            if not 1 <= len(action) <= 2:
                raise ValueError(f"an action tuple is (name, code), got {len(action)} items")
            raw, given = action[0], (action[1] if len(action) == 2 else None)
        elif isinstance(action, (str, int, np.integer)):
            raw, given = action, None
        else:
            raise ValueError(f"an action is a dict {{'action': name, 'code': str}}, a tuple (name, code) or a name, "
                             f"got {type(action).__name__}")
        if given is not None and code is not None:
            raise ValueError("the code was given twice (in the action and as code=); give it once")
        code = given if given is not None else code
        if isinstance(raw, (int, np.integer)) and not isinstance(raw, bool):
            if not 0 <= int(raw) < len(ACTIONS):
                raise ValueError(f"action index {int(raw)} is out of range; indices: "
                                 + ", ".join(f"{i}={a}" for i, a in enumerate(ACTIONS)))
            name = ACTIONS[int(raw)]
        elif isinstance(raw, str):
            name = ACTION_ALIASES.get(raw, raw)
            if name not in ACTIONS:
                raise ValueError(f"unknown action {raw!r}; use one of: {known}")
        else:
            raise ValueError(f"the action name must be a str or an index, got {type(raw).__name__}; "
                             f"use one of: {known}")
        if name == "request_info":
            return name, ""
        if code is None:
            raise ValueError(f"action {name!r} needs code: {{'action': {name!r}, 'code': <program>}}")
        if not isinstance(code, str):
            raise ValueError(f"code must be a str (the program text), got {type(code).__name__}")
        if not code.strip():
            raise ValueError(f"action {name!r} got empty code; give the program text")
        if len(code) > self.max_code_chars:
            raise ValueError(f"code is {len(code)} characters, more than max_code_chars={self.max_code_chars}")
        try:
            code.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(f"code is not valid Unicode text at character {e.start} ({code[e.start]!r}, a lone "
                             "surrogate): a program must be UTF-8 encodable; decode its bytes with "
                             "errors='replace'") from None
        return name, code

    def _view(self) -> Task:
        task = self._task
        assert task is not None
        if task.id not in self._views:
            self._views[task.id] = validation_view(task, self.validation_fraction, self.validation_seed)
        return self._views[task.id]

    def _execute(self, task: Task, code: str, turn: int, action: str) -> Any:
        req = ExecutionRequest(task=task, program=self.scaffold.render(task, code),
                               request_id=f"env-{task.id}-e{self._episode}-t{turn}-{action}",
                               time_limit_s=self.time_limit_s,
                               meta={"source": "ResearchEnv", "action": action, "turn": turn,
                                     "scaffold": getattr(self.scaffold, "name", "")})
        res = result_or_infra(self.executor.submit(req), req)
        self.executions += 1
        self._exec_turn[turn - 1] += 1
        if res.is_infra_error:
            raise ExecutionFailed(f"the executor could not run the program ({res.error}); the step did not happen, "
                                  "retry it")
        return res

    def _predict(self, code: str) -> tuple[float, float]:
        """(raw r_hat, calibrated and clipped r_tilde) of the world model for ``code``."""
        task = self._task
        assert task is not None
        r_hat, _ = predict_rewards(self.world_model, [self.scaffold.prompt(task)], [code])  # checked: [1], finite
        r = r_hat
        if self.calibrator is not None:
            f = getattr(self.calibrator, "transform", None) or self.calibrator
            r = np.asarray(f(r_hat), dtype=np.float64).reshape(-1)
        return float(r_hat[0]), float(np.clip(r[0], 0.0, 1.0))

    def _wm_wall_s(self) -> float | None:
        w = self.wm_wall_s
        if isinstance(w, Mapping):
            w = w.get(self._task.id) if self._task is not None else None
        return None if w is None else float(w)

    def _validate(self, code: str, turn: int) -> Observation:
        view = self._view()
        if self.backend == "execution":
            res = self._execute(view, code, turn, "validate")
            return observation_from_result(res, view, turn, self.error_chars)
        _, r = self._predict(code)
        return observation_from_prediction(view, turn, r, self._wm_wall_s(), self.wm_error_threshold, self.error_chars)

    def _submit(self, code: str, turn: int) -> tuple[Observation, float, dict[str, Any]]:
        task = self._task
        assert task is not None
        if self.backend == "execution":
            res = self._execute(task, code, turn, "submit")
            fb = observation_from_result(res, task, turn, self.error_chars)
            grade = {"score": res.score, "reward": res.reward, "medal": res.medal, "above_median": res.above_median,
                     "status": fb.status, "wall_s": float(res.wall_s)}
            ok = res.reward is not None and math.isfinite(res.reward)
            reward = float(res.reward) if ok else float(task.failure_reward)
            return fb, reward, grade
        r_hat, r = self._predict(code)
        fb = observation_from_prediction(self._view(), turn, r, self._wm_wall_s(), self.wm_error_threshold,
                                         self.error_chars)
        fb = dataclasses.replace(fb, validation_score=None)  # a submission shows no score: its grade is the reward
        return fb, r, {"reward": r, "reward_wm": r_hat, "status": fb.status, "predicted": True}

    def _submit_text(self, fb: Observation, reward: float) -> str:
        wall = "unknown" if fb.wall_s is None or not math.isfinite(fb.wall_s) else f"{fb.wall_s:.1f} s"
        kind = "predicted by the world model" if self.backend == "world_model" else "graded on the test set"
        lines = [f"Submitted as final at turn {fb.turn} of {self.max_turns}; the episode is over.",
                 f"Run time: {wall}", f"Status: {fb.status}",
                 f"The reward is the submission's leaderboard percentile ({kind})."]
        return "\n".join(lines + fb.error_lines())

    def _task_info(self) -> str:
        task = self._task
        assert task is not None
        pub = task.public_dir
        files = []
        for p in sorted(pub.iterdir()) if pub.is_dir() else []:
            if p.is_file():
                files.append(f"  input/{p.name} ({p.stat().st_size} bytes)")
        head = ""
        sample = pub / "sample_submission.csv"
        if sample.is_file():
            with open(sample, encoding="utf-8", errors="replace") as f:
                head = "".join([next(f, "") for _ in range(4)]).rstrip()
        direction = "lower is better" if task.lower_is_better else "higher is better"
        return "\n".join([f"Task {task.id} ({task.type}); metric {task.metric} ({direction}); target {task.target}; "
                          f"id column {task.id_column}.", "", (task.description or "").strip(), "",
                          "Files:", *files, "", "sample_submission.csv (first rows):", head])

    def _obs(self, text: str, fb: Observation | None) -> dict[str, Any]:
        return {"text": text[:MAX_TEXT_CHARS], "turn": int(self._turn if fb is None else fb.turn),
                "source": "" if fb is None else fb.source, "status": "" if fb is None else fb.status,
                "validation_score": _scalar(None if fb is None else fb.validation_score),
                "has_validation_score": int(fb is not None and _finite(fb.validation_score)),
                "wall_s": _scalar(None if fb is None else fb.wall_s),
                "error_tail": "" if fb is None else fb.error_tail[:max(self.error_chars, 1)]}

    @staticmethod
    def _copy_obs(obs: dict[str, Any], **changes: Any) -> dict[str, Any]:
        out = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in obs.items()}
        out.update(changes)
        return out

    def _info(self, **extra: Any) -> dict[str, Any]:
        task = self._task
        assert task is not None
        info = {"task_id": task.id, "task_type": task.type, "metric": task.metric,
                "lower_is_better": bool(task.lower_is_better),
                "direction": "minimize" if task.lower_is_better else "maximize", "turn": self._turn,
                "max_turns": self.max_turns, "turns_left": 0 if self._done else self.max_turns - self._turn,
                "backend": self.backend, "scaffold": getattr(self.scaffold, "name", type(self.scaffold).__name__),
                "validation_fraction": self.validation_fraction, "actions": list(ACTIONS),
                "executions": int(sum(self._exec_turn)), "executions_turn": list(self._exec_turn)}
        info.update(extra)
        return info


if ENV_ID not in gym.registry:
    # nondeterministic: real executions differ in run time (and unseeded programs in score), so the
    # checker's same-seed-same-step test does not apply to the execution backend.
    gym.register(ENV_ID, entry_point="wmrl.episodes.env:ResearchEnv", nondeterministic=True)

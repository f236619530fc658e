"""The environment seam: what the step engine asks of any kind of task, and the registry of environments.

An RL environment in WMRL has two ways to reward a trajectory: the expensive real one (execute a program in the
sandbox and grade it; read a robot simulator's success) and the world model's prediction of it. The
:class:`Environment` protocol is those two plus sampling::

    sample(policy, step)           -> Rollouts        B trajectories in M groups (G per group, one group key each)
    submit(rollouts, idx)          -> [Future] * n    start the real reward of trajectories idx (anchors), one
                                                      future per trajectory, resolving to an outcome
    predict(rollouts)              -> Predictions     the world model's reward r_hat of every trajectory

An outcome is an object with ``status``, ``reward`` (None: none), ``error``, ``cpu_s`` (CPU-seconds) and
``wall_s`` (seconds): an :class:`wmrl.execution.types.ExecutionResult`, or an :class:`Outcome`. The step engine
(:class:`wmrl.step.engine.StepEngine`) submits before it predicts and consumes the futures afterwards through its
anchor stream (:class:`wmrl.step.anchors.AnchorStream`: the synchronous stream, or the asynchronous one with a
staleness bound), so an environment whose executions run elsewhere (a sandbox pool) overlaps them with the world
model, and one whose real reward is at hand (a simulator episode's success) returns done futures (:func:`done`).
:meth:`Outcomes.from_results` turns outcomes into the step's real rewards with the one rule of what is usable
(:func:`wmrl.core.infra.usable_outcome`). What the world model reads (the prompt and the program, the visited states
of an episode) is the environment's business: the world model's input comes from the environment.

Environments are registered by name in :data:`ENVIRONMENTS`, a :class:`wmrl.core.registry.Registry` like every other
name-to-thing map of wmrl (entry-point group ``wmrl.environments``, docs/plugins.md): :func:`register_environment`
(a decorator on a factory), :func:`make_environment`, :func:`environment_names`. The built-in ones:

==============  ===========================================================  =================================
``kaggle``      Kaggle-style tasks: programs run in the sandbox, graded on      :mod:`wmrl.step.kaggle`
                the leaderboard percentile; the world model reads the program
``metaworld``   Meta-World manipulation: episodes of a Gaussian policy;       :mod:`wmrl.embodied.environment`
                success is the real reward, a progress predictor the model
==============  ===========================================================  =================================

One optional hook serves environments whose later turns depend on the route (:class:`ExtendingEnvironment`)::

    extend(policy, rollouts, is_anchor, predict, ledger) -> Extension
                                                      turns 2..K of routed trajectories: anchor trajectories see
                                                      real feedback, world-model ones predicted feedback

The engine samples turn 1, routes its groups, then calls ``extend`` instead of submit || predict
(:meth:`wmrl.step.engine.StepEngine.measure`) and writes the :class:`Extension`'s outcomes and predictions into the
step batch. Multi-turn research episodes on Kaggle-style tasks (a program per turn with validation feedback) are
such an environment (:class:`wmrl.step.multiturn.MultiTurnKaggleEnvironment`); the Gymnasium env of
:mod:`wmrl.episodes.env` predicts with the Kaggle environment's :func:`wmrl.world_model.outcome.predict_rewards`.
An environment with state of its own (the multi-turn environment's run times) is a :class:`StatefulEnvironment`,
and a checkpoint keeps it.

Adding an environment is one module: a class with the three methods, and ``@register_environment("name")`` on its
factory (docs/architecture.md, "Adding an environment", works one example through).
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Future
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from typing import Annotated, Any, Protocol, runtime_checkable

import numpy as np
from pydantic import AfterValidator

from wmrl.core.infra import usable_outcome
from wmrl.core.registry import Registry


@dataclass
class Rollouts:
    """B trajectories of one step in M groups, as an environment sampled them.

    Attributes:
        step: the training step (1-based).
        group_keys: [M] the router's key of each group (a task id, an initial state's key).
        group_ids: [B] int64 group of each trajectory, in 0..M-1.
        data: the environment's own trajectories (a ``RolloutBatch`` of token sequences, an episode batch).
        tasks: [M] the groups' task objects when the environment has them (text tasks), else empty.

    Raises:
        ValueError: group ids outside 0..M-1.
    """

    step: int
    group_keys: list[str]
    group_ids: np.ndarray
    data: Any
    tasks: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.group_ids = np.asarray(self.group_ids, dtype=np.int64)
        M = len(self.group_keys)
        if self.group_ids.size and (self.group_ids.min() < 0 or self.group_ids.max() >= M):
            raise ValueError(f"group ids must lie in 0..{M - 1} (one per group key); got "
                             f"{int(self.group_ids.min())}..{int(self.group_ids.max())}")

    @property
    def B(self) -> int:
        """Trajectories."""
        return int(self.group_ids.size)


@dataclass
class Outcomes:
    """The real rewards of n trajectories (the anchors of a step).

    Attributes:
        idx: [n] int64 the trajectories' indices in the step's rollouts.
        reward_true: [n] float64 true reward (NaN: none, e.g. an infrastructure failure).
        valid: [n] bool False: no usable outcome (infrastructure failure, no reward); dropped from the gradient,
            the baselines and the calibration.
        status: [n] the outcome's status (``ok``, ``runtime_error``, ..., ``success``/``failure``), or None.
        error: [n] the error message, or None.
        costs: [n] what each real reward cost, for the compute ledger: objects with ``status``, ``cpu_s``
            (CPU-seconds) and ``wall_s`` (seconds), e.g. :class:`wmrl.execution.types.ExecutionResult`.
    """

    idx: np.ndarray
    reward_true: np.ndarray
    valid: np.ndarray
    status: list[str | None]
    error: list[str | None]
    costs: list[Any] = field(default_factory=list)

    @classmethod
    def empty(cls) -> Outcomes:
        """No outcome (a step without anchors)."""
        return cls(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, bool), [], [], [])

    @classmethod
    def from_results(cls, idx: Sequence[int], results: Sequence[Any]) -> Outcomes:
        """The outcomes of trajectories ``idx`` ([n]) from their results ([n] objects with ``status``, ``reward``,
        ``error``: :class:`~wmrl.execution.types.ExecutionResult`, :class:`Outcome`). A result that is not usable
        (:func:`wmrl.core.infra.usable_outcome`: an infrastructure error or no finite reward) is invalid, its reward
        NaN; errors keep their last 500 characters. The results are the ledger's ``costs``."""
        status: list[str | None] = [str(getattr(r.status, "value", r.status)) for r in results]
        valid = np.array([usable_outcome(r.status, r.reward) for r in results], dtype=bool)
        reward = np.array([float(r.reward) if v else np.nan for v, r in zip(valid, results)], dtype=np.float64)
        return cls(idx=np.asarray(idx, dtype=np.int64).reshape(-1), reward_true=reward, valid=valid, status=status,
                   error=[(r.error or "")[-500:] or None for r in results], costs=list(results))


@dataclass
class Outcome:
    """A real reward known at once (a simulator's success), in the shape of an execution result.

    Attributes:
        status: ``ok``, ``success``, ``failure``, ``infra_error``, ... reward: the real reward (None: none).
        error: an error message, or None. cpu_s: CPU-seconds it cost outside the trainer. wall_s: seconds.
    """

    status: str = "ok"
    reward: float | None = None
    error: str | None = None
    cpu_s: float = 0.0
    wall_s: float = 0.0

    @property
    def usable(self) -> bool:
        """Whether the outcome can train (:func:`wmrl.core.infra.usable_outcome`)."""
        return usable_outcome(self.status, self.reward)


def done(outcomes: Sequence[Any]) -> list[Future[Any]]:
    """Done futures of ``outcomes`` (what :meth:`Environment.submit` returns when the real rewards are at hand)."""
    out: list[Future[Any]] = []
    for o in outcomes:
        f: Future[Any] = Future()
        f.set_result(o)
        out.append(f)
    return out


def result_of(fut: Future[Any]) -> Any:
    """The outcome of a finished future; an ``infra_error`` :class:`Outcome` when it was cancelled or raised (the
    executor's fault, not the trajectory's)."""
    try:
        return fut.result()
    except CancelledError:
        return Outcome(status="infra_error", error="cancelled before it finished")
    except Exception as exc:  # noqa: BLE001 - any failure of the environment's executor
        return Outcome(status="infra_error", error=f"executor failed: {type(exc).__name__}: {exc}")


@dataclass
class Predictions:
    """The world model's view of a step's B trajectories.

    Attributes:
        reward_wm: [B] float64 raw predicted reward r_hat (finite).
        outcome: the full prediction when the world model gives one (text tasks: an
            :class:`wmrl.world_model.outcome.OutcomePrediction` with the status distribution), else None.
        stats: what the environment reports about the prediction (e.g. ``wm_states_scored``), logged with the step.
    """

    reward_wm: np.ndarray
    outcome: Any = None
    stats: dict[str, Any] = field(default_factory=dict)


class StageTimer(Protocol):
    """What the engine and an environment report their stages and real executions to
    (:class:`wmrl.runs.ledger.Ledger`)."""

    def stage(self, name: str) -> AbstractContextManager[Any]:
        """Time the enclosed code as stage ``name`` of the current step."""
        ...

    def add_groups(self, n: int, n_anchor: int) -> None:
        """Count the step's groups and anchor groups."""
        ...

    def add_executions(self, kind: str, results: Sequence[Any], turn: int | None = None) -> Any:
        """Count real executions of ``kind`` (``anchor``) and their costs; ``turn``: the 1-based episode turn of a
        multi-turn episode's executions."""
        ...

    def add_stage(self, name: str, wall_s: float, cpu_s: float) -> None:
        """Add ``wall_s`` seconds and ``cpu_s`` CPU-seconds to stage ``name`` of the current step."""
        ...


def stage(ledger: StageTimer | None, name: str) -> AbstractContextManager[Any]:
    """``ledger.stage(name)``, or a context that times nothing when there is no ledger."""
    return ledger.stage(name) if ledger is not None else nullcontext()


@runtime_checkable
class Environment(Protocol):
    """A kind of task the step engine trains on (module docstring)."""

    name: str

    def sample(self, policy: Any, step: int) -> Rollouts:
        """B trajectories of ``step`` in M groups, sampled with seeds that are a pure function of (run seed, step),
        so a resumed run draws the same ones."""
        ...

    def submit(self, rollouts: Rollouts, idx: np.ndarray) -> list[Future[Any]]:
        """Start the real reward of trajectories ``idx`` ([n] int64); returns one future per trajectory, in the order
        of ``idx``, each resolving to an outcome (module docstring; :func:`done` when they are at hand)."""
        ...

    def predict(self, rollouts: Rollouts) -> Predictions:
        """The world model's rewards of all B trajectories.

        Raises:
            RuntimeError: a prediction of the wrong shape or a non-finite one.
        """
        ...


@dataclass
class Extension:
    """What an :class:`ExtendingEnvironment`'s later turns give the step: per trajectory, its final submission.

    Attributes:
        outcomes: the real outcomes of the trajectories whose final submission was executed (anchors).
        predictions: ``reward_wm`` [B] float64 the world model's raw r_hat of each final submission (NaN: not
            scored, e.g. a recipe without a world model).
        episodes: the environment's episodes (every turn's rows for the update, the turns for the samples), e.g.
            :class:`wmrl.episodes.rollout.Episodes`.
        feedback: the step's turn observations (the world model's observation of each (episode, turn) it scored:
            ``observations_wm``), kept for the samples and the feedback's fidelity.
    """

    outcomes: Outcomes
    predictions: Predictions
    episodes: Any
    feedback: Any


@runtime_checkable
class ExtendingEnvironment(Environment, Protocol):
    """An environment whose later turns depend on the route: the optional hook of the protocol (module docstring)."""

    def extend(self, policy: Any, rollouts: Rollouts, is_anchor: np.ndarray,
               predict: Callable[[Rollouts], np.ndarray] | None, ledger: StageTimer | None = None) -> Extension:
        """Turns 2..K of the routed ``rollouts`` (turn 1): ``is_anchor`` [B] bool marks the trajectories whose
        feedback is real; ``predict`` gives the world model's raw rewards [N] float64 of N trajectories (the engine's
        checked prediction route), None when the step does not score with the world model; stages and executions
        are reported to ``ledger``.

        Raises:
            RuntimeError: the world model returned a wrong shape or non-finite rewards.
        """
        ...


@runtime_checkable
class StatefulEnvironment(Protocol):
    """An environment with state of its own that a checkpoint keeps (under ``environment`` in ``trainer_state.json``,
    :func:`wmrl.runs.checkpoint.environment_state`), e.g. the run times a multi-turn environment shows."""

    def state_dict(self) -> dict[str, Any]:
        """The environment's state (JSON-safe)."""
        ...

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        ...


#: The environments: name -> factory (a class or a function) returning an :class:`Environment`, called with the
#: trainer's keyword arguments. The built-in ones are imported on first use (their modules are heavy: torch, mujoco);
#: an installed package offers its own through the ``wmrl.environments`` entry-point group (docs/plugins.md).
ENVIRONMENTS: Registry[Callable[..., Environment]] = Registry("environment", group="wmrl.environments", lazy={
    "kaggle": "wmrl.step.kaggle", "metaworld": "wmrl.embodied.environment"})


#: A config key naming an environment, checked against :data:`ENVIRONMENTS` when the config is validated (a name
#: registered after this module was imported, by a module of ``plugins``, or offered by an entry point, is accepted):
#: the text track's and the embodied track's ``environment``.
EnvironmentName = Annotated[str, AfterValidator(partial(ENVIRONMENTS.check, key="environment"))]


def register_environment(name: str) -> Callable[[Callable[..., Environment]], Callable[..., Environment]]:
    """Decorator: register ``factory`` (a class or a function returning an :class:`Environment`) in
    :data:`ENVIRONMENTS` as ``name``.

    Raises:
        wmrl.core.registry.DuplicateName: ``name`` is registered already, by another factory (a ValueError).
    """
    return ENVIRONMENTS.decorator(name)


def environment_names() -> list[str]:
    """The environment names, in registration order (the built-in ones and entry points not yet imported last)."""
    return ENVIRONMENTS.names()


def environment_factory(name: str, args: Sequence[str], trainer: str, advice: str) -> Callable[..., Environment]:
    """The factory of the registered environment ``name``, checked to take the keyword arguments ``args`` that
    ``trainer`` (``text trainer``, ``embodied trainer``) builds its environment with; ``advice`` ends the refusal
    (which environments that trainer takes). Called before a run touches its folder.

    Raises:
        ValueError: one line: no such environment (naming the registered ones), its module fails to import, or its
            factory does not take ``args`` (an environment of another track).
    """
    try:
        factory = ENVIRONMENTS.get(name)
    except (KeyError, ImportError, LookupError) as e:
        raise ValueError(f"environment: {e}") from None
    try:
        inspect.signature(factory).bind(**dict.fromkeys(args))
    except TypeError as e:
        raise ValueError(f"environment {name!r} is not one the {trainer} builds: its factory does not take the "
                         f"{trainer}'s arguments ({e}); {advice}") from None
    except ValueError:  # no signature to read (a callable implemented in C): the call says
        pass
    return factory


def make_environment(name: str, **kwargs: Any) -> Environment:
    """Build the environment registered as ``name`` with ``kwargs``.

    Raises:
        wmrl.core.registry.UnknownName: no such environment (a KeyError and a ValueError; the one-line message lists
            the registered ones and the closest).
        ImportError: the module of a built-in environment or of an entry point failed to import (the message says
            which).
    """
    return ENVIRONMENTS.get(name)(**kwargs)

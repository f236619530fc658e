"""What the trainer is built from and what a run returns: the parts (typed by :mod:`wmrl.interfaces`), the
run summary, and the seeded schedules (which tasks a step trains on, its sampling seeds) that the
trainer, the evaluation and the bench share, so that a resumed run draws exactly what an uninterrupted one
would."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


from wmrl.runs.rundir import RunDirError, now_iso  # noqa: F401 (re-exported)
from wmrl.step.engine import lookup_recipe
from wmrl.step.environment import Environment
from wmrl.step.environment import environment_factory as checked_factory
from wmrl.step.kaggle import TEXT_ENVIRONMENT_ARGS, TextEnvironment
from wmrl.step.multiturn import MultiTurnKaggleEnvironment
from wmrl.step.kaggle import sampling_seed, select_tasks  # noqa: F401 (re-exported: the schedules)
from wmrl.interfaces import Executor, Policy, Scaffold, WorldModel
from wmrl.tasks.spec import Task
from wmrl.training.config import ConfigError, TrainConfig


@dataclass
class Components:
    """The parts the trainer drives, typed by the protocols of :mod:`wmrl.interfaces`.

    Attributes:
        train_tasks: tasks used for RL (non-empty). heldout_tasks: evaluation-only tasks.
        scaffold: the :class:`~wmrl.interfaces.Scaffold`.
        policy: the :class:`~wmrl.interfaces.Policy`.
        executor: the :class:`~wmrl.interfaces.Executor`.
        world_model: the :class:`~wmrl.interfaces.WorldModel` (None when the method uses none).
        close: called when training ends (stops executors, ...).
        refit_world_model: optional ``f(step) -> dict`` that refits the world model on the warm-up corpus
            plus anchors so far (``world_model.refresh_every_k``).
        executed_records: optional ``f() -> list`` of the run's executions so far (warm-up corpus and anchors, as
            execution-log records), read by recipes with ``recall`` (:mod:`wmrl.core.recall`).
        info: what the builder reports about the parts (model name, corpus size, ...), for the run's log.
    """

    train_tasks: list[Task]
    heldout_tasks: list[Task]
    scaffold: Scaffold
    policy: Policy
    executor: Executor
    world_model: WorldModel | None = None
    close: Callable[[], None] | None = None
    refit_world_model: Callable[[int], dict[str, Any]] | None = None
    executed_records: Callable[[], list[dict[str, Any]]] | None = None
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunSummary:
    """What :func:`run_training` returns (also written to ``summary.json``).

    Attributes:
        run_dir: the run directory. method: ``grpo``/``wm``/``wmrl``. status: ``completed``.
        steps: steps completed. wall_s: wall seconds of the whole run (across resumes).
        ledger: the ``ledger.json`` document. final_eval: ``{split: eval record}`` of the last evaluation.
        initial_eval: ``{split: eval record}`` of the step-0 evaluation (the policy before training,
            ``eval.at_start``), the same sampling seeds as the final one; empty when not evaluated.
        last_metrics: the last metrics.jsonl record. anchor_fraction: realised anchor fraction of groups.
        reward_true_mean_last: mean anchor reward over the last quarter of steps (None without anchors).
    """

    run_dir: Path
    method: str
    status: str
    steps: int
    wall_s: float
    ledger: dict[str, Any]
    final_eval: dict[str, Any]
    last_metrics: dict[str, Any]
    anchor_fraction: float | None
    reward_true_mean_last: float | None
    started_at: str = ""
    finished_at: str = ""
    initial_eval: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The ``summary.json`` document: the attributes, ``run_dir`` as text, and ``ledger_totals``."""
        d = asdict(self)
        d["run_dir"] = str(self.run_dir)
        d["ledger_totals"] = self.ledger.get("totals", {})
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSummary:
        """The summary of a :meth:`to_dict` document (a ``summary.json``; keys it lacks take their defaults).

        Raises:
            KeyError: ``run_dir``, ``method``, ``status``, ``steps``, ``wall_s`` or ``ledger`` is missing.
        """
        return cls(run_dir=Path(d["run_dir"]), method=d["method"], status=d["status"], steps=d["steps"],
                   wall_s=d["wall_s"], ledger=d["ledger"], final_eval=d.get("final_eval", {}),
                   last_metrics=d.get("last_metrics", {}), anchor_fraction=d.get("anchor_fraction"),
                   reward_true_mean_last=d.get("reward_true_mean_last"), started_at=d.get("started_at", ""),
                   finished_at=d.get("finished_at", ""), initial_eval=d.get("initial_eval", {}))


def eval_sampling_seed(seed: int, step: int, split: str, has_heldout: bool) -> int:
    """Sampling seed of an evaluation at ``step``: stream 1 for the held-out tasks, and for the train
    tasks stream 2 when the run has held-out tasks (evaluated first) else 1; any other split (custom
    task lists) stream 1. One function for the trainer and ``wmrl eval``, so re-evaluating a checkpoint
    reproduces the trainer's own evaluation of that step."""
    return sampling_seed(seed, step, 2 if split == "train" and has_heldout else 1)


def anchor_fraction(cfg: TrainConfig) -> float:
    """The router's long-run fraction of anchor groups: 1 for ``grpo``, 0 for ``wm``, rho otherwise
    (:meth:`wmrl.core.recipe.Recipe.anchor_fraction`)."""
    return lookup_recipe(cfg.method).anchor_fraction(cfg.wmrl.routing.anchor_fraction)


def environment_factory(name: str) -> Callable[..., Environment]:
    """The factory of the registered environment ``name``, checked to take the text trainer's keyword arguments
    (:data:`wmrl.step.kaggle.TEXT_ENVIRONMENT_ARGS`; :func:`wmrl.step.environment.environment_factory`); called
    before a run touches its folder.

    Raises:
        ConfigError: no such environment, its module fails to import, or its factory does not take the text
            trainer's arguments (an environment of another track, e.g. ``metaworld``).
    """
    try:
        return checked_factory(name, TEXT_ENVIRONMENT_ARGS, "text trainer",
                               "a text environment takes those of the 'kaggle' one "
                               "(wmrl.step.kaggle.TEXT_ENVIRONMENT_ARGS); an embodied environment trains with "
                               "`wmrl embodied train`")
    except ValueError as e:
        raise ConfigError(str(e)) from None


def build_environment(cfg: TrainConfig, comps: Components, execution_logs: Sequence[str | Path] = ()
                      ) -> TextEnvironment:
    """The text trainer's environment: ``cfg.environment`` from the registry, built with the text trainer's
    arguments from ``cfg`` and ``comps``; with ``episode.max_turns`` K > 1 (which the config allows with ``kaggle``
    only) the Kaggle tasks in episodes of K turns (:class:`wmrl.step.multiturn.MultiTurnKaggleEnvironment`), whose
    world-model observations show the run times of the ``ok`` executions in ``execution_logs``.

    Raises:
        ConfigError: as :func:`environment_factory`; the environment built is not a
            :class:`~wmrl.step.kaggle.TextEnvironment` (it lacks ``programs``, ``sample``, ...).
    """
    ro, ec = cfg.rollout, cfg.episode
    factory = environment_factory(cfg.environment)
    episode_args: dict[str, Any] = {}
    if ec.max_turns > 1:
        factory = MultiTurnKaggleEnvironment
        episode_args = dict(max_turns=ec.max_turns, validation_fraction=ec.validation_fraction,
                            error_chars=ec.error_chars, wm_error_threshold=ec.wm_error_threshold,
                            execution_logs=list(execution_logs))
    env = factory(
        tasks=comps.train_tasks, scaffold=comps.scaffold, executor=comps.executor, world_model=comps.world_model,
        tasks_per_step=ro.tasks_per_step, group_size=ro.group_size, max_new_tokens=ro.max_new_tokens,
        temperature=ro.temperature, top_p=ro.top_p, seed=cfg.seed, run=cfg.name or cfg.method,
        time_limit_s=cfg.executor.time_limit_s, **episode_args)
    if not isinstance(env, TextEnvironment):
        missing = [m for m in ("name", "sample", "submit", "predict", "programs") if not hasattr(env, m)]
        raise ConfigError(f"environment {cfg.environment!r} built a {type(env).__name__} without "
                          f"{', '.join(missing)}: the text trainer needs a text environment "
                          f"(wmrl.step.kaggle.TextEnvironment)")
    return env

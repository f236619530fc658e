"""One WMRL step for a foreign trainer: route, execute anchors for real, score with the world model, and
call the same registered recipe as wmrl's trainer (:meth:`wmrl.core.recipe.Recipe.step`).

The foreign trainer (TRL, verl) owns generation and the policy update; this module owns what happens
between them, on the step engine (:mod:`wmrl.step.engine`) and the environment of the registry that wmrl's own
trainer uses (``kaggle`` by default: :class:`wmrl.step.kaggle.KaggleEnvironment`)::

    route       the engine's router marks the anchor groups of the step (seeded; all for ``grpo``, none for ``wm``)
    execute     every anchor sample's program (the scaffold renders the completion) runs in the executor
                (``wmrl.execution.pool.LocalExecutor`` or the Ray pool: sandboxed), futures in flight...
    wm_predict  ...while the world model scores every sample (r_hat)
    recipe      the engine's recipe stage (the registered recipe): reward_used, advantages, weights

From weights to a trainer's advantages (:func:`loss_advantages`). The recipe's loss is
``sum_i w_i * l_i(A_i)`` (``wmrl.core.losses``) with per-sequence losses l_i built from
``-min(rho * A_i, clip(rho) * A_i)``. ``min`` is positively homogeneous: ``c * min(x, y) = min(c x, c y)``
for c >= 0, so ``w_i * l_i(A_i) = l_i(w_i * A_i)`` and a trainer whose loss is the plain mean over the B
samples of a batch, ``(1/B) sum_i l_i(A'_i)``, trains on exactly the recipe's loss with
``A'_i = B * w_i * A_i``. This needs w_i >= 0; every registered recipe has it (PPI++'s -lambda/n_A anchor
rows are merged into one row of weight 1/n_A and advantage A_r - lambda * A_f, and lambda is clipped to
[0, 1], so its world-model weight lambda/n_W >= 0). A negative weight is refused: ``w * min(x, y)`` with
w < 0 is ``|w| * max(-x, -y)``, not a clipped surrogate of any advantage once the ratio leaves the clip
range.

Arrays are numpy: [B] float64 rewards/advantages/weights, [B] bool masks, [B] int64 group ids.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Mapping, Sequence

import numpy as np

from wmrl.core.recall import MeasuredRewards
from wmrl.core.recipe import Recipe, RecipeSettings, RecipeState, StepInputs, StepOutputs
from wmrl.core.routing import Router
from wmrl.step.batch import StepBatch
from wmrl.step.engine import StepEngine
from wmrl.step.environment import Rollouts, make_environment
from wmrl.step.kaggle import TextTrajectories


def loss_advantages(out: StepOutputs) -> np.ndarray:
    """The per-sample advantage a mean-over-samples loss must see to train on the recipe's weighted loss.

    Args:
        out: the recipe's :class:`StepOutputs` for B samples.

    Returns:
        [B] float64 ``B * weights * advantages`` (0 where the weight is 0, e.g. invalid samples).

    Raises:
        ValueError: a negative or non-finite weight (module docstring: not a scaled advantage).
    """
    w = np.asarray(out.weights, dtype=np.float64)
    if not np.all(np.isfinite(w)) or (w < 0).any():
        raise ValueError("loss weights must be finite and >= 0 to be folded into the advantages "
                         f"(min is positively homogeneous only for c >= 0); got min {np.nanmin(w)}")
    adv = np.where(w > 0, np.nan_to_num(np.asarray(out.advantages, dtype=np.float64)), 0.0)
    return w.size * w * adv


@dataclass
class StepRecord:
    """What one step sent to the recipe and got back (kept in :attr:`WMRLDriver.history`).

    Attributes:
        inputs: the :class:`StepInputs` (replaying them through a fresh state gives the same outputs).
        outputs: the recipe's :class:`StepOutputs`.
        task_ids: [B] task of each sample.
        statuses: [B] execution status (``ok``, ``runtime_error``, ...; None off anchors).
        execute_wall_s: wall seconds from the first anchor submission to the last result.
    """

    inputs: StepInputs
    outputs: StepOutputs
    task_ids: list[str]
    statuses: list[str | None]
    execute_wall_s: float = 0.0
    results: dict[int, Any] = field(default_factory=dict)

    @property
    def step(self) -> int:
        return self.inputs.step

    def loss_advantages(self) -> np.ndarray:
        """[B] :func:`loss_advantages` of this step's outputs."""
        return loss_advantages(self.outputs)


class WMRLDriver:
    """Drives one registered recipe for a trainer that generates and updates on its own.

    Args:
        tasks: the tasks completions can belong to (``Task`` objects or a mapping id -> Task).
        scaffold: turns a completion into a program (``wmrl.models.scaffolds.get_scaffold``).
        world_model: ``predict(prompts, completions) -> [B] float`` (``wmrl.interfaces.WorldModel``);
            may be None for a recipe without one (``grpo``, ``anchor-only``).
        executor: a wmrl executor (``submit(ExecutionRequest) -> Future[ExecutionResult]``).
        method: the registered recipe name (:func:`wmrl.core.recipe.recipe_names`).
        anchor_fraction: rho, the fraction of groups executed for real (fraction recipes).
        min_anchor_every: at least one anchor group every this many steps (fraction recipes; None: off).
        settings: :class:`RecipeSettings` (the config's ``optim``/``wmrl`` sections in wmrl's trainer).
        seed: the router's seed.
        time_limit_s: per-execution wall limit in seconds (None: the task's own).
        run: the run name written into each anchor's trajectory record (the execution log).
        environment: the registered text environment the steps run on (:data:`wmrl.step.environment.ENVIRONMENTS`;
            default ``kaggle``), built with ``tasks``, ``scaffold``, ``executor``, ``world_model``, ``run`` and
            ``time_limit_s``, like the text trainer's.

    Raises:
        ValueError: unknown method or environment (one line naming the registered ones), or a recipe that needs a
            world model without one.
    """

    def __init__(self, tasks: Sequence[Any] | Mapping[str, Any], scaffold: Any, world_model: Any, executor: Any, *,
                 method: str = "wmrl", anchor_fraction: float = 0.25, min_anchor_every: int | None = 1,
                 settings: RecipeSettings = RecipeSettings(), seed: int = 0, time_limit_s: float | None = None,
                 run: str = "integration", environment: str = "kaggle") -> None:
        self.tasks = dict(tasks) if isinstance(tasks, Mapping) else {t.id: t for t in tasks}
        self.engine = StepEngine(method, settings, anchor_fraction=anchor_fraction, min_anchor_every=min_anchor_every,
                                 seed=seed)
        if self.recipe.uses_world_model and world_model is None:
            raise ValueError(f"recipe {method!r} scores completions with a world model: pass world_model")
        self.scaffold, self.world_model, self.executor = scaffold, world_model, executor
        self.env = make_environment(environment, tasks=list(self.tasks.values()), scaffold=scaffold, executor=executor,
                                    world_model=world_model, run=run, time_limit_s=time_limit_s)
        self.time_limit_s, self.run = time_limit_s, run
        self.history: list[StepRecord] = []
        #: measured rewards of the anchors so far, recalled for world-model samples by recipes with ``recall``
        #: (add a warm-up corpus with ``measured.add_records``)
        self.measured = MeasuredRewards()

    @property
    def recipe(self) -> Recipe:
        """The registered recipe (the engine's)."""
        return self.engine.recipe

    @property
    def state(self) -> RecipeState:
        """The recipe's state: calibrator and anchor window (the engine's)."""
        return self.engine.state

    @property
    def settings(self) -> RecipeSettings:
        """The recipe's settings (the engine's)."""
        return self.engine.settings

    @property
    def router(self) -> Router:
        """The anchor router (the engine's)."""
        return self.engine.router

    # ------------------------------------------------------------------ stages
    def route(self, group_task_ids: Sequence[str], step: int) -> np.ndarray:
        """[M] bool: which groups of ``step`` are anchors."""
        return self.engine.route(list(group_task_ids), step)

    def task(self, task_id: str) -> Any:
        """The task ``task_id``.

        Raises:
            KeyError: a completion of a task the driver was not given (the message lists the known ones).
        """
        try:
            return self.tasks[str(task_id)]
        except KeyError:
            raise KeyError(f"unknown task {task_id!r}; the driver knows {sorted(self.tasks)}") from None

    def measure(self, step: int, task_ids: Sequence[str], prompts: Sequence[str], completions: Sequence[str],
                group_ids: np.ndarray, is_anchor: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str | None], float, dict[int, Any]]:
        """Execute the anchor samples (sandboxed, in flight) while the world model scores every sample.

        Args:
            step: the training step. task_ids, prompts, completions: [B] each (prompts are what the world
            model reads with the completion). group_ids: [B] int. is_anchor: [B] bool.

        Returns:
            ``(reward_true [B] (NaN off anchors), reward_wm [B] (NaN without a world model),
            valid [B] bool (False for infrastructure failures), statuses [B], execute wall seconds,
            results {sample index: ExecutionResult})``.

        Raises:
            RuntimeError: the world model returned the wrong shape or non-finite scores.
        """
        for t in task_ids:
            self.task(t)  # an unknown task is refused before anything runs
        gid = np.asarray(group_ids, dtype=np.int64)
        _, dense = np.unique(gid, return_inverse=True)  # groups 0..M-1 in the order of their ids (request ids use them)
        ro = Rollouts(step=int(step), group_keys=[str(g) for g in np.unique(gid)], group_ids=dense,
                      data=TextTrajectories([str(t) for t in task_ids], list(prompts), list(completions)))
        sb = StepBatch(step=int(step), tasks=[], batch=ro.data, gid=ro.group_ids, group_keys=ro.group_keys)
        sb.is_anchor = np.asarray(is_anchor, dtype=bool).copy()
        t0 = time.perf_counter()
        self.engine.measure(self.env, ro, sb, predict=self.recipe.uses_world_model)  # the engine's one route
        wall = time.perf_counter() - t0 if sb.anchor_idx.size else 0.0
        results = dict(self.engine.anchors.own_results)
        return sb.reward_true, sb.reward_wm, sb.valid, list(sb.status), wall, results

    def recall(self, task_ids: Sequence[str], completions: Sequence[str], measured: np.ndarray,
               reward_true: np.ndarray) -> np.ndarray | None:
        """[N] the rewards :attr:`measured` holds for N samples (NaN where none; None for a recipe without recall),
        looked up before the samples where ``measured`` ([N] bool) is True join the store with ``reward_true`` [N]."""
        out = self.measured.lookup(task_ids, completions) if self.recipe.recall else None
        ok = np.flatnonzero(measured)
        self.measured.add([task_ids[int(i)] for i in ok], [completions[int(i)] for i in ok], reward_true[ok])
        return out

    def step(self, step: int, task_ids: Sequence[str], prompts: Sequence[str], completions: Sequence[str],
             group_ids: Sequence[int] | np.ndarray) -> StepRecord:
        """One step end to end (route, execute || wm_predict, recipe) on B samples in M groups.

        Args:
            step: the training step (non-decreasing). task_ids, prompts, completions: [B].
            group_ids: [B] int group of each sample (a group = the samples of one prompt; one task each).

        Returns:
            the :class:`StepRecord` (also appended to :attr:`history`).

        Raises:
            ValueError: lengths differ, or a group mixes tasks.
        """
        gid = np.asarray(group_ids, dtype=np.int64)
        B = gid.size
        if not (len(task_ids) == len(prompts) == len(completions) == B):
            raise ValueError(f"task_ids, prompts, completions and group_ids must have one entry per sample; got "
                             f"{len(task_ids)}, {len(prompts)}, {len(completions)}, {B}")
        groups, first = np.unique(gid, return_index=True)
        group_task = {int(g): str(task_ids[i]) for g, i in zip(groups, first)}
        for i in range(B):
            if str(task_ids[i]) != group_task[int(gid[i])]:
                raise ValueError(f"group {gid[i]} mixes tasks {group_task[int(gid[i])]!r} and {task_ids[i]!r}")
        anchor_groups = self.route([group_task[int(g)] for g in groups], step)
        is_anchor = anchor_groups[np.searchsorted(groups, gid)]
        rt, rw, valid, statuses, wall, results = self.measure(step, task_ids, prompts, completions, gid, is_anchor)
        x = StepInputs(step=int(step), group_ids=gid, is_anchor=is_anchor, valid=valid, reward_true=rt, reward_wm=rw,
                       reward_recalled=self.recall(task_ids, completions, is_anchor & valid, rt))
        rec = StepRecord(x, self.engine.run_recipe(x), [str(t) for t in task_ids], statuses, wall, results)
        self.history.append(rec)
        return rec


def replay(method: str, inputs: Sequence[StepInputs], settings: RecipeSettings = RecipeSettings()) -> list[StepOutputs]:
    """Run ``inputs`` through a fresh state of recipe ``method`` (what a check of an integration compares to)."""
    engine = StepEngine(method, settings)
    return [engine.run_recipe(x) for x in inputs]

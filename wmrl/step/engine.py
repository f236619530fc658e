"""The step engine: route -> execute or predict -> recipe, the same in every trainer and environment.

One WMRL step on B trajectories in M groups (the WMRL paper's Algorithm 1)::

    route       the router marks anchor groups: all for grpo, none for wm, a long-run fraction rho for wmrl
    execute  || wm_predict
                the anchors' real rewards r are started (sandbox executions, simulator success) while the world
                model predicts r_hat for every trajectory; then the real rewards are collected
    recipe      the registered recipe (wmrl.core.recipe): r_tilde = f_hat(r_hat) with f_hat fitted on earlier
                steps' anchors, group-relative advantages per stream, per-sample loss weights (IVW, PPI++, ...)

The policy update and the logging stay with the trainer (they depend on the policy: token log-probs, a Gaussian
over actions). :class:`StepEngine` holds the method's state (the recipe's calibrator and anchor window, the
router) and runs the stages:

- :meth:`StepEngine.step`: sample + :meth:`StepEngine.score` on any :class:`~wmrl.step.environment.Environment`
  (the embodied trainer, a new environment);
- :meth:`StepEngine.route`, :meth:`StepEngine.measure` (execute || wm_predict through the engine's anchor stream,
  or the later turns of an environment with the ``extend`` hook, :meth:`StepEngine.extend`) and
  :meth:`StepEngine.run_recipe`: the stages one at a time, for trainers that do more between them (the text
  trainer's asynchronous anchors, recall and favourite verification, the TRL and verl integrations whose trainer
  generates).

The engine is the one route of a step's real outcomes and predictions into its batch: the environment's futures go
through the anchor stream (:class:`~wmrl.step.anchors.AnchorStream`, staleness bound k), which writes the outcomes
with :meth:`StepBatch.apply_outcomes <wmrl.step.batch.StepBatch.apply_outcomes>`
(:meth:`Outcomes.from_results <wmrl.step.environment.Outcomes.from_results>`' rule); predictions are checked by
:meth:`StepEngine.predict` and written with :meth:`StepBatch.apply_predictions
<wmrl.step.batch.StepBatch.apply_predictions>`; an extending environment's final submissions go through the same two
(:meth:`StepEngine.extend`).

:func:`build_router` is the one place a router is made from a method and rho; :meth:`StepEngine.from_config` the one
place an engine is made from the recipe's config section (:class:`~wmrl.step.config.RecipeConfig`, both tracks'
``wmrl`` section), whose :meth:`~wmrl.step.config.RecipeConfig.recipe_settings` is the one place that section becomes
:class:`~wmrl.core.recipe.RecipeSettings`.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import time

import numpy as np

from wmrl.core.recipe import Recipe, RecipeSettings, RecipeState, StepInputs, StepOutputs, get_recipe, recipe_names
from wmrl.core.routing import Router, build_router
from wmrl.step.anchors import AnchorRuns, AnchorStream
from wmrl.step.batch import LatePairs, StepBatch
from wmrl.step.config import RecipeConfig
from wmrl.step.environment import Environment, ExtendingEnvironment, Predictions, Rollouts, StageTimer
from wmrl.step.environment import stage as _stage


def lookup_recipe(method: str) -> Recipe:
    """The registered recipe ``method``.

    Raises:
        ValueError: no such recipe (the message lists the registered names).
    """
    try:
        return get_recipe(method)
    except KeyError:
        raise ValueError(f"unknown method {method!r}; use one of {', '.join(recipe_names())}") from None


class StepEngine:
    """The method's state and the stages of a step (module docstring).

    Args:
        method: a registered recipe name (:func:`wmrl.core.recipe.recipe_names`).
        settings: the recipe's settings (:meth:`wmrl.step.config.RecipeConfig.recipe_settings`).
        anchor_fraction: rho, the configured fraction of anchor groups (fraction recipes).
        router: the router kind (``fraction``, ``stratified``).
        min_anchor_every: the anchor floor of :func:`build_router` (steps; None or 0: off).
        seed: the router's seed.
        always_predict: score every step with the world model even when the recipe does not read it (``grpo``,
            ``anchor-only``): a diagnostic (r_hat against the anchors' true rewards), at the world model's cost.
        anchor_staleness: the anchor stream's staleness bound k (steps; 0: synchronous).
        over_bound_anchors: what a group still running at the bound does (``wait``, ``calibration``, ``drop``).

    Attributes:
        recipe: the :class:`~wmrl.core.recipe.Recipe`. state: its :class:`~wmrl.core.recipe.RecipeState`
        (calibrator, anchor window). router: the :class:`~wmrl.core.routing.Router`. anchors: the
        :class:`~wmrl.step.anchors.AnchorStream`.

    Raises:
        ValueError: unknown method or router kind, or a bad staleness setting.
    """

    def __init__(self, method: str, settings: RecipeSettings = RecipeSettings(), *, anchor_fraction: float = 0.25,
                 router: str = "fraction", min_anchor_every: int | None = None, seed: int = 0,
                 always_predict: bool = False, anchor_staleness: int = 0, over_bound_anchors: str = "wait") -> None:
        self.method = method
        self.anchors = AnchorStream(anchor_staleness, over_bound_anchors)
        self.always_predict = always_predict
        self.recipe: Recipe = lookup_recipe(method)
        self.router: Router = build_router(self.recipe, anchor_fraction, kind=router,
                                           min_anchor_every=min_anchor_every, seed=seed)
        self._settings = settings
        self.state: RecipeState = self.recipe.init_state(settings)

    @classmethod
    def from_config(cls, method: str, section: RecipeConfig, *, seed: int, normalize_std: bool = True,
                    adv_eps: float | None = None, always_predict: bool = False) -> StepEngine:
        """The engine of ``method`` with the recipe's config section ``section`` (routing, calibration, fusion, the
        asynchronous stream): the one place a track builds its engine. ``normalize_std``/``adv_eps``: the track's
        advantage settings (its ``optim`` section); ``seed``: the router's; ``always_predict`` as in the class.

        Raises:
            ValueError: unknown method or router kind, or a bad staleness setting.
        """
        r, a = section.routing, section.asynchronous
        return cls(method, section.recipe_settings(normalize_std=normalize_std, adv_eps=adv_eps),
                   anchor_fraction=r.anchor_fraction, router=r.router, min_anchor_every=r.min_anchor_every, seed=seed,
                   always_predict=always_predict, anchor_staleness=a.staleness,
                   over_bound_anchors=a.over_bound_anchors)

    # ------------------------------------------------------------------ properties of the method
    @property
    def settings(self) -> RecipeSettings:
        """The recipe's settings, with ``anchor_fraction`` the router's current rho for a recipe with both streams
        (the ``cv`` fusion's inclusion probability follows the exploitation alarm's raised fraction)."""
        if self.recipe.fuses and self.router.fraction > 0:
            return replace(self._settings, anchor_fraction=self.router.fraction)
        return self._settings

    @property
    def uses_world_model(self) -> bool:
        """Whether the recipe reads the world model's predictions."""
        return self.recipe.uses_world_model

    @property
    def fuses(self) -> bool:
        """Whether the recipe fuses the anchor and world-model streams."""
        return self.recipe.fuses

    @property
    def anchor_fraction(self) -> float:
        """The router's long-run fraction of anchor groups."""
        return float(self.router.fraction)

    # ------------------------------------------------------------------ the stages one at a time
    def route(self, group_keys: Sequence[str], step: int) -> np.ndarray:
        """Stage route: [M] bool, which of the step's M groups (by router key) are anchors."""
        return np.asarray(self.router.route(list(group_keys), step), dtype=bool)

    def run_recipe(self, x: StepInputs) -> StepOutputs:
        """Stage recipe: the registered recipe on the step's inputs (:meth:`wmrl.core.recipe.Recipe.step`); the
        state learns the step's anchors after they were used."""
        return self.recipe.step(x, self.state, self.settings)

    def learn_late(self, step: int, origin_steps: np.ndarray, group_ids: np.ndarray, reward_true: np.ndarray,
                   reward_wm: np.ndarray) -> np.ndarray:
        """Anchor pairs that reach only the calibrator and the window (:meth:`wmrl.core.recipe.Recipe.learn_late`);
        returns their calibrated world-model rewards [n] float64."""
        return self.recipe.learn_late(self.state, step, origin_steps, group_ids, reward_true, reward_wm)

    def predict(self, env: Environment, ro: Rollouts) -> Predictions:
        """Stage wm_predict's one route: the environment's predictions of ``ro``'s B trajectories, checked.

        Raises:
            RuntimeError: the environment's world model returned a wrong shape or non-finite rewards.
        """
        pred = env.predict(ro)
        r_hat = np.asarray(pred.reward_wm, dtype=np.float64)
        if r_hat.shape != (ro.B,) or not np.all(np.isfinite(r_hat)):
            raise RuntimeError(f"environment {env.name!r}: the world model returned shape {r_hat.shape} with "
                               f"{int((~np.isfinite(r_hat)).sum())} non-finite rewards; expected ({ro.B},) finite")
        return Predictions(reward_wm=r_hat, outcome=pred.outcome, stats=dict(pred.stats))

    def submit(self, env: Environment, ro: Rollouts, sb: StepBatch) -> AnchorRuns:
        """Start the real rewards of the step's anchor trajectories (``env.submit``) and track their futures in the
        anchor stream."""
        w0, c0 = time.perf_counter(), time.process_time()
        idx = sb.anchor_idx
        futures = env.submit(ro, idx) if idx.size else []
        return self.anchors.track(sb, idx, list(futures), w0, time.process_time() - c0)

    def collect(self, sb: StepBatch, runs: AnchorRuns, ledger: StageTimer | None = None) -> LatePairs | None:
        """Consume what the staleness bound allows (:meth:`AnchorStream.collect`): the step's own outcomes are written
        into ``sb``; returns the late pairs of earlier steps (None when k = 0)."""
        self.anchors.ledger = ledger
        return self.anchors.collect(sb, runs)

    def measure(self, env: Environment, ro: Rollouts, sb: StepBatch, ledger: StageTimer | None = None,
                predict: bool | None = None, policy: Any = None) -> LatePairs | None:
        """Stages execute || wm_predict on a routed step: :meth:`submit`, the world model's :meth:`predict` while the
        executions run (``predict`` None: when the recipe reads the world model or ``always_predict``), then
        :meth:`collect`. Returns the late pairs (None when k = 0). An environment with the ``extend`` hook
        (:class:`~wmrl.step.environment.ExtendingEnvironment`) runs its later turns with ``policy`` instead
        (:meth:`extend`).

        Raises:
            ValueError: an extending environment on an engine with asynchronous anchors (k > 0).
        """
        scored = predict if predict is not None else (self.uses_world_model or self.always_predict)
        if isinstance(env, ExtendingEnvironment):
            self.extend(env, policy, ro, sb, ledger, scored)
            return None
        runs = self.submit(env, ro, sb)
        if scored:
            with _stage(ledger, "wm_predict"):
                sb.apply_predictions(self.predict(env, ro))
        return self.collect(sb, runs, ledger)

    def extend(self, env: ExtendingEnvironment, policy: Any, ro: Rollouts, sb: StepBatch,
               ledger: StageTimer | None = None, predict: bool = True) -> None:
        """The later turns of a routed step on an environment with the ``extend`` hook: its
        :class:`~wmrl.step.environment.Extension` is written into ``sb`` (``episodes``, ``feedback``, the final
        submissions' outcomes and predictions) by the batch's one write-back of each. ``predict``: whether the world
        model scores the turns (through :meth:`predict`, checked).

        Raises:
            ValueError: the engine has asynchronous anchors (k > 0): an anchor's feedback is needed for its next turn.
            RuntimeError: the world model returned a wrong shape or non-finite rewards.
        """
        if self.anchors.k:
            raise ValueError(f"environment {env.name!r} runs later turns on the feedback of the earlier ones, so it "
                             f"needs synchronous anchors; set the anchor staleness to 0 (it is {self.anchors.k})")
        ext = env.extend(policy, ro, sb.is_anchor, (lambda r: self.predict(env, r).reward_wm) if predict else None,
                         ledger)
        sb.episodes, sb.feedback = ext.episodes, ext.feedback
        sb.apply_outcomes(ext.outcomes)
        sb.apply_predictions(ext.predictions)

    # ------------------------------------------------------------------ a whole step on an environment
    def step(self, env: Environment, policy: Any, step: int, ledger: StageTimer | None = None) -> StepBatch:
        """Stage generate (``env.sample``), then :meth:`score`."""
        with _stage(ledger, "generate"):
            ro = env.sample(policy, step)
        return self.score(env, ro, ledger, policy)

    def score(self, env: Environment, ro: Rollouts, ledger: StageTimer | None = None, policy: Any = None
              ) -> StepBatch:
        """Stages route, execute || wm_predict and recipe on the rollouts of one step (synchronous anchors: the engine
        must have k = 0); an extending environment's later turns are sampled with ``policy``.

        Returns:
            the step's :class:`~wmrl.step.batch.StepBatch` (``batch`` is ``ro.data``; ``out`` the recipe's outputs;
            ``reward_true`` NaN off anchors; ``reward_wm`` NaN for a recipe without a world model).

        Raises:
            RuntimeError: the environment's world model returned a wrong shape or non-finite rewards.
        """
        sb = StepBatch(step=ro.step, tasks=list(ro.tasks), batch=ro.data, gid=ro.group_ids,
                       group_keys=list(ro.group_keys))
        with _stage(ledger, "route"):
            sb.anchor_groups = self.route(sb.group_keys, sb.step)
            sb.is_anchor = sb.anchor_groups[sb.gid]
            if ledger is not None:
                ledger.add_groups(sb.M, int(sb.anchor_groups.sum()))
        self.measure(env, ro, sb, ledger, policy=policy)
        if ledger is not None and not sb.anchor_idx.size:  # a step without anchors still reports its execute stage
            ledger.add_stage("execute", 0.0, 0.0)
        with _stage(ledger, "recipe"):
            sb.out = self.run_recipe(StepInputs(step=sb.step, group_ids=sb.gid, is_anchor=sb.is_anchor,
                                                valid=sb.valid, reward_true=sb.reward_true, reward_wm=sb.reward_wm))
        return sb

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """``{"recipe": ..., "router": ...}``: what a checkpoint keeps of the method's state."""
        return {"recipe": self.state.state_dict(), "router": self.router.state_dict()}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.state.load_state_dict(d["recipe"])
        self.router.load_state_dict(d["router"])

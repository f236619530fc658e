"""One WMRL step as one transformation, and the methods as registered recipes (docs/architecture.md, "The method's
formulas").

A step's B trajectories in M groups go in: group ids, which groups were executed (anchors), which
samples are valid, the executed rewards and the world model's raw scores. Out come the reward each
trajectory is trained on, its group-relative advantage, its per-sample loss weight and the step's
statistics. The recipe's state (:class:`RecipeState`: the isotonic calibrator and the
:class:`AnchorWindow` of out-of-sample anchor pairs) is driven by the one stream of anchor pairs, as in
the WMRL paper's reference loop object. Every caller (the trainer, the simulation, the bench, the TRL/verl
integrations, the embodied track) looks a recipe up by name with :func:`get_recipe` and calls
:meth:`Recipe.step`, which calls the recipe's registered debiasing and fusion (:mod:`wmrl.core.axes`);
nothing else computes advantages or weights.

The step (Recipe.step; where it sits in a training step: docs/architecture.md, "One step"), with a = valid
anchor samples, w = valid world-model samples::

    calibrate   r_tilde = f_hat(r_hat)       the recipe's debiasing: ``isotonic`` f_hat fitted on anchors of
                                             steps < t only, then f_hat learns this step's anchors; ``none``
                                             the identity
    window      the pairs (r, r_tilde) of this step's anchors join the window (out of sample: f_hat
                did not see them when it mapped them)
    rewards     reward_used = r on anchors, r_tilde on world-model samples, NaN on invalid samples
    recalled    a world-model sample whose program's reward was measured before (StepInputs.reward_recalled)
                is trained on that measured reward instead of r_tilde; it stays in the world-model stream
                (its group, weight and the fusion statistics), and the calibration and the window see only
                this step's anchors
    advantages  the recipe's fusion: GRPO group-relative, inside each group (groups never mix streams)
    weights     equal 1/n; IVW alpha/n_A and (1-alpha)/n_W with alpha from the window
                (wmrl.core.fusion.estimate_fusion, the inverse-variance alpha*); or PPI++

PPI++ (Angelopoulos et al. 2023): three sets (anchors with r and weight 1/n_A, world-model
samples with r_tilde and lambda/n_W, anchors again with r_tilde and -lambda/n_A), advantages per set. The
two anchor rows of a trajectory share log-probs, and with one policy update per batch (ratio 1, inside
the clip range) the surrogate's gradient is linear in the advantage, so they are merged exactly into one
row of weight 1/n_A and advantage A_r - lambda * A_f: the same gradient without a duplicated pass.
Weights stay positive, so a weight times an advantage is the same loss as the scaled advantage.

Arrays are numpy float64 (bool for masks, int64 for ids) throughout; the update converts the
advantages and weights to tensors once.

The registered recipes (:func:`recipe_names`; :func:`recipes_with` selects by axis or flag), each a composition
of an anchors mode, a registered debiasing and a registered fusion (:mod:`wmrl.core.axes`) and flags, each
registration at the end of this file with a one-line ``help``: what each executes, trains its world-model samples
on and weights them with is the table in docs/training.md, "Methods".
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, get_args

import numpy as np

from wmrl.core.axes import (
    CALIBRATION_GRID,
    NO_DEBIASING,
    DebiasInputs,
    FusionInputs,
    RecipeSettings,
    get_debiasing,
    get_fusion,
)
from wmrl.core.ranking import ranking_errors
from wmrl.core.registry import Registry
from wmrl.core.window import AnchorWindow

__all__ = ["Anchors", "AnchorWindow", "BASELINE", "CALIBRATION_GRID", "RECIPES", "RECIPE_FLAGS", "Recipe",
           "RecipeSettings", "RecipeState", "StepInputs", "StepOutputs", "WMRL", "calibration_record", "get_recipe",
           "recipe_names", "recipes_with", "register_recipe"]

Anchors = Literal["all", "none", "fraction"]


@dataclass(frozen=True)
class StepInputs:
    """One step's trajectories, as the recipe sees them (B samples).

    Attributes:
        step: the training step t (>= 1 in the trainer; any non-decreasing integer).
        group_ids: [B] int64 group of each sample (one group = G samples of one prompt).
        is_anchor: [B] bool, the sample's group was executed for real.
        valid: [B] bool, False for infrastructure failures (no reward, weight 0, left out of statistics).
        reward_true: [B] float64 executed reward r (NaN off anchors).
        reward_wm: [B] float64 raw world-model score r_hat (NaN where the world model is not asked).
        reward_wm_repeat: [B] float64 a second, independent world-model query of the same samples, or
            None; it gives the repeat-query noise variance that ``wmrl-bias-aware`` subtracts.
        reward_recalled: [B] float64 the measured reward of a world-model sample whose program was executed
            before (the warm-up corpus or an earlier anchor of the same task), NaN elsewhere; or None. Such a
            sample is trained on its measured reward instead of r_tilde (``recalled`` in the module docstring).

    Raises:
        ValueError: an array of the wrong shape or dtype (the message names it).
    """

    step: int
    group_ids: np.ndarray
    is_anchor: np.ndarray
    valid: np.ndarray
    reward_true: np.ndarray
    reward_wm: np.ndarray
    reward_wm_repeat: np.ndarray | None = None
    reward_recalled: np.ndarray | None = None

    def __post_init__(self) -> None:
        gid = np.asarray(self.group_ids)
        if gid.ndim != 1 or (gid.size and not np.issubdtype(gid.dtype, np.integer)):
            raise ValueError(f"group_ids must be a 1-D integer array [B], got {gid.dtype} of shape {gid.shape}")
        B = gid.size
        object.__setattr__(self, "group_ids", gid.astype(np.int64))
        for name, dtype in (("is_anchor", bool), ("valid", bool), ("reward_true", np.float64),
                            ("reward_wm", np.float64), ("reward_wm_repeat", np.float64),
                            ("reward_recalled", np.float64)):
            val = getattr(self, name)
            if val is None:
                continue
            a = np.asarray(val, dtype=dtype)
            if a.shape != (B,):
                raise ValueError(f"{name} must have shape [B]=({B},) like group_ids, got {a.shape}")
            object.__setattr__(self, name, a)

    @property
    def B(self) -> int:
        """Number of trajectories."""
        return int(self.group_ids.size)


@dataclass
class StepOutputs:
    """What the recipe returns for one step (arrays [B] float64).

    Attributes:
        reward_wm_calibrated: r_tilde = f_hat(r_hat) (r_hat itself without debiasing; NaN where r_hat is).
        reward_used: the reward each trajectory is trained on (NaN on invalid samples).
        advantages: group-relative advantages (PPI++: anchors carry A_r - lambda * A_f).
        weights: per-sample loss weights (0 on invalid samples and on samples outside the loss).
        stats: the step's metrics (``alpha``, ``var_anchor``, ``var_wm``, ``residual_var``, ``ppi_lambda``,
            ``weight_anchor``, ``weight_wm``, ``n_anchor_samples``, ``n_wm_samples``, ``n_recalled``, ``fusion_mode``,
            ``calibrator_mode``, ``calibrator_n_anchors``, and the world model's ranking error on this step's
            anchors ``wm_kendall_tau``, ``wm_favourite_regret``: :mod:`wmrl.core.ranking`).
        calibration: the calibration before this step's update (``mode``, ``n_window``, ``map_y`` on
            :data:`CALIBRATION_GRID`, ``diagnostics`` on this step's anchors), or None without a world model.
    """

    reward_wm_calibrated: np.ndarray
    reward_used: np.ndarray
    advantages: np.ndarray
    weights: np.ndarray
    stats: dict[str, Any] = field(default_factory=dict)
    calibration: dict[str, Any] | None = None


@dataclass
class RecipeState:
    """The state a recipe carries from step to step: the debiasing's state (the ``isotonic`` debiasing's
    :class:`~wmrl.core.calibration.IsotonicCalibrator`; None for ``none``) and the window.

    Attributes:
        calibrator: what the debiasing's ``make_state`` built (it has ``state_dict`` / ``load_state_dict``), or None.
        window: the :class:`AnchorWindow` of out-of-sample anchor pairs.
    """

    calibrator: Any
    window: AnchorWindow

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state (for checkpoints)."""
        return {"calibrator": None if self.calibrator is None else self.calibrator.state_dict(),
                "window": self.window.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (a calibrator state is ignored by a recipe without one)."""
        if self.calibrator is not None and state.get("calibrator") is not None:
            self.calibrator.load_state_dict(state["calibrator"])
        self.window.load_state_dict(state["window"])


@dataclass(frozen=True)
class Recipe:
    """One method, composed of its axes: which groups are executed (``anchors``), how world-model rewards are
    debiased (a registered debiasing), how the two streams are fused (a registered fusion), and flags.
    Create with :func:`register_recipe`; look up with :func:`get_recipe`.

    Attributes:
        name: the registry name (also the config's ``method`` and the bench's method name).
        help: one line for tables and ``--help``.
        anchors: ``all`` (every group executed), ``none``, or ``fraction`` (rho of the groups).
        debiasing: a registered debiasing (:func:`wmrl.core.axes.debiasing_names`: ``none``, ``isotonic``).
        fusion: a registered fusion (:func:`wmrl.core.axes.fusion_names`: ``equal``, ``anchor-only``, ``ivw``,
            ``bias-aware``, ``ppi``).
        tie_break: the calibrator's tie-break for this recipe (None: the settings' value).
        recall: world-model samples whose program was executed before train on the measured reward
            (:attr:`StepInputs.reward_recalled`; the trainer supplies it, :mod:`wmrl.core.recall`).

    Raises:
        ValueError: an unknown anchors mode, debiasing or fusion (the message lists the known ones), a
            debiasing or tie-break on a recipe without a world model, or a tie-break without debiasing.
    """

    name: str
    help: str
    anchors: Anchors
    debiasing: str = NO_DEBIASING
    fusion: str = "equal"
    tie_break: float | None = None
    recall: bool = False

    def __post_init__(self) -> None:
        if self.anchors not in get_args(Anchors):
            raise ValueError(f"recipe {self.name!r}: anchors must be one of {', '.join(get_args(Anchors))}, "
                             f"got {self.anchors!r}")
        for axis, lookup in (("debiasing", get_debiasing), ("fusion", get_fusion)):
            try:
                lookup(getattr(self, axis))
            except KeyError as e:
                raise ValueError(f"recipe {self.name!r}: {e.args[0]}") from None
        if self.debias and not self.uses_world_model:
            raise ValueError(f"recipe {self.name!r} asks no world model: its debiasing must be {NO_DEBIASING!r}, "
                             f"got {self.debiasing!r}")
        if self.tie_break is not None and not self.debias:
            raise ValueError(f"recipe {self.name!r}: a tie_break needs a debiasing other than {NO_DEBIASING!r}")

    @property
    def debias(self) -> bool:
        """Whether world-model rewards are debiased (the debiasing is not ``none``)."""
        return self.debiasing != NO_DEBIASING

    @property
    def denoises(self) -> bool:
        """Whether the fusion weights the streams by their noise (``ivw``, ``bias-aware``, ``ppi``)."""
        return get_fusion(self.fusion).denoises

    @property
    def uses_world_model(self) -> bool:
        """Whether the world model scores trajectories."""
        return self.anchors != "all" and get_fusion(self.fusion).world_model

    @property
    def fuses(self) -> bool:
        """Whether the recipe has both streams and keeps a window of anchor pairs."""
        return self.anchors == "fraction" and self.uses_world_model

    def anchor_fraction(self, rho: float) -> float:
        """The fraction of groups executed for real: 1 (``all``), 0 (``none``) or ``rho``."""
        return {"all": 1.0, "none": 0.0}.get(self.anchors, float(rho))

    def init_state(self, settings: RecipeSettings = RecipeSettings()) -> RecipeState:
        """A fresh state: the debiasing's state (a calibrator for ``isotonic``; the recipe's ``tie_break``
        replaces the settings' one), an empty anchor window."""
        make = get_debiasing(self.debiasing).make_state
        if self.tie_break is not None:
            settings = replace(settings, calibrator_tie_break=self.tie_break)
        return RecipeState(None if make is None else make(settings),
                           AnchorWindow(settings.window_pairs, settings.window_steps))

    # ------------------------------------------------------------------------------------------
    def _check(self, x: StepInputs) -> None:
        if self.anchors == "all" and not x.is_anchor.all():
            raise ValueError(f"recipe {self.name!r} executes every group: is_anchor must be all True")
        if self.anchors == "none" and x.is_anchor.any():
            raise ValueError(f"recipe {self.name!r} has no anchors: is_anchor must be all False")
        if not np.all(np.isfinite(x.reward_true[x.is_anchor & x.valid])):
            raise ValueError("anchor samples need a finite true reward (mark infrastructure failures invalid)")
        if self.uses_world_model and not np.all(np.isfinite(x.reward_wm[~x.is_anchor & x.valid])):
            raise ValueError(f"recipe {self.name!r} needs a finite world-model score on every valid "
                             "world-model sample")

    def step(self, x: StepInputs, state: RecipeState, settings: RecipeSettings = RecipeSettings()) -> StepOutputs:
        """Map one step's trajectories to rewards used, advantages, weights and statistics; update
        ``state`` with this step's anchors (the debiasing after mapping them, then the window).

        Args:
            x: the step's :class:`StepInputs`.
            state: this recipe's :class:`RecipeState` (from :meth:`init_state` or a checkpoint).
            settings: :class:`RecipeSettings`.

        Returns:
            :class:`StepOutputs`.

        Raises:
            ValueError: anchors that contradict the recipe (``grpo`` with a world-model group, ``wm`` with
                an anchor), a reward missing where it is needed, or non-finite world-model scores.
        """
        self._check(x)
        gid, anc, val, rt = x.group_ids, x.is_anchor, x.valid, x.reward_true
        a_ok, w_ok = anc & val, ~anc & val
        deb = None
        if self.uses_world_model:
            deb = get_debiasing(self.debiasing)(DebiasInputs(x.step, x.reward_wm, x.reward_wm_repeat,
                                                             x.reward_wm[a_ok], rt[a_ok], state.calibrator))
            r_tilde, rep = deb.reward_wm_calibrated, deb.reward_wm_repeat_calibrated
        else:
            r_tilde, rep = x.reward_wm.copy(), None
        if self.fuses:
            state.window.add(x.step, gid[a_ok], rt[a_ok], r_tilde[a_ok], None if rep is None else rep[a_ok])
        measured = x.reward_recalled if self.recall and x.reward_recalled is not None else np.full(x.B, np.nan)
        recalled = ~anc & np.isfinite(measured)
        r_wm = np.where(recalled, measured, r_tilde)
        out = get_fusion(self.fusion)(FusionInputs(gid, anc, a_ok, w_ok, rt, r_tilde, r_wm,
                                                   state.window if self.fuses else None, settings))
        stats = out.stats
        fixed_alpha = {"all": 1.0, "none": 0.0}.get(self.anchors)
        if fixed_alpha is not None:
            stats["alpha"] = fixed_alpha
        stats["n_recalled"] = int((recalled & np.isfinite(out.reward_used)).sum())  # in the loss
        rec = None if deb is None else deb.record
        stats["calibrator_mode"] = None if rec is None else rec["mode"]
        stats["calibrator_n_anchors"] = None if deb is None else deb.n_fitted
        rank = ranking_errors(gid[a_ok], rt[a_ok], x.reward_wm[a_ok]) if self.uses_world_model and a_ok.any() \
            else None
        stats["wm_kendall_tau"] = None if rank is None else rank.kendall_tau
        stats["wm_favourite_regret"] = None if rank is None else rank.favourite_regret
        return StepOutputs(r_tilde, out.reward_used, out.advantages, out.weights, stats, rec)

    def learn_late(self, state: RecipeState, step: int, origin_steps: np.ndarray, group_ids: np.ndarray,
                   reward_true: np.ndarray, reward_wm: np.ndarray, reward_wm_repeat: np.ndarray | None = None
                   ) -> np.ndarray:
        """Feed N anchor pairs that arrived late (asynchronous anchors, :mod:`wmrl.core.staleness`) to the state,
        without a gradient: the window gets (r, r_tilde = f_hat(r_hat)) with f_hat as it is now (out of sample:
        it has not seen these pairs), then the debiasing learns them under ``step``, so they calibrate the
        steps after ``step`` only.

        Call it after :meth:`step` of ``step`` (whose mapping must not see them), or for a step without one.

        Args:
            state: this recipe's :class:`RecipeState`.
            step: the step at which the pairs are consumed (>= the calibrator's last update step).
            origin_steps: [N] int64 step each pair's group was routed at (<= ``step``); with ``group_ids`` it
                names the pair's cluster in the window.
            group_ids: [N] int64 group of each pair within its origin step.
            reward_true: [N] float64 executed rewards r (finite; infrastructure failures removed).
            reward_wm: [N] float64 raw world-model scores r_hat of the same samples (finite).
            reward_wm_repeat: [N] float64 a second world-model query, or None.

        Returns:
            [N] float64 r_tilde, the out-of-sample calibrated scores the window received.

        Raises:
            ValueError: a recipe without both streams (nothing to calibrate or fuse: ``grpo``, ``wm``,
                ``anchor-only``), arrays of different lengths, non-finite rewards, or a pair from the future.
        """
        if not self.fuses:
            raise ValueError(f"recipe {self.name!r} has no world-model stream to calibrate: late anchor pairs "
                             "can only feed the wmrl recipes (use a staleness bound of 0)")
        arrs = [np.asarray(a, dtype=np.float64).reshape(-1) for a in (reward_true, reward_wm)]
        og = np.asarray(origin_steps, dtype=np.int64).reshape(-1)
        gid = np.asarray(group_ids, dtype=np.int64).reshape(-1)
        n = arrs[0].size
        if {a.size for a in arrs} | {og.size, gid.size} != {n}:
            raise ValueError(f"origin_steps, group_ids, reward_true and reward_wm must all have length N, got "
                             f"{og.size}, {gid.size}, {arrs[0].size}, {arrs[1].size}")
        if not all(np.all(np.isfinite(a)) for a in arrs):
            raise ValueError("late anchor pairs need finite reward_true and reward_wm (drop infrastructure failures)")
        if n and og.max() > step:
            raise ValueError(f"a late pair routed at step {int(og.max())} cannot be consumed at step {step}")
        rt, rw = arrs
        rep = None if reward_wm_repeat is None else np.asarray(reward_wm_repeat, dtype=np.float64).reshape(-1)
        deb = get_debiasing(self.debiasing)(DebiasInputs(step, rw, rep, rw, rt, state.calibrator, late=True))
        state.window.add(og, gid, rt, deb.reward_wm_calibrated, deb.reward_wm_repeat_calibrated)
        return deb.reward_wm_calibrated

def calibration_record(step: int, out: StepOutputs, reward_wm: np.ndarray, reward_true: np.ndarray,
                       anchors: np.ndarray) -> dict[str, Any] | None:
    """The calibration.jsonl line of one step (docs/run-directory.md): the map the step was calibrated with
    (``mode``, ``n_window``, ``map_x`` = :data:`CALIBRATION_GRID`, ``map_y``), its diagnostics, and the
    anchors' raw, calibrated and true rewards (lists). None when the recipe has no world model.

    Args:
        step: the step. out: the recipe's :class:`StepOutputs` of that step.
        reward_wm, reward_true: [B] float64 r_hat and r of the step's trajectories.
        anchors: [B] bool, the anchor samples to list (valid anchors).
    """
    cal = out.calibration
    if cal is None:
        return None
    a = np.asarray(anchors, dtype=bool)
    return {"step": int(step), "mode": cal["mode"], "n_window": cal["n_window"],
            "map_x": CALIBRATION_GRID.tolist(), "map_y": np.asarray(cal["map_y"]).tolist(),
            "anchor_wm": np.asarray(reward_wm)[a].tolist(),
            "anchor_wm_calibrated": out.reward_wm_calibrated[a].tolist(),
            "anchor_true": np.asarray(reward_true)[a].tolist(), "diagnostics": cal["diagnostics"]}


#: The registry: recipe name -> :class:`Recipe` (entry-point group ``wmrl.recipes``; an entry point names a
#: :class:`Recipe` object, ``"my_package.recipes:MY_RECIPE"``).
RECIPES: Registry[Recipe] = Registry("recipe", group="wmrl.recipes")


def register_recipe(recipe: Recipe) -> Recipe:
    """Add ``recipe`` to :data:`RECIPES` under ``recipe.name`` (verl's ``register_adv_est`` pattern).

    Raises:
        wmrl.core.registry.DuplicateName: the name is taken (a ValueError).
    """
    return RECIPES.register(recipe.name, recipe)


def ran_as_note(recipe: Recipe, calibrator_modes: Sequence[str | None], anchor_pairs: int | None) -> str:
    """What a finished run of ``recipe`` did not do of what its name says, from its per-step ``calibrator_mode``
    (``None`` where a step logged none) and its count of executed anchor pairs; ``""`` when it ran as named or
    when nothing was logged to tell.

    - ``"no anchors executed"``: a recipe that executes anchors got none (``anchor_pairs`` is 0);
    - ``"no debiasing: the calibrator stayed identity (raw world-model rewards)"``: a debiasing recipe whose map
      was never fitted, at every step with a logged mode (fewer anchor pairs than ``calibrator_min_anchors``).
    """
    if recipe.anchors == "fraction" and anchor_pairs == 0:
        return "no anchors executed"
    modes = [m for m in calibrator_modes if m is not None]
    if recipe.debias and modes and all(m == "identity" for m in modes):
        return "no debiasing: the calibrator stayed identity (raw world-model rewards)"
    return ""


def get_recipe(name: str) -> Recipe:
    """The registered recipe ``name``.

    Raises:
        wmrl.core.registry.UnknownName: no such recipe (a KeyError and a ValueError); the message lists the
            registered names and the closest one.
    """
    return RECIPES.get(name)


def recipe_names() -> list[str]:
    """The registered names, in registration order (entry points not yet loaded last)."""
    return RECIPES.names()


#: What :func:`recipes_with` can select on: the recipe's fields and its derived properties.
RECIPE_FLAGS = tuple(f.name for f in fields(Recipe) if f.name != "help") + (
    "debias", "denoises", "uses_world_model", "fuses")


def recipes_with(**flags: Any) -> list[str]:
    """The registered names, in registration order, of the recipes whose attributes equal ``flags``, e.g.
    ``recipes_with(fuses=True)`` (both streams), ``recipes_with(uses_world_model=False)``,
    ``recipes_with(anchors="none")``, ``recipes_with(fusion="ppi", recall=True)``.

    Raises:
        ValueError: a flag that is not one of :data:`RECIPE_FLAGS` (the message lists them).
    """
    bad = sorted(set(flags) - set(RECIPE_FLAGS))
    if bad:
        raise ValueError(f"recipes_with: unknown flags {bad}; use any of {', '.join(RECIPE_FLAGS)}")
    return [n for n, r in RECIPES.items() if all(getattr(r, k) == v for k, v in flags.items())]


for _r in (
    Recipe("grpo", "GRPO with every group executed for real (the baseline)", "all"),
    Recipe("wm", "pure world model: every reward predicted, no anchors, no correction", "none"),
    Recipe("wmrl", "WMRL: anchor executions + isotonic debiasing + inverse-variance fusion + recalled executions",
           "fraction", debiasing="isotonic", fusion="ivw", recall=True),
    Recipe("wmrl-raw", "the raw mixture: anchors mixed in with raw world-model rewards, no correction", "fraction",
           fusion="equal"),
    Recipe("wmrl-no-recall", "WMRL without recalled executions (the WMRL paper's WMRL: every world-model sample "
           "predicted)", "fraction", debiasing="isotonic", fusion="ivw"),
    Recipe("wmrl-no-debias", "WMRL without the isotonic debiasing (raw world-model rewards)", "fraction",
           fusion="ivw", recall=True),
    Recipe("wmrl-no-denoise", "WMRL without inverse-variance fusion (every sample weighted equally)", "fraction",
           debiasing="isotonic", fusion="equal", recall=True),
    Recipe("wmrl-ppi", "WMRL with the PPI++ rectified estimator instead of inverse-variance fusion", "fraction",
           debiasing="isotonic", fusion="ppi", recall=True),
    Recipe("wmrl-cv", "WMRL with the inverse-probability-weighted difference estimator instead of inverse-variance "
           "fusion", "fraction", debiasing="isotonic", fusion="cv", recall=True),
    Recipe("wmrl-bias-aware", "WMRL with a bias-aware alpha (a persistent bias B^2 counted as variance)",
           "fraction", debiasing="isotonic", fusion="bias-aware", recall=True),
    Recipe("anchor-only", "GRPO on the anchor groups only (rho of the groups executed, the rest dropped)",
           "fraction", fusion="anchor-only"),
    Recipe("wmrl-flat", "WMRL with a calibrator without tie-break (a diagnostic of the simulation)", "fraction",
           debiasing="isotonic", fusion="ivw", tie_break=0.0, recall=True),
):
    register_recipe(_r)

#: The baseline every method is compared with: real-execution GRPO, every group executed.
BASELINE = "grpo"
#: The paper's method, every correction on (the config's default method).
WMRL = "wmrl"

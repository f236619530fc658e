"""The two registered axes a recipe is composed of (:mod:`wmrl.core.recipe`): how world-model rewards are
debiased, and how the two streams are fused into rewards used, advantages and loss weights.

Each axis is a registry of functions with one signature, in the manner of verl's ``register_adv_est`` /
``get_adv_estimator_fn`` (``verl/trainer/ppo/core_algos.py``)::

    @register_debiasing("isotonic", help="...", make_state=isotonic_state)
    def isotonic(x: DebiasInputs) -> DebiasOutputs: ...

    @register_fusion("ivw", help="...", denoises=True)
    def ivw(x: FusionInputs) -> FusionOutputs: ...

    get_fusion("ivw")(FusionInputs(...))        # the registered entry; calling it calls the function

A recipe names one of each (``Recipe(name, help, anchors, debiasing="isotonic", fusion="ivw", recall=True)``);
:meth:`wmrl.core.recipe.Recipe.step` calls them in order (debias, then fuse) and nothing else computes
advantages or weights. Formulas: docs/architecture.md, "The method's formulas", and :mod:`wmrl.core.fusion`.

Debiasing (:data:`DEBIASINGS`):

===========  ======================================================================================
``none``     r_tilde = r_hat (the identity; no state)
``isotonic`` r_tilde = f_hat(r_hat), f_hat the online isotonic calibrator fitted on the anchors of earlier
             steps only (:class:`wmrl.core.calibration.IsotonicCalibrator`); it then learns this step's
===========  ======================================================================================

Fusion (:data:`FUSIONS`); n_A, n_W = valid anchor and world-model samples:

===============  ==================================================================================
``equal``        every sample weighted 1/n (the pooled mixture)
``anchor-only``  world-model samples out of the loss; anchors weighted 1/n_A
``ivw``          alpha/n_A on anchors, (1 - alpha)/n_W on world-model samples, alpha the inverse-variance
                 alpha* estimated on the anchor window (:func:`wmrl.core.fusion.estimate_fusion`)
``bias-aware``   as ``ivw`` with a persistent bias B^2 counted as variance of the world-model stream
``ppi``          PPI++ (Angelopoulos et al. 2023): weights 1/n_A and lambda/n_W, the two anchor rows merged
                 into one of advantage A_r - lambda * A_f (:mod:`wmrl.core.recipe`'s docstring)
``cv``           the difference estimator with inverse-probability weights: every sample 1/n with advantage
                 A_f, anchors (A_r - A_f) / rho on top (:func:`control_variate`)
===============  ==================================================================================

With one stream empty in a step, ``ivw``, ``bias-aware`` and ``ppi`` weight every sample 1/n
(``fusion_mode`` ``equal``). Arrays are numpy float64 (bool for masks, int64 for ids) throughout.

Why one file of about 540 lines: both registries, their input/output dataclasses and every registered entry, so
that the whole menu a recipe picks from reads in one place (the estimators they call live in
:mod:`wmrl.core.fusion` and :mod:`wmrl.core.calibration`).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from wmrl.core.advantages import group_advantages
from wmrl.core.calibration import IsotonicCalibrator
from wmrl.core.fusion import (
    FusionEstimate,
    estimate_fusion,
    fusion_weights,
    ppi_lambda,
    ppi_samples,
)
from wmrl.core.registry import Registry
from wmrl.core.window import AnchorWindow

#: World-model scores at which the calibration map is reported (calibration.jsonl ``map_x``).
CALIBRATION_GRID = np.linspace(0.0, 1.0, 51)

#: The debiasing that leaves world-model rewards as they are (a recipe with it has ``debias`` False).
NO_DEBIASING = "none"


@dataclass(frozen=True)
class RecipeSettings:
    """Hyper-parameters every recipe reads (the config's ``optim`` and ``wmrl`` sections).

    Attributes:
        normalize_std, adv_eps: GRPO advantage settings (:func:`wmrl.core.advantages.group_advantages`).
        calibrator_window: anchor pairs the calibrator is fitted on (most recent).
        calibrator_min_anchors: below this many pairs the calibrator uses ``calibrator_fallback``.
        calibrator_fallback: ``identity`` or ``affine``.
        calibrator_tie_break: the strictly increasing blend of the calibrator, in [0, 1).
        window_pairs: most recent out-of-sample anchor pairs the fusion estimate uses (None: no limit).
        window_steps: most recent steps whose pairs it uses (None: no limit).
        alpha_floor, alpha_ceiling: clip range of alpha.
        fusion_min_pairs: below this many pairs alpha is the pooled n_A / (n_A + n_W).
        anchor_fraction: rho, the long-run probability that a group is executed (the router's fraction); the
            ``cv`` fusion's inverse-probability weight 1/rho. The trainer's engine sets the configured rho.
    """

    normalize_std: bool = True
    adv_eps: float = 1e-6
    calibrator_window: int | None = 256
    calibrator_min_anchors: int = 32
    calibrator_fallback: Literal["identity", "affine"] = "identity"
    calibrator_tie_break: float = 0.0
    window_pairs: int | None = 256
    window_steps: int | None = None
    alpha_floor: float = 0.05
    alpha_ceiling: float = 0.95
    fusion_min_pairs: int = 8
    anchor_fraction: float = 0.1

    def __post_init__(self) -> None:
        if not (0.0 < self.anchor_fraction <= 1.0):
            raise ValueError(f"anchor_fraction must be in (0, 1] (rho, e.g. 0.1), got {self.anchor_fraction!r}")


# ------------------------------------------------------------------------------------------------------------
# Debiasing
# ------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DebiasInputs:
    """What a debiasing function sees: the scores to map, then the anchor pairs to learn.

    Attributes:
        step: the step; the pairs are learned under it, and (unless ``late``) the map must not already hold
            pairs of this step or later (they must not calibrate their own step).
        reward_wm: [B] float64 raw world-model scores r_hat to map (finite).
        reward_wm_repeat: [B] float64 a second, independent query of the same samples, or None.
        anchor_wm: [N] float64 raw scores r_hat of the anchor pairs learned after the mapping.
        anchor_true: [N] float64 their executed rewards r.
        state: the debiasing's state (what its ``make_state`` built, kept in
            :attr:`wmrl.core.recipe.RecipeState.calibrator`; None for a debiasing without state). Updated in place.
        late: the pairs arrived late (:meth:`wmrl.core.recipe.Recipe.learn_late`): the scores are mapped with
            the map as it is, without the check above and without a calibration record.
    """

    step: int
    reward_wm: np.ndarray
    reward_wm_repeat: np.ndarray | None
    anchor_wm: np.ndarray
    anchor_true: np.ndarray
    state: Any = None
    late: bool = False


@dataclass
class DebiasOutputs:
    """What a debiasing function returns.

    Attributes:
        reward_wm_calibrated: [B] float64 r_tilde.
        reward_wm_repeat_calibrated: [B] float64 the mapped repeat query, or None.
        record: the calibration before this step's update (``mode``, ``n_window``, ``map_y`` on
            :data:`CALIBRATION_GRID`, ``diagnostics`` on this step's anchors); None for late pairs.
        n_fitted: anchor pairs the map holds after learning (metric ``calibrator_n_anchors``); None without state.
    """

    reward_wm_calibrated: np.ndarray
    reward_wm_repeat_calibrated: np.ndarray | None
    record: dict[str, Any] | None
    n_fitted: int | None


@dataclass(frozen=True)
class Debiasing:
    """A registered debiasing: ``fn(DebiasInputs) -> DebiasOutputs``, called through the entry.

    Attributes:
        name: the registry name (a recipe's ``debiasing``).
        fn: the function.
        help: one line for tables and errors.
        make_state: builds the state from :class:`RecipeSettings` (its ``calibrator_*`` fields), or None for a
            debiasing without state.
    """

    name: str
    fn: Callable[[DebiasInputs], DebiasOutputs]
    help: str
    make_state: Callable[[RecipeSettings], Any] | None = None

    def __call__(self, x: DebiasInputs) -> DebiasOutputs:
        return self.fn(x)


#: The debiasing registry: name -> :class:`Debiasing` (entry-point group ``wmrl.debiasings``).
DEBIASINGS: Registry[Debiasing] = Registry("debiasing", group="wmrl.debiasings")


DebiasFn = Callable[[DebiasInputs], DebiasOutputs]


def register_debiasing(name: str, *, help: str, make_state: Callable[[RecipeSettings], Any] | None = None
                       ) -> Callable[[DebiasFn], DebiasFn]:
    """Decorator: register ``fn(DebiasInputs) -> DebiasOutputs`` as the debiasing ``name``.

    Raises:
        wmrl.core.registry.DuplicateName: ``name`` is registered already for another function.
    """
    def decorator(fn: DebiasFn) -> DebiasFn:
        old = DEBIASINGS.loaded().get(name)
        if old is None or old.fn is not fn:
            DEBIASINGS.register(name, Debiasing(name, fn, help, make_state))
        return fn
    return decorator


def get_debiasing(name: str) -> Debiasing:
    """The registered debiasing ``name``.

    Raises:
        wmrl.core.registry.UnknownName: no such debiasing (a KeyError and a ValueError); the message lists the
            registered names and the closest one.
    """
    return DEBIASINGS.get(name)


def debiasing_names() -> list[str]:
    """The registered debiasing names, in registration order."""
    return DEBIASINGS.names()


@register_debiasing(NO_DEBIASING, help="none: the raw world-model score r_hat is used as it is")
def no_debiasing(x: DebiasInputs) -> DebiasOutputs:
    """r_tilde = r_hat (copies); the record reports the identity map."""
    rep = None if x.reward_wm_repeat is None else x.reward_wm_repeat.copy()
    rec = None if x.late else {"mode": "identity", "n_window": 0, "map_y": CALIBRATION_GRID.copy(), "diagnostics": {}}
    return DebiasOutputs(x.reward_wm.copy(), rep, rec, None)


def isotonic_state(settings: RecipeSettings) -> IsotonicCalibrator:
    """A fresh calibrator from the settings' ``calibrator_*`` fields."""
    return IsotonicCalibrator(window=settings.calibrator_window, min_anchors=settings.calibrator_min_anchors,
                              fallback=settings.calibrator_fallback, tie_break=settings.calibrator_tie_break)


@register_debiasing("isotonic", make_state=isotonic_state,
                    help="isotonic: r_tilde = f_hat(r_hat), f_hat fitted online on the anchors of earlier steps")
def isotonic(x: DebiasInputs) -> DebiasOutputs:
    """Map with f_hat (fitted on pairs of steps < ``x.step``), report the map and its held-out diagnostics on
    this step's anchors, then learn them.

    Raises:
        ValueError: the calibrator already holds pairs of ``x.step`` or later (not for late pairs), or
            non-finite scores (:meth:`wmrl.core.calibration.IsotonicCalibrator.transform`).
    """
    cal: IsotonicCalibrator = x.state
    step = None if x.late else x.step
    rec = None if x.late else {"mode": cal.mode, "n_window": cal.n_anchors, "map_y": cal.transform(CALIBRATION_GRID)}
    r_tilde = cal.transform(x.reward_wm, step=step)
    rep = None if x.reward_wm_repeat is None else cal.transform(x.reward_wm_repeat, step=step)
    if rec is not None:
        rec["diagnostics"] = cal.diagnostics(x.anchor_wm, x.anchor_true)
    cal.update(x.anchor_wm, x.anchor_true, x.step)
    return DebiasOutputs(r_tilde, rep, rec, cal.n_anchors)


# ------------------------------------------------------------------------------------------------------------
# Fusion
# ------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FusionInputs:
    """What a fusion function sees: one step's two streams (B samples).

    Attributes:
        group_ids: [B] int64 group of each sample (groups never mix streams).
        is_anchor: [B] bool, the sample's group was executed.
        anchor_ok: [B] bool, valid anchor samples.
        wm_ok: [B] bool, valid world-model samples.
        reward_true: [B] float64 executed rewards r (NaN off anchors).
        reward_wm_calibrated: [B] float64 r_tilde (the debiased score).
        reward_wm_used: [B] float64 the world-model samples' training reward: r_tilde, or the measured reward of
            a recalled sample.
        window: the recipe's :class:`AnchorWindow` of out-of-sample pairs (this step's included), or None for a
            recipe without both streams.
        settings: the :class:`RecipeSettings`.
    """

    group_ids: np.ndarray
    is_anchor: np.ndarray
    anchor_ok: np.ndarray
    wm_ok: np.ndarray
    reward_true: np.ndarray
    reward_wm_calibrated: np.ndarray
    reward_wm_used: np.ndarray
    window: AnchorWindow | None
    settings: RecipeSettings = RecipeSettings()


@dataclass
class FusionOutputs:
    """What a fusion function returns (arrays [B] float64).

    Attributes:
        reward_used: the reward each sample is trained on; NaN outside the loss (invalid samples, and
            world-model samples of ``anchor-only``).
        advantages: group-relative advantages (0 outside the loss).
        weights: per-sample loss weights (0 outside the loss).
        stats: ``alpha``, ``var_anchor``, ``var_wm``, ``residual_var``, ``ppi_lambda``, ``weight_anchor``,
            ``weight_wm``, ``n_anchor_samples``, ``n_wm_samples``, ``fusion_mode`` (None where not defined).
    """

    reward_used: np.ndarray
    advantages: np.ndarray
    weights: np.ndarray
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Fusion:
    """A registered fusion: ``fn(FusionInputs) -> FusionOutputs``, called through the entry.

    Attributes:
        name: the registry name (a recipe's ``fusion``).
        fn: the function.
        help: one line for tables and errors.
        world_model: world-model samples enter the loss (False: ``anchor-only``; such a recipe asks no world model).
        denoises: the streams are weighted by their noise (the paper's denoising: ``ivw``, ``bias-aware``,
            ``ppi``), not by their sizes alone.
    """

    name: str
    fn: Callable[[FusionInputs], FusionOutputs]
    help: str
    world_model: bool = True
    denoises: bool = False

    def __call__(self, x: FusionInputs) -> FusionOutputs:
        return self.fn(x)


#: The fusion registry: name -> :class:`Fusion` (entry-point group ``wmrl.fusions``).
FUSIONS: Registry[Fusion] = Registry("fusion", group="wmrl.fusions")


FusionFn = Callable[[FusionInputs], FusionOutputs]


def register_fusion(name: str, *, help: str, world_model: bool = True, denoises: bool = False
                    ) -> Callable[[FusionFn], FusionFn]:
    """Decorator: register ``fn(FusionInputs) -> FusionOutputs`` as the fusion ``name``.

    Raises:
        wmrl.core.registry.DuplicateName: ``name`` is registered already for another function.
    """
    def decorator(fn: FusionFn) -> FusionFn:
        old = FUSIONS.loaded().get(name)
        if old is None or old.fn is not fn:
            FUSIONS.register(name, Fusion(name, fn, help, world_model, denoises))
        return fn
    return decorator


def get_fusion(name: str) -> Fusion:
    """The registered fusion ``name``.

    Raises:
        wmrl.core.registry.UnknownName: no such fusion (a KeyError and a ValueError); the message lists the
            registered names and the closest one.
    """
    return FUSIONS.get(name)


def fusion_names() -> list[str]:
    """The registered fusion names, in registration order."""
    return FUSIONS.names()


def _none_if_nan(x: Any) -> Any:
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


class _Fused:
    """The working arrays of one fusion call, shared by the registered fusions: rewards used and GRPO
    advantages of the samples in the loss, zero weights, and the statistics with every key None."""

    def __init__(self, x: FusionInputs, wm_in_loss: bool = True) -> None:
        s = x.settings
        self.x = x
        self.a_ok = x.anchor_ok
        self.w_ok = x.wm_ok if wm_in_loss else np.zeros_like(x.wm_ok)
        self.n_a, self.n_w = int(self.a_ok.sum()), int(self.w_ok.sum())
        self.in_loss = self.a_ok | self.w_ok
        self.reward_used = np.where(self.in_loss, np.where(x.is_anchor, x.reward_true, x.reward_wm_used), np.nan)
        self.advantages = group_advantages(np.where(self.in_loss, self.reward_used, 0.0), x.group_ids,
                                           normalize_std=s.normalize_std, eps=s.adv_eps, valid=self.in_loss)
        self.weights = np.zeros(x.group_ids.size)
        self.stats: dict[str, Any] = {"alpha": None, "var_anchor": None, "var_wm": None, "residual_var": None,
                                      "ppi_lambda": None, "weight_anchor": None, "weight_wm": None,
                                      "n_anchor_samples": self.n_a, "n_wm_samples": self.n_w, "fusion_mode": None}

    @property
    def empty(self) -> bool:
        """No sample in the loss."""
        return self.n_a + self.n_w == 0

    @property
    def both(self) -> bool:
        """Both streams have samples in the loss."""
        return self.n_a > 0 and self.n_w > 0

    def estimate(self, bias_aware: bool = False) -> FusionEstimate | None:
        """The inverse-variance estimate on the window (None without one or with an empty one); its variances
        go into the statistics."""
        win, s = self.x.window, self.x.settings
        if win is None or not len(win):
            return None
        est = estimate_fusion(win.true, win.calibrated, win.clusters(), max(self.n_a, 1), max(self.n_w, 1),
                              alpha_min=s.alpha_floor, alpha_max=s.alpha_ceiling, min_pairs=s.fusion_min_pairs,
                              bias_aware=bias_aware, noise_var=win.noise_var())
        self.stats.update(var_anchor=_none_if_nan(est.var_anchor), var_wm=_none_if_nan(est.var_wm),
                          residual_var=_none_if_nan(est.sigma2_xi))
        return est

    def equal(self) -> float:
        """Weight every sample in the loss 1/n; returns the pooled alpha n_A / n."""
        self.weights[self.in_loss] = 1.0 / (self.n_a + self.n_w)
        self.stats["fusion_mode"] = "equal"
        return self.n_a / (self.n_a + self.n_w)

    def outputs(self, alpha: float | None) -> FusionOutputs:
        """The outputs, with ``alpha`` and the per-sample weight of each stream in the statistics."""
        self.stats["alpha"] = None if alpha is None else float(alpha)
        self.stats["weight_anchor"] = float(self.weights[self.a_ok][0]) if self.n_a else None
        self.stats["weight_wm"] = float(self.weights[self.w_ok][0]) if self.n_w else None
        return FusionOutputs(self.reward_used, self.advantages, self.weights, self.stats)


def _pooled(x: FusionInputs, wm_in_loss: bool) -> FusionOutputs:
    f = _Fused(x, wm_in_loss)
    if f.empty:
        return f.outputs(None)
    f.estimate()
    return f.outputs(f.equal())


@register_fusion("equal", help="equal: every sample of both streams weighted 1/n (the pooled mixture)")
def equal(x: FusionInputs) -> FusionOutputs:
    """Every valid sample in the loss with weight 1/(n_A + n_W); the window's variances are still reported."""
    return _pooled(x, wm_in_loss=True)


@register_fusion("anchor-only", world_model=False,
                 help="anchor-only: the world-model samples out of the loss, anchors weighted 1/n_A")
def anchor_only(x: FusionInputs) -> FusionOutputs:
    """Only the valid anchors in the loss (GRPO on the anchor groups), weight 1/n_A."""
    return _pooled(x, wm_in_loss=False)


def _inverse_variance(x: FusionInputs, bias_aware: bool) -> FusionOutputs:
    f = _Fused(x)
    if f.empty:
        return f.outputs(None)
    est = f.estimate(bias_aware=bias_aware)
    if not f.both:
        return f.outputs(f.equal())
    alpha = est.alpha if est is not None else f.n_a / (f.n_a + f.n_w)
    f.weights[f.in_loss] = fusion_weights(x.is_anchor[f.in_loss], float(alpha))
    f.stats["fusion_mode"] = est.mode if est is not None else "pooled"
    return f.outputs(alpha)


@register_fusion("ivw", denoises=True,
                 help="ivw: weights alpha/n_A and (1-alpha)/n_W, alpha the inverse-variance alpha* of the window")
def ivw(x: FusionInputs) -> FusionOutputs:
    """Inverse-variance fusion: alpha from the window (:func:`wmrl.core.fusion.estimate_fusion`; pooled
    n_A / n before ``fusion_min_pairs`` pairs), weights :func:`wmrl.core.fusion.fusion_weights`."""
    return _inverse_variance(x, bias_aware=False)


@register_fusion("bias-aware", denoises=True,
                 help="bias-aware: as ivw, a persistent bias B^2 of the world model counted as variance")
def bias_aware(x: FusionInputs) -> FusionOutputs:
    """As :func:`ivw` with the bias-aware alpha (:func:`wmrl.core.fusion.bias_aware_alpha`)."""
    return _inverse_variance(x, bias_aware=True)


@register_fusion("ppi", denoises=True,
                 help="ppi: the PPI++ rectified estimator, weights 1/n_A and lambda/n_W, anchor rows merged")
def ppi(x: FusionInputs) -> FusionOutputs:
    """PPI++ with the two anchor rows of each anchor merged (module docstring of :mod:`wmrl.core.recipe`):
    lambda = :func:`wmrl.core.fusion.ppi_lambda` on the window (0 with fewer than 2 pairs); anchors get weight
    1/n_A and advantage A_r - lambda * A_f, world-model samples lambda/n_W and A_f; ``alpha`` reports the
    equivalent 1 / (1 + lambda). The rectifier's anchor rows use r_tilde, the world-model rows
    ``reward_wm_used``."""
    f = _Fused(x)
    if f.empty:
        return f.outputs(None)
    f.estimate()
    if not f.both:
        return f.outputs(f.equal())
    win, s = x.window, x.settings
    lam = float(ppi_lambda(win.true, win.calibrated, f.n_a, f.n_w, group_ids=win.clusters())) \
        if win is not None and len(win) >= 2 else 0.0
    a_ok, w_ok, n_a, n_w = f.a_ok, f.w_ok, f.n_a, f.n_w
    ps = ppi_samples(x.reward_true[a_ok], x.reward_wm_calibrated[a_ok], x.reward_wm_used[w_ok], lam)
    a_idx, w_idx = np.flatnonzero(a_ok), np.flatnonzero(w_ok)
    wa = np.zeros(x.group_ids.size)  # sum over the three sets of weight * advantage, per trajectory
    for stream, idx in ((0, a_idx), (1, w_idx), (2, a_idx)):
        sel = ps.stream == stream
        if not sel.any():
            continue
        src = idx[ps.source_index[sel]]
        a_s = group_advantages(ps.rewards[sel], x.group_ids[src], normalize_std=s.normalize_std, eps=s.adv_eps)
        np.add.at(wa, src, ps.weights[sel] * a_s)
    f.weights[a_ok] = 1.0 / n_a
    f.weights[w_ok] = lam / n_w
    f.advantages[a_ok] = wa[a_ok] * n_a  # = A_r - lambda * A_f
    if lam > 0:
        f.advantages[w_ok] = wa[w_ok] * n_w / lam  # = A_f
    f.stats["ppi_lambda"] = lam
    f.stats["fusion_mode"] = "ppi"
    return f.outputs(1.0 / (1.0 + lam))


@register_fusion("cv", denoises=True,
                 help="cv: A_f on every sample, plus (A_r - A_f)/rho on anchors (the inverse-probability-weighted "
                      "difference estimator)")
def control_variate(x: FusionInputs) -> FusionOutputs:
    """The difference estimator of the policy gradient with inverse-probability weights (Horvitz-Thompson; the
    estimator of active statistical inference, Zrnic & Candes 2024, and of multi-fidelity policy gradients):

        g = sum_{all groups} g[A_f] + sum_{anchor groups} (g[A_r] - g[A_f]) / rho

    with rho the probability that a group is an anchor (``settings.anchor_fraction``), A_f the GRPO advantage of
    the world-model reward (``reward_wm_used`` off anchors, r_tilde on anchors) and A_r that of the executed
    reward. Over the router's draws E[g] is the gradient on true rewards whatever the world model's errors,
    including the order it gives programs inside a group: a step without an anchor group is corrected by the
    anchor groups of other steps, in expectation (up to the policy's drift between them), which PPI++'s
    per-step form cannot do. The world-model term enters at full weight: a coefficient lambda < 1 on it (the
    variance-minimising control variate) keeps the expectation but, measured on the ``cpu-small`` bench, shrank
    the world-model steps against the anchor steps under gradient clipping and Adam (docs/benchmark.md). Every
    valid sample gets weight 1/(n_A + n_W); world-model samples carry A_f, anchors A_f + (A_r - A_f) / rho.
    ``alpha`` and ``ppi_lambda`` are None.
    """
    f = _Fused(x)
    if f.empty:
        return f.outputs(None)
    f.estimate()
    s = x.settings
    a_ok, w_ok = f.a_ok, f.w_ok
    a_f = group_advantages(np.where(a_ok, x.reward_wm_calibrated, np.where(w_ok, x.reward_wm_used, 0.0)),
                           x.group_ids, normalize_std=s.normalize_std, eps=s.adv_eps, valid=f.in_loss)
    a_r = f.advantages  # A_r on anchors (their reward used is r)
    f.advantages = np.where(a_ok, a_f + (a_r - a_f) / s.anchor_fraction, np.where(w_ok, a_f, 0.0))
    f.weights[f.in_loss] = 1.0 / (f.n_a + f.n_w)
    f.stats["fusion_mode"] = "cv"
    return f.outputs(None)

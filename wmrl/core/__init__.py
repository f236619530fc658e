"""wmrl.core: the WMRL algorithms as small pure functions (no I/O, imports nothing else from wmrl).

One step of every method is :meth:`wmrl.core.recipe.Recipe.step` (look a recipe up by name with
:func:`wmrl.core.recipe.get_recipe`): it maps a step's anchor and world-model rewards to the rewards used,
advantages and loss weights, and is what the trainer, the simulation, the embodied track and the TRL/verl
integrations call. Where it sits in a training step: docs/architecture.md, "One step"; the methods:
docs/training.md, "Methods"; the formulas: docs/architecture.md, "The method's formulas".

Modules: :mod:`~wmrl.core.recipe` (the registered recipes, :class:`~wmrl.core.recipe.StepInputs` ->
:class:`~wmrl.core.recipe.StepOutputs`), :mod:`~wmrl.core.advantages` (group-relative advantages),
:mod:`~wmrl.core.losses` (clipped surrogate, k3 KL, aggregation, sample weights), :mod:`~wmrl.core.routing`
(which groups are anchors), :mod:`~wmrl.core.calibration` (online isotonic debiasing), :mod:`~wmrl.core.fusion`
(inverse-variance / bias-aware / PPI++ fusion of the two streams), :mod:`~wmrl.core.axes` (the registered debiasings
and fusions a recipe is composed of), :mod:`~wmrl.core.window` (the out-of-sample
anchor pairs the fusion is estimated on), :mod:`~wmrl.core.recall` (measured rewards of programs executed
before), :mod:`~wmrl.core.staleness` (the asynchronous anchor stream), :mod:`~wmrl.core.alarm` (the exploitation
alarm), :mod:`~wmrl.core.episodes` (multi-turn episodes in the loss), :mod:`~wmrl.core.infra` (the
infrastructure-error alarm).

The functions exported here are the recipe's parts, for use on their own::

    r_tilde = calibrator.transform(r_hat, step=t)      # map fitted on anchors of steps < t only
    calibrator.update(r_hat[anchor & valid], r[anchor & valid], step=t)  # then learn from step t
    adv = group_advantages(reward, group_ids, valid=valid)                # inside each group
    loss, stats = grpo_loss(logprobs, old_logprobs, adv, mask, sample_weights=w, ...)
"""
from wmrl.core.advantages import group_advantages, group_stats
from wmrl.core.calibration import IsotonicCalibrator
from wmrl.core.fusion import (
    FusionEstimate,
    PPISamples,
    bias_aware_alpha,
    estimate_bias2,
    estimate_fusion,
    fusion_weights,
    ivw_alpha,
    ppi_lambda,
    ppi_samples,
    residual_variance,
    within_group_variance,
)
from wmrl.core.losses import clipped_surrogate, grpo_loss, kl_k3
from wmrl.core.routing import FractionRouter, Router, StratifiedRouter, make_router

__all__ = [
    "group_advantages", "group_stats", "IsotonicCalibrator", "FusionEstimate", "PPISamples",
    "bias_aware_alpha", "estimate_bias2", "estimate_fusion", "fusion_weights", "ivw_alpha",
    "ppi_lambda", "ppi_samples", "residual_variance", "within_group_variance", "clipped_surrogate",
    "grpo_loss", "kl_k3", "FractionRouter", "Router", "StratifiedRouter", "make_router",
]

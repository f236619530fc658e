"""wmrl.core: the WMRL algorithms as small pure functions (no I/O, imports nothing else from wmrl).

Modules: :mod:`~wmrl.core.advantages` (group-relative advantages), :mod:`~wmrl.core.losses`
(clipped surrogate, k3 KL, aggregation, sample weights), :mod:`~wmrl.core.routing` (which groups
are anchors), :mod:`~wmrl.core.calibration` (online isotonic debiasing), :mod:`~wmrl.core.fusion`
(inverse-variance / bias-aware / PPI++ fusion of the two streams). Formulas: docs/architecture.md, "The method's
formulas".

How the trainer chains them at step t (M groups of G trajectories; B = M*G samples)::

    is_anchor_group = router.route(group_task_ids, step=t)                  # [M] bool
    # execute the anchor groups for real -> r (true rewards, infra failures -> valid=False)
    # ask the world model for every group  -> r_hat (anchors too: they feed the calibrator)
    r_tilde = calibrator.transform(r_hat, step=t)      # map fitted on anchors of steps < t only
    diag = calibrator.diagnostics(r_hat[anchor], r[anchor])   # held-out check before the update
    est = estimate_fusion(r[anchor], r_tilde[anchor], group_ids[anchor], n_A, n_W)   # alpha, V_A, V_W
    calibrator.update(r_hat[anchor & valid], r[anchor & valid], step=t)  # now learn from step t
    reward = where(is_anchor, r, r_tilde)            # anchors use the true reward
    adv = group_advantages(reward, group_ids, valid=valid)   # groups never mix streams
    w = fusion_weights(is_anchor, est.alpha)         # alpha/n_A, (1-alpha)/n_W; plain GRPO: None
    loss, stats = grpo_loss(logprobs, old_logprobs, adv, mask, sample_weights=w, ...)

For PPI++ replace the last three lines by ``lam = ppi_lambda(...)``, ``s = ppi_samples(...)``,
advantages per stream (``s.stream``), ``sample_weights = s.weights`` on the duplicated batch.
Methods as configurations: real GRPO = ``FractionRouter(1.0)`` + no weights; pure world model =
``FractionRouter(0.0)`` + identity (no calibrator); debias-only = calibrator + ``w = None``;
denoise-only = raw r_hat + IVW weights; WMRL = both.
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
from wmrl.core.routing import FractionRouter, Router, StratifiedRouter, UncertaintyRouter, make_router

__all__ = [
    "group_advantages", "group_stats", "IsotonicCalibrator", "FusionEstimate", "PPISamples",
    "bias_aware_alpha", "estimate_bias2", "estimate_fusion", "fusion_weights", "ivw_alpha",
    "ppi_lambda", "ppi_samples", "residual_variance", "within_group_variance", "clipped_surrogate",
    "grpo_loss", "kl_k3", "FractionRouter", "Router", "StratifiedRouter", "UncertaintyRouter", "make_router",
]

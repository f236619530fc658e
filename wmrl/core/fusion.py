"""Fusing the anchor stream and the world-model stream (the WMRL paper's inverse-variance denoising;
docs/architecture.md).

Inverse-variance weighting (IVW). Two unbiased estimates of the policy gradient: g_A from n_A
anchor samples (true reward, per-sample variance V_A) and g_W from n_W world-model samples
(calibrated reward, per-sample variance V_W). The minimum-variance combination
g = alpha * g_A + (1 - alpha) * g_W has

    alpha = (n_A / V_A) / (n_A / V_A + n_W / V_W)

and since gradients are linear in per-sample loss weights it is applied as a weight
alpha / n_A on each anchor sample and (1 - alpha) / n_W on each world-model sample
(:func:`fusion_weights`, consumed by :func:`wmrl.core.losses.grpo_loss`).

How V_A and V_W are estimated (a documented proxy; the true per-sample gradient variance would need
per-sample gradients). GRPO's per-sample gradient is A_i * grad log pi(tau_i) with A_i the
group-centred reward, so the per-sample gradient variance is proportional to the within-group
variance of the reward that feeds the advantage. We therefore use

    V_A = pooled within-group variance of the true reward on anchor groups,
    sigma_xi^2 = pooled within-group variance of the residual r - f_hat(r_hat) on anchor groups
                 (:func:`residual_variance`; a group-level offset cancels in GRPO, so it is
                 removed by the within-group centring),
    V_W = V_A + sigma_xi^2

Floors and ceilings keep alpha stable when few anchors exist: variances are floored at
``var_floor``, alpha is clipped to [alpha_min, alpha_max], and with fewer than ``min_pairs``
anchor pairs :func:`estimate_fusion` falls back to plain pooling alpha = n_A / (n_A + n_W)
(equal weight per sample). With no anchors in a step alpha = 0; with no world-model samples alpha = 1.

Bias-aware weight: a residual bias B that does not average out counts as extra
variance of g_W: alpha = (V_W/n_W + B^2) / (V_A/n_A + V_W/n_W + B^2).

PPI++ (Angelopoulos, Duchi & Zrnic 2023, "PPI++: Efficient Prediction-Powered Inference"):
g = g_A[r] + lambda * (g_W[f] - g_A[f]), unbiased for any f, with the power-tuned
lambda = Cov(r, f) / ((1 + n_A / n_W) * Var(f)) estimated on anchors, clipped to [0, 1].
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


def _arr(name: str, x: Any) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} contains NaN/inf")
    return a


def _centre(x: np.ndarray, group_ids: np.ndarray | None) -> tuple[np.ndarray, int]:
    """Within-group centred values and the degrees of freedom lost (number of groups, or 1)."""
    if group_ids is None:
        return x - x.mean(), 1
    g = np.asarray(group_ids).reshape(-1)
    if g.shape != x.shape:
        raise ValueError(f"group_ids must have the same length as the values ({x.size}), got {g.size}")
    _, inv = np.unique(g, return_inverse=True)
    sums = np.bincount(inv, weights=x)
    cnt = np.bincount(inv)
    return x - (sums / cnt)[inv], int(cnt.size)


def within_group_variance(values: np.ndarray, group_ids: np.ndarray | None = None) -> float:
    """Pooled within-group variance: sum_g sum_i (x_i - xbar_g)^2 / (N - n_groups).

    Args:
        values: [N] float values.
        group_ids: [N] group labels or None (one group: the ordinary unbiased variance).

    Returns:
        The variance (float), or nan when N - n_groups < 1 (not enough samples).
    """
    x = _arr("values", values)
    if x.size == 0:
        return float("nan")
    d, k = _centre(x, group_ids)
    dof = x.size - k
    return float(np.sum(d * d) / dof) if dof >= 1 else float("nan")


def residual_variance(
    true_rewards: np.ndarray,
    calibrated_wm: np.ndarray,
    group_ids: np.ndarray | None = None,
) -> float:
    """sigma_xi^2 = pooled within-group variance of r - f_hat(r_hat) on anchor samples.

    Args:
        true_rewards: [N] true rewards r of anchor samples.
        calibrated_wm: [N] calibrated world-model rewards f_hat(r_hat) of the same samples, with the
            calibrator fitted on earlier steps only.
        group_ids: [N] group labels (recommended: removes group-level offsets, which GRPO cancels),
            or None for the plain unbiased variance.

    Returns:
        float variance (reward units squared), nan if there are too few samples.

    Raises:
        ValueError: length mismatch or non-finite values.
    """
    r = _arr("true_rewards", true_rewards)
    f = _arr("calibrated_wm", calibrated_wm)
    if r.shape != f.shape:
        raise ValueError(f"true_rewards and calibrated_wm must have the same length, got {r.size} and {f.size}")
    return within_group_variance(r - f, group_ids)


def ivw_alpha(
    n_anchor: int,
    n_wm: int,
    var_anchor: float,
    var_wm: float,
    alpha_min: float = 0.0,
    alpha_max: float = 1.0,
) -> float:
    """Inverse-variance fusion weight of the anchor stream.

    ``alpha = (n_A / V_A) / (n_A / V_A + n_W / V_W)``, clipped to [alpha_min, alpha_max] when both
    streams are present; 0 when n_A = 0, 1 when n_W = 0. V = 0 means an exact stream (infinite
    precision): V_A = 0 gives alpha = alpha_max, V_W = 0 (and V_A > 0) alpha = alpha_min.

    Raises:
        ValueError: negative counts, negative or non-finite variances, or bad clip bounds.
    """
    if n_anchor < 0 or n_wm < 0:
        raise ValueError(f"sample counts must be >= 0, got n_anchor={n_anchor}, n_wm={n_wm}")
    if not (0.0 <= alpha_min <= alpha_max <= 1.0):
        raise ValueError(f"need 0 <= alpha_min <= alpha_max <= 1, got {alpha_min}, {alpha_max}")
    if n_anchor == 0:
        return 0.0
    if n_wm == 0:
        return 1.0
    for name, v in (("var_anchor", var_anchor), ("var_wm", var_wm)):
        if not (math.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a finite variance >= 0, got {v}; estimate it with residual_variance")
    if var_anchor == 0:
        a = 1.0
    elif var_wm == 0:
        a = 0.0
    else:
        pa, pw = n_anchor / var_anchor, n_wm / var_wm
        a = pa / (pa + pw)
    return float(min(max(a, alpha_min), alpha_max))


def bias_aware_alpha(
    n_anchor: int,
    n_wm: int,
    var_anchor: float,
    var_wm: float,
    bias2: float,
    alpha_min: float = 0.0,
    alpha_max: float = 1.0,
) -> float:
    """Anchor weight when the world-model stream has a squared bias B^2.

    ``alpha = (V_W/n_W + B^2) / (V_A/n_A + V_W/n_W + B^2)``, the weight minimising the mean squared
    error of alpha*g_A + (1-alpha)*g_W when g_W has bias B; equals :func:`ivw_alpha` at B = 0.
    Same edge cases and clipping as :func:`ivw_alpha`.

    Raises:
        ValueError: as :func:`ivw_alpha`, or a negative/non-finite ``bias2``.
    """
    if not (math.isfinite(bias2) and bias2 >= 0):
        raise ValueError(f"bias2 must be a finite value >= 0, got {bias2}")
    base = ivw_alpha(n_anchor, n_wm, var_anchor, var_wm, 0.0, 1.0)
    if n_anchor == 0 or n_wm == 0:
        return base
    ea, ew = var_anchor / n_anchor, var_wm / n_wm + bias2
    a = 1.0 if ea + ew == 0 else ew / (ea + ew)
    return float(min(max(a, alpha_min), alpha_max))


def estimate_bias2(
    true_rewards: np.ndarray,
    calibrated_wm: np.ndarray,
    group_ids: np.ndarray | None = None,
    noise_var: float = 0.0,
) -> float:
    """Squared persistent bias B^2 of the world-model stream, per sample, from anchors.

    The within-group residual variance sigma_xi^2 mixes noise that changes at every query (it
    averages out across samples and steps) and error that is fixed per trajectory (a deterministic
    world model repeats it every time, and the policy can learn to exploit it). The latter is
    ``max(0, sigma_xi^2 - noise_var)`` where ``noise_var`` is the world model's repeat-query noise
    variance (half the variance of the difference of two queries of the same trajectory; 0 for a
    deterministic world model). It is treated as bias that does not average out (conservative).

    Returns:
        float >= 0 (0 when sigma_xi^2 cannot be estimated).
    """
    if not (math.isfinite(noise_var) and noise_var >= 0):
        raise ValueError(f"noise_var must be a finite variance >= 0, got {noise_var}")
    s2 = residual_variance(true_rewards, calibrated_wm, group_ids)
    if not math.isfinite(s2):
        return 0.0
    return float(max(0.0, s2 - noise_var))


@dataclass
class FusionEstimate:
    """What :func:`estimate_fusion` returns; ``asdict`` it for logging.

    Attributes:
        alpha: anchor-stream weight in [0, 1].
        var_anchor: V_A (reward units^2). var_wm: V_W. sigma2_xi: residual variance.
        bias2: B^2 used (0 for mode "ivw"). n_anchor, n_wm: sample counts. n_pairs: anchor pairs
        used for the estimate. mode: "ivw" | "bias_aware" | "pooled" (fallback) | "edge".
    """

    alpha: float
    var_anchor: float
    var_wm: float
    sigma2_xi: float
    bias2: float
    n_anchor: int
    n_wm: int
    n_pairs: int
    mode: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def estimate_fusion(
    reward_true: np.ndarray,
    reward_wm_calibrated: np.ndarray,
    anchor_group_ids: np.ndarray | None,
    n_anchor: int,
    n_wm: int,
    alpha_min: float = 0.05,
    alpha_max: float = 0.95,
    var_floor: float = 1e-4,
    min_pairs: int = 8,
    bias_aware: bool = False,
    noise_var: float = 0.0,
) -> FusionEstimate:
    """Estimate V_A, V_W (and B^2) from anchor pairs and return the fusion weight alpha.

    Args:
        reward_true: [N] true rewards of anchor samples (this step's, or a window of recent ones).
        reward_wm_calibrated: [N] calibrated world-model rewards of the same samples.
        anchor_group_ids: [N] their group labels (None: one group).
        n_anchor, n_wm: number of anchor / world-model samples in this step's loss.
        alpha_min, alpha_max: clip range of alpha when both streams are present.
        var_floor: floor on V_A and sigma_xi^2 (reward units^2).
        min_pairs: below this many anchor pairs, alpha = n_A / (n_A + n_W) (mode "pooled").
        bias_aware: use :func:`bias_aware_alpha` with B^2 from :func:`estimate_bias2`.
        noise_var: the world model's repeat-query noise variance, for ``bias_aware``.

    Returns:
        :class:`FusionEstimate`.
    """
    r = _arr("reward_true", reward_true)
    f = _arr("reward_wm_calibrated", reward_wm_calibrated)
    if r.shape != f.shape:
        raise ValueError(f"reward_true and reward_wm_calibrated must have the same length, got {r.size} and {f.size}")
    nan = float("nan")
    if n_anchor == 0 or n_wm == 0:
        a = 0.0 if n_anchor == 0 else 1.0
        return FusionEstimate(a, nan, nan, nan, 0.0, n_anchor, n_wm, int(r.size), "edge")
    va = within_group_variance(r, anchor_group_ids)
    s2 = residual_variance(r, f, anchor_group_ids)
    if r.size < min_pairs or not (math.isfinite(va) and math.isfinite(s2)):
        a = min(max(n_anchor / (n_anchor + n_wm), alpha_min), alpha_max)
        return FusionEstimate(a, va, nan, s2, 0.0, n_anchor, n_wm, int(r.size), "pooled")
    va = max(va, var_floor)
    s2 = max(s2, var_floor)
    vw = va + s2
    if bias_aware:
        b2 = max(0.0, s2 - noise_var)
        a = bias_aware_alpha(n_anchor, n_wm, va, vw, b2, alpha_min, alpha_max)
        return FusionEstimate(a, va, vw, s2, b2, n_anchor, n_wm, int(r.size), "bias_aware")
    a = ivw_alpha(n_anchor, n_wm, va, vw, alpha_min, alpha_max)
    return FusionEstimate(a, va, vw, s2, 0.0, n_anchor, n_wm, int(r.size), "ivw")


def fusion_weights(is_anchor: np.ndarray, alpha: float) -> np.ndarray:
    """Per-sample loss weights for IVW fusion: alpha/n_A on anchor samples, (1-alpha)/n_W on the rest.

    With these weights ``grpo_loss`` has gradient alpha * g_A + (1 - alpha) * g_W (see
    :mod:`wmrl.core.losses`). If there are no anchor samples every world-model sample gets 1/n_W
    (and vice versa), whatever alpha is, so the weights always sum to 1.

    Args:
        is_anchor: [B] bool, True for samples of anchor groups (scored with the true reward).
        alpha: anchor-stream weight in [0, 1].

    Returns:
        [B] float64 weights summing to 1 (all zeros for B = 0).

    Raises:
        ValueError: alpha outside [0, 1] or a non-bool mask.
    """
    m = np.asarray(is_anchor)
    if m.dtype != bool:
        raise ValueError(f"is_anchor must be a bool array, got dtype {m.dtype}")
    m = m.reshape(-1)
    if not (0.0 <= alpha <= 1.0):
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    n_a, n_w = int(m.sum()), int((~m).sum())
    w = np.zeros(m.size, dtype=np.float64)
    if n_a == 0 and n_w == 0:
        return w
    if n_a == 0:
        w[:] = 1.0 / n_w
    elif n_w == 0:
        w[:] = 1.0 / n_a
    else:
        w[m] = alpha / n_a
        w[~m] = (1.0 - alpha) / n_w
    return w


def ppi_lambda(
    reward_true: np.ndarray,
    reward_wm_calibrated: np.ndarray,
    n_anchor: int,
    n_wm: int,
    group_ids: np.ndarray | None = None,
    clip: tuple[float, float] = (0.0, 1.0),
) -> float:
    """Power-tuned PPI++ coefficient lambda = Cov(r, f) / ((1 + n_A/n_W) * Var(f)) (Angelopoulos et al. 2023).

    Covariance and variance are computed within groups (the component that reaches group-relative
    advantages) when ``group_ids`` are given. Angelopoulos et al. (2023) clip lambda to [0, 1].

    Args:
        reward_true: [N] true rewards r of anchor samples.
        reward_wm_calibrated: [N] calibrated predictions f of the same samples.
        n_anchor: n_A, anchor samples in the loss. n_wm: n_W, world-model samples.
        group_ids: [N] group labels or None.
        clip: (lo, hi) range of lambda.

    Returns:
        lambda (float); 0 when n_W = 0, N < 2 or Var(f) = 0 (the world model adds nothing).
    """
    r = _arr("reward_true", reward_true)
    f = _arr("reward_wm_calibrated", reward_wm_calibrated)
    if r.shape != f.shape:
        raise ValueError(f"reward_true and reward_wm_calibrated must have the same length, got {r.size} and {f.size}")
    if n_wm <= 0 or n_anchor <= 0 or r.size < 2:
        return 0.0
    rc, k = _centre(r, group_ids)
    fc, _ = _centre(f, group_ids)
    dof = r.size - k
    if dof < 1:
        return 0.0
    var_f = float(np.sum(fc * fc) / dof)
    if var_f <= 0:
        return 0.0
    cov = float(np.sum(rc * fc) / dof)
    lam = cov / ((1.0 + n_anchor / n_wm) * var_f)
    return float(min(max(lam, clip[0]), clip[1]))


@dataclass
class PPISamples:
    """The three sample sets of the PPI++ loss, concatenated in this order.

    Attributes:
        rewards: [n_A + n_W + n_A] float64: true rewards of anchors, calibrated rewards of
            world-model samples, calibrated rewards of the anchors again.
        weights: [same] float64 loss weights: 1/n_A, lambda/n_W, -lambda/n_A.
        stream: [same] int8 stream code: 0 anchor_true, 1 wm, 2 anchor_wm.
        source_index: [same] int64 index of the trajectory in its input array (anchor or wm).
        lam: the lambda used.
    """

    rewards: np.ndarray
    weights: np.ndarray
    stream: np.ndarray
    source_index: np.ndarray
    lam: float

    ANCHOR_TRUE = 0
    WM = 1
    ANCHOR_WM = 2


def ppi_samples(
    reward_true: np.ndarray,
    reward_wm_calibrated: np.ndarray,
    calibrated_wm: np.ndarray,
    lam: float,
) -> PPISamples:
    """Per-sample (reward, weight) of the PPI++ rectified gradient g_A[r] + lambda (g_W[f] - g_A[f]).

    The trainer builds one GRPO batch from three sets: the anchor trajectories with their true
    rewards (weight 1/n_A), the world-model trajectories with calibrated rewards (lambda/n_W), and
    the anchor trajectories *again* with their calibrated world-model rewards (-lambda/n_A).
    Advantages must be computed per set (group ids of set 0 and set 2 must not be merged).
    With one policy update per batch (ratio = 1) the clipped surrogate's gradient is linear in the
    weights, so negative weights are exact; with several PPO epochs the clip acts on each set.

    Edge cases: n_A = 0 gives only the world-model set with weight 1/n_W (pure world model);
    n_W = 0 gives only the anchor set (lambda is irrelevant).

    Raises:
        ValueError: length mismatch of the anchor arrays, non-finite values or non-finite lam.
    """
    ra = _arr("reward_true", reward_true)
    fa = _arr("reward_wm_calibrated", reward_wm_calibrated)
    fw = _arr("calibrated_wm", calibrated_wm)
    if ra.shape != fa.shape:
        raise ValueError(f"reward_true and reward_wm_calibrated must have the same length, got {ra.size} and {fa.size}")
    if not math.isfinite(lam):
        raise ValueError(f"lam must be finite, got {lam}")
    n_a, n_w = ra.size, fw.size
    if n_a == 0:
        w = np.full(n_w, 1.0 / n_w) if n_w else np.zeros(0)
        return PPISamples(fw.copy(), w, np.full(n_w, 1, np.int8), np.arange(n_w), 0.0)
    if n_w == 0:
        return PPISamples(ra.copy(), np.full(n_a, 1.0 / n_a), np.zeros(n_a, np.int8), np.arange(n_a), float(lam))
    rewards = np.concatenate([ra, fw, fa])
    weights = np.concatenate([np.full(n_a, 1.0 / n_a), np.full(n_w, lam / n_w), np.full(n_a, -lam / n_a)])
    stream = np.concatenate([np.zeros(n_a, np.int8), np.ones(n_w, np.int8), np.full(n_a, 2, np.int8)])
    src = np.concatenate([np.arange(n_a), np.arange(n_w), np.arange(n_a)])
    return PPISamples(rewards, weights, stream, src, float(lam))

"""The GRPO objective: clipped surrogate, k3 KL to a reference policy, aggregation, sample weights.

Notation: B trajectories, T token positions, ``mask[i, t]`` True on the completion
tokens that count. Per token, with the importance ratio ``ratio = exp(logprobs - old_logprobs)``::

    surrogate_{i,t} = -min(ratio * A_i, clip(ratio, 1 - clip_low, 1 + clip_high) * A_i)  (PPO, Schulman et al. 2017)
    kl_{i,t}        = exp(ref - lp) - (ref - lp) - 1                                    (k3, Schulman 2020)
    L_{i,t}         = surrogate_{i,t} + beta * kl_{i,t}

which is TRL's ``GRPOTrainer`` per-token loss (``epsilon_low``/``epsilon_high``, ``beta``) and verl's
``compute_policy_loss`` + ``kl_penalty(..., "low_var_kl")`` without verl's clamp of the KL to
[-10, 10] and without verl's dual-clip (``clip_ratio_c``).

Default clip ranges are symmetric 0.2/0.2 (PPO, DeepSeekMath GRPO). DAPO (Yu et al. 2025) raises
``clip_high`` to 0.28 ("clip-higher") to keep exploration; pass ``clip_high=0.28`` for that.

Aggregation and sample weights. Let S_i = sum_t mask_{i,t} L_{i,t}, n_i = sum_t mask_{i,t}, and
nbar = (sum_i n_i) / B (mean completion length in the batch). Each trajectory has a loss

    seq_mean:   l_i = S_i / max(n_i, 1)          (per-sequence token mean; TRL loss_type="grpo")
    token_mean: l_i = S_i / nbar                  (so that the batch token mean is the plain mean of l_i;
                                                   TRL loss_type="bnpo"/"dapo", verl "token-mean")

and the loss is the weighted sum ``loss = sum_i w_i * l_i``. Without ``sample_weights`` w_i = 1/B,
which gives exactly the usual unweighted losses (token_mean = sum_{i,t} m L / sum m; seq_mean =
mean_i l_i). Weights are used as given: they are not renormalised and may be negative (the PPI++
rectifier needs -lambda/n_A). Because the loss is linear in w, the gradient is
``sum_i w_i grad l_i``: with the inverse-variance weights of :func:`wmrl.core.fusion.fusion_weights`
(alpha/n_A on anchor samples, (1-alpha)/n_W on world-model samples, summing to 1) the gradient is
exactly ``alpha * g_A + (1 - alpha) * g_W`` where g_A and g_W are the means of grad l_i over each
stream (the inverse-variance fusion). Both streams share one nbar, so token_mean keeps this exact identity.

Masked positions may hold -inf log-probabilities (grammar-masked or padding tokens); they are
removed with ``masked_fill``/``torch.where`` before any arithmetic so that -inf * 0 never yields NaN.
"""
from __future__ import annotations

from typing import Literal

import torch

Aggregation = Literal["token_mean", "seq_mean"]


def _check_bt(name: str, x: torch.Tensor, shape: torch.Size) -> None:
    if x.shape != shape:
        raise ValueError(f"{name} must have shape {tuple(shape)} (same as logprobs [B, T]), got {tuple(x.shape)}")


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k3 estimator of KL(pi_theta || pi_ref) per token (Schulman 2020; TRL, verl ``low_var_kl``).

    ``k3 = exp(ref - lp) - (ref - lp) - 1``, non-negative, unbiased for the KL when tokens are sampled
    from pi_theta.

    Args:
        logprobs: [B, T] log pi_theta of the sampled tokens (float32).
        ref_logprobs: [B, T] log pi_ref of the same tokens.

    Returns:
        [B, T] per-token estimate. Positions where either input is not finite give NaN/inf: mask
        them with ``torch.where`` before summing (``grpo_loss`` does).
    """
    _check_bt("ref_logprobs", ref_logprobs, logprobs.shape)
    d = ref_logprobs - logprobs
    return torch.exp(d) - d - 1.0


def clipped_surrogate(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO clipped surrogate *loss* (to minimise).

    ``-min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A)`` with the importance ratio
    ``ratio = exp(logprobs - old_logprobs)`` (PPO, Schulman et al. 2017).

    Args:
        logprobs: [B, T] current log-probs (requires grad).
        old_logprobs: [B, T] log-probs under the sampling policy (no grad needed).
        advantages: [B] one advantage per trajectory, broadcast over tokens.
        mask: [B, T] bool or None. Masked-out positions get loss 0 and ratio 1 (no NaN even if the
            log-probs there are -inf).
        clip_low, clip_high: clip range below/above 1, each in [0, 1).

    Returns:
        (loss [B, T], is_clipped [B, T] bool) where ``is_clipped`` marks tokens whose gradient was
        cut by the clip (the clipped term was the active minimum and differs from the unclipped one).

    Raises:
        ValueError: on shape mismatches or clip ranges outside [0, 1).
    """
    if not (0.0 <= clip_low < 1.0) or not (0.0 <= clip_high):
        raise ValueError(f"clip_low must be in [0, 1) and clip_high >= 0, got {clip_low}, {clip_high}")
    _check_bt("old_logprobs", old_logprobs, logprobs.shape)
    if advantages.shape != logprobs.shape[:1]:
        raise ValueError(f"advantages must have shape [B]={tuple(logprobs.shape[:1])}, got {tuple(advantages.shape)}")
    if mask is None:
        mask = torch.ones_like(logprobs, dtype=torch.bool)
    _check_bt("mask", mask, logprobs.shape)
    log_ratio = (logprobs - old_logprobs.detach()).masked_fill(~mask, 0.0)
    ratio = torch.exp(log_ratio)
    adv = advantages.detach().to(logprobs.dtype).unsqueeze(1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    loss = -torch.minimum(unclipped, clipped)
    is_clipped = (clipped < unclipped) & mask
    loss = loss.masked_fill(~mask, 0.0)
    return loss, is_clipped


def grpo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    sample_weights: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    beta: float = 0.0,
    aggregation: Aggregation = "token_mean",
) -> tuple[torch.Tensor, dict[str, float]]:
    """The GRPO loss with per-trajectory weights (module docstring gives the exact formula).

    Args:
        logprobs: [B, T] float32 log pi_theta of the sampled tokens (requires grad).
        old_logprobs: [B, T] log-probs at sampling time (for one update per batch, ``logprobs.detach()``).
        advantages: [B] float advantages (see :func:`wmrl.core.advantages.group_advantages`).
        mask: [B, T] bool, True on tokens that count. Rows with no True token contribute 0.
        sample_weights: [B] float or None (= 1/B each). Used as given, may be negative.
        ref_logprobs: [B, T] reference-policy log-probs; required when ``beta > 0``.
        clip_low, clip_high: PPO clip range (0.2/0.2 default; DAPO uses clip_high=0.28).
        beta: KL coefficient (0 disables the KL term, as in recent GRPO recipes).
        aggregation: ``"token_mean"`` or ``"seq_mean"``.

    Returns:
        (loss, stats): scalar loss tensor; stats (floats, over masked tokens, unweighted):
        ``clip_frac``, ``ratio_mean``, ``kl_mean`` (nan without ref), ``surrogate_mean``,
        ``n_tokens``, ``weight_sum``.

    Raises:
        ValueError: on shape/dtype problems, unknown aggregation, beta > 0 without ref_logprobs.
    """
    if logprobs.ndim != 2:
        raise ValueError(f"logprobs must be [B, T], got shape {tuple(logprobs.shape)}")
    B = logprobs.shape[0]
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor, got {mask.dtype}; use mask.bool()")
    if aggregation not in ("token_mean", "seq_mean"):
        raise ValueError(f"aggregation must be 'token_mean' or 'seq_mean', got {aggregation!r}")
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    if beta > 0 and ref_logprobs is None:
        raise ValueError("beta > 0 needs ref_logprobs [B, T]; pass them or set beta=0")
    if sample_weights is None:
        w = torch.full((B,), 1.0 / max(B, 1), dtype=logprobs.dtype, device=logprobs.device)
    else:
        if sample_weights.shape != (B,):
            raise ValueError(f"sample_weights must have shape [B]=({B},), got {tuple(sample_weights.shape)}")
        if not bool(torch.isfinite(sample_weights).all()):
            raise ValueError("sample_weights contain NaN/inf")
        w = sample_weights.detach().to(logprobs.dtype)

    surr, is_clipped = clipped_surrogate(logprobs, old_logprobs, advantages, mask, clip_low, clip_high)
    per_token = surr
    kl_mean = float("nan")
    if ref_logprobs is not None:
        _check_bt("ref_logprobs", ref_logprobs, logprobs.shape)
        lp_safe = logprobs.masked_fill(~mask, 0.0)
        ref_safe = ref_logprobs.detach().masked_fill(~mask, 0.0)
        kl = kl_k3(lp_safe, ref_safe).masked_fill(~mask, 0.0)
        n_tok = mask.sum().clamp(min=1)
        kl_mean = float(kl.detach().sum() / n_tok)
        if beta > 0:
            per_token = per_token + beta * kl

    seq_sum = per_token.masked_fill(~mask, 0.0).sum(dim=1)  # S_i  [B]
    n_i = mask.sum(dim=1).to(logprobs.dtype)  # [B]
    if aggregation == "seq_mean":
        per_seq = seq_sum / n_i.clamp(min=1.0)
    else:
        nbar = n_i.sum() / max(B, 1)
        per_seq = seq_sum / nbar.clamp(min=1e-12) if B else seq_sum
    loss = (w * per_seq).sum()

    with torch.no_grad():
        n_tokens = int(mask.sum())
        denom = max(n_tokens, 1)
        ratio = torch.exp((logprobs - old_logprobs).masked_fill(~mask, 0.0))
        stats = {
            "clip_frac": float(is_clipped.sum()) / denom,
            "ratio_mean": float(ratio.masked_fill(~mask, 0.0).sum()) / denom,
            "kl_mean": kl_mean,
            "surrogate_mean": float(surr.sum()) / denom,
            "n_tokens": float(n_tokens),
            "weight_sum": float(w.sum()),
        }
    return loss, stats

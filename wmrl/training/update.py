"""The GRPO update of one step: micro-batched log-probs, the fused loss of :func:`wmrl.core.losses.grpo_loss`
with the recipe's advantages and per-sample weights, one optimiser step."""
from __future__ import annotations

from collections.abc import Sequence

import math
from typing import Any

import numpy as np

from wmrl.interfaces import Policy
from wmrl.training.config import OptimConfig
from wmrl.core.losses import grpo_loss


def grpo_update(policy: Policy, optimizer: Any, params: list[Any], batch: Any, adv: np.ndarray, weights: np.ndarray,
                valid: np.ndarray, o: OptimConfig, extra: Sequence[tuple[Any, np.ndarray, np.ndarray]] = (),
                extra_clip: tuple[float, float] | None = None) -> dict[str, Any]:
    """One AdamW step on the fused GRPO loss, micro-batched with exact token-mean rescaling.

    Rows with weight 0, or with advantage 0 when beta = 0, contribute exactly nothing to the
    gradient and are skipped. For ``token_mean`` the core loss divides by the micro-batch's mean
    loss-token count nbar_mb; each micro-batch loss is rescaled by nbar_mb / nbar (nbar over all
    valid rows of the step), so the accumulated gradient equals the full-batch one.

    Args:
        policy: the :class:`~wmrl.interfaces.Policy` (``logprobs`` with grad; ``ref_logprobs`` for the KL).
        optimizer: the torch optimiser over ``params``. params: the trainable parameters (gradient norm, clip).
        batch: the step's ``RolloutBatch`` (B rows).
        adv, weights: [B] float64 advantages and per-sample loss weights (:meth:`wmrl.core.recipe.Recipe.step`).
        valid: [B] bool; False rows are left out.
        o: the config's ``optim`` section (clip range, beta, aggregation, micro-batch, grad clip, lr).
        extra: more rows of the same loss, ``(batch, adv [n], weights [n])`` each (late anchor groups of
            earlier steps, :mod:`wmrl.step.anchors`): their ``old_logprobs`` are the behaviour policy's, so
            the clipped ratio is their importance correction (:mod:`wmrl.core.staleness`). Every row is valid.
        extra_clip: ``(clip_low, clip_high)`` of the extra rows (:func:`wmrl.core.staleness.late_clip`);
            None = the configured ``o.clip_low``, ``o.clip_high``.

    Returns:
        ``loss``, ``kl``, ``clip_frac``, ``grad_norm``, ``lr``, ``update_rows``, ``update_skipped`` (metrics.jsonl).
    """
    import torch  # noqa: PLC0415 - heavy


    parts = [(batch, adv, weights, valid)] + [(b, a, w, np.ones(len(a), dtype=bool)) for b, a, w in extra]
    lens_p = [b.loss_mask.sum(dim=1).to(torch.float64).cpu().numpy() for b, *_ in parts]
    lens_v = np.concatenate([ln[v] for ln, (_, _, _, v) in zip(lens_p, parts)])
    nbar = float(lens_v.mean()) if lens_v.size else 1.0
    rows_p = [np.flatnonzero(v & (w != 0) & ((a != 0) | (o.beta > 0))) for _, a, w, v in parts]
    n_rows = int(sum(r.size for r in rows_p))
    out = {"loss": 0.0, "kl": None, "clip_frac": None, "grad_norm": None, "lr": o.lr,
           "update_rows": n_rows, "update_skipped": bool(n_rows == 0)}
    if n_rows == 0:
        return out
    optimizer.zero_grad(set_to_none=True)
    tot_tokens, clip_tok, kl_tok, loss_sum = 0.0, 0.0, 0.0, 0.0
    micro = [(p, rows[s:s + o.micro_batch].tolist()) for p, rows in zip(range(len(parts)), rows_p)
             for s in range(0, rows.size, o.micro_batch)]
    for p, mb in micro:
        batch, adv, weights, _ = parts[p]
        lens = lens_p[p]
        c_lo, c_hi = (o.clip_low, o.clip_high) if p == 0 or extra_clip is None else extra_clip
        sub = batch.slice(mb)
        lp = policy.logprobs(sub)
        ref = None
        if o.beta > 0:
            with torch.no_grad():
                ref = policy.ref_logprobs(sub)
        mask = sub.loss_mask.bool()
        loss, st = grpo_loss(
            lp, sub.old_logprobs.to(lp.dtype), torch.as_tensor(adv[mb], dtype=lp.dtype), mask,
            sample_weights=torch.as_tensor(weights[mb], dtype=lp.dtype), ref_logprobs=ref,
            clip_low=c_lo, clip_high=c_hi, beta=o.beta, aggregation=o.aggregation)
        if o.aggregation == "token_mean":
            nbar_mb = float(lens[mb].mean())
            loss = loss * (nbar_mb / max(nbar, 1e-12))
        loss.backward()
        n_tok = st["n_tokens"]
        tot_tokens += n_tok
        clip_tok += st["clip_frac"] * n_tok
        if math.isfinite(st["kl_mean"]):
            kl_tok += st["kl_mean"] * n_tok
        loss_sum += float(loss.detach())
    if o.grad_clip > 0:
        gn = torch.nn.utils.clip_grad_norm_(params, o.grad_clip)
    else:
        gn = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params if p.grad is not None]))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    out.update(loss=loss_sum, clip_frac=clip_tok / max(tot_tokens, 1.0),
               kl=(kl_tok / max(tot_tokens, 1.0)) if o.beta > 0 else None, grad_norm=float(gn))
    return out

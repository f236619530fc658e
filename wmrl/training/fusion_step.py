"""One step's rewards -> advantages -> per-sample loss weights, for every method (pure function).

The trainer's glue around :mod:`wmrl.core` (advantages, fusion); no state, no I/O, so every
combination (``grpo``, ``wm``, ``wmrl`` with debias/denoise on or off, ``ivw`` or ``ppi`` fusion)
is unit-testable on plain arrays.

Inputs are per trajectory (B samples):

- ``group_ids`` [B] int, ``is_anchor`` [B] bool (the sample's group was executed for real),
- ``valid`` [B] bool (False = infrastructure failure: no reward, weight 0, left out of statistics),
- ``r_true`` [B] float (NaN off anchors), ``r_wm_cal`` [B] float (the calibrated world-model reward,
  calibrated with the map fitted on earlier steps; NaN where there is none, as in ``grpo``).

Rewards used: anchors use the true reward, world-model samples the calibrated prediction; group-
relative advantages inside each group (groups never mix streams).

Weights:

- ``grpo``, ``wm``, and ``wmrl`` with ``denoise: false``: 1/n over valid samples (alpha = n_A/n).
- ``wmrl`` + ``ivw``: :func:`wmrl.core.fusion.estimate_fusion` on a window of recent out-of-sample
  anchor pairs (true reward, calibrated prediction) gives alpha; :func:`wmrl.core.fusion.fusion_weights`
  gives alpha/n_A and (1-alpha)/n_W.
- ``wmrl`` + ``ppi``: :func:`wmrl.core.fusion.ppi_lambda` and :func:`wmrl.core.fusion.ppi_samples`
  give three sets (anchors with r and weight 1/n_A, WM samples with f and lambda/n_W, anchors again
  with f and -lambda/n_A), advantages per set. The two anchor rows of a trajectory share log-probs,
  and with one policy update per batch (ratio = 1, inside the clip range) the surrogate's gradient is
  linear in the advantage, so they are merged exactly into one row with weight 1/n_A and advantage
  A_r - lambda * A_f: same gradient, no duplicated forward/backward pass.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from wmrl.core.advantages import group_advantages
from wmrl.core.fusion import estimate_fusion, fusion_weights, ppi_lambda, ppi_samples


@dataclass
class FusionResult:
    """Per-sample reward used, advantage and loss weight, plus the step's fusion statistics.

    Arrays are float64 numpy of shape [B] (reward_used is NaN on invalid samples); ``stats`` holds the
    metrics.jsonl keys ``alpha``, ``var_anchor``, ``var_wm``, ``residual_var``, ``ppi_lambda``,
    ``weight_anchor``, ``weight_wm``, ``n_anchor_samples``, ``n_wm_samples``, ``fusion_mode``.
    """

    reward_used: np.ndarray
    advantages: np.ndarray
    weights: np.ndarray
    stats: dict[str, Any] = field(default_factory=dict)


def group_adv(rewards: np.ndarray, group_ids: np.ndarray, valid: np.ndarray, normalize_std: bool,
              eps: float) -> np.ndarray:
    """:func:`wmrl.core.advantages.group_advantages` on numpy arrays ([B] float64 out)."""
    r = torch.as_tensor(np.where(valid, np.nan_to_num(rewards), 0.0), dtype=torch.float64)
    g = torch.as_tensor(np.asarray(group_ids), dtype=torch.int64)
    v = torch.as_tensor(np.asarray(valid, dtype=bool))
    return group_advantages(r, g, normalize_std=normalize_std, eps=eps, valid=v).numpy().astype(np.float64)


def _nan_to_none(x: Any) -> Any:
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


def _check(method: str, fusion: str, group_ids, is_anchor, valid, r_true, r_wm_cal):
    if method not in ("grpo", "wm", "wmrl"):
        raise ValueError(f"method must be grpo, wm or wmrl, got {method!r}")
    if fusion not in ("ivw", "ppi"):
        raise ValueError(f"fusion must be 'ivw' or 'ppi', got {fusion!r}")
    gid = np.asarray(group_ids, dtype=np.int64)
    B = gid.size
    anc = np.asarray(is_anchor, dtype=bool)
    val = np.asarray(valid, dtype=bool)
    rt = np.asarray(r_true, dtype=np.float64)
    rw = np.asarray(r_wm_cal, dtype=np.float64)
    for name, a in (("is_anchor", anc), ("valid", val), ("r_true", rt), ("r_wm_cal", rw)):
        if a.shape != (B,):
            raise ValueError(f"{name} must have shape [B]=({B},), got {a.shape}")
    if method == "grpo" and not anc.all():
        raise ValueError("method 'grpo' executes every group: is_anchor must be all True")
    if method == "wm" and anc.any():
        raise ValueError("method 'wm' has no anchors: is_anchor must be all False")
    if not np.all(np.isfinite(rt[anc & val])):
        raise ValueError("anchor samples need a finite true reward (mark infrastructure failures invalid)")
    if not np.all(np.isfinite(rw[~anc & val])):
        raise ValueError("world-model samples need a finite world-model reward")
    return gid, anc, val, rt, rw


def stream_advantages(*, method: str, group_ids: np.ndarray, is_anchor: np.ndarray, valid: np.ndarray,
                      r_true: np.ndarray, r_wm_cal: np.ndarray, normalize_std: bool = True,
                      adv_eps: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """The reward each trajectory is trained on and its group-relative advantage.

    Anchors use the true reward, world-model samples the calibrated prediction; invalid samples get
    reward NaN and advantage 0. Groups are stream-pure, so one call covers both streams.

    Returns:
        (reward_used [B] float64, advantages [B] float64).

    Raises:
        ValueError: see :func:`fuse_step`.
    """
    gid, anc, val, rt, rw = _check(method, "ivw", group_ids, is_anchor, valid, r_true, r_wm_cal)
    used = np.where(val, np.where(anc, rt, rw), np.nan)
    return used, group_adv(used, gid, val, normalize_std, adv_eps)


def fusion_for_step(*, method: str, group_ids: np.ndarray, is_anchor: np.ndarray, valid: np.ndarray,
                    r_true: np.ndarray, r_wm_cal: np.ndarray, reward_used: np.ndarray, advantages: np.ndarray,
                    denoise: bool = True, fusion: str = "ivw", window_true: np.ndarray | None = None,
                    window_cal: np.ndarray | None = None, window_groups: np.ndarray | None = None,
                    bias_aware: bool = False, alpha_floor: float = 0.05, alpha_ceiling: float = 0.95,
                    min_pairs: int = 8, normalize_std: bool = True, adv_eps: float = 1e-6) -> FusionResult:
    """Per-sample loss weights (and, for PPI++, the merged anchor advantages) of one step.

    Args: as :func:`fuse_step`, plus ``reward_used`` and ``advantages`` from :func:`stream_advantages`.

    Returns:
        :class:`FusionResult`.
    """
    gid, anc, val, rt, rw = _check(method, fusion, group_ids, is_anchor, valid, r_true, r_wm_cal)
    B = gid.size
    used = np.asarray(reward_used, dtype=np.float64)
    adv = np.asarray(advantages, dtype=np.float64).copy()
    a_mask = anc & val
    w_mask = ~anc & val
    n_a, n_w = int(a_mask.sum()), int(w_mask.sum())
    weights = np.zeros(B)
    stats: dict[str, Any] = {"alpha": None, "var_anchor": None, "var_wm": None, "residual_var": None,
                             "ppi_lambda": None, "weight_anchor": None, "weight_wm": None,
                             "n_anchor_samples": n_a, "n_wm_samples": n_w, "fusion_mode": None}
    if n_a + n_w == 0:
        return FusionResult(used, adv, weights, stats)

    if window_true is None:
        ok = a_mask & np.isfinite(rw)
        wt, wc, wg = rt[ok], rw[ok], gid[ok]
    else:
        wt, wc = np.asarray(window_true, np.float64), np.asarray(window_cal, np.float64)
        wg = None if window_groups is None else np.asarray(window_groups)
    est = None
    if method == "wmrl" and wt.size:
        est = estimate_fusion(wt, wc, wg, max(n_a, 1), max(n_w, 1), alpha_min=alpha_floor,
                              alpha_max=alpha_ceiling, min_pairs=min_pairs, bias_aware=bias_aware)
        stats.update(var_anchor=_nan_to_none(est.var_anchor), var_wm=_nan_to_none(est.var_wm),
                     residual_var=_nan_to_none(est.sigma2_xi))

    if method != "wmrl" or not denoise or n_a == 0 or n_w == 0:
        weights[val] = 1.0 / (n_a + n_w)
        alpha = n_a / (n_a + n_w)
        stats["fusion_mode"] = "equal"
    elif fusion == "ppi":
        lam = ppi_lambda(wt, wc, n_a, n_w, group_ids=wg) if wt.size >= 2 else 0.0
        ps = ppi_samples(rt[a_mask], rw[a_mask], rw[w_mask], lam)
        a_idx, w_idx = np.flatnonzero(a_mask), np.flatnonzero(w_mask)
        wa = np.zeros(B)  # sum over the three sets of weight * advantage, per trajectory
        for s, idx in ((0, a_idx), (1, w_idx), (2, a_idx)):
            sel = ps.stream == s
            if not sel.any():
                continue
            src = idx[ps.source_index[sel]]
            a_s = group_adv(ps.rewards[sel], gid[src], np.ones(src.size, bool), normalize_std, adv_eps)
            np.add.at(wa, src, ps.weights[sel] * a_s)
        weights[a_mask] = 1.0 / n_a
        weights[w_mask] = lam / n_w
        adv[a_mask] = wa[a_mask] * n_a  # = A_r - lambda * A_f
        if lam > 0:
            adv[w_mask] = wa[w_mask] * n_w / lam  # = A_f
        stats["ppi_lambda"] = float(lam)
        alpha = 1.0 / (1.0 + lam)
        stats["fusion_mode"] = "ppi"
    else:
        alpha = est.alpha if est is not None else n_a / (n_a + n_w)
        weights[val] = fusion_weights(anc[val], float(alpha))
        stats["fusion_mode"] = est.mode if est is not None else "pooled"
    stats["alpha"] = float(alpha)
    stats["weight_anchor"] = float(weights[a_mask][0]) if n_a else None
    stats["weight_wm"] = float(weights[w_mask][0]) if n_w else None
    return FusionResult(used, adv, weights, stats)


def fuse_step(*, method: str, group_ids: np.ndarray, is_anchor: np.ndarray, valid: np.ndarray,
              r_true: np.ndarray, r_wm_cal: np.ndarray, normalize_std: bool = True, adv_eps: float = 1e-6,
              **fusion_kw: Any) -> FusionResult:
    """:func:`stream_advantages` then :func:`fusion_for_step` in one call.

    Args:
        method: ``grpo``, ``wm`` or ``wmrl``.
        group_ids: [B] int; is_anchor, valid: [B] bool; r_true, r_wm_cal: [B] float.
        normalize_std, adv_eps: GRPO advantage settings.
        **fusion_kw: ``denoise``, ``fusion`` (``ivw``/``ppi``), ``window_true``, ``window_cal``,
            ``window_groups`` ([N] recent out-of-sample anchor pairs on which V_A, sigma_xi^2 and lambda
            are estimated; None = this step's anchors), ``bias_aware``, ``alpha_floor``,
            ``alpha_ceiling``, ``min_pairs``.

    Returns:
        :class:`FusionResult`; weights of invalid samples are 0.

    Raises:
        ValueError: unknown method/fusion, shape mismatch, grpo with a non-anchor group, wm with an
            anchor, or a reward missing where it is needed.
    """
    used, adv = stream_advantages(method=method, group_ids=group_ids, is_anchor=is_anchor, valid=valid,
                                  r_true=r_true, r_wm_cal=r_wm_cal, normalize_std=normalize_std, adv_eps=adv_eps)
    return fusion_for_step(method=method, group_ids=group_ids, is_anchor=is_anchor, valid=valid, r_true=r_true,
                           r_wm_cal=r_wm_cal, reward_used=used, advantages=adv, normalize_std=normalize_std,
                           adv_eps=adv_eps, **fusion_kw)

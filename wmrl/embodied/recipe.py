"""The one place where the embodied trainer calls wmrl's step recipe (debiasing, advantages, fusion).

Everything that turns one step's per-episode arrays into rewards used, advantages and loss weights goes
through :func:`recipe_step`, which drives :class:`wmrl.core.calibration.IsotonicCalibrator` and
:func:`wmrl.training.fusion_step.stream_advantages` / :func:`~wmrl.training.fusion_step.fusion_for_step`
exactly as the text trainer does (``wmrl/training/trainer.py``: ``_calibrate``, ``_advantages``,
``_fuse``), unchanged. When the registered recipe of ``wmrl/core/recipe.py`` lands, this module's body is
what switches to it; the embodied trainer only sees :class:`RecipeOut`.

Recipes (names as in the recipe registry):

========================  =====================================================================
``grpo``                  every group gets the simulator's success (sparse reward only)
``wm``                    no anchors; the raw progress score (dense, uncorrected)
``wmrl``                  anchors (success) + calibrated progress, isotonic debias + IVW denoise
``wmrl-no-debias``        as wmrl, the progress score used raw (identity map)
``wmrl-no-denoise``       as wmrl, every sample weighted equally (no inverse-variance fusion)
``wmrl-ppi``              as wmrl, PPI++ rectified fusion instead of IVW
========================  =====================================================================
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wmrl.core.calibration import IsotonicCalibrator
from wmrl.training.fusion_step import fusion_for_step, stream_advantages


@dataclass(frozen=True)
class RecipeSpec:
    """How one named recipe drives the core: ``method`` (grpo | wm | wmrl), ``debias``, ``denoise``,
    ``fusion`` (ivw | ppi) and whether its groups are anchors always (1.0), never (0.0) or at rho (None)."""

    method: str
    debias: bool = False
    denoise: bool = False
    fusion: str = "ivw"
    anchor_fraction: float | None = None


RECIPES: dict[str, RecipeSpec] = {
    "grpo": RecipeSpec("grpo", anchor_fraction=1.0),
    "wm": RecipeSpec("wm", anchor_fraction=0.0),
    "wmrl": RecipeSpec("wmrl", debias=True, denoise=True),
    "wmrl-no-debias": RecipeSpec("wmrl", debias=False, denoise=True),
    "wmrl-no-denoise": RecipeSpec("wmrl", debias=True, denoise=False),
    "wmrl-ppi": RecipeSpec("wmrl", debias=True, denoise=True, fusion="ppi"),
}


def recipe_spec(name: str) -> RecipeSpec:
    try:
        return RECIPES[name]
    except KeyError:
        raise ValueError(f"unknown recipe {name!r}; use one of {', '.join(RECIPES)}") from None


@dataclass
class RecipeSettings:
    """The recipe's knobs (defaults as the text track's ``wmrl:`` section)."""

    calibrator_window: int = 256
    calibrator_min_anchors: int = 32
    calibrator_fallback: str = "identity"
    fusion_min_pairs: int = 8
    alpha_floor: float = 0.05
    alpha_ceiling: float = 0.95
    bias_aware: bool = False
    normalize_std: bool = True
    adv_eps: float = 1e-6


class RecipeState:
    """What the recipe carries between steps: the calibrator and the window of out-of-sample anchor
    pairs (true reward, calibrated prediction, global group id). JSON-serialisable via ``state_dict``."""

    def __init__(self, s: RecipeSettings):
        self.settings = s
        self.calibrator = IsotonicCalibrator(window=s.calibrator_window, min_anchors=s.calibrator_min_anchors,
                                             fallback=s.calibrator_fallback)  # type: ignore[arg-type]
        self.window: dict[str, list] = {"true": [], "cal": [], "group": []}

    def state_dict(self) -> dict[str, Any]:
        return {"calibrator": self.calibrator.state_dict(), "window": self.window}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.calibrator.load_state_dict(d["calibrator"])
        self.window = d["window"]


@dataclass
class RecipeOut:
    """One step's result; arrays are [B] float64. ``r_cal`` is f_hat(r_hat) with the map of earlier steps
    (r_hat itself where the recipe does not debias); ``stats`` holds the fusion statistics (``alpha``, ...)
    and ``calibrator_mode``."""

    reward_used: np.ndarray
    advantages: np.ndarray
    weights: np.ndarray
    r_cal: np.ndarray
    stats: dict[str, Any] = field(default_factory=dict)


def recipe_step(name: str, state: RecipeState, *, step: int, group_ids: np.ndarray, is_anchor: np.ndarray,
                valid: np.ndarray, r_true: np.ndarray, r_hat: np.ndarray) -> RecipeOut:
    """Map one step's per-episode arrays to rewards used, advantages and per-sample loss weights.

    Args:
        name: a key of :data:`RECIPES`.
        state: the recipe's state (updated in place with this step's anchors, after they were used).
        step: training step (the calibrator refuses anchors of this step calibrating this step).
        group_ids: [B] int64; is_anchor, valid: [B] bool; r_true: [B] float64 success (NaN off anchors);
        r_hat: [B] float64 world-model episode scores (NaN where the recipe has none, e.g. ``grpo``).

    Returns:
        :class:`RecipeOut`.
    """
    spec = recipe_spec(name)
    s = state.settings
    gid = np.asarray(group_ids, np.int64)
    anc = np.asarray(is_anchor, bool)
    val = np.asarray(valid, bool)
    rt = np.asarray(r_true, np.float64)
    rh = np.asarray(r_hat, np.float64)
    a_ok = anc & val
    cal_mode = None
    if spec.method == "wmrl" and spec.debias:  # as Trainer._calibrate
        cal_mode = state.calibrator.mode
        r_cal = state.calibrator.transform(rh, step=step)
        state.calibrator.update(rh[a_ok], rt[a_ok], step)
    else:
        r_cal = rh.copy()
        if spec.method != "grpo":
            cal_mode = "identity"
    if spec.method == "wmrl":
        state.window["true"].extend(rt[a_ok].tolist())
        state.window["cal"].extend(r_cal[a_ok].tolist())
        state.window["group"].extend([int(step * 100000 + g) for g in gid[a_ok]])
        for k in state.window:
            state.window[k] = state.window[k][-s.calibrator_window:]
    used, adv = stream_advantages(method=spec.method, group_ids=gid, is_anchor=anc, valid=val, r_true=rt,
                                  r_wm_cal=r_cal, normalize_std=s.normalize_std, adv_eps=s.adv_eps)
    fr = fusion_for_step(
        method=spec.method, group_ids=gid, is_anchor=anc, valid=val, r_true=rt, r_wm_cal=r_cal, reward_used=used,
        advantages=adv, denoise=spec.denoise, fusion=spec.fusion, window_true=np.asarray(state.window["true"]),
        window_cal=np.asarray(state.window["cal"]), window_groups=np.asarray(state.window["group"]),
        bias_aware=s.bias_aware, alpha_floor=s.alpha_floor, alpha_ceiling=s.alpha_ceiling,
        min_pairs=s.fusion_min_pairs, normalize_std=s.normalize_std, adv_eps=s.adv_eps)
    stats = dict(fr.stats)
    if spec.method == "grpo":
        stats["alpha"] = 1.0
    elif spec.method == "wm":
        stats["alpha"] = 0.0
    stats["calibrator_mode"] = cal_mode
    return RecipeOut(fr.reward_used, fr.advantages, fr.weights, r_cal, stats)

"""Online debiasing of world-model rewards by isotonic regression on anchors (the WMRL paper; docs/architecture.md).

The world model predicts r_hat; anchors give pairs (r_hat_i, r_i). We fit a non-decreasing map
f_hat equal to scikit-learn's ``IsotonicRegression(increasing=True, out_of_bounds="clip",
y_min=lo, y_max=hi)`` (computed with its PAV solver ``sklearn.isotonic.isotonic_regression``, see
:func:`_isotonic_fit`) on the anchors of a sliding window (and/or with recency weights), and apply
r_tilde = f_hat(r_hat) to world-model rewards before advantages are computed.

"Only anchors of earlier steps": the trainer calls, at step t::

    r_tilde = calibrator.transform(r_hat_all_groups, step=t)     # map fitted on steps < t
    calibrator.update(r_hat_anchor, r_anchor, step=t)              # then learn from step t's anchors

``transform(..., step=t)`` raises if the current fit contains anchors from step >= t (leakage).

Applied map. Isotonic regression is a step function: distinct predictions inside one flat block
become ties, which carry no ranking information. By default (``tie_break=0``) they stay ties: the
project's simulation (docs/simulation.md, ``wmrl`` against ``wmrl_flat``) found that a strict
tie-break keeps the world model's possibly wrong order inside a block and std-normalised advantages
blow it back up to full size (WMRL lost 0.127-0.240 to GRPO with exploitable errors B >= 0.5,
against 0.031-0.081 without the tie-break; equal within 0.004 on monotone errors). Optionally the
applied map is made strictly increasing

    f(x) = (1 - delta) * iso(x) + delta * g(x),   g(x) = lo + (hi - lo) * sigmoid((x - c) / s)

with c = (lo + hi) / 2, s = (hi - lo) / 4 and ``tie_break=delta`` (off by default): a convex
combination of a non-decreasing and a strictly increasing map into [lo, hi], so it stays inside the
reward bounds and distinct inputs stay distinct (for inputs that differ by more than about 1e-10,
the float64 resolution of delta * g). Its deviation from the isotonic fit is at most delta*(hi-lo).

Fallback below ``min_anchors`` pairs: ``"identity"`` (clip r_hat to the bounds, then the same
tie-break) or ``"affine"`` (least squares r = a + b * r_hat with b > 0; identity if the fit has
b <= 0 or fewer than two distinct r_hat values).
"""
from __future__ import annotations

import math
from typing import Any, Literal, cast

import numpy as np
import sklearn
from sklearn.isotonic import isotonic_regression

Fallback = Literal["identity", "affine"]


def _as_1d(name: str, x: Any) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 1:
        a = a.reshape(-1) if a.ndim == 0 else a
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    return a


def _isotonic_fit(
    x: np.ndarray, y: np.ndarray, w: np.ndarray | None, lo: float, hi: float
) -> tuple[np.ndarray, np.ndarray]:
    """Thresholds (x_unique, fitted y) of ``IsotonicRegression(increasing=True, y_min=lo, y_max=hi)``.

    Same steps as scikit-learn's ``IsotonicRegression.fit``: sort by x, merge duplicate x into their
    weighted mean (weights summed), then the pool-adjacent-violators solver
    ``sklearn.isotonic.isotonic_regression``. Predicting by ``np.interp`` on these thresholds equals
    ``IsotonicRegression(..., out_of_bounds="clip").predict`` (tested); calling the solver directly
    avoids about 1 ms of input re-validation per fit, which matters when the simulation refits
    hundreds of calibrators every step.
    """
    w = np.ones_like(x) if w is None else np.asarray(w, dtype=np.float64)
    xu, inv = np.unique(x, return_inverse=True)
    wu = np.bincount(inv, weights=w, minlength=xu.size)
    yu = np.bincount(inv, weights=w * y, minlength=xu.size) / wu
    with sklearn.config_context(assume_finite=True, skip_parameter_validation=True):  # validated by the caller
        yf = isotonic_regression(yu, sample_weight=wu, y_min=lo, y_max=hi, increasing=True)
    return xu, np.asarray(yf, dtype=np.float64)


class IsotonicCalibrator:
    """Online monotone calibrator from world-model score to true score.

    Args:
        window: keep only the most recent ``window`` anchor pairs (None = all).
        recency_halflife: if set, a pair from step s gets weight 0.5 ** ((t_last - s) / halflife),
            t_last = the step of the latest update (steps). None = equal weights.
        min_anchors: below this many pairs in the window, use ``fallback``.
        fallback: ``"identity"`` or ``"affine"``.
        bounds: (lo, hi) reward bounds; outputs always lie in [lo, hi].
        tie_break: delta of the strictly increasing blend (module docstring), in [0, 1).

    Raises:
        ValueError: bad configuration (message says which argument).
    """

    def __init__(
        self,
        window: int | None = 512,
        recency_halflife: float | None = None,
        min_anchors: int = 16,
        fallback: Fallback = "identity",
        bounds: tuple[float, float] = (0.0, 1.0),
        tie_break: float = 0.0,
    ) -> None:
        if window is not None and (int(window) != window or window < 1):
            raise ValueError(f"window must be a positive number of anchor pairs or None, got {window!r}")
        if recency_halflife is not None and not recency_halflife > 0:
            raise ValueError(f"recency_halflife must be > 0 steps or None, got {recency_halflife!r}")
        if int(min_anchors) != min_anchors or min_anchors < 1:
            raise ValueError(f"min_anchors must be a positive integer, got {min_anchors!r}")
        if fallback not in ("identity", "affine"):
            raise ValueError(f"fallback must be 'identity' or 'affine', got {fallback!r}")
        lo, hi = float(bounds[0]), float(bounds[1])
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"bounds must be finite with lo < hi, got {bounds!r}")
        if not (0.0 <= tie_break < 1.0):
            raise ValueError(f"tie_break must be in [0, 1), got {tie_break}")
        self.window = None if window is None else int(window)
        self.recency_halflife = None if recency_halflife is None else float(recency_halflife)
        self.min_anchors = int(min_anchors)
        self.fallback: Fallback = fallback
        self.bounds = (lo, hi)
        self.tie_break = float(tie_break)
        self._wm = np.zeros(0)
        self._true = np.zeros(0)
        self._step = np.zeros(0, dtype=np.int64)
        self._last_step: int | None = None
        self._iso: bool | None = None
        self._xt = np.zeros(0)
        self._yt = np.zeros(0)
        self._affine: tuple[float, float] | None = None
        self.mode = "identity"

    # ------------------------------------------------------------------------------------------
    @property
    def n_anchors(self) -> int:
        """Number of anchor pairs in the current window."""
        return int(self._wm.size)

    @property
    def fitted_through_step(self) -> int | None:
        """The latest step whose anchors are in the fit (None before any update)."""
        return self._last_step

    def update(self, wm_scores: np.ndarray, true_scores: np.ndarray, step: int) -> None:
        """Add the anchors of ``step`` and refit.

        Args:
            wm_scores: [N] world-model predictions r_hat of the anchor samples (raw, uncalibrated).
            true_scores: [N] their true rewards r (infrastructure failures already removed).
            step: training step of these anchors; must be >= the previous update's step.

        Raises:
            ValueError: length mismatch, non-finite values, or step going backwards.
        """
        wm = _as_1d("wm_scores", wm_scores)
        tr = _as_1d("true_scores", true_scores)
        if wm.shape != tr.shape:
            raise ValueError(f"wm_scores and true_scores must have the same length, got {wm.size} and {tr.size}")
        if not (np.all(np.isfinite(wm)) and np.all(np.isfinite(tr))):
            raise ValueError("wm_scores/true_scores contain NaN/inf; drop infrastructure failures before update")
        if self._last_step is not None and step < self._last_step:
            raise ValueError(f"update step {step} is earlier than the last update step {self._last_step}")
        self._last_step = int(step)
        if wm.size:
            self._wm = np.concatenate([self._wm, wm])
            self._true = np.concatenate([self._true, tr])
            self._step = np.concatenate([self._step, np.full(wm.size, int(step), dtype=np.int64)])
            if self.window is not None and self._wm.size > self.window:
                self._wm = self._wm[-self.window :]
                self._true = self._true[-self.window :]
                self._step = self._step[-self.window :]
        self._refit()

    def _weights(self) -> np.ndarray | None:
        if self.recency_halflife is None or self._last_step is None:
            return None
        age = (self._last_step - self._step).astype(np.float64)
        return np.power(0.5, age / self.recency_halflife)

    def _refit(self) -> None:
        lo, hi = self.bounds
        self._iso = None
        self._affine = None
        if self.n_anchors >= self.min_anchors and np.unique(self._wm).size >= 2:
            self._xt, self._yt = _isotonic_fit(self._wm, np.clip(self._true, lo, hi), self._weights(), lo, hi)
            self._iso = True
            self.mode = "isotonic"
            return
        self.mode = "identity"
        if self.fallback == "affine" and self.n_anchors >= 2 and np.unique(self._wm).size >= 2:
            w = self._weights()
            w = np.ones_like(self._wm) if w is None else w
            xm = np.average(self._wm, weights=w)
            ym = np.average(self._true, weights=w)
            sxx = np.average((self._wm - xm) ** 2, weights=w)
            sxy = np.average((self._wm - xm) * (self._true - ym), weights=w)
            b = sxy / sxx if sxx > 0 else 0.0
            if b > 0:
                self._affine = (float(ym - b * xm), float(b))
                self.mode = "affine"

    def _base(self, x: np.ndarray) -> np.ndarray:
        lo, hi = self.bounds
        if self._iso is not None:
            return cast(np.ndarray, np.interp(x, self._xt, self._yt))
        if self._affine is not None:
            a, b = self._affine
            return np.clip(a + b * x, lo, hi)
        return cast(np.ndarray, np.clip(x, lo, hi))

    def transform(self, wm_scores: np.ndarray, step: int | None = None) -> np.ndarray:
        """Calibrated rewards r_tilde = f(r_hat), strictly increasing in r_hat, inside the bounds.

        Args:
            wm_scores: [N] raw world-model predictions.
            step: the current training step; if given, raises when the fit already contains
                anchors of this step or later (they must not calibrate their own step).

        Returns:
            [N] float64 calibrated rewards in [lo, hi].

        Raises:
            ValueError: non-finite inputs, or leakage (see ``step``).
        """
        x = _as_1d("wm_scores", wm_scores)
        if not np.all(np.isfinite(x)):
            raise ValueError("wm_scores contain NaN/inf")
        if step is not None and self._last_step is not None and self._last_step >= step and self.n_anchors:
            raise ValueError(
                f"calibrator already holds anchors of step {self._last_step} >= {step}: call transform "
                "for a step before update with that step's anchors"
            )
        lo, hi = self.bounds
        base = self._base(x)
        if self.tie_break == 0.0:
            return base
        c, s = 0.5 * (lo + hi), 0.25 * (hi - lo)
        g = lo + (hi - lo) / (1.0 + np.exp(-(x - c) / s))
        out = (1.0 - self.tie_break) * base + self.tie_break * g
        return np.clip(out, lo, hi)

    @property
    def n_blocks(self) -> int:
        """Number of distinct levels of the fitted isotonic step function (0 when not isotonic)."""
        if self._iso is None:
            return 0
        return int(np.unique(np.round(self._yt, 12)).size)

    def diagnostics(self, wm_scores: np.ndarray | None = None,
                    true_scores: np.ndarray | None = None) -> dict[str, float]:
        """Calibration quality on held-out anchors (e.g. this step's anchors, before ``update``).

        Args:
            wm_scores, true_scores: [N] held-out pairs; if omitted only the fit's state is reported.

        Returns:
            dict with ``mode`` (0 identity, 1 affine, 2 isotonic), ``n_anchors``, ``n_blocks``,
            ``fitted_through_step`` (-1 if none) and, with held-out pairs, ``n_heldout``,
            ``bias_before`` = mean(r_hat - r), ``mae_before`` = mean|r_hat - r|, ``bias_after`` and
            ``mae_after`` (same with f(r_hat)).
        """
        out: dict[str, float] = {
            "mode": float({"identity": 0, "affine": 1, "isotonic": 2}[self.mode]),
            "n_anchors": float(self.n_anchors),
            "n_blocks": float(self.n_blocks),
            "fitted_through_step": float(-1 if self._last_step is None else self._last_step),
        }
        if wm_scores is not None and true_scores is not None:
            wm = _as_1d("wm_scores", wm_scores)
            tr = _as_1d("true_scores", true_scores)
            if wm.shape != tr.shape:
                raise ValueError("wm_scores and true_scores must have the same length")
            out["n_heldout"] = float(wm.size)
            if wm.size:
                cal = self.transform(wm)
                out["bias_before"] = float(np.mean(wm - tr))
                out["mae_before"] = float(np.mean(np.abs(wm - tr)))
                out["bias_after"] = float(np.mean(cal - tr))
                out["mae_after"] = float(np.mean(np.abs(cal - tr)))
        return out

    # ------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state: configuration and the anchor window (the fit is recomputed)."""
        return {
            "window": self.window,
            "recency_halflife": self.recency_halflife,
            "min_anchors": self.min_anchors,
            "fallback": self.fallback,
            "bounds": list(self.bounds),
            "tie_break": self.tie_break,
            "wm": self._wm.tolist(),
            "true": self._true.tolist(),
            "step": self._step.tolist(),
            "last_step": self._last_step,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict` and refit (the same map as before saving)."""
        self.__init__(  # type: ignore[misc]
            window=state["window"],
            recency_halflife=state["recency_halflife"],
            min_anchors=state["min_anchors"],
            fallback=state["fallback"],
            bounds=tuple(state["bounds"]),
            tie_break=state["tie_break"],
        )
        self._wm = np.asarray(state["wm"], dtype=np.float64)
        self._true = np.asarray(state["true"], dtype=np.float64)
        self._step = np.asarray(state["step"], dtype=np.int64)
        self._last_step = state["last_step"]
        self._refit()

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> IsotonicCalibrator:
        """A new calibrator restored from :meth:`state_dict`."""
        cal = cls()
        cal.load_state_dict(state)
        return cal

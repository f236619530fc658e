"""The anchor window: the recent out-of-sample anchor pairs the fusion estimate is computed on
(:mod:`wmrl.core.recipe` re-exports it)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np


class AnchorWindow:
    """The recent out-of-sample anchor pairs on which V_A, sigma_xi^2, B^2 and lambda are estimated.

    Each pair is (true reward r, calibrated prediction r_tilde, optionally a calibrated repeat query),
    with the step and group it came from; pairs of one (step, group) form one cluster of the
    within-group variances (:func:`wmrl.core.fusion.within_group_variance`).

    Args:
        max_pairs: keep at most this many most recent pairs (None: no limit).
        max_steps: keep the pairs of at most this many most recent steps that had anchors (None: no limit).
    """

    def __init__(self, max_pairs: int | None = None, max_steps: int | None = None) -> None:
        for name, v in (("max_pairs", max_pairs), ("max_steps", max_steps)):
            if v is not None and (int(v) != v or v < 1):
                raise ValueError(f"{name} must be a positive integer or None, got {v!r}")
        self.max_pairs, self.max_steps = max_pairs, max_steps
        self.true = np.zeros(0)
        self.calibrated = np.zeros(0)
        self.repeat = np.zeros(0)
        self.steps = np.zeros(0, dtype=np.int64)
        self.groups = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        return int(self.true.size)

    def add(self, step: int | np.ndarray, groups: np.ndarray, true: np.ndarray, calibrated: np.ndarray,
            repeat: np.ndarray | None = None) -> None:
        """Append anchor pairs ([N] each; ``repeat`` NaN when absent), then trim. ``step`` is the step the pairs'
        groups were routed at: one int, or [N] int64 (late pairs of several steps, ``Recipe.learn_late``)."""
        n = int(np.asarray(true).size)
        step_arr = np.broadcast_to(np.asarray(step, dtype=np.int64), (n,))
        rep = np.full(n, np.nan) if repeat is None else np.asarray(repeat, dtype=np.float64)
        self.true = np.concatenate([self.true, np.asarray(true, dtype=np.float64)])
        self.calibrated = np.concatenate([self.calibrated, np.asarray(calibrated, dtype=np.float64)])
        self.repeat = np.concatenate([self.repeat, rep])
        self.steps = np.concatenate([self.steps, step_arr])
        self.groups = np.concatenate([self.groups, np.asarray(groups, dtype=np.int64)])
        keep = np.ones(len(self), dtype=bool)
        if self.max_steps is not None:
            recent = np.unique(self.steps)[-self.max_steps:]
            keep &= np.isin(self.steps, recent)
        if self.max_pairs is not None:
            keep &= np.arange(len(self)) >= len(self) - self.max_pairs
        for k in ("true", "calibrated", "repeat", "steps", "groups"):
            setattr(self, k, getattr(self, k)[keep])

    def clusters(self) -> np.ndarray:
        """[N] int64 cluster id of each pair, one per (step, group), in the pairs' lexicographic order."""
        if not len(self):
            return np.zeros(0, dtype=np.int64)
        _, inv = np.unique(np.stack([self.steps, self.groups], axis=1), axis=0, return_inverse=True)
        return inv.reshape(-1).astype(np.int64)

    def noise_var(self) -> float:
        """Repeat-query noise variance 0.5 * mean((r_tilde - r_tilde')^2) over pairs with a repeat (0 if none)."""
        ok = np.isfinite(self.repeat)
        return 0.5 * float(np.mean((self.calibrated[ok] - self.repeat[ok]) ** 2)) if ok.any() else 0.0

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state (lists)."""
        return {"true": self.true.tolist(), "calibrated": self.calibrated.tolist(),
                "repeat": [None if not math.isfinite(x) else x for x in self.repeat.tolist()],
                "steps": self.steps.tolist(), "groups": self.groups.tolist()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output. Checkpoints written before this class (keys ``true``,
        ``cal``, ``group`` with group = step * 100000 + group) are read too.

        Raises:
            ValueError: the state has neither layout.
        """
        if "calibrated" in state:
            cal, steps, groups = state["calibrated"], state["steps"], state["groups"]
            rep = [np.nan if x is None else x for x in state.get("repeat", [None] * len(cal))]
        elif "cal" in state:
            cal, code = state["cal"], np.asarray(state["group"], dtype=np.int64)
            steps, groups, rep = code // 100000, code % 100000, [np.nan] * len(cal)
        else:
            raise ValueError(f"not an anchor window state (keys {sorted(state)})")
        self.true = np.asarray(state["true"], dtype=np.float64)
        self.calibrated = np.asarray(cal, dtype=np.float64)
        self.repeat = np.asarray(rep, dtype=np.float64)
        self.steps = np.asarray(steps, dtype=np.int64)
        self.groups = np.asarray(groups, dtype=np.int64)

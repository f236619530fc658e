"""The residual of executed neighbours: a program-conditioned correction of the regression world model.

A linear head on backbone features orders a task's programs barely better than chance once the policy writes
programs near each other; an executed program tells more about its close neighbours than the head does. After
each fit the regression world model (``world_model.residual_neighbours: K``) keeps every training row's
standardised features ``z_j``, its in-sample residual ``e_j = y_j - head(z_j)`` and its prompt, and adds to the
head's prediction for a trajectory ``q`` the kernel-weighted residual of the K training rows of the same prompt
nearest in feature space:

    correction(q) = sum_j w_j e_j / (1 + sum_j w_j),    w_j = exp(-4 ||z_q - z_j|| / h_q)

with ``h_q`` the median distance from ``q`` to the rows of its prompt (the scale of the task's programs), and the
``1`` in the denominator a shrinkage toward the head (one executed exact repeat moves the prediction half-way to its
measured reward). With ``own_program=False`` the rows of the very program (same prompt and completion) are left
out, so that no prediction uses the program's own execution: the correction is then a pure generalisation from
other programs, as where programs never repeat (the trainer sets it for recipes without ``recall``).

This is the two-stage, covariate-conditional calibration of Causal Judge Evaluation (an index over the score
plus covariates) in its simplest nonparametric form, and a recall of executed programs that generalises to their
neighbours; the replay behind the kernel is ``studies/benchmark/reorder_probe.py`` (docs/models.md, "Residual of
executed neighbours").
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from wmrl.program_text import text_sha256

__all__ = ["ResidualNeighbours"]


def _digests(texts: Sequence[str]) -> np.ndarray:
    """[N, 32] uint8 SHA-256 digests of N texts (:func:`wmrl.program_text.text_sha256`)."""
    return np.frombuffer(b"".join(bytes.fromhex(text_sha256(t)) for t in texts), dtype=np.uint8).reshape(-1, 32).copy()


class ResidualNeighbours:
    """The executed rows a regression world model was fitted on, and the correction they give (module docstring).

    Args:
        k: neighbours per prediction (>= 1).
        own_program: whether rows of the very program (same prompt and completion) count among its neighbours.

    Raises:
        ValueError: ``k < 1``.
    """

    def __init__(self, k: int, own_program: bool = True):
        if k < 1:
            raise ValueError(f"residual neighbours must be >= 1, got {k}")
        self.k = int(k)
        self.own_program = bool(own_program)
        self.z = np.zeros((0, 0), dtype=np.float32)
        self.residual = np.zeros(0, dtype=np.float64)
        self.keys = np.zeros((0, 32), dtype=np.uint8)
        self.programs = np.zeros((0, 32), dtype=np.uint8)

    def __len__(self) -> int:
        return len(self.residual)

    def fit(self, z: np.ndarray, residual: np.ndarray, prompts: Sequence[str], completions: Sequence[str]) -> None:
        """Keep N training rows: ``z`` [N, D] standardised features, ``residual`` [N] (reward units, y - head),
        their N prompts and completions. Replaces what was kept.

        Raises:
            ValueError: the four differ in length.
        """
        if not (len(z) == len(residual) == len(prompts) == len(completions)):
            raise ValueError(f"{len(z)} feature rows, {len(residual)} residuals, {len(prompts)} prompts and "
                             f"{len(completions)} completions")
        self.z = np.asarray(z, dtype=np.float32)
        self.residual = np.asarray(residual, dtype=np.float64)
        self.keys, self.programs = _digests(prompts), _digests(completions)

    def correction(self, z: np.ndarray, prompts: Sequence[str], completions: Sequence[str]) -> np.ndarray:
        """[M] float64 corrections (reward units) for M trajectories: ``z`` [M, D] standardised features, their
        prompts and completions; 0 where no kept row shares the prompt (or, without ``own_program``, none but the
        program's own rows).

        Raises:
            ValueError: the three differ in length, or ``z`` has another width than the kept rows.
        """
        if not (len(z) == len(prompts) == len(completions)):
            raise ValueError(f"{len(z)} feature rows but {len(prompts)} prompts and {len(completions)} completions")
        out = np.zeros(len(prompts), dtype=np.float64)
        if not len(self):
            return out
        if z.shape[1] != self.z.shape[1]:
            raise ValueError(f"features of width {z.shape[1]}, but the kept rows have {self.z.shape[1]}")
        rows_of: dict[bytes, np.ndarray] = {}
        keys, programs = _digests(prompts), _digests(completions)
        for i in range(len(prompts)):
            key = keys[i].tobytes()
            if key not in rows_of:
                rows_of[key] = np.flatnonzero((self.keys == keys[i]).all(1))
            rows = rows_of[key]
            if not self.own_program:
                rows = rows[~(self.programs[rows] == programs[i]).all(1)]
            if not len(rows):
                continue
            d = np.linalg.norm(self.z[rows] - np.asarray(z[i], dtype=np.float32), axis=1).astype(np.float64)
            h = float(np.median(d)) or 1.0
            near = np.argsort(d, kind="stable")[:self.k]
            w = np.exp(-4.0 * d[near] / h)
            out[i] = float((w * self.residual[rows[near]]).sum() / (1.0 + w.sum()))
        return out

    def tensors(self) -> dict[str, np.ndarray]:
        """The kept rows as arrays to save: ``z`` [N, D] float32, ``residual`` [N] float64, ``prompt`` and
        ``program`` [N, 32] uint8 digests."""
        return {"z": self.z, "residual": self.residual, "prompt": self.keys, "program": self.programs}

    def load(self, arrays: dict[str, np.ndarray]) -> None:
        """Restore what :meth:`tensors` returned.

        Raises:
            ValueError: a key is missing or the arrays disagree in length.
        """
        missing = {"z", "residual", "prompt", "program"} - set(arrays)
        if missing:
            raise ValueError(f"saved residual neighbours lack {sorted(missing)}")
        z, r, k, g = (np.asarray(arrays[n]) for n in ("z", "residual", "prompt", "program"))
        if not (len(z) == len(r) == len(k) == len(g)) or (len(k) and (k.shape[1] != 32 or g.shape[1] != 32)):
            raise ValueError(f"saved residual neighbours disagree: {z.shape}, {r.shape}, {k.shape}, {g.shape}")
        self.z, self.residual = z.astype(np.float32), r.astype(np.float64)
        self.keys, self.programs = k.astype(np.uint8), g.astype(np.uint8)

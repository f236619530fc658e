"""Program-choice features for the regression world model: what a program chose, per task.

A pooled hidden state of the backbone sees a program as one vector, and a linear head on it (fitted on a few
hundred executions) often cannot tell apart two programs that differ in one choice (``Lasso(alpha=0.001)``
against ``GradientBoostingRegressor(n_estimators=300)``). These features name the choices directly: every
identifier of the program (``GradientBoostingRegressor``, ``StandardScaler``) and every ``name=value``
argument (``n_estimators=300``), each once globally and once joined to the task (the first line of the
prompt, which names the task in every scaffold), so that a linear head can learn that a choice is good on
one task and poor on another. They are hashed into ``dim`` columns with scikit-learn's
:class:`~sklearn.feature_extraction.FeatureHasher` (MurmurHash3, the same in every process), with value 1
per distinct token (presence, not counts).

The regression world model appends them to its backbone features when ``world_model.program_features`` is
``dim > 0``; they are not standardised (they are 0/1 and mostly 0), so a token first seen in an anchor after
the first fit enters the ridge fit at the same scale as the others.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

__all__ = ["program_tokens", "program_features", "task_key"]

_TOKEN = re.compile(r"[A-Za-z_][A-Za-z_0-9]*\s*=\s*[^,()\s]+|[A-Za-z_][A-Za-z_0-9]*")


def program_tokens(completion: str) -> list[str]:
    """The distinct choice tokens of a program, in order of first appearance: ``name=value`` arguments
    (spaces around ``=`` removed) and identifiers.

    >>> program_tokens("make_pipeline(StandardScaler(), Ridge(alpha = 1.0))")
    ['make_pipeline', 'StandardScaler', 'Ridge', 'alpha=1.0']
    """
    seen: dict[str, None] = {}
    for m in _TOKEN.finditer(completion):
        seen.setdefault(re.sub(r"\s+", "", m.group(0)), None)
    return list(seen)


def task_key(prompt: str) -> str:
    """The task part of a prompt: its first non-empty line (``""`` for an empty prompt)."""
    for line in prompt.splitlines():
        if line.strip():
            return line.strip()
    return ""


def program_features(prompts: Sequence[str], completions: Sequence[str], dim: int) -> np.ndarray:
    """[N, dim] float32 hashed presence features of N (prompt, completion) pairs (module docstring).

    Raises:
        ValueError: ``dim < 1`` or the two sequences differ in length.
    """
    if dim < 1:
        raise ValueError(f"program feature dimension must be >= 1, got {dim}")
    if len(prompts) != len(completions):
        raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
    from sklearn.feature_extraction import FeatureHasher  # noqa: PLC0415 - heavy (sklearn)

    rows = []
    for p, c in zip(prompts, completions):
        key = task_key(p)
        toks = program_tokens(c)
        rows.append([f"g|{t}" for t in toks] + [f"t|{key}|{t}" for t in toks])
    if not rows:
        return np.zeros((0, dim), dtype=np.float32)
    X = FeatureHasher(n_features=dim, input_type="string", alternate_sign=False).transform(rows)
    X.data[:] = 1.0  # presence: a hash collision between two tokens of one row still counts once
    return X.toarray().astype(np.float32)

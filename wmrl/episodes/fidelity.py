"""How faithful the world model's feedback is, measured on anchors (docs/multiturn.md).

Every executed anchor turn has two observations of the same program: the real one (the sandbox's run on the
validation view) and the one the world model would have shown
(:func:`wmrl.episodes.observation.observation_from_prediction` from the calibrated prediction).
:func:`feedback_fidelity` compares them:

- ``validation_rel_error`` and ``validation_rel_error_median``: mean and median |v_wm - v| / max(|v|, 1e-9)
  over turns where both ran without error (the scores are in each task's metric units, so the error is
  relative; the median, because a metric near 0 such as an r2 of 0.02 makes one turn's relative error huge);
- ``status_accuracy``: fraction of turns where both agree on error vs no error;
- ``pairwise_agreement``: over pairs of turns of one episode whose real validation scores differ, the fraction
  where the world model's scores order the two revisions the same way (the quantity a revising agent needs).
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from itertools import combinations
from typing import Any


def _val(obs: dict[str, Any] | None) -> float | None:
    if not obs or obs.get("status") != "ok":
        return None
    v = obs.get("validation_score")
    return None if v is None or not math.isfinite(float(v)) else float(v)


def feedback_fidelity(turns: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Fidelity of the world model's observations on executed anchor turns (module docstring).

    Args:
        turns: records with ``episode`` (an id unique within the sequence, e.g. ``(step, episode)``), ``turn``,
            ``executed`` (bool), ``observation`` and ``observation_wm`` (:meth:`Observation.to_dict` dicts, the latter
            None when the world model did not score the turn). Other records are ignored.

    Returns:
        ``n_turns`` (turns compared), ``validation_rel_error``, ``validation_rel_error_median``,
        ``status_accuracy``, ``pairwise_agreement`` and ``n_pairs_pairwise``; a figure over no turns is None.
    """
    rel, acc = [], []
    by_ep: dict[Any, list[tuple[int, float, float]]] = {}
    n = 0
    for t in turns:
        real, wm = t.get("observation"), t.get("observation_wm")
        if not t.get("executed") or not real or not wm:
            continue
        n += 1
        acc.append((real.get("status") == "ok") == (wm.get("status") == "ok"))
        v, p = _val(real), _val(wm)
        if v is not None and p is not None:
            rel.append(abs(p - v) / max(abs(v), 1e-9))
            by_ep.setdefault(t["episode"], []).append((int(t["turn"]), v, p))
    agree = []
    for rows in by_ep.values():
        for (_, v1, p1), (_, v2, p2) in combinations(sorted(rows), 2):
            if v1 != v2:
                agree.append((v2 > v1) == (p2 > p1) if p1 != p2 else False)
    def mean(x: list) -> float | None:
        return float(statistics.fmean(x)) if x else None

    return {"n_turns": n, "validation_rel_error": mean(rel),
            "validation_rel_error_median": float(statistics.median(rel)) if rel else None,
            "status_accuracy": mean(acc), "pairwise_agreement": mean(agree), "n_pairs_pairwise": len(agree)}

"""Favourite verification (``wmrl.routing.verify_favourites``): execute each world-model group's favourite before the
recipe.

Why. GRPO standardises advantages inside a group, so any increasing map of the world model's score (the isotonic
debiasing) keeps the world model's order inside every world-model group, and a policy that follows those groups
ends at the world model's favourite program of each task, however wrong the world model is about it. Anchor
groups see the truth only at rate rho. Verification executes, in every world-model group, the one program the
world model scores highest, and trains that program on its true reward (as a recalled execution is trained):
the policy can then no longer settle on a program the world model over-rates, because the program it settles
on is the one executed. The other samples of the group keep their calibrated world-model rewards.

Cost. At most one execution per world-model group and step; none when the favourite was executed before in the
run (the warm-up corpus, an anchor, an earlier verification), since its measured reward is recalled for free.
Verified executions are training compute (ledger kind ``verify``) and go into the execution log (trajectory
stream ``verify``), so later steps recall them and a world-model refit learns from them. They are a selected
sample (the world model's favourites), so they do not feed the calibrator or the fusion's variance estimates.

In the simulation of a world model that misorders programs (docs/simulation.md) verification is what carries a
recipe from the world model's favourites to the true optimum.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from wmrl.execution.pool import result_or_infra


@dataclass(frozen=True)
class Verified:
    """The outcome of one step's favourite verification.

    Attributes:
        reward: [B] float64, the true reward of every sample whose program is a verified favourite of its
            world-model group (every sample of the group that wrote that same program), NaN elsewhere.
        favourites: [n] int64 sample indices of the favourites of the step's world-model groups.
        executed: [m] int64 the favourites executed at this step (the others were recalled or failed to run).
        results: the m :class:`~wmrl.execution.types.ExecutionResult`, in the order of ``executed``.
    """

    reward: np.ndarray
    favourites: np.ndarray
    executed: np.ndarray
    results: list[Any]


def favourites(gid: np.ndarray, reward_wm: np.ndarray, wm_groups: np.ndarray) -> np.ndarray:
    """The sample the world model scores highest in each of the groups ``wm_groups`` (ties: the first).

    Args:
        gid: [B] int64 group of each sample. reward_wm: [B] float64 world-model scores (finite).
        wm_groups: [k] int64 the groups to verify (the step's world-model groups).

    Returns:
        [k'] int64 sample indices, one per group of ``wm_groups`` that has samples, in the order of ``wm_groups``.
    """
    out = []
    for g in np.asarray(wm_groups, dtype=np.int64):
        idx = np.flatnonzero(gid == g)
        if idx.size:
            out.append(int(idx[int(np.argmax(reward_wm[idx]))]))
    return np.asarray(out, dtype=np.int64)


def verify_favourites(gid: np.ndarray, reward_wm: np.ndarray, wm_groups: np.ndarray, task_ids: Sequence[str],
                      completions: Sequence[str], recalled: np.ndarray | None,
                      requests: Callable[[np.ndarray], list[tuple[int, Any]]], executor: Any) -> Verified:
    """Execute the favourite of every world-model group that the run has not executed before (module docstring).

    Args:
        gid: [B] int64 group ids. reward_wm: [B] float64 the world model's scores. wm_groups: [k] int64 the
            groups that are not anchors this step.
        task_ids, completions: the B samples' task ids and completions (a program is a (task, completion) pair).
        recalled: [B] float64 measured rewards of programs executed before this step (NaN: none), or None.
        requests: ``idx -> [(sample index, ExecutionRequest)]`` (the environment's anchor requests); their
            trajectories are relabelled stream ``verify`` and their request ids prefixed ``v``.
        executor: the run's executor (``submit(request) -> Future``); the favourites run in parallel and are
            waited for.

    Returns:
        :class:`Verified`. A favourite whose execution failed for infrastructure reasons, or gave no reward, is
        left at NaN (it trains on its world-model reward, as an unverified sample).
    """
    B = gid.shape[0]
    reward = np.full(B, np.nan)
    fav = favourites(gid, reward_wm, wm_groups)
    known = np.isfinite(recalled[fav]) if recalled is not None else np.zeros(fav.size, dtype=bool)
    todo: dict[tuple[str, str], int] = {}
    for i in fav[~known]:
        todo.setdefault((task_ids[i], completions[i]), int(i))  # one execution per distinct program
    executed = np.asarray(sorted(todo.values()), dtype=np.int64)
    futures = []
    for i, req in requests(executed):
        req = replace(req, request_id=f"v{req.request_id}",
                      trajectory=None if req.trajectory is None else replace(req.trajectory, stream="verify"))
        futures.append((i, executor.submit(req), req))
    results = [result_or_infra(f, req) for _, f, req in futures]
    measured: dict[tuple[str, str], float] = {}
    for (i, _, _), res in zip(futures, results, strict=True):
        if getattr(res.status, "value", res.status) != "infra_error" and res.reward is not None:
            measured[(task_ids[i], completions[i])] = float(res.reward)
    for i in fav:
        key = (task_ids[i], completions[i])
        r = float(recalled[i]) if recalled is not None and np.isfinite(recalled[i]) else measured.get(key)
        if r is None:
            continue
        same = (gid == gid[i]) & np.array([c == completions[i] for c in completions])
        reward[same] = r
    return Verified(reward, fav, executed, results)

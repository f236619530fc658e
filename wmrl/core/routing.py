"""Anchor routing: which groups of a step are executed for real (docs/architecture.md, "Anchor stream").

All routers share one interface, :class:`Router`::

    route(group_task_ids: Sequence[str], step: int) -> np.ndarray[bool] of shape [M]   (True = anchor group)

How many anchors (all routers): with target fraction rho and M groups at this step, the router
keeps a carry c (the fractional anchors it still owes) and takes ``k = floor(rho * M + c)``
anchors, carrying ``c' = rho * M + c - k``. Hence the total number of anchors after any number of
steps differs from rho * (total groups) by less than 1: the long-run fraction is exactly rho.

Minimum frequency: if ``min_every = K`` and no group was an anchor in the previous K-1 steps, the
router forces at least one anchor at this step (and records it as a debt, c' = c - 1, so the
long-run fraction stays exact whenever rho * M * K >= 1; if rho is so small that one anchor every
K steps exceeds it, ``min_every`` wins and the debt is floored at -1 so it cannot grow forever).
``fraction=1.0`` anchors every group (plain GRPO); ``fraction=0.0`` anchors none and ignores
``min_every`` (pure world model).

Which groups: :class:`FractionRouter` picks uniformly at random (seeded);
:class:`StratifiedRouter` keeps one carry per task so that every task gets anchored at rate rho.
All are deterministic given the seed and the call sequence, and their ``state_dict`` (JSON-
serialisable) restores the exact same future choices.
"""
from __future__ import annotations

import abc
import math
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from wmrl.core.registry import Registry


def _check_fraction(fraction: float, min_every: int | None) -> None:
    if not (0.0 <= fraction <= 1.0) or math.isnan(fraction):
        raise ValueError(f"fraction must be in [0, 1] (0.1 = 10% of groups executed), got {fraction}")
    if min_every is not None and (not isinstance(min_every, int) or min_every < 1):
        raise ValueError(f"min_every must be a positive integer number of steps or None, got {min_every!r}")


class Router(abc.ABC):
    """Chooses the anchor groups of each training step.

    Subclasses implement :meth:`_choose`; this base class handles the carry, ``min_every``, the
    seeded RNG and the state.
    """

    def __init__(self, fraction: float = 0.1, min_every: int | None = 10, seed: int = 0) -> None:
        """
        Args:
            fraction: long-run fraction rho of groups executed for real, in [0, 1].
            min_every: K; at least one anchor group every K steps (None disables).
            seed: seed of the router's own ``numpy.random.Generator``.

        Raises:
            ValueError: fraction outside [0, 1] or min_every not a positive int.
        """
        _check_fraction(fraction, min_every)
        self.fraction = float(fraction)
        self.min_every = min_every
        self.seed = int(seed)
        self.rng = np.random.default_rng(self.seed)
        self.carry = 0.0
        self.last_anchor_step: int | None = None
        self.last_step: int | None = None
        self._first_step: int | None = None
        self.total_groups = 0
        self.total_anchors = 0

    # ----- interface -------------------------------------------------------------------------
    def route(self, group_task_ids: Sequence[str], step: int) -> np.ndarray:
        """Anchor mask for the M groups of ``step``.

        Args:
            group_task_ids: M task ids, one per group (a task may appear several times).
            step: training step (non-decreasing between calls).

        Returns:
            np.ndarray of dtype bool and shape [M]; True = execute this group for real.

        Raises:
            ValueError: step going backwards.
        """
        ids = [str(t) for t in group_task_ids]
        m = len(ids)
        if self.last_step is not None and step < self.last_step:
            raise ValueError(f"step went backwards: {step} after {self.last_step}; routers are called once per step")
        self.last_step = int(step)
        mask = np.zeros(m, dtype=bool)
        if m == 0:
            return mask
        k = self._count(ids, step)
        if k > 0:
            chosen = self._choose(ids, k)
            mask[chosen] = True
        k = int(mask.sum())
        if k > 0:
            self.last_anchor_step = int(step)
        self.total_groups += m
        self.total_anchors += k
        return mask

    def _needs_forced(self, step: int) -> bool:
        if self.min_every is None or self.fraction <= 0.0:
            return False
        if self.last_anchor_step is None:
            # counts steps since the router started
            first = self._first_step
            if first is None:
                self._first_step = int(step)
                first = int(step)
            return step - first + 1 >= self.min_every
        return step - self.last_anchor_step >= self.min_every

    def _count(self, ids: list[str], step: int) -> int:
        """Number of anchors at this step (global carry). Subclasses may override."""
        m = len(ids)
        if self.fraction >= 1.0:
            return m
        expected = self.fraction * m + self.carry
        k = int(math.floor(expected + 1e-12))
        k = min(k, m)
        self.carry = expected - k
        if k == 0 and self._needs_forced(step):
            k = 1
            self.carry = max(self.carry - 1.0, -1.0)
        return k

    @abc.abstractmethod
    def _choose(self, ids: list[str], k: int) -> np.ndarray:
        """Indices (int array of length k, distinct) of the anchor groups."""

    # ----- state ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state (config, carry, counters, RNG state)."""
        return {
            "class": type(self).__name__,
            "fraction": self.fraction,
            "min_every": self.min_every,
            "seed": self.seed,
            "carry": self.carry,
            "last_anchor_step": self.last_anchor_step,
            "last_step": self.last_step,
            "first_step": self._first_step,
            "total_groups": self.total_groups,
            "total_anchors": self.total_anchors,
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state from :meth:`state_dict` (raises ValueError on a class mismatch)."""
        if state.get("class") != type(self).__name__:
            raise ValueError(f"state is for {state.get('class')!r}, this router is {type(self).__name__!r}")
        self.fraction = float(state["fraction"])
        self.min_every = state["min_every"]
        self.seed = int(state["seed"])
        self.carry = float(state["carry"])
        self.last_anchor_step = state["last_anchor_step"]
        self.last_step = state["last_step"]
        self._first_step = None if state.get("first_step") is None else int(state["first_step"])
        self.total_groups = int(state["total_groups"])
        self.total_anchors = int(state["total_anchors"])
        self.rng = np.random.default_rng()
        self.rng.bit_generator.state = state["rng"]

    @property
    def realised_fraction(self) -> float:
        """Anchors so far / groups so far (nan before the first call)."""
        return self.total_anchors / self.total_groups if self.total_groups else float("nan")


class FractionRouter(Router):
    """A fraction rho of groups, chosen uniformly at random (seeded), carry between steps.

    ``FractionRouter(fraction=0.1, min_every=10, seed=0)`` is the project's default.
    """

    def _choose(self, ids: list[str], k: int) -> np.ndarray:
        return self.rng.choice(len(ids), size=k, replace=False)


class StratifiedRouter(Router):
    """Anchors every task at rate rho: one carry per task id.

    At each step, task t with m_t groups gets ``floor(rho * m_t + c_t)`` anchors (its carry c_t is
    kept across steps, also for steps where the task is absent), so every task's own long-run anchor
    fraction is rho, and so is the global one. Within a task the groups are chosen at random.
    ``min_every`` forces one anchor (for the task with the largest carry) when no group was an
    anchor for K-1 steps.
    """

    def __init__(self, fraction: float = 0.1, min_every: int | None = 10, seed: int = 0) -> None:
        super().__init__(fraction=fraction, min_every=min_every, seed=seed)
        self.task_carry: dict[str, float] = {}
        self._plan: np.ndarray | None = None

    def _count(self, ids: list[str], step: int) -> int:
        m = len(ids)
        plan = np.zeros(m, dtype=bool)
        if self.fraction >= 1.0:
            self._plan = np.ones(m, dtype=bool)
            return m
        if self.fraction <= 0.0:
            self._plan = plan
            return 0
        tasks: dict[str, list[int]] = {}
        for i, t in enumerate(ids):
            tasks.setdefault(t, []).append(i)
        for t in sorted(tasks):
            idx = tasks[t]
            expected = self.fraction * len(idx) + self.task_carry.get(t, 0.0)
            # a forced anchor leaves a debt (carry down to -1) that later steps pay off: never fewer than 0 anchors
            k_t = max(0, min(int(math.floor(expected + 1e-12)), len(idx)))
            self.task_carry[t] = expected - k_t
            if k_t:
                plan[self.rng.choice(np.asarray(idx), size=k_t, replace=False)] = True
        if not plan.any() and self._needs_forced(step):
            t = max(sorted(tasks), key=lambda s: self.task_carry.get(s, 0.0))
            plan[int(self.rng.choice(np.asarray(tasks[t])))] = True
            self.task_carry[t] = max(self.task_carry[t] - 1.0, -1.0)
        self._plan = plan
        return int(plan.sum())

    def _choose(self, ids: list[str], k: int) -> np.ndarray:
        assert self._plan is not None
        return np.flatnonzero(self._plan)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["task_carry"] = dict(self.task_carry)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.task_carry = {str(k): float(v) for k, v in state.get("task_carry", {}).items()}


class HashRouter(Router):
    """Stateless per-key routing: group ``key`` is an anchor when ``crc32(seed, key) / 2**32 < rho``.

    For trainers whose reward workers route samples apart, without shared state (verl's reward manager): every
    process that sees the same key decides the same way. Each key is a Bernoulli(rho) draw, so unlike
    :class:`FractionRouter` there is no exact count per step and no ``min_every`` floor (it is refused).
    """

    def __init__(self, fraction: float = 0.1, min_every: int | None = None, seed: int = 0) -> None:
        if min_every is not None:
            raise ValueError("the hash router decides each key on its own and cannot guarantee min_every; pass None")
        super().__init__(fraction=fraction, min_every=None, seed=seed)
        self._plan: np.ndarray | None = None

    def _count(self, ids: list[str], step: int) -> int:
        u = np.array([zlib.crc32(f"{self.seed}\x00{x}".encode()) for x in ids], dtype=np.float64)
        self._plan = u / 2.0 ** 32 < self.fraction
        return int(self._plan.sum())

    def _choose(self, ids: list[str], k: int) -> np.ndarray:
        assert self._plan is not None
        return np.flatnonzero(self._plan)


#: The router registry: name -> router class, called as ``cls(fraction=, min_every=, seed=)`` (entry-point group
#: ``wmrl.routers``; an entry point names a :class:`Router` subclass).
ROUTERS: Registry[Callable[..., Router]] = Registry("router", group="wmrl.routers")
ROUTERS.register("fraction", FractionRouter)
ROUTERS.register("stratified", StratifiedRouter)
ROUTERS.register("hash", HashRouter)


def make_router(kind: str, fraction: float = 0.1, min_every: int | None = 10, seed: int = 0) -> Router:
    """Build the router registered as ``kind`` (:data:`ROUTERS`: ``"fraction"``, ``"stratified"``, ``"hash"``).

    Raises:
        wmrl.core.registry.UnknownName: unknown kind (a ValueError; the message lists the registered ones).
    """
    return ROUTERS.get(kind)(fraction=fraction, min_every=min_every, seed=seed)


def build_router(recipe: Any, anchor_fraction: float, *, kind: str = "fraction", min_anchor_every: int | None = None,
                 seed: int = 0) -> Router:
    """The router of ``recipe`` (a :class:`wmrl.core.recipe.Recipe`) at the configured rho, the one place a trainer's,
    an integration's or the simulation's router is made: its long-run anchor fraction is
    ``recipe.anchor_fraction(rho)`` (1 for grpo, 0 for wm, rho for the fraction recipes), and a fraction recipe at
    0 < rho < 1 gets at least one anchor group every ``min_anchor_every`` steps (None or 0: no such floor).

    Raises:
        ValueError: an unknown router kind (the message lists the known ones).
    """
    rho = recipe.anchor_fraction(anchor_fraction)
    floor = (min_anchor_every or None) if recipe.anchors == "fraction" and 0.0 < rho < 1.0 else None
    return make_router(kind, fraction=rho, min_every=floor, seed=seed)

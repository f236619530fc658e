"""The synthetic problem of the convergence study: a contextual bandit with an imperfect world model.

Tasks c = 0..C-1 (the "prompts"), K arms per task (the "programs"). Every (task, arm) pair has a
feature vector phi(c, a) in R^d (i.i.d. standard normal). The simulated policy (see
:mod:`wmrl.sim.engine`) has a part shared across tasks, phi(c, a) . theta, as an LM shares its
weights across prompts (so the anchor stream and the world-model stream estimate the gradient of the
same parameters, which is what fusing them presumes), plus a per-task table.

True reward (exactly known): r(c, a) = Phi_N((phi(c, a) . w* + idio * eps(c, a)) / sqrt(1 + idio^2))
in [0, 1], with a unit vector w*, idiosyncratic eps ~ N(0, 1) and ``idio = 1`` by default, so r is
marginally uniform. The policy's true expected reward J(theta) = mean_c sum_a pi(a|c) r(c, a) is
computed exactly (no evaluation noise).

The world model follows the WMRL paper's error model (docs/architecture.md), r_hat = r + b(tau) + xi, with three shapes
of bias b of magnitude B and fresh Gaussian noise xi ~ N(0, sigma^2) at every query:

- ``monotone``: r_hat = (1 - B) r + B (1 - (1 - r)^4) + xi. A strictly increasing distortion
  (B in [0, 1]) that compresses the top of the scale (slope (1 - B) at r = 1): the world model
  under-separates the best programs. E[r | r_hat] is monotone, the case isotonic debiasing targets.
- ``offset``: r_hat = r + B u_{c,t} + xi with u ~ N(0, 1) drawn per group and step: a group-level
  offset (the world model misjudges a whole task at once). GRPO's group baseline cancels it.
- ``exploit``: r_hat = r + B * 1[phi(c, a) . e in the top 10% of task c's arms], e a fixed unit
  vector orthogonal to w*. A persistent, trajectory-specific, non-monotone error: the world model
  over-rates one *kind* of program (those with a large component along e, of average true quality)
  every time it is asked, and the shared policy can learn to produce that kind (as an AutoResearch
  agent can learn to please a deterministic world model). No monotone map of the score removes it.
- ``rank``: r_hat = r + B eta(c, a), eta ~ N(0, 1) drawn once per (task, arm) and fixed: a deterministic
  world model that misorders programs. Every arm has its own persistent error, so the world model's favourite
  arm of a task is in general not the best one, its within-group order is wrong for some pairs (pairwise
  accuracy falls with B), and asking again does not help. This is the error a language-model world model
  makes on programs it has never seen executed: a monotone map of the score keeps its order in every group.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SHAPES = ("monotone", "offset", "exploit", "rank")


@dataclass(frozen=True)
class WorldModelSpec:
    """Error model of the simulated world model.

    Attributes:
        shape: one of ``"monotone"``, ``"offset"``, ``"exploit"``, ``"rank"`` (module docstring).
        bias: B, the bias magnitude (reward units; for ``monotone`` the blend weight in [0, 1]).
        sigma: standard deviation of the per-query noise xi (reward units).
    """

    shape: str = "monotone"
    bias: float = 0.0
    sigma: float = 0.0

    def __post_init__(self) -> None:
        if self.shape not in SHAPES:
            raise ValueError(f"unknown world-model shape {self.shape!r}; choose one of {SHAPES}")
        if not (self.bias >= 0 and self.sigma >= 0):
            raise ValueError(f"bias and sigma must be >= 0, got {self.bias}, {self.sigma}")
        if self.shape == "monotone" and self.bias > 1:
            raise ValueError(f"monotone bias is a blend weight in [0, 1], got {self.bias}")

    @property
    def label(self) -> str:
        return f"{self.shape} B={self.bias:g} sigma={self.sigma:g}"


@dataclass
class BanditProblem:
    """Features, true rewards and the fixed parts of the world model for one seed.

    Attributes:
        features: [C, K, d] float64 phi(c, a).
        rewards: [C, K] float64 true rewards in [0, 1].
        exploit: [C, K] bool, the arms the ``exploit`` world model over-rates.
        rank_error: [C, K] float64 eta(c, a) ~ N(0, 1), the ``rank`` world model's persistent error per arm
            (drawn from its own generator, so the other fields do not depend on it).
    """

    features: np.ndarray
    rewards: np.ndarray
    exploit: np.ndarray
    rank_error: np.ndarray

    @classmethod
    def make(cls, n_tasks: int, n_arms: int, seed: int, dim: int = 8, idio: float = 1.0) -> BanditProblem:
        """Draw a problem (module docstring); deterministic in ``seed``."""
        from scipy.stats import norm  # noqa: PLC0415 - heavy (scipy)

        if n_tasks < 1 or n_arms < 10 or dim < 2:
            raise ValueError(f"need n_tasks >= 1, n_arms >= 10 and dim >= 2, got {n_tasks}, {n_arms}, {dim}")
        rng = np.random.default_rng([seed, 7919])
        phi = rng.standard_normal((n_tasks, n_arms, dim))
        w = rng.standard_normal(dim)
        w /= np.linalg.norm(w)
        e = rng.standard_normal(dim)
        e -= (e @ w) * w
        e /= np.linalg.norm(e)
        z = phi @ w + idio * rng.standard_normal((n_tasks, n_arms))
        r = norm.cdf(z / np.sqrt(1.0 + idio**2))
        proj = phi @ e
        n_ex = max(1, int(round(0.1 * n_arms)))
        thresh = np.sort(proj, axis=1)[:, -n_ex][:, None]
        eta = np.random.default_rng([seed, 7921]).standard_normal((n_tasks, n_arms))
        return cls(features=phi, rewards=r, exploit=proj >= thresh, rank_error=eta)

    def world_model_optimum(self, spec: WorldModelSpec) -> float:
        """J of the policy that plays, in every task, the arm the noise-free world model rates best (the
        destination of a run that trusts the world model's order)."""
        rows = np.arange(self.rewards.shape[0])[:, None]
        arms = np.arange(self.rewards.shape[1])[None, :].repeat(self.rewards.shape[0], 0)
        r_hat = world_model_scores(self.rewards, self.exploit, WorldModelSpec(spec.shape, spec.bias, 0.0),
                                   np.random.default_rng(0), self.rank_error[rows, arms])
        best = r_hat.argmax(axis=1)
        return float(self.rewards[np.arange(self.rewards.shape[0]), best].mean())

    @property
    def optimum(self) -> float:
        """J* = mean over tasks of the best arm's reward (an upper bound for a linear policy)."""
        return float(self.rewards.max(axis=1).mean())

    @property
    def uniform_value(self) -> float:
        """J of the uniform policy (theta = 0, the starting point)."""
        return float(self.rewards.mean())


def world_model_scores(
    true_rewards: np.ndarray,
    is_exploit: np.ndarray,
    spec: WorldModelSpec,
    rng: np.random.Generator,
    rank_error: np.ndarray | None = None,
) -> np.ndarray:
    """Query the simulated world model once for every sample.

    Args:
        true_rewards: [C, G] true rewards of the sampled arms (one row per group).
        is_exploit: [C, G] bool, whether each sampled arm is an exploit arm.
        spec: the error model.
        rng: noise generator (fresh noise per call: two calls give two independent queries).
        rank_error: [C, G] float64 the sampled arms' persistent errors eta (:attr:`BanditProblem.rank_error`);
            required by the ``rank`` shape.

    Raises:
        ValueError: the ``rank`` shape without ``rank_error``.

    Returns:
        [C, G] float64 predictions r_hat (not clipped: a biased model may leave [0, 1]).
    """
    r = true_rewards
    if spec.shape == "monotone":
        base = (1.0 - spec.bias) * r + spec.bias * (1.0 - (1.0 - r) ** 4)
    elif spec.shape == "offset":
        base = r + spec.bias * rng.standard_normal((r.shape[0], 1))
    elif spec.shape == "exploit":
        base = r + spec.bias * is_exploit
    else:
        if rank_error is None:
            raise ValueError("the rank world model needs the sampled arms' rank_error (BanditProblem.rank_error)")
        base = r + spec.bias * rank_error
    if spec.sigma > 0:
        base = base + spec.sigma * rng.standard_normal(r.shape)
    return base

"""The simulation loop: GRPO on the contextual bandit with the real wmrl.core functions.

Every run trains the softmax policy pi(a | c) = softmax_a(phi(c, a) . theta + table[c, a])
(theta: [d] shared by all tasks, table: [C, K] per task; both initialised to 0, i.e. the uniform
policy) with Adam on the GRPO loss. One step samples one group of G arms per task
(M = C groups, B = C*G trajectories, each a one-token "completion"), routes the groups with
:class:`wmrl.core.routing.FractionRouter`, scores them (true reward for anchors, world model for the
rest), debiases with :class:`wmrl.core.calibration.IsotonicCalibrator`, computes advantages with
:func:`wmrl.core.advantages.group_advantages`, weights the samples with :mod:`wmrl.core.fusion`
and takes one step of :func:`wmrl.core.losses.grpo_loss` (on-policy, ratio 1).

Many runs are simulated together: their parameters live in tensors [S, d] and [S, C, K] and their losses
are summed, so every run gets exactly its own gradient (Adam is per-parameter). Each run draws its
samples and world-model noise from its own generators seeded by (seed, stream), so a run's result
does not depend on which other runs share the batch, and the methods of one seed see common random
numbers until their policies diverge.

Methods (the ablations of DESIGN.md §3):

==============  =========  ====================================  ==========================================
method          executed   reward of world-model groups          per-sample weights
==============  =========  ====================================  ==========================================
grpo            all        (none: all groups true reward)        uniform 1/B
anchor_only     rho        (world-model groups dropped)          uniform 1/n_A
wm              none       raw r_hat                             uniform 1/B
debias          rho        calibrated f(r_hat)                   uniform 1/B (pooling)
denoise         rho        raw r_hat                             IVW alpha from r - r_hat residuals
wmrl            rho        calibrated f(r_hat)                   IVW alpha from r - f(r_hat) residuals
wmrl_ba         rho        calibrated f(r_hat)                   bias-aware alpha (B^2 = persistent part)
ppi             rho        calibrated f(r_hat)                   PPI++: 1/n_A, lambda/n_W, -lambda/n_A
wmrl_flat       rho        isotonic f(r_hat) without tie-break   IVW as wmrl (ties inside flat blocks kept)
==============  =========  ====================================  ==========================================

``wmrl_flat`` is a diagnostic, not a recommended method: it drops the strictly increasing tie-break
of the calibrator (``tie_break=0``), so world-model scores that fall in one flat isotonic block get
equal rewards and zero advantage between them.
"""
from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import asdict, dataclass, field

import numpy as np

from wmrl.core.calibration import IsotonicCalibrator
from wmrl.core.fusion import estimate_fusion, fusion_weights, ppi_lambda, ppi_samples
from wmrl.core.routing import FractionRouter
from wmrl.sim.bandit import BanditProblem, WorldModelSpec, world_model_scores

METHODS = ("grpo", "anchor_only", "wm", "debias", "denoise", "wmrl", "wmrl_ba", "ppi", "wmrl_flat")
_CALIBRATED = {"debias", "wmrl", "wmrl_ba", "ppi", "wmrl_flat"}


@dataclass(frozen=True)
class SimConfig:
    """Size and hyper-parameters shared by all runs of a study.

    Attributes:
        n_tasks: C, tasks (= groups per step). n_arms: K, arms per task. dim: d, feature size.
        group_size: G.
        steps: training steps. lr: Adam learning rate. log_every: steps between curve points.
        normalize_std: GRPO std normalisation of advantages.
        min_every: the router's K (one anchor group at least every this many steps).
        cal_window: calibrator window (anchor pairs). cal_min_anchors: its isotonic threshold.
        fusion_window: steps of anchor residuals used to estimate V_A, sigma_xi^2, B^2, lambda.
        alpha_min, alpha_max: clip range of alpha.
    """

    n_tasks: int = 20
    n_arms: int = 32
    dim: int = 8
    group_size: int = 8
    steps: int = 200
    lr: float = 0.05
    log_every: int = 5
    normalize_std: bool = True
    min_every: int = 10
    cal_window: int = 512
    cal_min_anchors: int = 16
    fusion_window: int = 8
    alpha_min: float = 0.0
    alpha_max: float = 0.95


@dataclass(frozen=True)
class RunSpec:
    """One simulated training run.

    Attributes:
        method: one of :data:`METHODS`. wm: the world model's error model. rho: anchor fraction
        (ignored by ``grpo`` = 1 and ``wm`` = 0). seed: problem and sampling seed.
    """

    method: str
    wm: WorldModelSpec = field(default_factory=WorldModelSpec)
    rho: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; choose one of {METHODS}")
        if not 0.0 < self.rho <= 1.0 and self.method not in ("grpo", "wm"):
            raise ValueError(f"rho must be in (0, 1] for {self.method}, got {self.rho}")

    @property
    def effective_rho(self) -> float:
        return {"grpo": 1.0, "wm": 0.0}.get(self.method, self.rho)


class _RunState:
    """Per-run objects: problem, generators, router, calibrator, residual window, counters."""

    def __init__(self, spec: RunSpec, problem: BanditProblem, cfg: SimConfig) -> None:
        self.spec = spec
        self.problem = problem
        self.cfg = cfg
        self.rng_sample = np.random.default_rng([spec.seed, 1])
        self.rng_wm = np.random.default_rng([spec.seed, 2])
        self.router = FractionRouter(fraction=spec.effective_rho, min_every=cfg.min_every, seed=spec.seed)
        self.cal = (
            IsotonicCalibrator(window=cfg.cal_window, min_anchors=cfg.cal_min_anchors, fallback="identity",
                               tie_break=0.0 if spec.method == "wmrl_flat" else 1e-3)  # the study of record
            if spec.method in _CALIBRATED
            else None
        )
        self.window: deque = deque(maxlen=cfg.fusion_window)
        self.executions = 0
        self.alpha_log: list[float] = []
        self.mae_log: list[tuple[float, float]] = []

    def sample(self, probs: np.ndarray) -> np.ndarray:
        """[C, G] arm indices drawn from probs [C, K] by inverse CDF."""
        c, g = probs.shape[0], self.cfg.group_size
        cdf = np.cumsum(probs, axis=1)
        cdf[:, -1] = 1.0
        u = self.rng_sample.random((c, g))
        return np.minimum((u[:, :, None] > cdf[:, None, :]).sum(-1), probs.shape[1] - 1)

    def step(self, t: int, arms: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Build this run's part of the GRPO batch.

        Returns:
            (flat_idx [N] int into the C*G samples, rewards [N], local group ids [N], weights [N]).
        """
        cfg, spec = self.cfg, self.spec
        C, G = arms.shape
        rows = np.arange(C)[:, None]
        r = self.problem.rewards[rows, arms]
        ex = self.problem.exploit[rows, arms]
        r_hat = world_model_scores(r, ex, spec.wm, self.rng_wm)
        r_hat2 = world_model_scores(r, ex, spec.wm, self.rng_wm)  # a second, independent query
        groups = np.repeat(np.arange(C), G)
        flat = np.arange(C * G)
        m = spec.method
        anchor_g = self.router.route([f"task{c}" for c in range(C)], step=t)
        a = np.repeat(anchor_g, G)  # [C*G] per-sample anchor mask
        self.executions += int(a.sum())
        rf, hf, h2 = r.reshape(-1), r_hat.reshape(-1), r_hat2.reshape(-1)

        if m == "grpo":
            return flat, rf, groups, np.full(C * G, 1.0 / (C * G))
        if m == "wm":
            return flat, hf, groups, np.full(C * G, 1.0 / (C * G))
        if m == "anchor_only":
            n_a = int(a.sum())
            return flat[a], rf[a], groups[a], np.full(n_a, 1.0 / max(n_a, 1))

        # streams with a world model and anchors
        if self.cal is not None:
            tilde = self.cal.transform(hf, step=t)
            tilde2 = self.cal.transform(h2, step=t) if m == "wmrl_ba" else h2
            if a.any():
                d = self.cal.diagnostics(hf[a], rf[a])
                self.mae_log.append((d["mae_before"], d["mae_after"]))
                self.cal.update(hf[a], rf[a], step=t)
        else:
            tilde, tilde2 = hf, h2
        if a.any():
            self.window.append((rf[a], tilde[a], tilde2[a], groups[a] + 1000 * t))
        n_a, n_w = int(a.sum()), int((~a).sum())
        reward = np.where(a, rf, tilde)

        if m == "debias":
            return flat, reward, groups, np.full(C * G, 1.0 / (C * G))
        if self.window:
            wr, wt, wt2, wg = (np.concatenate([w[k] for w in self.window]) for k in range(4))
        else:
            wr = wt = wt2 = wg = np.zeros(0)
        if m in ("denoise", "wmrl", "wmrl_ba", "wmrl_flat"):
            noise_var = 0.5 * float(np.mean((wt - wt2) ** 2)) if wt.size else 0.0
            est = estimate_fusion(
                wr, wt, wg, n_anchor=n_a, n_wm=n_w, alpha_min=cfg.alpha_min, alpha_max=cfg.alpha_max,
                bias_aware=(m == "wmrl_ba"), noise_var=noise_var,
            )
            self.alpha_log.append(est.alpha)
            return flat, reward, groups, fusion_weights(a, est.alpha)
        # ppi
        lam = ppi_lambda(wr, wt, n_anchor=n_a, n_wm=n_w, group_ids=wg) if wr.size else 0.0
        self.alpha_log.append(lam)
        s = ppi_samples(rf[a], tilde[a], tilde[~a], lam)
        a_idx, w_idx = flat[a], flat[~a]
        src = np.empty(s.rewards.size, dtype=np.int64)
        is_w = s.stream == 1
        src[is_w] = w_idx[s.source_index[is_w]]
        src[~is_w] = a_idx[s.source_index[~is_w]]
        # groups of the duplicated anchor set must not merge with the true-reward anchor set
        gl = groups[src] + np.where(s.stream == 2, C, 0)
        return src, s.rewards, gl, s.weights


def simulate(runs: list[RunSpec], cfg: SimConfig = SimConfig(), progress=None) -> "tuple[object, object]":
    """Simulate all runs together.

    Args:
        runs: the runs (any mix of methods, world models, rho and seeds).
        cfg: shared configuration.
        progress: optional callable(step, steps) for progress display.

    Returns:
        (curves, finals) pandas DataFrames. ``curves`` has one row per run and logged step with
        columns run, method, shape, bias, sigma, rho, seed, step, executions, J (true expected
        reward), J_star, J_uniform, gap = J_star - J. ``finals`` has one row per run with the final
        J (mean of the last 10% of logged points), executions, mean alpha/lambda and calibration
        MAE before/after, and wall seconds of the whole simulation (``attrs["wall_s"]``).

    Raises:
        ValueError: no runs.
    """
    import torch

    if not runs:
        raise ValueError("no runs to simulate")
    t0 = time.perf_counter()
    n_threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: extra threads only add contention on a shared machine
    try:
        return _simulate(runs, cfg, progress, t0)
    finally:
        torch.set_num_threads(n_threads)


def _simulate(runs: list[RunSpec], cfg: SimConfig, progress, t0: float):
    import pandas as pd
    import torch

    from wmrl.core.advantages import group_advantages
    from wmrl.core.losses import grpo_loss

    C, K, G = cfg.n_tasks, cfg.n_arms, cfg.group_size
    problems: dict[int, BanditProblem] = {}
    for spec in runs:
        if spec.seed not in problems:
            problems[spec.seed] = BanditProblem.make(C, K, spec.seed, dim=cfg.dim)
    states = [_RunState(s, problems[s.seed], cfg) for s in runs]
    S = len(runs)
    R = torch.tensor(np.stack([st.problem.rewards for st in states]), dtype=torch.float64)
    Phi = torch.tensor(np.stack([st.problem.features for st in states]), dtype=torch.float64)
    theta = torch.zeros(S, cfg.dim, dtype=torch.float64, requires_grad=True)
    table = torch.zeros(S, C, K, dtype=torch.float64, requires_grad=True)

    def logits() -> "torch.Tensor":
        return torch.einsum("sckd,sd->sck", Phi, theta) + table

    opt = torch.optim.Adam([theta, table], lr=cfg.lr)
    rows: list[dict] = []

    def log(step: int) -> None:
        with torch.no_grad():
            J = (torch.softmax(logits(), -1) * R).sum(-1).mean(-1).numpy()
        for i, st in enumerate(states):
            rows.append(dict(run=i, step=step, executions=st.executions, J=float(J[i])))

    log(0)
    for t in range(cfg.steps):
        with torch.no_grad():
            probs = torch.softmax(logits(), -1).numpy()
        idx_all, rew_all, gid_all, w_all = [], [], [], []
        for i, st in enumerate(states):
            arms = st.sample(probs[i])
            flat, rew, gl, w = st.step(t, arms)
            arm_flat = arms.reshape(-1)[flat]
            task_flat = flat // G
            idx_all.append(np.stack([np.full(flat.size, i), task_flat, arm_flat], axis=1))
            rew_all.append(rew)
            gid_all.append(gl + i * 4 * C)
            w_all.append(w)
        idx = torch.as_tensor(np.concatenate(idx_all), dtype=torch.int64)
        rewards = torch.as_tensor(np.concatenate(rew_all), dtype=torch.float64)
        gids = torch.as_tensor(np.concatenate(gid_all), dtype=torch.int64)
        weights = torch.as_tensor(np.concatenate(w_all), dtype=torch.float64)
        adv = group_advantages(rewards, gids, normalize_std=cfg.normalize_std)
        logp = torch.log_softmax(logits(), -1)[idx[:, 0], idx[:, 1], idx[:, 2]].unsqueeze(1)
        mask = torch.ones_like(logp, dtype=torch.bool)
        loss, _ = grpo_loss(logp, logp.detach(), adv, mask, sample_weights=weights, aggregation="token_mean")
        opt.zero_grad()
        loss.backward()
        opt.step()
        if (t + 1) % cfg.log_every == 0 or t + 1 == cfg.steps:
            log(t + 1)
        if progress is not None:
            progress(t + 1, cfg.steps)
    wall = time.perf_counter() - t0

    meta = pd.DataFrame(
        [
            dict(run=i, method=s.method, shape=s.wm.shape, bias=s.wm.bias, sigma=s.wm.sigma,
                 rho=s.effective_rho, seed=s.seed, J_star=st.problem.optimum, J_uniform=st.problem.uniform_value)
            for i, (s, st) in enumerate(zip(runs, states))
        ]
    )
    curves = pd.DataFrame(rows).merge(meta, on="run")
    curves["gap"] = curves["J_star"] - curves["J"]
    n_last = max(1, int(math.ceil(0.1 * (cfg.steps // cfg.log_every + 1))))
    last = curves.sort_values("step").groupby("run").tail(n_last).groupby("run")["J"].mean()
    finals = meta.copy()
    finals["J_final"] = finals["run"].map(last)
    finals["gap_final"] = finals["J_star"] - finals["J_final"]
    finals["executions"] = [st.executions for st in states]
    finals["alpha_or_lambda_mean"] = [float(np.mean(st.alpha_log)) if st.alpha_log else float("nan") for st in states]
    finals["cal_mae_before"] = [float(np.mean([m[0] for m in st.mae_log])) if st.mae_log else float("nan") for st in states]
    finals["cal_mae_after"] = [float(np.mean([m[1] for m in st.mae_log])) if st.mae_log else float("nan") for st in states]
    finals.attrs["wall_s"] = wall
    curves.attrs["wall_s"] = wall
    return curves, finals


def config_dict(cfg: SimConfig) -> dict:
    """The configuration as a plain dict (for the report)."""
    return asdict(cfg)

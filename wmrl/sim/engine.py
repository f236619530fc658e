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

Methods: the registered recipes of :mod:`wmrl.core.recipe` (the table of its module docstring), called
exactly as the trainer calls them: one :meth:`~wmrl.core.recipe.Recipe.step` per run and step on the
run's [C*G] arrays, its advantages and weights going straight into the GRPO loss. The simulation gives
every recipe a second, independent world-model query of each sample (``reward_wm_repeat``), from which
``wmrl-bias-aware`` estimates the repeat-query noise. ``wmrl-flat`` is a diagnostic, not a recommended
method: its calibrator has no strictly increasing tie-break (``tie_break=0``), so world-model scores that
fall in one flat isotonic block get equal rewards and zero advantage between them; the others use the
study's ``tie_break=1e-3``.

Earlier versions of the simulation had method names of their own; the committed study
(studies/simulation/) uses them: ``anchor_only`` = ``anchor-only``, ``debias`` = ``wmrl-no-denoise``,
``denoise`` = ``wmrl-no-debias``, ``wmrl_ba`` = ``wmrl-bias-aware``, ``ppi`` = ``wmrl-ppi``,
``wmrl_flat`` = ``wmrl-flat``.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

from typing import Any

import numpy as np

from wmrl.core.alarm import ExploitationMonitor, raised_anchor_fraction
from wmrl.core.recipe import RecipeSettings, StepInputs, get_recipe, recipe_names
from wmrl.core.routing import build_router
from wmrl.core.staleness import (UNANCHORED_MODES, LatencyModel, UnanchoredSteps, arrival_steps, check_at_bound,
                                  check_staleness, late_clip)
from wmrl.sim.bandit import BanditProblem, WorldModelSpec, world_model_scores
from wmrl.core.losses import grpo_loss

METHODS = tuple(recipe_names())
LATE_MODES = ("calibration", "gradient")
ALARM_RESPONSES = ("none", "raise_anchors")


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
        alarm_threshold, alarm_drift, alarm_min_groups: h, k and the burn-in of every run's exploitation alarm
            (:class:`wmrl.core.alarm.ExploitationMonitor`, fed each step's anchors in a run with both streams).
        alarm_max_rho: the ceiling of the ``raise_anchors`` response.
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
    alarm_threshold: float = 5.0
    alarm_drift: float = 0.5
    alarm_min_groups: int = 4
    alarm_max_rho: float = 0.5


@dataclass(frozen=True)
class RunSpec:
    """One simulated training run.

    Attributes:
        method: one of :data:`METHODS`. wm: the world model's error model. rho: anchor fraction
        (ignored by ``grpo`` = 1 and ``wm`` = 0). seed: problem and sampling seed.
        staleness: the bound k of the asynchronous anchor stream (steps; 0 = synchronous, every anchor group
            consumed at its own step: the study of record). late: what a group consumed after its own step
            does: ``calibration`` (its pairs feed the calibrator and the window only, and at its own step
            the group trains as a world-model group) or ``gradient`` (left out of its own step, it enters
            the loss of the step it arrives at as an anchor group, importance-corrected by the clipped ratio
            pi_t / pi_s, kept in [0.001, late_ratio_max], :mod:`wmrl.core.staleness`). latency_steps, latency_sigma,
            latency_floor_steps, latency_cap_steps (None: 20 x latency_steps): the latency model in
            units of steps (median and log-sd of one execution; a group takes its G executions' maximum).
        at_bound: a group still running at the bound (``wmrl.asynchronous.over_bound_anchors``): ``wait`` (consumed at
            s + k, as ``late`` says), ``calibration`` (consumed when it arrives, later than s + k, its pairs
            feeding only the calibrator and the window) or ``drop`` (never consumed). In every mode it is out of
            its own step's loss in the ``gradient`` late mode and a world-model group there in ``calibration``.
            The simulation counts steps, not seconds: the time ``wait`` costs is the benchmark's and the
            projection's (docs/scaling.md).
        steps_without_anchors: ``wmrl.asynchronous.steps_without_anchors``
            (:func:`wmrl.core.staleness.skips_update`): a step of an asynchronous run whose own anchor groups are all
            in flight and at which no other one arrives makes no update (``skip``, the run's parameters and optimiser
            state stay as they are) or trains on its world-model groups alone (``update``). Ignored when
            ``staleness`` is 0.
        latency_reward_slope: how an execution's latency depends on its program's true reward r: the sampled latency
            is multiplied by ``exp(slope * (r - mean r))``, the mean over the step's samples, so that the typical
            latency stays as configured while the better programs of a step take longer (0: independent; 2: a
            program 0.5 above the step's mean takes e times as long, as more estimators take longer and often
            score higher).
        alarm_response: what the run's exploitation alarm does when it fires: ``none`` (only recorded) or
            ``raise_anchors`` (the anchor fraction doubles, up to ``SimConfig.alarm_max_rho``).
        recall: a recipe with recall (``wmrl``, its single-correction ablations) trains a world-model sample of an
            arm that an anchor measured before on that arm's true reward, as the trainer does with programs it
            executed before (docs/training.md, "Recalled executions"); False: every world-model sample is
            predicted, as in the paper's recipes (the studies of record, which isolate the paper's corrections).
        verify: favourite verification: in every world-model group the sample the world model scores highest (ties:
            the first) is executed for real before the recipe runs, and its true reward replaces the world model's
            for that sample as a recalled execution does (needs a recipe with recall). With ``recall`` the
            favourite is executed only if its program was never measured (a measured one is recalled for free) and
            its reward is remembered; without ``recall`` every group's favourite is executed at every step and
            forgotten after it (programs never repeat). Verified pairs are a selected sample (the favourites), so
            they do not feed the calibrator. At most one execution per world-model group and step.
    """

    method: str
    wm: WorldModelSpec = field(default_factory=WorldModelSpec)
    rho: float = 0.1
    seed: int = 0
    staleness: int = 0
    late: str = "calibration"
    late_ratio_max: float = 2.0
    latency_steps: float = 3.0
    latency_sigma: float = 0.6
    latency_floor_steps: float = 0.0
    latency_cap_steps: float | None = None
    at_bound: str = "wait"
    steps_without_anchors: str = "skip"
    alarm_response: str = "none"
    latency_reward_slope: float = 0.0
    recall: bool = True
    verify: bool = False

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; choose one of {METHODS}")
        if self.verify and not get_recipe(self.method).recall:
            raise ValueError(f"verify feeds the favourites' executions in as recalled rewards: {self.method!r} has no "
                             "recall; use a recipe with recall (wmrl, wmrl-cv, wmrl-ppi, ...)")
        if not 0.0 < self.rho <= 1.0 and self.method not in ("grpo", "wm"):
            raise ValueError(f"rho must be in (0, 1] for {self.method}, got {self.rho}")
        check_staleness(self.staleness)
        if self.late not in LATE_MODES:
            raise ValueError(f"late must be one of {LATE_MODES}, got {self.late!r}")
        late_clip(self.late_ratio_max)  # validates
        check_at_bound(self.at_bound)
        if self.steps_without_anchors not in UNANCHORED_MODES:
            raise ValueError(f"steps_without_anchors must be one of {UNANCHORED_MODES}, "
                             f"got {self.steps_without_anchors!r}")
        if self.alarm_response not in ALARM_RESPONSES:
            raise ValueError(f"alarm_response must be one of {ALARM_RESPONSES}, got {self.alarm_response!r}")
        if self.staleness and not get_recipe(self.method).fuses:
            raise ValueError(f"asynchronous anchors (staleness {self.staleness}) need a recipe with both streams, "
                             f"not {self.method!r}")
        try:
            _ = self.latency_model  # validates
        except ValueError as e:  # LatencyModel speaks of seconds and its own field names
            raise ValueError(f"the run's latency model (in steps, not seconds): {e}; here median_s is latency_steps, "
                             f"sigma latency_sigma, floor_s latency_floor_steps, cap_s latency_cap_steps (None: 20 x "
                             f"latency_steps)") from None

    @property
    def latency_model(self) -> LatencyModel:
        """The latency of one execution in steps (:class:`~wmrl.core.staleness.LatencyModel`, units of steps)."""
        cap = 20.0 * self.latency_steps if self.latency_cap_steps is None else self.latency_cap_steps
        return LatencyModel(self.latency_steps, self.latency_sigma, self.latency_floor_steps, cap)

    @property
    def effective_rho(self) -> float:
        return get_recipe(self.method).anchor_fraction(self.rho)


class _RunState:
    """Per-run objects: problem, generators, router, the recipe and its state, counters."""

    def __init__(self, spec: RunSpec, problem: BanditProblem, cfg: SimConfig) -> None:
        self.spec = spec
        self.problem = problem
        self.cfg = cfg
        self.rng_sample = np.random.default_rng([spec.seed, 1])
        self.rng_wm = np.random.default_rng([spec.seed, 2])
        self.recipe = get_recipe(spec.method)
        self.router = build_router(self.recipe, spec.rho, min_anchor_every=cfg.min_every, seed=spec.seed)
        self.settings = RecipeSettings(
            normalize_std=cfg.normalize_std, calibrator_window=cfg.cal_window,
            calibrator_min_anchors=cfg.cal_min_anchors,
            calibrator_fallback="identity", calibrator_tie_break=1e-3,  # the study of record
            window_pairs=None, window_steps=cfg.fusion_window, alpha_floor=cfg.alpha_min, alpha_ceiling=cfg.alpha_max)
        self.state = self.recipe.init_state(self.settings)
        self.latency = spec.latency_model
        self.rng_latency = np.random.default_rng([spec.seed, 3])
        self.measured = np.full(problem.rewards.shape, np.nan)  # [C, K] rewards the anchors measured (recall)
        self.pending: list[dict] = []  # anchor groups in flight: arrival step, routed step, arms, rewards, log-probs
        self.staleness_log: list[int] = []
        self.n_async_groups = 0  # anchor groups routed with k > 0
        self.n_over_bound = 0  # of those, still running at the bound (not waited for unless at_bound = wait)
        self.executions = 0
        self.unanchored = UnanchoredSteps(spec.steps_without_anchors, spec.staleness, spec.late)  # skipped updates
        self.alpha_log: list[float] = []
        self.mae_log: list[tuple[float, float]] = []
        self.monitor = ExploitationMonitor(threshold=cfg.alarm_threshold, drift=cfg.alarm_drift,
                                           min_groups=cfg.alarm_min_groups)
        self.cal_bias_log: list[float] = []  # per step: mean f_hat(r_hat) - r over the world-model samples
        self.exploit_mass: list[float] = []  # per step: mean over tasks of the policy's mass on exploit arms

    def sample(self, probs: np.ndarray) -> np.ndarray:
        """[C, G] arm indices drawn from probs [C, K] by inverse CDF."""
        c, g = probs.shape[0], self.cfg.group_size
        cdf = np.cumsum(probs, axis=1)
        cdf[:, -1] = 1.0
        u = self.rng_sample.random((c, g))
        return np.minimum((u[:, :, None] > cdf[:, None, :]).sum(-1), probs.shape[1] - 1)

    def _verify_favourites(self, arms: np.ndarray, r: np.ndarray, r_hat: np.ndarray, anchor_g: np.ndarray,
                           recalled: np.ndarray | None) -> np.ndarray:
        """:attr:`RunSpec.verify`: execute the world model's favourite of every world-model group.

        Args:
            arms, r, r_hat: [C, G] the step's arms, their true rewards and world-model scores. anchor_g: [C] bool
            anchor groups (executed anyway). recalled: [N >= C*G] the recalled rewards (NaN: none), or None.

        Returns:
            [N] float64 recalled rewards with every verified favourite's true reward filled in.
        """
        C, G = arms.shape
        out = np.full(C * G, np.nan) if recalled is None else np.array(recalled, dtype=np.float64)
        for c in np.flatnonzero(~anchor_g):
            j = int(np.argmax(r_hat[c]))
            arm = int(arms[c, j])
            if not (self.spec.recall and np.isfinite(self.measured[c, arm])):
                self.executions += 1
                if self.spec.recall:
                    self.measured[c, arm] = r[c, j]
            same = arms[c] == arm  # every sample of that program in the group is the executed program
            out[c * G:(c + 1) * G][same] = r[c, j]
        return out

    def step(self, t: int, arms: np.ndarray, logp: np.ndarray) -> dict[str, Any]:
        """This run's part of the GRPO batch at step t.

        Args:
            t: the step. arms: [C, G] sampled arms. logp: [C, G] their log-probabilities under the policy of t.

        Returns:
            ``task``, ``arm`` [N] int64 rows of the loss (the C*G samples of step t, then any late anchor
            groups of the ``gradient`` mode), ``adv``, ``weights`` [N] float64 (the recipe's), ``old_logp``
            [N] float64 the behaviour log-probability (NaN: the row is on-policy, ratio 1), ``skip`` bool: no
            update for this run at step t (:func:`wmrl.core.staleness.skips_update`).
        """
        spec = self.spec
        C, G = arms.shape
        rows = np.arange(C)[:, None]
        r = self.problem.rewards[rows, arms]
        ex = self.problem.exploit[rows, arms]
        eta = self.problem.rank_error[rows, arms]
        r_hat = world_model_scores(r, ex, spec.wm, self.rng_wm, eta)
        r_hat2 = world_model_scores(r, ex, spec.wm, self.rng_wm, eta)  # a second, independent query
        anchor_g = self.router.route([f"task{c}" for c in range(C)], step=t)
        self.executions += int(anchor_g.sum()) * G
        now_g, due = anchor_g, []
        if spec.staleness:
            lat = self.latency.sample(self.rng_latency, C * G).reshape(C, G)
            if spec.latency_reward_slope:
                lat = lat * np.exp(spec.latency_reward_slope * (r - r.mean()))
            lat = lat.max(axis=1)
            arrive = arrival_steps(t, lat, spec.staleness, wait=spec.at_bound == "wait")
            now_g = anchor_g & (arrive == t)
            self.n_async_groups += int(anchor_g.sum())
            self.n_over_bound += int((anchor_g & (np.ceil(lat) > spec.staleness)).sum())
            for c in np.flatnonzero(anchor_g & (arrive > t)):
                self.pending.append(dict(at=int(arrive[c]), origin=t, task=int(c), arms=arms[c], r=r[c],
                                         r_hat=r_hat[c], r_hat2=r_hat2[c], logp=logp[c]))
            due = [p for p in self.pending if p["at"] == t]
            self.pending = [p for p in self.pending if p["at"] != t]
            over = [p for p in due if t - p["origin"] > spec.staleness]  # arrived over the bound: calibration only
            due = [p for p in due if t - p["origin"] <= spec.staleness]
        self.staleness_log += [0] * int(now_g.sum()) + [t - p["origin"] for p in due]
        a = np.repeat(now_g, G)  # [C*G] anchors consumed at their own step
        valid = np.ones(C * G, bool)
        if spec.late == "gradient":  # in flight: out of this step's loss, into the loss of its arrival step
            valid &= ~np.repeat(anchor_g & ~now_g, G)
        rf = r.reshape(-1)
        task, arm = np.repeat(np.arange(C), G), arms.reshape(-1)
        old = np.full(C * G, np.nan)
        gid, rt, rw, rw2 = np.repeat(np.arange(C), G), np.where(a, rf, np.nan), r_hat.reshape(-1), r_hat2.reshape(-1)
        if due and spec.late == "gradient":
            n = len(due)
            cat = lambda key: np.concatenate([p[key] for p in due])  # noqa: E731
            task = np.concatenate([task, np.repeat([p["task"] for p in due], G)])
            arm, old = np.concatenate([arm, cat("arms")]), np.concatenate([old, cat("logp")])
            gid = np.concatenate([gid, np.repeat(C + np.arange(n), G)])
            a, valid = np.concatenate([a, np.ones(n * G, bool)]), np.concatenate([valid, np.ones(n * G, bool)])
            rt, rw = np.concatenate([rt, cat("r")]), np.concatenate([rw, cat("r_hat")])
            rw2 = np.concatenate([rw2, cat("r_hat2")])
        recalled = self.measured[task, arm] if spec.recall else None
        if spec.verify:
            recalled = self._verify_favourites(arms, r, r_hat, anchor_g, recalled)
        x = StepInputs(step=t, group_ids=gid, is_anchor=a, valid=valid, reward_true=rt, reward_wm=rw,
                       reward_wm_repeat=rw2, reward_recalled=recalled)
        rho = self.router.fraction  # the cv fusion's inclusion probability (the alarm may have raised it)
        out = self.recipe.step(x, self.state, replace(self.settings, anchor_fraction=rho) if rho > 0 else self.settings)
        self.measured[task[a & valid], arm[a & valid]] = rt[a & valid]  # known from the next step on
        if due and spec.late == "calibration":
            cat = lambda key: np.concatenate([p[key] for p in due])  # noqa: E731
            self.recipe.learn_late(self.state, t, np.repeat([p["origin"] for p in due], G),
                                   np.repeat([p["task"] for p in due], G), cat("r"), cat("r_hat"), cat("r_hat2"))
        if spec.staleness and over and spec.at_bound == "calibration":  # after the in-bound ones, as the trainer
            cat = lambda key: np.concatenate([p[key] for p in over])  # noqa: E731
            self.recipe.learn_late(self.state, t, np.repeat([p["origin"] for p in over], G),
                                   np.repeat([p["task"] for p in over], G), cat("r"), cat("r_hat"), cat("r_hat2"))
        if self.recipe.uses_world_model:
            w = ~a[:C * G] & valid[:C * G]
            if w.any():
                self.cal_bias_log.append(float(np.mean(out.reward_wm_calibrated[:C * G][w] - rf[w])))
        if self.recipe.fuses and (a & valid).any():
            sel = a & valid
            if self.monitor.update(t, gid[sel], rt[sel], out.reward_wm_calibrated[sel], rw[sel]).fired \
                    and spec.alarm_response == "raise_anchors":
                self.router.fraction = raised_anchor_fraction(self.router.fraction, self.cfg.alarm_max_rho)
        d = (out.calibration or {}).get("diagnostics", {})
        if self.recipe.debias and "mae_before" in d:
            self.mae_log.append((d["mae_before"], d["mae_after"]))
        key = {"ppi": "ppi_lambda", "ivw": "alpha", "bias-aware": "alpha"}.get(self.recipe.fusion)
        if key is not None and out.stats[key] is not None:  # lambda is None on a step with one stream only
            self.alpha_log.append(out.stats[key])
        skip = self.unanchored.decide(int((anchor_g & ~now_g).sum()), int((a & valid).sum()))
        return dict(task=task, arm=arm, adv=out.advantages, weights=out.weights, old_logp=old, skip=skip)


def simulate(runs: list[RunSpec], cfg: SimConfig = SimConfig(), progress=None) -> tuple[Any, Any]:
    """Simulate all runs together.

    Args:
        runs: the runs (any mix of methods, world models, rho and seeds).
        cfg: shared configuration.
        progress: optional callable(step, steps) for progress display.

    Returns:
        (curves, finals) pandas DataFrames. ``curves`` has one row per run and logged step with
        columns run, method, shape, bias, sigma, rho, seed, step, executions, J (true expected
        reward), J_star, J_uniform, gap = J_star - J. ``finals`` has one row per run with the final
        J (mean of the last 10% of logged points), executions, updates skipped, mean alpha/lambda and calibration
        MAE before/after, and wall seconds of the whole simulation (``attrs["wall_s"]``).

    Raises:
        ValueError: no runs.
    """
    import torch  # noqa: PLC0415 - heavy

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
    import pandas as pd  # noqa: PLC0415 - heavy
    import torch  # noqa: PLC0415 - heavy


    C, K = cfg.n_tasks, cfg.n_arms
    problems: dict[int, BanditProblem] = {}
    for spec in runs:
        if spec.seed not in problems:
            problems[spec.seed] = BanditProblem.make(C, K, spec.seed, dim=cfg.dim)
    states = [_RunState(s, problems[s.seed], cfg) for s in runs]
    S = len(runs)
    R = torch.tensor(np.stack([st.problem.rewards for st in states]), dtype=torch.float64)
    Phi = torch.tensor(np.stack([st.problem.features for st in states]), dtype=torch.float64)
    # one Adam per run (the same per-element arithmetic as one over the stacked parameters), so that a run can skip
    # a step: its parameters, moments and step count stay as they are
    thetas = [torch.zeros(cfg.dim, dtype=torch.float64, requires_grad=True) for _ in range(S)]
    tables = [torch.zeros(C, K, dtype=torch.float64, requires_grad=True) for _ in range(S)]
    opts = [torch.optim.Adam([th, tb], lr=cfg.lr) for th, tb in zip(thetas, tables)]

    def logits() -> torch.Tensor:
        return torch.einsum("sckd,sd->sck", Phi, torch.stack(thetas)) + torch.stack(tables)
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
        idx_all, adv_all, w_all, old_all, rmax_all, skip = [], [], [], [], [], []
        rows_c = np.arange(C)[:, None]
        for i, st in enumerate(states):
            st.exploit_mass.append(float((probs[i] * st.problem.exploit).sum(-1).mean()))
            arms = st.sample(probs[i])
            part = st.step(t, arms, np.log(probs[i][rows_c, arms]))
            idx_all.append(np.stack([np.full(part["task"].size, i), part["task"], part["arm"]], axis=1))
            adv_all.append(part["adv"])
            w_all.append(part["weights"])
            old_all.append(part["old_logp"])
            rmax_all.append(np.full(part["task"].size, st.spec.late_ratio_max))
            skip.append(part["skip"])
        idx = torch.as_tensor(np.concatenate(idx_all), dtype=torch.int64)
        adv = torch.as_tensor(np.concatenate(adv_all), dtype=torch.float64)
        weights = torch.as_tensor(np.concatenate(w_all), dtype=torch.float64)
        logp = torch.log_softmax(logits(), -1)[idx[:, 0], idx[:, 1], idx[:, 2]].unsqueeze(1)
        mask = torch.ones_like(logp, dtype=torch.bool)
        old_np, rmax = np.concatenate(old_all), np.concatenate(rmax_all)
        stale = np.isfinite(old_np)  # late anchor rows: the behaviour policy's log-probability (importance ratio)
        fresh = torch.as_tensor(~stale)
        # one token per row, so the token-mean loss is a sum over rows: the late rows' terms can be taken apart
        loss, _ = grpo_loss(logp[fresh], logp[fresh].detach(), adv[fresh], mask[fresh], sample_weights=weights[fresh],
                            aggregation="token_mean")
        for rm in np.unique(rmax[stale]):
            sel = torch.as_tensor(stale & (rmax == rm))
            lo, hi = late_clip(float(rm))
            old = torch.as_tensor(old_np[sel.numpy()], dtype=torch.float64).unsqueeze(1)
            l_late, _ = grpo_loss(logp[sel], old, adv[sel], mask[sel], sample_weights=weights[sel],
                                  clip_low=lo, clip_high=hi, aggregation="token_mean")
            loss = loss + l_late
        for opt in opts:
            opt.zero_grad()
        loss.backward()
        for opt, sk in zip(opts, skip):
            if not sk:
                opt.step()
        if (t + 1) % cfg.log_every == 0 or t + 1 == cfg.steps:
            log(t + 1)
        if progress is not None:
            progress(t + 1, cfg.steps)
    wall = time.perf_counter() - t0

    meta = pd.DataFrame(
        [
            dict(run=i, method=s.method, shape=s.wm.shape, bias=s.wm.bias, sigma=s.wm.sigma,
                 rho=s.effective_rho, seed=s.seed, J_star=st.problem.optimum, J_uniform=st.problem.uniform_value,
                 staleness=s.staleness, late=s.late, late_ratio_max=s.late_ratio_max, at_bound=s.at_bound,
                 steps_without_anchors=s.steps_without_anchors, recall=s.recall and get_recipe(s.method).recall,
                 verify=s.verify)
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
    finals["updates_skipped"] = [st.unanchored.total for st in states]
    finals["staleness_mean"] = [float(np.mean(st.staleness_log)) if st.staleness_log else float("nan") for st in states]
    finals["staleness_max"] = [float(np.max(st.staleness_log)) if st.staleness_log else float("nan") for st in states]
    finals["over_bound_frac"] = [st.n_over_bound / st.n_async_groups if st.n_async_groups else float("nan")
                                 for st in states]
    finals["alpha_or_lambda_mean"] = [float(np.mean(st.alpha_log)) if st.alpha_log else float("nan") for st in states]
    finals["cal_mae_before"] = [float(np.mean([m[0] for m in st.mae_log])) if st.mae_log else float("nan")
                                for st in states]
    finals["cal_mae_after"] = [float(np.mean([m[1] for m in st.mae_log])) if st.mae_log else float("nan")
                               for st in states]
    finals["cal_bias_wm"] = [float(np.mean(st.cal_bias_log[len(st.cal_bias_log) // 2:])) if st.cal_bias_log
                             else float("nan") for st in states]  # second half of the run
    finals["alarm_steps"] = [list(st.monitor.alarm_steps) for st in states]
    finals["alarm_reasons"] = [list(st.monitor.alarm_reasons) for st in states]
    finals["exploit_mass"] = [list(st.exploit_mass) for st in states]
    finals["rho_final"] = [st.router.fraction for st in states]
    finals.attrs["wall_s"] = wall
    curves.attrs["wall_s"] = wall
    return curves, finals

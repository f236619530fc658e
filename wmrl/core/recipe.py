"""One WMRL step as one transformation, and the methods as registered recipes (docs/architecture.md, "The method's
formulas").

A step's B trajectories in M groups go in: group ids, which groups were executed (anchors), which
samples are valid, the executed rewards and the world model's raw scores. Out come the reward each
trajectory is trained on, its group-relative advantage, its per-sample loss weight and the step's
statistics. The recipe's state (:class:`RecipeState`: the isotonic calibrator and the
:class:`AnchorWindow` of out-of-sample anchor pairs) is driven by the one stream of anchor pairs, as in
the paper's reference loop object. Every caller (the trainer, the simulation, the bench, the TRL/verl
integrations, the embodied track) looks a recipe up by name with :func:`get_recipe` and calls
:meth:`Recipe.step`; nothing else computes advantages or weights.

The step (Recipe.step), with a = valid anchor samples, w = valid world-model samples::

    calibrate   r_tilde = f_hat(r_hat)       f_hat fitted on anchors of steps < t only (debias recipes;
                                             identity otherwise); then f_hat learns this step's anchors
    window      the pairs (r, r_tilde) of this step's anchors join the window (out of sample: f_hat
                did not see them when it mapped them)
    rewards     reward_used = r on anchors, r_tilde on world-model samples, NaN on invalid samples
    recalled    a world-model sample whose program's reward was measured before (StepInputs.reward_recalled)
                is trained on that measured reward instead of r_tilde; it stays in the world-model stream
                (its group, weight and the fusion statistics), and the calibration and the window see only
                this step's anchors
    advantages  GRPO group-relative, inside each group (groups never mix streams)
    weights     equal 1/n; IVW alpha/n_A and (1-alpha)/n_W with alpha from the window
                (wmrl.core.fusion.estimate_fusion, the inverse-variance alpha*); or PPI++

PPI++ (Angelopoulos et al. 2023): three sets (anchors with r and weight 1/n_A, world-model
samples with r_tilde and lambda/n_W, anchors again with r_tilde and -lambda/n_A), advantages per set. The
two anchor rows of a trajectory share log-probs, and with one policy update per batch (ratio 1, inside
the clip range) the surrogate's gradient is linear in the advantage, so they are merged exactly into one
row of weight 1/n_A and advantage A_r - lambda * A_f: the same gradient without a duplicated pass.
Weights stay positive, so a weight times an advantage is the same loss as the scaled advantage.

Arrays are numpy float64 (bool for masks, int64 for ids) throughout; the update converts the
advantages and weights to tensors once.

The registered recipes (:func:`recipe_names`):

Recalled: a world-model sample whose program was executed before trains on its measured reward.

==================  =========  ==============================  ========  =================================
name                executed   reward of world-model samples   recalled  weights
==================  =========  ==============================  ========  =================================
grpo                all        (none)                                    1/n
wm                  none       raw r_hat                       no        1/n
wmrl-raw            rho        raw r_hat                       no        1/n (pooled: the raw mixture)
anchor-only         rho        (none: weight 0)                          1/n_A on anchors
wmrl-no-denoise     rho        f_hat(r_hat)                    yes       1/n (pooled)
wmrl-no-debias      rho        raw r_hat                       yes       IVW alpha from r - r_hat
wmrl-no-recall      rho        f_hat(r_hat)                    no        IVW alpha from r - f_hat(r_hat)
wmrl                rho        f_hat(r_hat)                    yes       IVW alpha from r - f_hat(r_hat)
wmrl-bias-aware     rho        f_hat(r_hat)                    yes       bias-aware alpha (B^2 = persistent part)
wmrl-ppi            rho        f_hat(r_hat)                    yes       PPI++ 1/n_A, lambda/n_W (merged)
wmrl-flat           rho        f_hat(r_hat), no tie-break      yes       IVW (a diagnostic of the simulation)
==================  =========  ==============================  ========  =================================
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from wmrl.core.advantages import group_advantages
from wmrl.core.calibration import IsotonicCalibrator
from wmrl.core.fusion import estimate_fusion, fusion_weights, ppi_lambda, ppi_samples
from wmrl.core.window import AnchorWindow

#: World-model scores at which the calibration map is reported (calibration.jsonl ``map_x``).
CALIBRATION_GRID = np.linspace(0.0, 1.0, 51)

Fusion = Literal["equal", "ivw", "bias-aware", "ppi", "anchor-only"]
Anchors = Literal["all", "none", "fraction"]


@dataclass(frozen=True)
class RecipeSettings:
    """Hyper-parameters every recipe reads (the config's ``optim`` and ``wmrl`` sections).

    Attributes:
        normalize_std, adv_eps: GRPO advantage settings (:func:`wmrl.core.advantages.group_advantages`).
        calibrator_window: anchor pairs the calibrator is fitted on (most recent).
        calibrator_min_anchors: below this many pairs the calibrator uses ``calibrator_fallback``.
        calibrator_fallback: ``identity`` or ``affine``.
        calibrator_tie_break: the strictly increasing blend of the calibrator, in [0, 1).
        window_pairs: most recent out-of-sample anchor pairs the fusion estimate uses (None: no limit).
        window_steps: most recent steps whose pairs it uses (None: no limit).
        alpha_floor, alpha_ceiling: clip range of alpha.
        fusion_min_pairs: below this many pairs alpha is the pooled n_A / (n_A + n_W).
    """

    normalize_std: bool = True
    adv_eps: float = 1e-6
    calibrator_window: int | None = 256
    calibrator_min_anchors: int = 32
    calibrator_fallback: Literal["identity", "affine"] = "identity"
    calibrator_tie_break: float = 0.0
    window_pairs: int | None = 256
    window_steps: int | None = None
    alpha_floor: float = 0.05
    alpha_ceiling: float = 0.95
    fusion_min_pairs: int = 8


@dataclass(frozen=True)
class StepInputs:
    """One step's trajectories, as the recipe sees them (B samples).

    Attributes:
        step: the training step t (>= 1 in the trainer; any non-decreasing integer).
        group_ids: [B] int64 group of each sample (one group = G samples of one prompt).
        is_anchor: [B] bool, the sample's group was executed for real.
        valid: [B] bool, False for infrastructure failures (no reward, weight 0, left out of statistics).
        reward_true: [B] float64 executed reward r (NaN off anchors).
        reward_wm: [B] float64 raw world-model score r_hat (NaN where the world model is not asked).
        reward_wm_repeat: [B] float64 a second, independent world-model query of the same samples, or
            None; it gives the repeat-query noise variance that ``wmrl-bias-aware`` subtracts.
        reward_recalled: [B] float64 the measured reward of a world-model sample whose program was executed
            before (the warm-up corpus or an earlier anchor of the same task), NaN elsewhere; or None. Such a
            sample is trained on its measured reward instead of r_tilde (``recalled`` in the module docstring).

    Raises:
        ValueError: an array of the wrong shape or dtype (the message names it).
    """

    step: int
    group_ids: np.ndarray
    is_anchor: np.ndarray
    valid: np.ndarray
    reward_true: np.ndarray
    reward_wm: np.ndarray
    reward_wm_repeat: np.ndarray | None = None
    reward_recalled: np.ndarray | None = None

    def __post_init__(self) -> None:
        gid = np.asarray(self.group_ids)
        if gid.ndim != 1 or (gid.size and not np.issubdtype(gid.dtype, np.integer)):
            raise ValueError(f"group_ids must be a 1-D integer array [B], got {gid.dtype} of shape {gid.shape}")
        B = gid.size
        object.__setattr__(self, "group_ids", gid.astype(np.int64))
        for name, dtype in (("is_anchor", bool), ("valid", bool), ("reward_true", np.float64),
                            ("reward_wm", np.float64), ("reward_wm_repeat", np.float64),
                            ("reward_recalled", np.float64)):
            val = getattr(self, name)
            if val is None:
                continue
            a = np.asarray(val, dtype=dtype)
            if a.shape != (B,):
                raise ValueError(f"{name} must have shape [B]=({B},) like group_ids, got {a.shape}")
            object.__setattr__(self, name, a)

    @property
    def B(self) -> int:
        """Number of trajectories."""
        return int(self.group_ids.size)


@dataclass
class StepOutputs:
    """What the recipe returns for one step (arrays [B] float64).

    Attributes:
        reward_wm_calibrated: r_tilde = f_hat(r_hat) (r_hat itself without debiasing; NaN where r_hat is).
        reward_used: the reward each trajectory is trained on (NaN on invalid samples).
        advantages: group-relative advantages (PPI++: anchors carry A_r - lambda * A_f).
        weights: per-sample loss weights (0 on invalid samples and on samples outside the loss).
        stats: the step's metrics (``alpha``, ``var_anchor``, ``var_wm``, ``residual_var``, ``ppi_lambda``,
            ``weight_anchor``, ``weight_wm``, ``n_anchor_samples``, ``n_wm_samples``, ``n_recalled``, ``fusion_mode``,
            ``calibrator_mode``, ``calibrator_n_anchors``).
        calibration: the calibration before this step's update (``mode``, ``n_window``, ``map_y`` on
            :data:`CALIBRATION_GRID`, ``diagnostics`` on this step's anchors), or None without a world model.
    """

    reward_wm_calibrated: np.ndarray
    reward_used: np.ndarray
    advantages: np.ndarray
    weights: np.ndarray
    stats: dict[str, Any] = field(default_factory=dict)
    calibration: dict[str, Any] | None = None


@dataclass
class RecipeState:
    """The state a recipe carries from step to step: the calibrator (debias recipes) and the window."""

    calibrator: IsotonicCalibrator | None
    window: AnchorWindow

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state (for checkpoints)."""
        return {"calibrator": None if self.calibrator is None else self.calibrator.state_dict(),
                "window": self.window.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (a calibrator state is ignored by a recipe without one)."""
        if self.calibrator is not None and state.get("calibrator") is not None:
            self.calibrator.load_state_dict(state["calibrator"])
        self.window.load_state_dict(state["window"])


def _none_if_nan(x: Any) -> Any:
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


@dataclass(frozen=True)
class Recipe:
    """One method: which groups are executed, whether world-model rewards are debiased, how the two
    streams are weighted. Create with :func:`register_recipe`; look up with :func:`get_recipe`.

    Attributes:
        name: the registry name (also the config's ``method`` and the bench's method name).
        help: one line for tables and ``--help``.
        anchors: ``all`` (every group executed), ``none``, or ``fraction`` (rho of the groups).
        debias: isotonic debiasing of world-model rewards.
        fusion: ``equal`` (1/n), ``ivw``, ``bias-aware``, ``ppi`` or ``anchor-only`` (world-model samples
            out of the loss).
        tie_break: the calibrator's tie-break for this recipe (None: the settings' value).
        recall: world-model samples whose program was executed before train on the measured reward
            (:attr:`StepInputs.reward_recalled`; the trainer supplies it, :mod:`wmrl.core.recall`).
    """

    name: str
    help: str
    anchors: Anchors
    debias: bool = False
    fusion: Fusion = "equal"
    tie_break: float | None = None
    recall: bool = False

    @property
    def uses_world_model(self) -> bool:
        """Whether the world model scores trajectories."""
        return self.anchors != "all" and self.fusion != "anchor-only"

    @property
    def fuses(self) -> bool:
        """Whether the recipe has both streams and keeps a window of anchor pairs."""
        return self.anchors == "fraction" and self.uses_world_model

    def anchor_fraction(self, rho: float) -> float:
        """The fraction of groups executed for real: 1 (``all``), 0 (``none``) or ``rho``."""
        return {"all": 1.0, "none": 0.0}.get(self.anchors, float(rho))

    def init_state(self, settings: RecipeSettings = RecipeSettings()) -> RecipeState:
        """A fresh state: a calibrator for debias recipes, an empty anchor window."""
        cal = None
        if self.debias:
            tb = settings.calibrator_tie_break if self.tie_break is None else self.tie_break
            cal = IsotonicCalibrator(window=settings.calibrator_window, min_anchors=settings.calibrator_min_anchors,
                                     fallback=settings.calibrator_fallback, tie_break=tb)
        return RecipeState(cal, AnchorWindow(settings.window_pairs, settings.window_steps))

    # ------------------------------------------------------------------------------------------
    def _check(self, x: StepInputs) -> None:
        if self.anchors == "all" and not x.is_anchor.all():
            raise ValueError(f"recipe {self.name!r} executes every group: is_anchor must be all True")
        if self.anchors == "none" and x.is_anchor.any():
            raise ValueError(f"recipe {self.name!r} has no anchors: is_anchor must be all False")
        if not np.all(np.isfinite(x.reward_true[x.is_anchor & x.valid])):
            raise ValueError("anchor samples need a finite true reward (mark infrastructure failures invalid)")
        if self.uses_world_model and not np.all(np.isfinite(x.reward_wm[~x.is_anchor & x.valid])):
            raise ValueError(f"recipe {self.name!r} needs a finite world-model score on every valid "
                             "world-model sample")

    def _calibrate(self, x: StepInputs, state: RecipeState, a_ok: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray | None, dict[str, Any] | None]:
        """(r_tilde [B], calibrated repeat or None, the calibration record); the calibrator then learns."""
        if not self.uses_world_model:
            return x.reward_wm.copy(), None, None
        cal = state.calibrator
        if cal is None:
            rep = None if x.reward_wm_repeat is None else x.reward_wm_repeat.copy()
            return x.reward_wm.copy(), rep, {"mode": "identity", "n_window": 0,
                                             "map_y": CALIBRATION_GRID.copy(), "diagnostics": {}}
        rec = {"mode": cal.mode, "n_window": cal.n_anchors, "map_y": cal.transform(CALIBRATION_GRID)}
        r_tilde = cal.transform(x.reward_wm, step=x.step)
        rep = None if x.reward_wm_repeat is None else cal.transform(x.reward_wm_repeat, step=x.step)
        rec["diagnostics"] = cal.diagnostics(x.reward_wm[a_ok], x.reward_true[a_ok])
        cal.update(x.reward_wm[a_ok], x.reward_true[a_ok], x.step)
        return r_tilde, rep, rec

    def _advantages(self, rewards: np.ndarray, gid: np.ndarray, valid: np.ndarray, s: RecipeSettings) -> np.ndarray:
        return group_advantages(np.where(valid, rewards, 0.0), gid, normalize_std=s.normalize_std, eps=s.adv_eps,
                                valid=valid)

    def step(self, x: StepInputs, state: RecipeState, settings: RecipeSettings = RecipeSettings()) -> StepOutputs:
        """Map one step's trajectories to rewards used, advantages, weights and statistics; update
        ``state`` with this step's anchors (the calibrator after mapping them, then the window).

        Args:
            x: the step's :class:`StepInputs`.
            state: this recipe's :class:`RecipeState` (from :meth:`init_state` or a checkpoint).
            settings: :class:`RecipeSettings`.

        Returns:
            :class:`StepOutputs`.

        Raises:
            ValueError: anchors that contradict the recipe (``grpo`` with a world-model group, ``wm`` with
                an anchor), a reward missing where it is needed, or non-finite world-model scores.
        """
        self._check(x)
        gid, anc, val, rt = x.group_ids, x.is_anchor, x.valid, x.reward_true
        a_ok, w_ok = anc & val, ~anc & val
        r_tilde, rep, cal_rec = self._calibrate(x, state, a_ok)
        if self.fuses:
            state.window.add(x.step, gid[a_ok], rt[a_ok], r_tilde[a_ok], None if rep is None else rep[a_ok])
        measured = x.reward_recalled if self.recall and x.reward_recalled is not None else np.full(x.B, np.nan)
        recalled = ~anc & np.isfinite(measured)
        r_wm = np.where(recalled, measured, r_tilde)
        val_loss = a_ok if self.fusion == "anchor-only" else val
        used = np.where(val_loss, np.where(anc, rt, r_wm), np.nan)
        adv = self._advantages(used, gid, val_loss, settings)
        if self.fusion == "anchor-only":
            w_ok = np.zeros_like(w_ok)
        stats, weights = self._weights(x, state, settings, r_tilde, r_wm, adv, a_ok, w_ok)
        stats["n_recalled"] = int((recalled & w_ok).sum())
        stats["calibrator_mode"] = None if cal_rec is None else cal_rec["mode"]
        stats["calibrator_n_anchors"] = None if state.calibrator is None else state.calibrator.n_anchors
        return StepOutputs(r_tilde, used, adv, weights, stats, cal_rec)

    def learn_late(self, state: RecipeState, step: int, origin_steps: np.ndarray, group_ids: np.ndarray,
                   reward_true: np.ndarray, reward_wm: np.ndarray, reward_wm_repeat: np.ndarray | None = None
                   ) -> np.ndarray:
        """Feed N anchor pairs that arrived late (asynchronous anchors, :mod:`wmrl.core.staleness`) to the state,
        without a gradient: the window gets (r, r_tilde = f_hat(r_hat)) with f_hat as it is now (out of sample:
        it has not seen these pairs), then the calibrator learns them under ``step``, so they calibrate the
        steps after ``step`` only.

        Call it after :meth:`step` of ``step`` (whose mapping must not see them), or for a step without one.

        Args:
            state: this recipe's :class:`RecipeState`.
            step: the step at which the pairs are consumed (>= the calibrator's last update step).
            origin_steps: [N] int64 step each pair's group was routed at (<= ``step``); with ``group_ids`` it
                names the pair's cluster in the window.
            group_ids: [N] int64 group of each pair within its origin step.
            reward_true: [N] float64 executed rewards r (finite; infrastructure failures removed).
            reward_wm: [N] float64 raw world-model scores r_hat of the same samples (finite).
            reward_wm_repeat: [N] float64 a second world-model query, or None.

        Returns:
            [N] float64 r_tilde, the out-of-sample calibrated scores the window received.

        Raises:
            ValueError: a recipe without both streams (nothing to calibrate or fuse: ``grpo``, ``wm``,
                ``anchor-only``), arrays of different lengths, non-finite rewards, or a pair from the future.
        """
        if not self.fuses:
            raise ValueError(f"recipe {self.name!r} has no world-model stream to calibrate: late anchor pairs "
                             "can only feed the wmrl recipes (use a staleness bound of 0)")
        arrs = [np.asarray(a, dtype=np.float64).reshape(-1) for a in (reward_true, reward_wm)]
        og = np.asarray(origin_steps, dtype=np.int64).reshape(-1)
        gid = np.asarray(group_ids, dtype=np.int64).reshape(-1)
        n = arrs[0].size
        if {a.size for a in arrs} | {og.size, gid.size} != {n}:
            raise ValueError(f"origin_steps, group_ids, reward_true and reward_wm must all have length N, got "
                             f"{og.size}, {gid.size}, {arrs[0].size}, {arrs[1].size}")
        if not all(np.all(np.isfinite(a)) for a in arrs):
            raise ValueError("late anchor pairs need finite reward_true and reward_wm (drop infrastructure failures)")
        if n and og.max() > step:
            raise ValueError(f"a late pair routed at step {int(og.max())} cannot be consumed at step {step}")
        rt, rw = arrs
        rep = None if reward_wm_repeat is None else np.asarray(reward_wm_repeat, dtype=np.float64).reshape(-1)
        cal = state.calibrator
        r_tilde = rw.copy() if cal is None else cal.transform(rw)
        rep_t = rep if cal is None or rep is None else cal.transform(rep)
        state.window.add(og, gid, rt, r_tilde, rep_t)
        if cal is not None:
            cal.update(rw, rt, step)
        return r_tilde

    def _weights(self, x: StepInputs, state: RecipeState, s: RecipeSettings, r_tilde: np.ndarray, r_wm: np.ndarray,
                 adv: np.ndarray, a_ok: np.ndarray, w_ok: np.ndarray) -> tuple[dict[str, Any], np.ndarray]:
        """Fill ``adv`` (PPI++ merges in place) and return (stats, weights [B]); ``r_wm`` is the world-model
        samples' reward (r_tilde, or the recalled measurement)."""
        B = x.B
        n_a, n_w = int(a_ok.sum()), int(w_ok.sum())
        weights = np.zeros(B)
        stats: dict[str, Any] = {"alpha": None, "var_anchor": None, "var_wm": None, "residual_var": None,
                                 "ppi_lambda": None, "weight_anchor": None, "weight_wm": None,
                                 "n_anchor_samples": n_a, "n_wm_samples": n_w, "fusion_mode": None}
        fixed_alpha = {"all": 1.0, "none": 0.0}.get(self.anchors)
        if n_a + n_w == 0:
            stats["alpha"] = fixed_alpha
            return stats, weights
        win = state.window
        est = None
        if self.fuses and len(win):
            est = estimate_fusion(win.true, win.calibrated, win.clusters(), max(n_a, 1), max(n_w, 1),
                                  alpha_min=s.alpha_floor, alpha_max=s.alpha_ceiling, min_pairs=s.fusion_min_pairs,
                                  bias_aware=self.fusion == "bias-aware", noise_var=win.noise_var())
            stats.update(var_anchor=_none_if_nan(est.var_anchor), var_wm=_none_if_nan(est.var_wm),
                         residual_var=_none_if_nan(est.sigma2_xi))
        use = a_ok | w_ok
        if self.fusion in ("equal", "anchor-only") or n_a == 0 or n_w == 0:
            weights[use] = 1.0 / (n_a + n_w)
            alpha = n_a / (n_a + n_w)
            stats["fusion_mode"] = "equal"
        elif self.fusion == "ppi":
            lam = ppi_lambda(win.true, win.calibrated, n_a, n_w, group_ids=win.clusters()) if len(win) >= 2 else 0.0
            alpha = self._ppi(x, s, r_tilde, r_wm, adv, weights, a_ok, w_ok, float(lam))
            stats["ppi_lambda"] = float(lam)
            stats["fusion_mode"] = "ppi"
        else:
            alpha = est.alpha if est is not None else n_a / (n_a + n_w)
            weights[use] = fusion_weights(x.is_anchor[use], float(alpha))
            stats["fusion_mode"] = est.mode if est is not None else "pooled"
        stats["alpha"] = float(alpha) if fixed_alpha is None else fixed_alpha
        stats["weight_anchor"] = float(weights[a_ok][0]) if n_a else None
        stats["weight_wm"] = float(weights[w_ok][0]) if n_w else None
        return stats, weights

    @staticmethod
    def _ppi(x: StepInputs, s: RecipeSettings, r_tilde: np.ndarray, r_wm: np.ndarray, adv: np.ndarray,
             weights: np.ndarray, a_ok: np.ndarray, w_ok: np.ndarray, lam: float) -> float:
        """PPI++ with the two anchor rows merged (module docstring); fills ``adv`` and ``weights`` in place
        and returns the equivalent alpha = 1 / (1 + lambda). The rectifier's anchor rows use r_tilde; the
        world-model rows ``r_wm``."""
        gid, n_a, n_w = x.group_ids, int(a_ok.sum()), int(w_ok.sum())
        ps = ppi_samples(x.reward_true[a_ok], r_tilde[a_ok], r_wm[w_ok], lam)
        a_idx, w_idx = np.flatnonzero(a_ok), np.flatnonzero(w_ok)
        wa = np.zeros(x.B)  # sum over the three sets of weight * advantage, per trajectory
        for stream, idx in ((0, a_idx), (1, w_idx), (2, a_idx)):
            sel = ps.stream == stream
            if not sel.any():
                continue
            src = idx[ps.source_index[sel]]
            a_s = group_advantages(ps.rewards[sel], gid[src], normalize_std=s.normalize_std, eps=s.adv_eps)
            np.add.at(wa, src, ps.weights[sel] * a_s)
        weights[a_ok] = 1.0 / n_a
        weights[w_ok] = lam / n_w
        adv[a_ok] = wa[a_ok] * n_a  # = A_r - lambda * A_f
        if lam > 0:
            adv[w_ok] = wa[w_ok] * n_w / lam  # = A_f
        return 1.0 / (1.0 + lam)


def calibration_record(step: int, out: StepOutputs, reward_wm: np.ndarray, reward_true: np.ndarray,
                       anchors: np.ndarray) -> dict[str, Any] | None:
    """The calibration.jsonl line of one step (docs/run-directory.md): the map the step was calibrated with
    (``mode``, ``n_window``, ``map_x`` = :data:`CALIBRATION_GRID`, ``map_y``), its diagnostics, and the
    anchors' raw, calibrated and true rewards (lists). None when the recipe has no world model.

    Args:
        step: the step. out: the recipe's :class:`StepOutputs` of that step.
        reward_wm, reward_true: [B] float64 r_hat and r of the step's trajectories.
        anchors: [B] bool, the anchor samples to list (valid anchors).
    """
    cal = out.calibration
    if cal is None:
        return None
    a = np.asarray(anchors, dtype=bool)
    return {"step": int(step), "mode": cal["mode"], "n_window": cal["n_window"],
            "map_x": CALIBRATION_GRID.tolist(), "map_y": np.asarray(cal["map_y"]).tolist(),
            "anchor_wm": np.asarray(reward_wm)[a].tolist(),
            "anchor_wm_calibrated": out.reward_wm_calibrated[a].tolist(),
            "anchor_true": np.asarray(reward_true)[a].tolist(), "diagnostics": cal["diagnostics"]}


#: The registry: recipe name -> :class:`Recipe`.
RECIPES: dict[str, Recipe] = {}


def register_recipe(recipe: Recipe) -> Recipe:
    """Add ``recipe`` to the registry under ``recipe.name`` (verl's ``register_adv_est`` pattern).

    Raises:
        ValueError: the name is taken.
    """
    if recipe.name in RECIPES:
        raise ValueError(f"a recipe named {recipe.name!r} is registered already")
    RECIPES[recipe.name] = recipe
    return recipe


def get_recipe(name: str) -> Recipe:
    """The registered recipe ``name``.

    Raises:
        KeyError: no such recipe; the message lists the registered names.
    """
    try:
        return RECIPES[name]
    except KeyError:
        raise KeyError(f"unknown method {name!r}; registered recipes: {', '.join(RECIPES)}") from None


def recipe_names() -> list[str]:
    """The registered names, in registration order."""
    return list(RECIPES)


for _r in (
    Recipe("grpo", "GRPO with every group executed for real (the baseline)", "all"),
    Recipe("wm", "pure world model: every reward predicted, no anchors, no correction", "none"),
    Recipe("wmrl", "WMRL: anchor executions + isotonic debiasing + inverse-variance fusion + recalled executions",
           "fraction", debias=True, fusion="ivw", recall=True),
    Recipe("wmrl-raw", "the raw mixture: anchors mixed in with raw world-model rewards, no correction", "fraction",
           fusion="equal"),
    Recipe("wmrl-no-recall", "WMRL without recalled executions (the paper's WMRL: every world-model sample "
           "predicted)", "fraction", debias=True, fusion="ivw"),
    Recipe("wmrl-no-debias", "WMRL without the isotonic debiasing (raw world-model rewards)", "fraction",
           fusion="ivw", recall=True),
    Recipe("wmrl-no-denoise", "WMRL without inverse-variance fusion (every sample weighted equally)", "fraction",
           debias=True, fusion="equal", recall=True),
    Recipe("wmrl-ppi", "WMRL with the PPI++ rectified estimator instead of inverse-variance fusion", "fraction",
           debias=True, fusion="ppi", recall=True),
    Recipe("wmrl-bias-aware", "WMRL with a bias-aware alpha (a persistent bias B^2 counted as variance)",
           "fraction", debias=True, fusion="bias-aware", recall=True),
    Recipe("anchor-only", "GRPO on the anchor groups only (rho of the groups executed, the rest dropped)",
           "fraction", fusion="anchor-only"),
    Recipe("wmrl-flat", "WMRL with a calibrator without tie-break (a diagnostic of the simulation)", "fraction",
           debias=True, fusion="ivw", tie_break=0.0, recall=True),
):
    register_recipe(_r)

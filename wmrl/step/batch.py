"""The step batch: what one training step carries from stage to stage, in every environment.

The engine (:mod:`wmrl.step.engine`) and the trainers fill it stage by stage; the text track's trainer adds the
fields of asynchronous anchors and multi-turn episodes. Arrays are numpy, [B] over the step's trajectories in
[M] groups, unless said otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from wmrl.core.recipe import StepOutputs
from wmrl.step.environment import Outcomes, Predictions

if TYPE_CHECKING:
    from wmrl.episodes.rollout import Episodes
    from wmrl.world_model.outcome import OutcomePrediction


class TurnObservations(Protocol):
    """The multi-turn feedback of a step, as the step batch keeps it: the world model's observation of each
    (episode, turn) it scored (:class:`wmrl.step.multiturn.TurnFeedbackFn`)."""

    observations_wm: dict[tuple[int, int], Any]


@dataclass
class LatePairs:
    """Anchor samples consumed at a later step than their own ([N] arrays; ``staleness`` in steps). ``parts``:
    per origin step, (that step's ``RolloutBatch``, [n] int64 row indices into it), in the order of the arrays,
    so the samples can enter this step's loss with their behaviour log-probabilities (``late="gradient"``)."""

    origin_steps: np.ndarray
    group_ids: np.ndarray
    reward_true: np.ndarray
    reward_wm: np.ndarray
    staleness: np.ndarray
    parts: list[tuple[Any, np.ndarray]] = field(default_factory=list)

    @property
    def n(self) -> int:
        return int(self.reward_true.size)


@dataclass
class StepBatch:
    """What one training step carries from stage to stage: B trajectories in M groups (arrays [B]
    unless said otherwise). Each stage fills its part:

    - generate: ``step``, ``batch`` (the environment's trajectories: the policy's ``RolloutBatch`` for text tasks),
      ``gid`` ([B] int64 group ids in 0..M-1), ``group_keys`` ([M] the router's keys: task ids, initial states;
      default the ids of ``tasks``), ``tasks`` ([M] the groups' tasks, text tasks only).
    - route: ``anchor_groups`` ([M] bool), ``is_anchor``.
    - execute: ``r_true`` (NaN off anchors and on infrastructure failures), ``status`` (execution
      status or None), ``error`` (the execution's error message, or None), ``valid`` (False:
      infrastructure failure or no reward; dropped everywhere); with asynchronous anchors ``is_anchor``
      loses the groups still in flight and ``late`` holds the pairs of earlier steps consumed now.
    - wm_predict: ``reward_wm`` (raw prediction r_hat; NaN when the world model is not used), ``outcome_wm``
      (the world model's :class:`~wmrl.world_model.outcome.OutcomePrediction` of the B programs; None when it
      is not used or has no ``predict_outcome``).
    - recipe: ``out`` (:class:`~wmrl.core.recipe.StepOutputs`: calibrated world-model reward, reward used,
      advantages, weights, statistics), ``cal_rec`` (the calibration.jsonl line, or None), ``skip_update``
      (asynchronous anchors: the step's own anchor groups are in flight and nothing else arrived, so the update
      is skipped, :func:`wmrl.core.staleness.skips_update`);
      ``recalled`` ([B] bool, recipes with recall: world-model samples trained on the measured reward of their
      program, executed before; None without recall).
    - update: ``update`` (loss stats); wm_refresh: ``refresh`` (the refit's report, or None).
    """

    step: int
    tasks: list[Any]
    batch: Any
    gid: np.ndarray
    group_keys: list[str] = field(default_factory=list)
    anchor_groups: np.ndarray = field(init=False)
    is_anchor: np.ndarray = field(init=False)
    reward_wm: np.ndarray = field(init=False)
    outcome_wm: OutcomePrediction | None = None
    reward_true: np.ndarray = field(init=False)
    status: list[str | None] = field(init=False)
    error: list[str | None] = field(init=False)
    valid: np.ndarray = field(init=False)
    out: StepOutputs = field(init=False)  # stage recipe
    recalled: np.ndarray | None = None  # stage recipe: [B] bool, world-model samples trained on a measured reward
    verified: np.ndarray | None = None  # stage verify: [B] float64 recalled rewards with the verified favourites
    late: LatePairs | None = None
    late_out: StepOutputs | None = None  # the late anchor rows' outputs (asynchronous anchors, gradient mode)
    cal_rec: dict[str, Any] | None = None
    episodes: Episodes | None = None  # multi-turn: the step's B episodes
    feedback: TurnObservations | None = None  # multi-turn: the step's feedback (wmrl.step.multiturn.TurnFeedbackFn)
    update: dict[str, Any] = field(default_factory=dict)
    refresh: dict[str, Any] | None = None
    skip_update: bool = False
    exploit: dict[str, Any] = field(default_factory=dict)  # the exploitation alarm's metrics (wmrl.training.alarm)
    env_stats: dict[str, Any] = field(default_factory=dict)  # what the environment reported (its world model's work)

    def __post_init__(self) -> None:
        if not self.group_keys:
            self.group_keys = [str(getattr(t, "id", t)) for t in self.tasks]
        B = self.B
        self.reward_wm = np.full(B, np.nan)
        self.reward_true = np.full(B, np.nan)
        self.status = [None] * B
        self.error = [None] * B
        self.valid = np.ones(B, dtype=bool)

    def apply_outcomes(self, res: Outcomes) -> None:
        """Write real outcomes into the step batch, the one place that does: ``status``, ``error`` and ``reward_true``
        at ``res.idx``; an outcome that is not valid (:meth:`Outcomes.from_results`' rule) leaves its reward NaN and
        its trajectory out of the step (``valid`` False)."""
        for j, i in enumerate(np.asarray(res.idx, dtype=np.int64)):
            self.status[i], self.error[i] = res.status[j], res.error[j]
            if res.valid[j] and np.isfinite(res.reward_true[j]):
                self.reward_true[i] = float(res.reward_true[j])
            else:
                self.valid[i] = False

    def apply_predictions(self, pred: Predictions) -> None:
        """Write the world model's predictions of the step's B trajectories (``reward_wm``, ``outcome_wm``, the
        environment's statistics), the one place that does; :meth:`wmrl.step.engine.StepEngine.predict` checked
        them."""
        self.reward_wm, self.outcome_wm = np.asarray(pred.reward_wm, dtype=np.float64), pred.outcome
        self.env_stats.update(pred.stats)

    @property
    def B(self) -> int:
        """Trajectories of the step."""
        return int(self.gid.size)

    @property
    def M(self) -> int:
        """Groups of the step."""
        return len(self.group_keys)

    @property
    def anchor_idx(self) -> np.ndarray:
        """Indices of the anchor trajectories (executed)."""
        return np.flatnonzero(self.is_anchor)

    @property
    def a_ok(self) -> np.ndarray:
        """Anchor trajectories with a true reward (calibration pairs)."""
        return np.asarray(self.is_anchor & self.valid, dtype=bool)

    @property
    def n_infra(self) -> int:
        """Executions of this step dropped as infrastructure failures (or without a reward)."""
        return int((~self.valid).sum())

    @cached_property
    def completion_tokens(self) -> np.ndarray:
        """Completion length (tokens) per trajectory (multi-turn: the policy tokens of all its turns)."""
        if self.episodes is not None:
            return np.asarray(self.episodes.tokens())
        mask = getattr(self.batch, "completion_mask", None)
        if mask is None:  # an environment whose trajectories are not token sequences (Meta-World episodes)
            return np.zeros(self.B, dtype=np.int64)
        return np.asarray(mask.sum(dim=1).cpu().numpy())

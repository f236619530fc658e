"""The trainer hook of WMRL in verl 0.9.1: verl's own sync PPO trainer whose advantage step runs the ``wmrl``
estimator with ``non_tensor_batch`` (docs/integrations.md). Imports verl: use it in the verl environment.

verl 0.9.1 trains with its V1 trainer by default (``trainer.use_v1=true``; the legacy ``RayPPOTrainer`` is
deprecated). The V1 trainer is picked by name from verl's trainer registry
(``verl.trainer.ppo.v1.register_trainer``, ``trainer.v1.trainer_mode``) and computes advantages in one method,
``PPOTrainer._compute_advantage(batch, metrics)``: it reads the batch from TransferQueue, folds the KL penalty,
applies the rollout correction and calls ``compute_advantage``, which passes ``non_tensor_batch`` to ``gdpo``
only, and it does not read the reward manager's extra info (``extra_fields["reward_extra_info"]``) at all.

:class:`WMRLPPOTrainerSync` (trainer mode ``wmrl_sync``) is ``PPOTrainerSync`` with that one method
overridden: for ``algorithm.adv_estimator=wmrl`` it reads the same fields plus ``extra_fields``, puts the
reward manager's ``wmrl_is_anchor`` / ``wmrl_reward_true`` / ``wmrl_reward_wm`` into ``non_tensor_batch``,
calls :func:`wmrl.integrations.verl.wmrl_compute_advantage` and writes ``advantages`` / ``returns`` back
as verl does; for every other estimator it is verl's method unchanged (``super()``). Nothing in verl is
patched.

The registries are per process, so the trainer, the estimator and the reward manager must be registered in
the process that runs verl's ``TaskRunnerV1``. verl's ``run_ppo(config, task_runner_class)`` takes the task
runner as an argument ("for recipe to change TaskRunner"); :func:`wmrl_task_runner_class` is verl's
``TaskRunnerV1`` (its ``run`` and ``init_agent_loop_manager``, verl's code) that registers wmrl's parts
when the actor starts. ``python -m wmrl.integrations.verl_main`` is verl's ``main_ppo`` with it.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import transfer_queue as tq
from tensordict import TensorDict
from verl.protocol import DataProto
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch
from verl.trainer.ppo.v1 import PPOTrainerSync, get_trainer_cls, register_trainer
from verl.workers.utils.padding import response_to_nested

from wmrl.integrations.verl import ESTIMATOR_STATE, register_verl, settings_from_env, wmrl_compute_advantage

#: ``trainer.v1.trainer_mode`` of :class:`WMRLPPOTrainerSync`.
TRAINER_MODE = "wmrl_sync"
#: the reward manager's per-sample extra info that the estimator reads from ``non_tensor_batch``.
WMRL_KEYS = ("wmrl_is_anchor", "wmrl_reward_true", "wmrl_reward_wm")
#: the fields verl 0.9.1's ``PPOTrainer._compute_advantage`` reads from TransferQueue.
VERL_FIELDS = ["uid", "response_mask", "rm_scores", "rollout_log_probs", "old_log_probs", "ref_log_prob", "values"]


def batch_from_transfer_queue(batch: Any) -> tuple[DataProto, Any]:
    """The ``DataProto`` verl 0.9.1's ``_compute_advantage`` builds from TransferQueue, plus the reward
    manager's extra info in ``non_tensor_batch``; returns ``(data, response_mask)`` (the nested mask verl
    writes back with).

    Raises:
        ValueError: a sample without the ``wmrl`` reward manager's extra info, or an agent loop with more
            than one output per session (keys ``{uid}_{session}_{index}``, index > 0: the recipe counts one
            sample per program, and verl copies the final reward onto every output of a session).
    """
    multi = [k for k in batch.keys if not k.endswith("_0")]
    if multi:
        raise ValueError(f"the wmrl estimator takes one output per session (single-turn programs); got {multi[:3]}")
    got = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=VERL_FIELDS)
    response_mask = got["response_mask"]
    data = DataProto(batch=got.to_padded_tensor())
    data.batch["token_level_scores"] = data.batch["rm_scores"]
    data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    data.non_tensor_batch["uid"] = np.array(data.batch.pop("uid").tolist(), dtype=object)
    extra = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
    infos = [(e.get("reward_extra_info") or {}) if isinstance(e, dict) else {} for e in list(extra["extra_fields"])]
    missing = [k for k, info in zip(batch.keys, infos) if any(key not in info for key in WMRL_KEYS)]
    if missing:
        raise ValueError(f"samples {missing[:3]} lack the wmrl reward manager's extra info {WMRL_KEYS}: set "
                         "reward.reward_manager.name=WMRLRewardManager (docs/integrations.md)")
    for key in WMRL_KEYS:
        data.non_tensor_batch[key] = np.array([info[key] for info in infos], dtype=object)
    return data, response_mask


def wmrl_advantage_step(config: Any, batch: Any, metrics: dict) -> Any:
    """verl 0.9.1's ``PPOTrainer._compute_advantage`` for ``algorithm.adv_estimator=wmrl``: the same reads,
    rollout correction and write-back, with :func:`wmrl_compute_advantage` (given ``non_tensor_batch``) as
    the estimator. ``batch`` is a TransferQueue ``KVBatchMeta``; returns the one ``kv_batch_put`` returns.

    Raises:
        ValueError: ``algorithm.use_kl_in_reward`` is on (the recipe reads the rewards as the reward
            manager's scores), or :func:`batch_from_transfer_queue`'s errors.
    """
    if config.algorithm.use_kl_in_reward:
        raise ValueError("adv_estimator=wmrl needs algorithm.use_kl_in_reward=False")
    data, response_mask = batch_from_transfer_queue(batch)
    rollout_corr_config = config.algorithm.get("rollout_correction", None)
    bypass = rollout_corr_config and rollout_corr_config.get("bypass_mode", False)
    rollout_correction = rollout_corr_config is not None and "rollout_log_probs" in data.batch and not bypass
    if rollout_correction:
        data, is_metrics = compute_rollout_correction_and_add_to_batch(data, rollout_corr_config)
        metrics.update(is_metrics)
    data = wmrl_compute_advantage(data, config=config.algorithm)
    method = settings_from_env()["method"]
    if method in ESTIMATOR_STATE.last:
        x, _ = ESTIMATOR_STATE.last[method]
        metrics["wmrl/anchor_fraction"] = float(np.mean(x.is_anchor))
        metrics["wmrl/valid_fraction"] = float(np.mean(x.valid))
    fields = ["advantages", "returns"]
    if rollout_correction:
        fields.append("response_mask")
        if "rollout_is_weights" in data.batch:
            fields.append("rollout_is_weights")
    output = TensorDict({f: response_to_nested(data.batch[f], response_mask) for f in fields}, batch_size=len(batch))
    return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=output)


@register_trainer(TRAINER_MODE)
class WMRLPPOTrainerSync(PPOTrainerSync):
    """verl's ``PPOTrainerSync`` whose advantage step is :func:`wmrl_advantage_step` when
    ``algorithm.adv_estimator == "wmrl"`` and verl's own ``_compute_advantage`` otherwise."""

    def _compute_advantage(self, batch: Any, metrics: dict) -> Any:
        if self.config.algorithm.adv_estimator != "wmrl":
            return super()._compute_advantage(batch, metrics)
        return wmrl_advantage_step(self.config, batch, metrics)


def register_all() -> dict[str, Any]:
    """The ``wmrl`` reward manager and estimator (:func:`register_verl`) and the ``wmrl_sync`` trainer, in this
    process's verl registries (idempotent)."""
    return {**register_verl(), "trainer": get_trainer_cls(TRAINER_MODE)}


def _verl_task_runner() -> Any:
    """verl's ``TaskRunnerV1`` class body. verl decorates it with ``ray.remote`` and Ray forbids subclassing
    an actor class, so its methods are taken from the class Ray keeps (``__ray_metadata__.modified_class``)."""
    from verl.trainer.main_ppo import TaskRunnerV1  # noqa: PLC0415 - optional dependency

    cls = getattr(getattr(TaskRunnerV1, "__ray_metadata__", None), "modified_class", None)
    if cls is None or not callable(getattr(cls, "run", None)):
        raise RuntimeError("cannot find verl's TaskRunnerV1 methods (a Ray or verl version other than the tested "
                           "ray 2.60 / verl 0.9.1)")
    return cls


class WMRLTaskRunner:
    """verl's ``TaskRunnerV1`` (``run`` and ``init_agent_loop_manager`` are verl's functions) that first
    registers wmrl's reward manager, estimator and trainer in its own process (the Ray actor's)."""

    def __init__(self) -> None:
        register_all()
        self.config = None
        self.trainer = None
        self.agent_loop_manager = None

    def registered(self) -> dict[str, str]:
        """What this process's registries hold (a check that the actor registered wmrl's parts)."""
        from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls  # noqa: PLC0415 - optional dependency
        from verl.trainer.ppo.core_algos import get_adv_estimator_fn  # noqa: PLC0415 - optional dependency

        return {"trainer": get_trainer_cls(TRAINER_MODE).__qualname__,
                "adv_estimator": get_adv_estimator_fn("wmrl").__qualname__,
                "reward_manager": get_reward_manager_cls("wmrl").__qualname__}

    def init_agent_loop_manager(self) -> None:
        return _verl_task_runner().init_agent_loop_manager(self)

    def run(self, config: Any) -> None:
        return _verl_task_runner().run(self, config)


def wmrl_task_runner_class() -> Any:
    """:class:`WMRLTaskRunner` as a Ray actor class (``ray.remote``, as verl's ``TaskRunnerV1``), for verl's
    ``run_ppo(config, task_runner_class=...)``."""
    import ray  # noqa: PLC0415 - optional dependency

    return ray.remote(WMRLTaskRunner)

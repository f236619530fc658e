"""``python -m wmrl.integrations.verl_main <verl overrides>``: verl 0.9.1's ``main_ppo`` with wmrl's task
runner, so ``algorithm.adv_estimator=wmrl`` trains (docs/integrations.md, configs/verl/wmrl_mledojo.sh).

It takes verl's own Hydra config (``verl/trainer/config/ppo_trainer.yaml``) and overrides, runs verl's
``auto_set_device`` and ``validate_config`` as ``main_ppo`` does, then :func:`prepare_config` and verl's
``run_ppo`` with :func:`wmrl.integrations.verl_trainer.wmrl_task_runner_class`. With any other estimator
it trains exactly as ``main_ppo`` (the ``wmrl_sync`` trainer defers to verl's advantage step).
"""
from __future__ import annotations

import os
from typing import Any

import hydra
import verl.trainer.main_ppo as verl_main_ppo
from omegaconf import open_dict
from wmrl.integrations.verl_trainer import register_all, wmrl_task_runner_class
from wmrl.integrations.verl_trainer import TRAINER_MODE

#: verl's Hydra config folder (the one ``verl.trainer.main_ppo`` uses).
VERL_CONFIG_DIR = os.path.join(os.path.dirname(verl_main_ppo.__file__), "config")


def prepare_config(config: Any) -> Any:
    """Check and complete a verl config for wmrl; returns it.

    With ``algorithm.adv_estimator=wmrl``: verl's V1 trainer (``trainer.use_v1``) and the ``wmrl_sync`` trainer
    mode (the default ``sync`` is switched to it; ``colocate_async`` / ``separate_async`` are refused: wmrl's
    hook is built on the sync trainer only) and ``algorithm.use_kl_in_reward=False``.

    Raises:
        ValueError: ``use_v1=False`` (the legacy ``RayPPOTrainer`` calls ``compute_advantage`` inside ``fit()``,
            with no method to override), an async trainer mode, or ``use_kl_in_reward=True``.
    """

    if config.algorithm.adv_estimator != "wmrl":
        return config
    if not config.trainer.use_v1:
        raise ValueError("adv_estimator=wmrl needs verl's V1 trainer (trainer.use_v1=True): the legacy RayPPOTrainer "
                         "computes advantages inside fit(), which wmrl does not patch")
    mode = config.trainer.v1.trainer_mode
    if mode == "sync":
        with open_dict(config):
            config.trainer.v1.trainer_mode = TRAINER_MODE
    elif mode != TRAINER_MODE:
        raise ValueError(f"adv_estimator=wmrl runs with trainer.v1.trainer_mode={TRAINER_MODE} (verl's sync trainer "
                         f"with wmrl's advantage step), not {mode!r}")
    if config.algorithm.use_kl_in_reward:
        raise ValueError("adv_estimator=wmrl needs algorithm.use_kl_in_reward=False")
    return config


def run(config: Any) -> None:
    """``main_ppo``'s body with wmrl's task runner."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy  # noqa: PLC0415 - optional dependency
    from verl.utils.config import validate_config  # noqa: PLC0415 - optional dependency
    from verl.utils.device import auto_set_device  # noqa: PLC0415 - optional dependency


    register_all()  # this process too: verl's checks resolve names in its registries
    auto_set_device(config)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    prepare_config(config)
    verl_main_ppo.run_ppo(config, task_runner_class=wmrl_task_runner_class())


@hydra.main(config_path=VERL_CONFIG_DIR, config_name="ppo_trainer", version_base=None)
def main(config: Any) -> None:
    run(config)


if __name__ == "__main__":
    main()

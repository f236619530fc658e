#!/usr/bin/env bash
# WMRL in verl 0.9.1 for a GPU user (docs/integrations.md). NOT RUN here (no GPU): a recipe to adapt.
# Needs a verl environment (scripts/verl-env.sh plus verl's vllm extra on the GPU machine), wmrl importable
# there (PYTHONPATH=<checkout> or installed), MLE-Dojo's prepared competitions and bubblewrap on every Ray node.
# wmrl.integrations.verl_main is verl's main_ppo (same Hydra config and overrides) with wmrl's task runner:
# adv_estimator=wmrl switches verl's V1 trainer mode 'sync' to 'wmrl_sync' (verl's sync trainer whose
# _compute_advantage gives the wmrl estimator non_tensor_batch). Only its advantage step was run (on CPU).
set -euo pipefail
export WMRL_METHOD=wmrl WMRL_ANCHOR_FRACTION=0.1 WMRL_SEED=0
export WMRL_TASKS_ROOT=/data/mle-dojo/prepared          # one folder per competition (wmrl.tasks.loader)
export WMRL_SCAFFOLD=script
export WMRL_EXECUTOR=ray WMRL_EXEC_WORKERS=24           # 24 sandbox slots on the Ray cluster
export WMRL_WORLD_MODEL=my_wm:build                      # module:function returning a wmrl WorldModel on the
                                                         # policy's backbone (e.g. GenerativeWorldModel)
python -m wmrl.integrations.verl_main \
  algorithm.adv_estimator=wmrl algorithm.use_kl_in_reward=False \
  reward.reward_manager.source=importlib \
  reward.reward_manager.module.path="$(python -c 'import wmrl.integrations.verl as m; print(m.__file__)')" \
  reward.reward_manager.name=WMRLRewardManager \
  data.train_files=/data/mle-dojo/verl/train.parquet data.val_files=/data/mle-dojo/verl/val.parquet \
  actor_rollout_ref.model.path=Qwen/Qwen2.5-Coder-7B-Instruct \
  actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=8 \
  trainer.n_gpus_per_node=8 trainer.nnodes=1 "$@"

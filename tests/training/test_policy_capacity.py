"""Which weights the policy trains (``model.finetune``) and the world model's own weights."""
from __future__ import annotations

import torch

from wmrl.training import parts
from wmrl.training.config import load_config


def test_auto_finetune_is_full_for_a_random_backbone_and_lora_for_a_pretrained_one():
    assert parts.policy_lora(load_config(None, ["model.name=tiny"])) is None
    lora = parts.policy_lora(load_config(None, ["model.name=smollm2-135m", "model.lora_r=4", "model.lora_alpha=8"]))
    assert (lora.r, lora.alpha) == (4, 8)
    assert parts.policy_lora(load_config(None, ["model.name=tiny", "model.finetune=lora"])) is not None
    assert parts.policy_lora(load_config(None, ["model.name=smollm2-135m", "model.finetune=full"])) is None


def test_world_model_keeps_its_own_weights_when_the_policy_trains_the_base():
    from wmrl.models.backbone import tiny_backbone
    from wmrl.models.policy import Policy

    model, tok = tiny_backbone(seed=0)
    wm_model = parts.world_model_backbone(model, None)
    assert wm_model is not model
    before = {k: v.clone() for k, v in wm_model.state_dict().items()}
    policy = Policy(model, tok, lora=None)
    # no storage is shared: an update of every policy weight leaves the world model's untouched
    with torch.no_grad():
        for p in policy.trainable_parameters():
            p.add_(1.0)
    after = wm_model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    # a LoRA policy never changes the base: the world model shares it (and adds its own adapter)
    assert parts.world_model_backbone(model, object()) is model


def test_a_token_budget_below_the_longest_program_is_refused_before_the_run_starts(small_suite, tmp_path):
    import pytest

    from wmrl.training.config import ConfigError
    from wmrl.training.run import run_training

    run = tmp_path / "run"
    cfg = load_config("configs/tiny.yaml", [f"tasks.root={small_suite}", f"run_dir={run}", "method=grpo",
                                            "rollout.max_new_tokens=8"])
    with pytest.raises(ConfigError, match=r"rollout.max_new_tokens=8 is shorter .* set it to at least 6\d"):
        run_training(cfg)
    assert not run.exists()  # a failed start leaves no run directory behind

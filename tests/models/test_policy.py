"""Policy on the tiny random backbone: sampling, log-probs, reference, LoRA step, save/load."""
from __future__ import annotations

import torch

from wmrl.models.policy import Policy
from wmrl.models.scaffolds import get_scaffold
from wmrl.models.types import LoraSettings


def _policy(_tiny, **kw):
    from wmrl.models.backbone import tiny_backbone

    model, tok = tiny_backbone(seed=0)  # fresh weights per test: adapters mutate the model
    return Policy(model, tok, **kw)


def test_grammar_sampling_is_valid_and_logprobs_match(tasks, tiny):
    pol = _policy(tiny)
    batch = pol.sample(tasks, "grammar", group_size=4, max_new_tokens=128, generator_seed=0)
    B = 2 * 4
    assert len(batch) == B
    assert batch.group_ids == [0] * 4 + [1] * 4
    assert batch.task_ids[0] == tasks[0].id and batch.task_ids[-1] == tasks[1].id
    assert batch.input_ids.shape == batch.attention_mask.shape == batch.completion_mask.shape
    assert batch.old_logprobs.dtype == torch.float32
    # every completion finished its grammar: a make_pipeline expression of the right kind
    assert batch.valid is not None and all(batch.valid)
    for comp, task in zip(batch.completions, [tasks[0]] * 4 + [tasks[1]] * 4):
        assert comp.startswith("make_pipeline(") and comp.endswith(")")
        is_classifier = "Classifier" in comp or "LogisticRegression" in comp or "GaussianNB" in comp
        assert is_classifier == (task.type != "regression")
    assert all("def build_model():" in p for p in batch.programs)
    # prompt and padding are masked out; completions start at prompt_len
    P = batch.prompt_len
    assert not batch.completion_mask[:, :P].any()
    assert (batch.old_logprobs[~batch.completion_mask] == 0).all()
    assert (batch.old_logprobs[batch.completion_mask] <= 0).all()
    lp = pol.logprobs(batch)
    assert lp.shape == batch.input_ids.shape and lp.requires_grad
    # recomputed log-probs equal the generation-time ones (same masked distribution)
    assert torch.allclose(lp.detach(), batch.old_logprobs, atol=1e-4)
    ref = pol.ref_logprobs(batch)
    assert not ref.requires_grad
    # fresh LoRA (B = 0): the adapter is a no-op, so the reference equals the policy
    assert torch.allclose(ref, batch.old_logprobs, atol=1e-4)


def test_grammar_decoding_is_canonical_and_forced_tokens_are_not_choices(tasks, tiny):
    """Every sample is the tokenizer's own tokenization of its text (plus EOS); tokens the grammar
    fixes have log-prob exactly 0 under both sampling and recomputation and are out of the loss mask."""
    pol = _policy(tiny, lora=None)
    batch = pol.sample(tasks, "grammar", group_size=6, max_new_tokens=64, generator_seed=3)
    tok = pol.tokenizer
    P = batch.prompt_len
    for i, comp in enumerate(batch.completions):
        n = int(batch.completion_mask[i].sum())
        canonical = tok(comp, add_special_tokens=False)["input_ids"]
        assert batch.input_ids[i, P:P + n].tolist() == canonical + [pol.eos_token_ids[0]]
    cm, ch = batch.completion_mask, batch.choice_mask
    assert ch is not None and not (ch & ~cm).any() and batch.loss_mask is ch
    # real choices are few (preprocessing, family, hyperparameters); at least one per sample
    assert (ch.sum(1) >= 1).all() and ch.sum() < cm.sum() / 3
    forced = cm & ~ch
    assert (batch.old_logprobs[forced] == 0).all() and (batch.old_logprobs[ch] < 0).any()
    lp = pol.logprobs(batch).detach()
    assert torch.allclose(lp, batch.old_logprobs, atol=1e-5)
    assert (lp[forced] == 0).all()


def test_too_small_token_budget_for_the_grammar_is_refused(tasks, tiny):
    import pytest

    pol = _policy(tiny)
    with pytest.raises(ValueError, match="longest sentence"):
        pol.sample(tasks[:1], "grammar", group_size=1, max_new_tokens=8)


def test_sampling_is_seeded(tasks, tiny):
    pol = _policy(tiny)
    a = pol.sample(tasks[:1], "grammar", group_size=3, max_new_tokens=128, generator_seed=7)
    b = pol.sample(tasks[:1], "grammar", group_size=3, max_new_tokens=128, generator_seed=7)
    assert a.completions == b.completions
    assert torch.equal(a.input_ids, b.input_ids)


def test_lora_step_changes_only_adapter_weights(tasks, tiny):
    pol = _policy(tiny, lora=LoraSettings(r=4, alpha=8))
    batch = pol.sample(tasks, "grammar", group_size=2, max_new_tokens=128, generator_seed=1)
    params = pol.trainable_parameters()
    assert params and all(p.requires_grad for p in params)
    before = {n: p.detach().clone() for n, p in pol.model.named_parameters()}
    opt = torch.optim.SGD(params, lr=0.5)
    lp = pol.logprobs(batch)
    loss = -(lp * batch.completion_mask).sum() / batch.completion_mask.sum()
    loss.backward()
    opt.step()
    changed = [n for n, p in pol.model.named_parameters() if not torch.equal(before[n], p.detach())]
    assert changed, "the LoRA step changed nothing"
    assert all("lora_" in n for n in changed), f"non-adapter weights changed: {changed[:3]}"
    # after the step the policy moves away from the reference, and the reference is unchanged
    new_lp = pol.logprobs(batch).detach()
    ref = pol.ref_logprobs(batch)
    assert not torch.allclose(new_lp, ref, atol=1e-4)
    assert torch.allclose(ref, batch.old_logprobs, atol=1e-4)


def test_save_load_roundtrip(tasks, tiny, tmp_path):
    pol = _policy(tiny, lora=LoraSettings(r=4, alpha=8))
    for p in pol.trainable_parameters():
        torch.nn.init.normal_(p, std=0.05)
    batch = pol.sample(tasks[:1], "grammar", group_size=2, max_new_tokens=128, generator_seed=3)
    lp = pol.logprobs(batch).detach()
    pol.save(tmp_path / "ckpt")
    other = _policy(tiny, lora=LoraSettings(r=4, alpha=8))
    other.load(tmp_path / "ckpt")
    assert torch.allclose(other.logprobs(batch).detach(), lp, atol=1e-5)


def test_function_scaffold_free_sampling_and_slice(tasks, tiny):
    pol = _policy(tiny, max_batch_size=3)  # forces two generate calls and re-padding
    batch = pol.sample(tasks, get_scaffold("function"), group_size=2, max_new_tokens=12, generator_seed=0)
    assert len(batch) == 4
    assert batch.valid is not None and len(batch.valid) == 4
    assert (batch.completion_lengths() >= 1).all() and (batch.completion_lengths() <= 12).all()
    lp = pol.logprobs(batch, micro_batch_size=2)
    assert torch.allclose(lp.detach(), batch.old_logprobs, atol=1e-4)
    part = batch.slice([1, 3])
    assert part.task_ids == [batch.task_ids[1], batch.task_ids[3]]
    assert torch.allclose(pol.logprobs(part).detach(), batch.old_logprobs[[1, 3]], atol=1e-4)


def test_full_finetune_reference_is_frozen_copy(tasks, tiny):
    pol = _policy(tiny, lora=None)
    batch = pol.sample(tasks[:1], "grammar", group_size=2, max_new_tokens=128, generator_seed=0)
    params = pol.trainable_parameters()
    assert len(params) == len(list(pol.model.parameters()))
    lp = pol.logprobs(batch)
    (-(lp.sum())).backward()
    torch.optim.SGD(params, lr=1.0).step()
    assert torch.allclose(pol.ref_logprobs(batch), batch.old_logprobs, atol=1e-4)
    assert not torch.allclose(pol.logprobs(batch).detach(), batch.old_logprobs, atol=1e-4)


def test_bad_arguments_raise(tasks, tiny):
    import pytest

    pol = _policy(tiny)
    with pytest.raises(ValueError, match="group_size"):
        pol.sample(tasks, "grammar", group_size=0, max_new_tokens=8)
    with pytest.raises(ValueError, match="unknown scaffold"):
        pol.sample(tasks, "poetry", group_size=1, max_new_tokens=8)
    with pytest.raises(ValueError, match="top_p"):
        pol.sample(tasks, "grammar", group_size=1, max_new_tokens=8, top_p=0.0)


def test_temperature_and_greedy_logprobs_are_consistent(tasks, tiny):
    pol = _policy(tiny)
    for temp in (0.7, 0.0):
        batch = pol.sample(tasks, "grammar", group_size=2, max_new_tokens=128, temperature=temp, generator_seed=5)
        assert batch.temperature == (temp or 1.0)
        assert all(batch.valid)
        assert torch.allclose(pol.logprobs(batch).detach(), batch.old_logprobs, atol=1e-4)
    # greedy decoding is deterministic: every row of a group is the same
    assert batch.completions[0] == batch.completions[1]


def test_min_new_tokens_is_the_longest_grammar_sentence_with_eos(tasks, tiny):
    from wmrl.models.scaffolds import grammar_sentences

    pol = _policy(tiny)
    sc = get_scaffold("grammar")
    kinds = {sc.grammar_key(t) for t in tasks}
    want = max(len(pol.tokenizer(s, add_special_tokens=False)["input_ids"]) + 1
               for k in kinds for s in grammar_sentences(k))
    assert pol.min_new_tokens(sc, tasks) == want
    assert pol.min_new_tokens(get_scaffold("function"), tasks) == 0

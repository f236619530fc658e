"""The policy's LM passes with shared prompts: sampling and the completion log-probs.

On a CPU the LM is what a training step waits for, and most of its tokens were the prompt: every
sample of a GRPO group has the same 190-320-token prompt, and each completion only 9-64 tokens.
Both passes here compute each group's prompt once:

* :func:`sample_shared` (no grad): prefill each group's prompt once (the groups' prompts left-padded
  into one batch), copy its KV cache to the group's G rows (``batch_select_indices``), then decode.
  Under a grammar (:class:`~wmrl.models.choice_trie.TrieTables`) masks, trie transitions and forced
  runs are tensor ops over the batch, and after each sampled token the whole run of tokens the grammar
  forces is appended in the same forward pass (its tokens have log-prob exactly 0 and are no choices),
  so a completion of ~40 tokens with 1-6 real choices takes ~6 decoding steps, not ~40. Finished rows
  leave the batch.
* :func:`completion_logprobs` (with grad): the prompt of each group (rows with equal prompt tokens and
  group id) runs once with gradients, its KV cache is indexed out to the group's rows (autograd
  follows the index and the concatenation) and the completions attend to it. The LM head runs only at
  the positions whose log-prob is not a constant: completion tokens where more than one token was
  allowed (a forced token's log-prob is exactly 0, without gradient). Equal to the per-sample forward
  (tested to 1e-5 in value and gradient).

Both call the decoder (``get_decoder()``) and the output embedding (``get_output_embeddings()``) of the
causal LM themselves, as Llama/Qwen/SmolLM's ``ForCausalLM.forward`` does; a model whose forward does
more to the logits (e.g. Gemma 2's final soft-capping) is refused.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from wmrl.models.choice_trie import DONE, TrieTables, ragged_index


def lm_parts(model: Any) -> tuple[Any, Any]:
    """(decoder, lm_head) of a causal LM or a ``PeftModel`` around one (LoRA layers are injected in
    place, so the decoder runs the active adapter).

    Raises:
        ValueError: the model post-processes its logits (``final_logit_softcapping``).
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    cfg = getattr(base, "config", None)
    if getattr(cfg, "final_logit_softcapping", None) or getattr(getattr(cfg, "text_config", None),
                                                               "final_logit_softcapping", None):
        raise ValueError(f"{type(base).__name__} soft-caps its logits: the shared-prompt passes do not support it")
    return base.get_decoder(), base.get_output_embeddings()


def _cache(out: Any) -> Any:
    c = getattr(out, "cache", None)
    return c if c is not None else out.past_key_values


def left_pad(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """([N, L] int64 ids, [N, L] int64 mask) of ``seqs`` left-padded to the longest."""
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), pad_id, dtype=torch.long)
    am = torch.zeros((len(seqs), L), dtype=torch.long)
    for i, s in enumerate(seqs):
        if s:
            ids[i, L - len(s):] = torch.tensor(list(s), dtype=torch.long)
            am[i, L - len(s):] = 1
    return ids, am


def _positions(am: torch.Tensor) -> torch.Tensor:
    return (am.cumsum(-1) - 1).clamp(min=0)


@dataclass
class Decoded:
    """What :func:`sample_shared` returns for B rows (completion budget ``L`` = max_new_tokens).

    Attributes:
        tokens: [B, L] int64 completion tokens (pad after ``lengths``); logprobs: [B, L] float32
            ``log_softmax(mask(logits) / T)`` of each token (0 for forced ones); choices: [B, L] bool
            (more than one token allowed); lengths: [B] int64; complete: [B] bool (grammar rows: the
            stop token was accepted at a sentence's end; free rows: EOS or the stop point was reached).
        stats: ``steps`` (forward passes after the prefill), ``prefill_tokens`` (real prompt tokens
            run), ``fed_tokens`` (completion tokens run), ``padded_tokens`` (slots run, padding of the
            shorter chunks included), ``prefill_seconds``, ``mask_seconds`` (building and applying the
            grammar masks), ``forward_seconds`` (decoder + LM head).
    """

    tokens: torch.Tensor
    logprobs: torch.Tensor
    choices: torch.Tensor
    lengths: torch.Tensor
    complete: torch.Tensor
    stats: dict[str, float] = field(default_factory=dict)


def _top_p_filter(scores: torch.Tensor, top_p: float) -> torch.Tensor:
    """transformers' ``TopPLogitsWarper`` (keep the smallest set with mass >= top_p, at least one)."""
    sorted_logits, sorted_idx = torch.sort(scores, descending=False)
    cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove = cum <= (1 - top_p)
    remove[..., -1:] = False
    return scores.masked_fill(remove.scatter(1, sorted_idx, remove), float("-inf"))


@torch.no_grad()
def sample_shared(
    model: Any,
    prompts: Sequence[Sequence[int]],
    row_prompt: Sequence[int],
    start_nodes: torch.Tensor,
    tables: TrieTables | None,
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    eos_ids: Sequence[int],
    pad_id: int,
    stop_check: Callable[[list[int]], bool] | None = None,
) -> Decoded:
    """Sample one completion per row, each group's prompt prefilled once.

    Args:
        model: the causal LM (or ``PeftModel``), adapter already active.
        prompts: U prompts' token ids (one per group).
        row_prompt: B indices into ``prompts`` (row b continues prompt ``row_prompt[b]``).
        start_nodes: [B] int64 root node of each row's grammar in ``tables`` (``tables.roots``),
            -3 for unconstrained rows.
        tables: the grammar tables of the constrained rows (None when no row is constrained).
        max_new_tokens: completion budget L per row.
        temperature: > 0 samples from softmax(masked logits / T); 0 = greedy (log-probs at T = 1).
        top_p: nucleus threshold (the stored log-probs are of the untruncated distribution).
        eos_ids: tokens that end an unconstrained row.
        pad_id: the padding token.
        stop_check: for unconstrained rows, called with a row's tokens so far; True ends the row
            (the scaffold's stop point).

    Draws from torch's global RNG (``torch.multinomial``), once per step.
    """
    decoder, lm_head = lm_parts(model)
    B, L = len(row_prompt), int(max_new_tokens)
    temp = temperature if temperature > 0 else 1.0
    st = {"steps": 0, "prefill_tokens": 0, "fed_tokens": 0, "mask_seconds": 0.0, "forward_seconds": 0.0,
          "prefill_seconds": 0.0, "padded_tokens": 0}
    dev = lm_head.weight.device
    t0 = time.perf_counter()
    ids_u, am_u = left_pad(prompts, pad_id)
    out = decoder(input_ids=ids_u.to(dev), attention_mask=am_u.to(dev), position_ids=_positions(am_u).to(dev),
                  use_cache=True)
    cache = _cache(out)
    logits_u = lm_head(out.last_hidden_state[:, -1]).float()
    st["prefill_tokens"] = int(am_u.sum())
    rp = torch.as_tensor(list(row_prompt), dtype=torch.long)
    cache.batch_select_indices(rp.to(dev))
    am = am_u[rp].to(dev)
    logits = logits_u[rp.to(dev)]
    st["forward_seconds"] += time.perf_counter() - t0
    st["prefill_seconds"] = st["forward_seconds"]
    st["padded_tokens"] = 0

    toks = torch.full((B, L), pad_id, dtype=torch.long)
    lps = torch.zeros((B, L), dtype=torch.float32)
    chs = torch.zeros((B, L), dtype=torch.bool)
    lengths = torch.zeros(B, dtype=torch.long)
    complete = torch.zeros(B, dtype=torch.bool)
    rows = torch.arange(B)  # batch row -> output row
    nodes = start_nodes.clone().long()  # >= 0 constrained, -3 free
    eos = torch.as_tensor(list(eos_ids), dtype=torch.long)
    V = logits.shape[-1]
    while rows.numel():
        st["steps"] += 1
        t0 = time.perf_counter()
        con = nodes >= 0
        n_allowed = torch.full((rows.numel(),), V, dtype=torch.long)
        scores = logits
        if tables is not None and bool(con.any()):
            allowed = torch.ones((rows.numel(), V), dtype=torch.bool)
            allowed[con] = tables.mask(nodes[con], V)
            n_allowed[con] = tables.n_allowed[nodes[con]]
            scores = logits.masked_fill(~allowed.to(dev), float("-inf"))
        st["mask_seconds"] += time.perf_counter() - t0
        scores = scores / temp
        lsm = torch.log_softmax(scores, dim=-1)
        if temperature > 0:
            s = _top_p_filter(scores, top_p) if top_p < 1.0 else scores
            tok = torch.multinomial(torch.softmax(s, dim=-1), 1).squeeze(1)
        else:
            tok = scores.argmax(dim=-1)
        lp = lsm.gather(1, tok.view(-1, 1)).squeeze(1).float().cpu()
        tok = tok.cpu()
        # the chunk each row appends: the sampled token, then the run the grammar forces after it
        t0 = time.perf_counter()
        nxt = nodes.clone()
        run_len = torch.zeros(rows.numel(), dtype=torch.long)
        run_start = torch.zeros(rows.numel(), dtype=torch.long)
        done = torch.zeros(rows.numel(), dtype=torch.bool)
        if tables is not None and bool(con.any()):
            nc = tables.step(nodes[con], tok[con])
            if bool((nc == -2).any()):
                raise RuntimeError("the grammar rejected a token sampled under its own mask")
            live = nc >= 0
            ncl = nc.clamp(min=0)
            rl = torch.where(live, tables.run_offsets[ncl + 1] - tables.run_offsets[ncl], 0)
            run_len[con], run_start[con] = rl, tables.run_offsets[ncl]
            after = torch.where(live, tables.run_end[ncl], nc)
            nxt[con] = after
            done[con] = after == DONE
        free = ~con
        if bool(free.any()):
            done[free] = torch.isin(tok[free], eos)
        st["mask_seconds"] += time.perf_counter() - t0
        k = 1 + run_len  # tokens appended per row
        room = L - lengths[rows]
        k_fit = torch.minimum(k, room)
        complete[rows] = done & (k <= room)
        # write the chunk [tok, run...] into the outputs (ragged scatter, no per-row loop)
        r_rep = torch.repeat_interleave(torch.arange(rows.numel()), k_fit)
        within = ragged_index(torch.zeros_like(k_fit), k_fit)
        col = lengths[rows][r_rep] + within
        chunk = tok[r_rep].clone()
        forced = within > 0
        if bool(forced.any()):
            assert tables is not None  # forced tokens come only from a grammar's runs
            chunk[forced] = tables.run_tokens[run_start[r_rep][forced] + within[forced] - 1]
        out_r = rows[r_rep]
        toks[out_r, col] = chunk
        first = within == 0
        lps[out_r[first], col[first]] = lp
        chs[out_r[first], col[first]] = n_allowed > 1
        lengths[rows] += k_fit
        finished = done | (k >= room)
        if stop_check is not None and bool(free.any()):
            for j in torch.nonzero(free & ~finished).flatten().tolist():  # free rows only (scaffold stop point)
                r = int(rows[j])
                if stop_check(toks[r, :int(lengths[r])].tolist()):
                    finished[j] = True
                    complete[r] = True
        keep = ~finished
        if not bool(keep.any()):
            break
        # feed the kept rows' chunks (right-padded to the longest) in one forward pass
        t0 = time.perf_counter()
        kk = k_fit[keep]
        K = int(kk.max())
        kept_rows = rows[keep]
        feed = torch.full((int(keep.sum()), K), pad_id, dtype=torch.long)
        fm = torch.zeros_like(feed)
        rr = torch.repeat_interleave(torch.arange(kept_rows.numel()), kk)
        ww = ragged_index(torch.zeros_like(kk), kk)
        feed[rr, ww] = toks[kept_rows[rr], lengths[kept_rows][rr] - kk[rr] + ww]
        fm[rr, ww] = 1
        if not bool(keep.all()):
            idx = torch.nonzero(keep).flatten().to(dev)
            cache.batch_select_indices(idx)
            am = am[idx]
        pos = am.sum(-1, keepdim=True) + torch.arange(K, device=dev)[None, :]
        am = torch.cat([am, fm.to(dev)], dim=1)
        out = decoder(input_ids=feed.to(dev), attention_mask=am, position_ids=pos, cache=cache,
                      use_cache=True)
        cache = _cache(out)
        h = out.last_hidden_state[torch.arange(feed.shape[0], device=dev), (kk - 1).to(dev)]
        logits = lm_head(h).float()
        st["fed_tokens"] += int(kk.sum())
        st["padded_tokens"] += feed.numel()
        st["forward_seconds"] += time.perf_counter() - t0
        rows, nodes = kept_rows, nxt[keep]
    return Decoded(toks, lps, chs, lengths, complete, st)


def prompt_groups(batch: Any) -> torch.Tensor:
    """[B] int64: the index of each row's (group id, prompt tokens) among the batch's distinct ones,
    in order of first appearance."""
    P = batch.prompt_len
    ids, am = batch.input_ids[:, :P].cpu(), batch.attention_mask[:, :P].cpu()
    gids = list(batch.group_ids) if len(batch.group_ids) == len(batch) else [0] * len(batch)
    seen: dict[tuple, int] = {}
    out = []
    for i in range(len(batch)):
        key = (gids[i], tuple(ids[i][am[i].bool()].tolist()))
        out.append(seen.setdefault(key, len(seen)))
    return torch.tensor(out, dtype=torch.long)


def completion_logprobs(
    model: Any,
    batch: Any,
    nodes: torch.Tensor | None,
    tables: TrieTables | None,
    *,
    share_prompts: bool = True,
) -> torch.Tensor:
    """[B, T] float32 ``log_softmax(mask(logits) / T)`` of each completion token (0 elsewhere), with
    grad when grad is enabled.

    Args:
        model: the causal LM (or ``PeftModel``) to score with (adapter state as the caller set it).
        batch: a :class:`~wmrl.models.types.RolloutBatch` (or a slice of one; groups may be split).
        nodes: [B, Tc] int64 grammar node before each completion token (``TrieTables.replay``;
            -3 = unconstrained row, :data:`DONE` after the end), or None when no row is constrained.
        tables: the tables ``nodes`` refer to.
        share_prompts: run each distinct (group, prompt) once and the completions from its KV cache;
            False = one forward pass over each row's prompt and completion (the per-sample reference).

    Columns that are padding in every row (left of the longest prompt, right of the longest
    completion) are not computed; positions are taken from the attention mask as in ``generate``.
    """
    decoder, lm_head = lm_parts(model)
    dev = lm_head.weight.device
    P, T = batch.prompt_len, batch.input_ids.shape[1]
    B = len(batch)
    ids, am, cm = batch.input_ids.to(dev), batch.attention_mask.to(dev), batch.completion_mask.to(dev)
    pos = _positions(am)
    c0 = int(torch.nonzero(am[:, :P].any(0)).min()) if bool(am[:, :P].any()) else P - 1
    c0 = min(c0, P - 1)
    Tc = int(cm[:, P:].sum(1).max()) if B else 0
    out = torch.zeros((B, T), dtype=torch.float32, device=dev)
    if Tc == 0:
        return out
    cmc = cm[:, P:P + Tc]
    need = cmc.clone()
    allowed_n = None
    if nodes is not None and tables is not None:
        nd = nodes[:, :Tc].cpu()
        con = nd >= 0
        allowed_n = torch.full(nd.shape, -1, dtype=torch.long)
        allowed_n[con] = tables.n_allowed[nd[con]]
        # a forced token (one allowed) has log-prob exactly 0 and no gradient: no LM head there
        need &= ~(con & (allowed_n == 1)).to(dev)
    if share_prompts:
        grp = prompt_groups(batch)
        U = int(grp.max()) + 1
    if share_prompts and U < B:
        first = torch.tensor([int(torch.nonzero(grp == u)[0]) for u in range(U)], dtype=torch.long, device=dev)
        o = decoder(input_ids=ids[first, c0:P], attention_mask=am[first, c0:P], position_ids=pos[first, c0:P],
                    use_cache=True)
        cache = _cache(o)
        g = grp.to(dev)
        cache.batch_select_indices(g)
        hp_last = o.last_hidden_state[:, -1][g]  # [B, H]: predicts the first completion token
        oc = decoder(input_ids=ids[:, P:P + Tc], attention_mask=am[:, c0:P + Tc], position_ids=pos[:, P:P + Tc],
                     cache=cache, use_cache=True)
        h_pred = torch.cat([hp_last[:, None], oc.last_hidden_state[:, :Tc - 1]], dim=1)  # [B, Tc, H]
    else:
        o = decoder(input_ids=ids[:, c0:P + Tc], attention_mask=am[:, c0:P + Tc], position_ids=pos[:, c0:P + Tc],
                    use_cache=False)
        h_pred = o.last_hidden_state[:, P - c0 - 1:P - c0 - 1 + Tc]
    r, t = torch.nonzero(need, as_tuple=True)
    if r.numel() == 0:
        return out + 0.0 * h_pred.sum()  # keeps the graph (every token forced: log-probs 0, gradient 0)
    logits = lm_head(h_pred[r, t]).float() / batch.temperature  # [N, V]
    if allowed_n is not None and tables is not None:
        rc, tc = r.cpu(), t.cpu()
        nsel = nd[rc, tc]
        csel = nsel >= 0
        if bool(csel.any()):
            allowed = torch.ones(logits.shape, dtype=torch.bool)
            allowed[csel] = tables.mask(nsel[csel], logits.shape[1])
            logits = logits.masked_fill(~allowed.to(dev), float("-inf"))
    tok = ids[:, P:P + Tc][r, t]
    lp = torch.log_softmax(logits, dim=-1).gather(1, tok[:, None]).squeeze(1)
    return out.index_put((r, t + P), lp)

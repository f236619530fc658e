"""``wmrl models bench``: the LM's throughput on the machine it runs on, next to its FLOP bound.

One run measures, with the same weights and torch threads:

* the FLOP bound: float32 matmul GFLOP/s (1024 x 1024, best of several timed rounds), turned into
  tokens/s at 2 FLOPs per parameter per token (forward) and 6 (forward + backward);
* sampling tokens/s (completion tokens / wall s) with the grammar scaffold and free (``function``)
  decoding, with the per-row engine (``generate``, the baseline) and the shared-prompt one (``shared``), and the
  grammar mask's share of the decoding time;
* world-model scoring (frozen backbone, as the quickstart) with and without shared prompts;
* the policy update (log-probs + backward, micro-batches as the trainer's) per sample (label ``before``: the
  baseline without shared prompts) and with shared prompts (label ``now``: what the trainer runs), in
  "row tokens"/s: B x T tokens of the batch layout per second (16 rows of 368 = 5,888 tokens), so both count
  the same work;
* one quickstart step (its 4 train tasks x 4 samples, 96 new tokens, scoring, update of every row):
  LM CPU seconds, ``before`` and ``now`` (CPU-s from ``time.process_time``, which the machine's load does
  not inflate the way it does wall time);
* optional variants (``--variants``): eager vs SDPA attention and bf16 autocast on the update's
  forward, kept only if faster with equal log-probs.

Tokens/s of the two engines are of different draws of the same distribution (different token counts).
"""
from __future__ import annotations

import time
from functools import partial
from typing import Any

import torch

from wmrl.models.decoding import prompt_groups
from wmrl.models.policy import Policy
from wmrl.world_model.regression import RegressionWorldModel


def matmul_gflops(n: int = 1024, rounds: int = 5, reps: int = 10) -> float:
    """Best float32 ``n x n @ n x n`` rate over ``rounds`` of ``reps`` products, GFLOP/s (2 n^3 each)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            a @ b
        best = min(best, (time.perf_counter() - t0) / reps)
    return 2 * n ** 3 / best / 1e9


def _timed(fn: Any) -> tuple[Any, float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def _update(policy: Any, batch: Any, micro: int, mode: str) -> None:
    adv = torch.linspace(-1.0, 1.0, len(batch))
    for p in policy.trainable_parameters():
        p.grad = None
    for s in range(0, len(batch), micro):
        rows = list(range(s, min(s + micro, len(batch))))
        sub = batch.slice(rows)
        lp = policy.logprobs(sub, mode=mode)
        m = sub.loss_mask.float()
        (-(lp * m * adv[rows, None]).sum() / m.sum().clamp(min=1)).backward()
    for p in policy.trainable_parameters():
        p.grad = None


def _sampling(policy: Any, tasks: list, scaffold: str, G: int, L: int, seed: int, engine: str) -> dict[str, Any]:
    batch, wall, cpu = _timed(lambda: policy.sample(tasks, scaffold, group_size=G, max_new_tokens=L,
                                                    generator_seed=seed, engine=engine))
    n = int(batch.completion_mask.sum())
    st = batch.stats
    return {"batch": batch, "wall_s": wall, "cpu_s": cpu, "new_tokens": n, "tokens_per_s": n / wall,
            "tokens_per_completion": n / len(batch), "choice_tokens": int(st.get("choice_tokens", 0)),
            "mask_seconds": float(st.get("mask_seconds", 0.0)), "mask_share": float(st.get("mask_seconds", 0.0)) / wall,
            "prefill_tokens": int(st.get("prefill_tokens", 0)), "fed_tokens": st.get("fed_tokens"),
            "steps": st.get("steps")}


def update_computed_tokens(batch: Any, micro: int, mode: str) -> int:
    """Tokens the update's forward runs through the decoder: per micro-batch, every row's columns
    (``per_sample``), or each distinct prompt once plus every row's completion columns (``shared``),
    after trimming all-padding columns."""
    P, n = batch.prompt_len, 0
    for s in range(0, len(batch), micro):
        sub = batch.slice(list(range(s, min(s + micro, len(batch)))))
        if mode == "per_sample":
            n += sub.input_ids.numel()
            continue
        am = sub.attention_mask[:, :P]
        width = P - int(torch.nonzero(am.any(0)).min())
        Tc = int(sub.completion_mask[:, P:].sum(1).max())
        n += (int(prompt_groups(sub).max()) + 1) * width + len(sub) * Tc
    return n


def run_bench(model: Any, tok: Any, task: Any, quick_tasks: list, *, groups: int = 4, group_size: int = 4,
              max_new_tokens: int = 64, quick_new_tokens: int = 96, micro_batch: int = 4, seed: int = 0,
              before: bool = True, variants: bool = False, log: Any = print) -> dict[str, Any]:
    """All measurements of the module docstring; returns them as a JSON-ready dict."""
    torch.manual_seed(seed)
    n_params = sum(p.numel() for p in model.parameters())
    gf = matmul_gflops()
    res: dict[str, Any] = {"params": n_params, "matmul_gflops": gf, "threads": torch.get_num_threads(),
                           "bound_tokens_per_s_forward": gf * 1e9 / (2 * n_params),
                           "bound_tokens_per_s_forward_backward": gf * 1e9 / (6 * n_params)}
    log(f"matmul {gf:.1f} GFLOP/s -> bound {res['bound_tokens_per_s_forward']:.0f} tokens/s forward, "
        f"{res['bound_tokens_per_s_forward_backward']:.0f} forward+backward ({n_params / 1e6:.1f}M parameters)")
    policy = Policy(model, tok)  # LoRA r=8 as the quickstart
    engines = ["generate", "shared"] if before else ["shared"]
    tasks = [task] * groups
    for scaffold in ("grammar", "function"):
        for eng in engines:
            r = _sampling(policy, tasks, scaffold, group_size, max_new_tokens, seed, eng)
            res[f"sample_{scaffold}_{eng}"] = r
            log(f"sample {scaffold:8s} {eng:8s}: {r['new_tokens']} tokens in {r['wall_s']:.1f} s = "
                f"{r['tokens_per_s']:.1f} tokens/s, mask {100 * r['mask_share']:.1f}% of it; prefill "
                f"{r['prefill_tokens']} tokens, {r['steps'] or '-'} steps")
    batch = res["sample_grammar_shared"]["batch"]
    wm = RegressionWorldModel(model, tok, lora=None)
    p_ids = [len(wm._prompt_ids(p)) + len(wm._ids(c)) for p, c in zip(batch.prompts, batch.completions)]
    uniq = {p: len(wm._prompt_ids(p)) for p in batch.prompts}
    shared_tokens = sum(uniq.values()) + sum(len(wm._ids(c)) for c in batch.completions)
    for share in (False, True):
        _, wall, cpu = _timed(partial(wm.features, batch.prompts, batch.completions, share_prompts=share))
        ct = shared_tokens if share else sum(p_ids)
        res[f"wm_{'shared' if share else 'separate'}"] = {"wall_s": wall, "cpu_s": cpu, "input_tokens": sum(p_ids),
                                                        "tokens_per_s": sum(p_ids) / wall, "computed_tokens": ct,
                                                        "computed_tokens_per_s": ct / wall}
        log(f"world model {'shared' if share else 'separate'}: {sum(p_ids)} input tokens in {wall:.1f} s = "
            f"{sum(p_ids) / wall:.1f} tokens/s ({ct} computed: {ct / wall:.1f}/s)")
    row_tokens = int(batch.input_ids.numel())
    for mode in (["per_sample", "shared"] if before else ["shared"]):
        _, wall, cpu = _timed(partial(_update, policy, batch, micro_batch, mode))
        ct = update_computed_tokens(batch, micro_batch, mode)
        res[f"update_{mode}"] = {"wall_s": wall, "cpu_s": cpu, "row_tokens": row_tokens,
                                 "tokens_per_s": row_tokens / wall, "rows": len(batch),
                                 "columns": batch.input_ids.shape[1],
                                 "computed_tokens": ct, "computed_tokens_per_s": ct / wall}
        log(f"update {mode:10s}: {len(batch)} rows x {batch.input_ids.shape[1]} = {row_tokens} row tokens in "
            f"{wall:.1f} s = {row_tokens / wall:.1f} tokens/s ({ct} tokens computed: {ct / wall:.1f}/s)")
    if variants:
        res["variants"] = _variants(policy, batch, micro_batch, log)
    quickstart_steps = ((("before", "generate", "per_sample"),) if before else ()) + (("now", "shared", "shared"),)
    for label, eng, mode in quickstart_steps:
        gen, _, g_cpu = _timed(partial(policy.sample, quick_tasks, "grammar", group_size=group_size,
                                              max_new_tokens=quick_new_tokens, generator_seed=seed, engine=eng))
        _, _, w_cpu = _timed(partial(wm.predict, gen.prompts, gen.completions))
        _, _, u_cpu = _timed(partial(_update, policy, gen, micro_batch, mode))
        res[f"quickstart_step_{label}"] = {"generate_cpu_s": g_cpu, "wm_cpu_s": w_cpu, "update_cpu_s": u_cpu,
                                           "lm_cpu_s": g_cpu + w_cpu + u_cpu,
                                           "new_tokens": int(gen.completion_mask.sum())}
        log(f"quickstart step {label}: generate {g_cpu:.1f} + world model {w_cpu:.1f} + update {u_cpu:.1f} = "
            f"{g_cpu + w_cpu + u_cpu:.1f} LM CPU-s")
    for k in list(res):
        if isinstance(res[k], dict):
            res[k].pop("batch", None)
    return res


def _variants(policy: Any, batch: Any, micro: int, log: Any) -> list[dict[str, Any]]:
    """Forward-only log-probs of ``batch`` (shared mode) under attention / precision variants."""
    base = policy._base()
    out: list[dict[str, Any]] = []
    with torch.no_grad():
        ref, t_ref, _ = _timed(lambda: policy.logprobs(batch, micro_batch_size=micro))
    out.append({"variant": "float32, sdpa (default)", "wall_s": t_ref, "max_abs_logprob_diff": 0.0})
    cur = base.config._attn_implementation
    try:
        base.set_attn_implementation("eager")
        with torch.no_grad():
            lp, t, _ = _timed(lambda: policy.logprobs(batch, micro_batch_size=micro))
        out.append({"variant": "eager attention", "wall_s": t, "max_abs_logprob_diff": float((lp - ref).abs().max())})
    finally:
        base.set_attn_implementation(cur)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        lp, t, _ = _timed(lambda: policy.logprobs(batch, micro_batch_size=micro))
    out.append({"variant": "bf16 autocast", "wall_s": t, "max_abs_logprob_diff": float((lp.float() - ref).abs().max())})
    for v in out:
        v["speedup"] = t_ref / v["wall_s"]
        log(f"variant {v['variant']:24s}: {v['wall_s']:.2f} s ({v['speedup']:.2f}x), max |d logprob| "
            f"{v['max_abs_logprob_diff']:.2e}")
    return out

"""How the cpu-small policy spells its programs (docs/models.md, grammar scaffold; docs/benchmark.md).

1. Over the GRPO training samples of a bench folder: tokens the policy sampled per completion against
   the tokens the tokenizer itself uses for the same text (its canonical tokenization).
2. One completion of the initial policy (tiny backbone, seed 0, grammar scaffold) on a train task,
   token by token with its log-probability: a token the grammar fixes as text still has a
   log-probability below 0 when other spellings of the same text are allowed.

    WMRL_HOME=... python docs/benchmark/tokenization.py [BENCH_DIR]
"""
from __future__ import annotations

import glob
import json
import statistics
import sys

import torch

from wmrl.models import backbone
from wmrl.models.policy import Policy
from wmrl.models.scaffolds import get_scaffold
from wmrl.models.types import LoraSettings
from wmrl.tasks.loader import default_suite


def main(out: str) -> None:
    torch.set_num_threads(1)
    model, tok = backbone.tiny_backbone(seed=0)
    rows = [json.loads(line) for f in sorted(glob.glob(f"{out}/grpo/seed*/samples.jsonl")) for line in open(f)]
    if rows:
        canon = [len(tok(r["completion"], add_special_tokens=False)["input_ids"]) for r in rows]
        sampled = [r["completion_tokens"] for r in rows]
        print(f"{len(rows)} GRPO training samples: {statistics.mean(sampled):.1f} sampled tokens per completion, "
              f"{statistics.mean(canon):.1f} in the tokenizer's own tokenization of the same text")
    policy = Policy(model, tok, lora=LoraSettings(r=8, alpha=16, dropout=0.0))
    task = default_suite().get("aer-hmda")
    batch = policy.sample([task], get_scaffold("grammar"), 4, max_new_tokens=96, generator_seed=5)
    with torch.no_grad():
        lp = policy.logprobs(batch)
    P = batch.prompt_len
    print(f"completion: {batch.completions[0]!r}")
    for t in range(int(batch.completion_mask[0, P:].sum())):
        print(f"  {tok.decode([int(batch.input_ids[0, P + t])])!r:14s} log-prob {float(lp[0, P + t]):7.3f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/bench-cpu-small")

"""How the cpu-small policy spells its programs (docs/models.md, grammar scaffold; docs/benchmark.md).

1. Over the GRPO training samples of a bench folder: tokens the policy sampled per completion against
   the tokens the tokenizer itself uses for the same text (its canonical tokenization) plus the EOS
   token. With canonical decoding (wmrl.models.choice_trie) the two are equal for every sample.
2. One completion of the initial policy (tiny backbone, seed 0, grammar scaffold) on a train task,
   token by token with its log-probability and whether it was a real choice: a token the grammar
   fixes is forced (log-prob 0, out of the loss).

    WMRL_HOME=... python studies/benchmark/tokenization.py [BENCH_DIR]
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
from wmrl.tasks.loader import default_suite


def main(out: str) -> None:
    torch.set_num_threads(1)
    model, tok = backbone.tiny_backbone(seed=0)
    rows = [json.loads(line) for f in sorted(glob.glob(f"{out}/grpo/seed*/samples.jsonl")) for line in open(f)]
    if rows:
        canon = [len(tok(r["completion"], add_special_tokens=False)["input_ids"]) + 1 for r in rows]
        sampled = [r["completion_tokens"] for r in rows]
        same = sum(a == b for a, b in zip(sampled, canon))
        print(f"{len(rows)} GRPO training samples: {statistics.mean(sampled):.2f} sampled tokens per completion, "
              f"{statistics.mean(canon):.2f} in the tokenizer's own tokenization of the same text + EOS; "
              f"equal in {same} of {len(rows)} samples")
    policy = Policy(model, tok, lora=None)
    task = default_suite().get("aer-hmda")
    batch = policy.sample([task], get_scaffold("grammar"), 4, max_new_tokens=64, generator_seed=5)
    with torch.no_grad():
        lp = policy.logprobs(batch)
    assert batch.choice_mask is not None, "the grammar scaffold marks its choices"
    P = batch.prompt_len
    print(f"completion: {batch.completions[0]!r}")
    for t in range(int(batch.completion_mask[0, P:].sum())):
        kind = "choice" if bool(batch.choice_mask[0, P + t]) else "forced"
        print(f"  {tok.decode([int(batch.input_ids[0, P + t])])!r:14s} {kind:6s} log-prob {float(lp[0, P + t]):7.3f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/bench-cpu-small")

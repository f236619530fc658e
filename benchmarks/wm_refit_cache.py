"""Refitting the world model as anchors arrive, with and without the feature cache, side by side.

    PYTHONPATH=. python benchmarks/wm_refit_cache.py EXECUTIONS.sqlite [--model smollm2-135m] [--refits 4]
                                                    [--new-per-refit 4] [--threads 1]

A run with ``world_model.refresh_every_k: 1`` refits its world model every step on the warm-up corpus plus every
anchor so far (``wmrl.training.parts.refit_world_model``). With a frozen backbone (``world_model.adapter: false``)
the features of a trajectory never change, so the world model keeps them (:mod:`wmrl.world_model.feature_cache`)
and a refit runs only the new trajectories through the backbone. This script replays that: the executed
trajectories of an execution log (a bench's ``corpus/executions.sqlite`` or a run's ``executions.sqlite``) are
split into a starting corpus and ``--refits`` batches of ``--new-per-refit`` later ones (the anchors); two world
models on the same backbone (one with the cache, one with it off) fit the corpus, then refit after each batch.
Printed per fit: records, wall seconds of each, backbone rows computed by the cached one, the ratio, and the
largest difference between the two models' predictions on the records fitted so far (the cache must not change
them beyond float32 batching noise). The cache pays where refits dominate: the LM's forward passes, not the ridge solve.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import torch

try:
    from wmrl.execution.log import ExecutionLog
    from wmrl.models.backbone import load_backbone, tiny_backbone
    from wmrl.world_model.feature_cache import FeatureCache
    from wmrl.world_model.regression import RegressionWorldModel
except ImportError as e:  # pragma: no cover - run from the repository root
    sys.exit(f"{e}: run it from the repository root with PYTHONPATH=. (or install wmrl)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", help="an execution log (SQLite) whose rows hold trajectories")
    ap.add_argument("--model", default="smollm2-135m", help="backbone: smollm2-135m or tiny")
    ap.add_argument("--refits", type=int, default=4, help="refits after the first fit")
    ap.add_argument("--new-per-refit", type=int, default=4, help="new records (anchors) before each refit")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    records = [r for r in ExecutionLog(a.log).records() if r["trajectory"] is not None and r["reward"] is not None]
    n_later = a.refits * a.new_per_refit
    if len(records) < n_later + 4:
        sys.exit(f"{a.log} holds {len(records)} usable records; need at least {n_later + 4}")
    model, tok = tiny_backbone(seed=0) if a.model == "tiny" else load_backbone(a.model)
    cached = RegressionWorldModel(model, tok, lora=None)
    plain = RegressionWorldModel(model, tok, lora=None)
    plain.feature_cache = FeatureCache(max_bytes=0)
    start = len(records) - n_later
    prompts = [r["trajectory"].prompt for r in records]
    comps = [r["trajectory"].completion for r in records]
    print(f"backbone {a.model}, {a.threads} torch thread(s); corpus {start} records, then {a.refits} refits of "
          f"+{a.new_per_refit}")
    print(f"{'fit':>4} {'records':>8} {'no cache s':>11} {'cache s':>8} {'rows run':>9} {'ratio':>6} {'max |dr|':>9}")
    plain.features(prompts[:2], comps[:2])  # first forward passes are slow (allocations): not in either timing
    tot_plain = tot_cached = 0.0
    for k in range(a.refits + 1):
        upto = start + k * a.new_per_refit
        recs = records[:upto]
        t = time.perf_counter()
        plain.fit(recs, heldout_fraction=0.0, seed=0)
        s_plain = time.perf_counter() - t
        misses = cached.feature_cache.misses
        t = time.perf_counter()
        cached.fit(recs, heldout_fraction=0.0, seed=0)
        s_cached = time.perf_counter() - t
        rows = cached.feature_cache.misses - misses
        seen_p, seen_c = prompts[:upto], comps[:upto]
        diff = float(np.max(np.abs(plain.predict(seen_p, seen_c) - cached.predict(seen_p, seen_c))))
        tot_plain += s_plain
        tot_cached += s_cached
        print(f"{k:>4} {upto:>8} {s_plain:>11.1f} {s_cached:>8.1f} {rows:>9} {s_plain / s_cached:>5.1f}x {diff:>9.1e}")
    print(f"all fits: {tot_plain:.1f} s without the cache, {tot_cached:.1f} s with it "
          f"({tot_plain / tot_cached:.1f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

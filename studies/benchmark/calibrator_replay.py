"""Which minimum anchor count should the isotonic debiasing wait for? (docs/training.md, defaults)

Replays the anchor stream of every finished world-model run of a bench (``samples.jsonl``: each anchor
trajectory's raw world-model score r_hat and its executed reward r, in step order) through
:class:`wmrl.core.calibration.IsotonicCalibrator` with several ``min_anchors`` (and both fallbacks),
exactly as the trainer uses it: at step t the map fitted on steps < t calibrates step t's anchors, then
learns from them. Prints, pooled over runs, the out-of-sample squared error of f_hat(r_hat) relative to
the raw r_hat (< 1: debiasing helped) and the within-group pairwise accuracy of the calibrated scores
(ties count 1/2, so a map that flattens a group loses ranking information).

    WMRL_HOME=... python studies/benchmark/calibrator_replay.py BENCH_DIR
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Literal

import numpy as np

from wmrl.core.calibration import IsotonicCalibrator
from wmrl.world_model.metrics import world_model_metrics

MIN_ANCHORS = (4, 8, 16, 32, 64, 200)
RUN_METHODS = ("wmrl", "wmrl-no-debias", "wmrl-no-denoise", "wmrl-ppi")


def anchor_steps(run_dir: Path) -> list[tuple[int, np.ndarray, np.ndarray, list]]:
    """``[(step, r_hat [n], r [n], groups)]`` of one run's anchors, in step order."""
    by_step: dict[int, list[dict]] = defaultdict(list)
    for line in open(run_dir / "samples.jsonl"):
        r = json.loads(line)
        if r.get("stream") == "anchor" and r.get("reward_true") is not None and r.get("reward_wm") is not None:
            by_step[int(r["step"])].append(r)
    return [(s, np.array([r["reward_wm"] for r in rs], float), np.array([r["reward_true"] for r in rs], float),
             [(s, r["group"]) for r in rs]) for s, rs in sorted(by_step.items())]


def replay(streams: list, min_anchors: int, fallback: Literal["identity", "affine"],
           window: int = 256) -> dict[str, float]:
    raw = cal = 0.0
    pred, true, groups = [], [], []
    for stream in streams:
        c = IsotonicCalibrator(window=window, min_anchors=min_anchors, fallback=fallback)
        for step, x, y, g in stream:
            f = c.transform(x, step=step)
            raw += float(np.sum((x - y) ** 2))
            cal += float(np.sum((f - y) ** 2))
            pred += list(f)
            true += list(y)
            groups += [(id(stream),) + k for k in g]
            c.update(x, y, step=step)
    m = world_model_metrics(pred, true, groups)
    return {"sq_err_ratio": cal / raw if raw else float("nan"), "pairwise_accuracy": m["pairwise_accuracy"],
            "n": len(true)}


def main(bench: Path) -> None:
    streams = [anchor_steps(rd) for m in RUN_METHODS for rd in sorted((bench / m).glob("seed*"))
               if (rd / "summary.json").is_file()]
    streams = [s for s in streams if s]
    n = sum(len(x) for s in streams for _, x, _, _ in s)
    print(f"{len(streams)} runs, {n} anchor pairs; per run {n / max(len(streams), 1):.0f}")
    print("| min_anchors | fallback | out-of-sample sq. error / raw | within-group pairwise accuracy |")
    print("|---|---|---|---|")
    base = replay(streams, 10**9, "identity")
    print(f"| never (raw r_hat) | identity | 1.000 | {base['pairwise_accuracy']:.3f} |")
    for k in MIN_ANCHORS:
        for fb in ("identity", "affine"):
            r = replay(streams, k, fb)
            print(f"| {k} | {fb} | {r['sq_err_ratio']:.3f} | {r['pairwise_accuracy']:.3f} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))

"""Where the cpu-small policies moved: the analysis behind "What it shows" in docs/benchmark.md.

For a bench folder (default runs/bench-cpu-small), prints per model family of the grammar scaffold:
its share of the training samples in the first and the last three steps (all methods and seeds pooled),
its mean true reward on the train tasks (GRPO's executed training trajectories) and its mean
leaderboard percentile on the held-out tasks (every evaluation execution in the runs' execution logs).

    python studies/benchmark/family_shares.py [BENCH_DIR]
"""
from __future__ import annotations

import collections
import glob
import json
import re
import sqlite3
import statistics
import sys


def family(text: str) -> str:
    """The estimator of a grammar completion or rendered program: the last call in its pipeline line."""
    for line in text.splitlines():
        if "make_pipeline(" in line and "import" not in line:
            calls = re.findall(r"(\w+)\(", line)
            return calls[-1] if calls else "?"
    calls = re.findall(r"(\w+)\(", text)
    return calls[-1] if calls else "?"


def main(out: str) -> None:
    early: collections.Counter[str] = collections.Counter()
    late: collections.Counter[str] = collections.Counter()
    train_reward: collections.defaultdict[str, list[float]] = collections.defaultdict(list)
    heldout: collections.defaultdict[str, list[float]] = collections.defaultdict(list)
    runs = [rd for rd in sorted(glob.glob(f"{out}/*/seed*")) if glob.glob(f"{rd}/summary.json")]
    for rd in runs:
        samples = [json.loads(line) for line in open(f"{rd}/samples.jsonl")]
        last = max(r["step"] for r in samples)
        for r in samples:
            f = family(r["completion"])
            if r["step"] <= 3:
                early[f] += 1
            if r["step"] > last - 3:
                late[f] += 1
            if "/grpo/" in rd and r["reward_true"] is not None:
                train_reward[f].append(r["reward_true"])
        con = sqlite3.connect(f"file:{rd}/executions.sqlite?mode=ro", uri=True)
        for program, reward, meta in con.execute("select program, reward, meta from executions"):
            m = json.loads(meta or "{}")
            if m.get("stream") == "eval" and reward is not None and m.get("split", "heldout") == "heldout":
                heldout[family(program)].append(reward)
        con.close()
    n_early, n_late = sum(early.values()), sum(late.values())
    print(f"{len(runs)} runs in {out}")
    print(f"{'family':32s}{'share steps 1-3':>16s}{'share last 3':>14s}{'train reward (grpo)':>21s}"
          f"{'held-out pct':>14s}")
    mean = lambda xs: f"{statistics.mean(xs):.3f} (n={len(xs)})" if xs else "n/a"  # noqa: E731
    for f in sorted(set(early) | set(late), key=lambda k: -late[k]):
        print(f"{f:32s}{early[f] / n_early:16.2f}{late[f] / n_late:14.2f}{mean(train_reward[f]):>21s}"
              f"{mean(heldout[f]):>14s}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/bench-cpu-small")

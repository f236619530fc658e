"""How fast each arm of a bench learns and concentrates: the per-step training metrics of its runs, in blocks of
steps, averaged over seeds (the analysis behind "the world model's signal on new programs" in docs/benchmark.md).

For every method of a bench folder (``<bench>/<method>/seed<k>/metrics.jsonl``) and every block of ``--block``
steps, the mean over the block's steps and the method's seeds of:

- ``executed reward``: ``reward_true_mean``, the mean executed reward of the step's anchor samples (GRPO: every
  sample), in [0, 1]; steps without anchors are left out, so a world-model arm's value is over fewer steps;
- ``recalled share``: ``n_recalled / n_wm_samples``, the share of world-model samples answered by an execution
  the run already had (0 for arms without recall; empty for GRPO, which has no world-model samples);
- ``Kendall tau``: ``wm_kendall_tau``, the world model's within-group order against the executed one on the
  step's anchor groups (1: the same order, 0: chance), and in brackets the number of (seed, step) values it is
  the mean of; empty where no step of the block had an anchor group with two distinct executed rewards;
- ``distinct programs``: ``policy_distinct_programs``, distinct completions per group of 4 (1: collapsed);
- ``entropy``: ``policy_entropy``, minus the mean log-probability of the sampled completions (nats).

    python studies/benchmark/learning_curves.py BENCH_DIR [--methods grpo,wmrl,...] [--block 10] [--out FILE.md]

Reads only committed files (``metrics.jsonl``); a few seconds.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from wmrl.report.runs import read_jsonl

#: (column, how a step's value is read from a metrics.jsonl line; None = not defined for that step).
COLUMNS = (
    ("executed reward", lambda r: r.get("reward_true_mean")),
    ("recalled share", lambda r: (r["n_recalled"] / r["n_wm_samples"]) if r.get("n_wm_samples") else None),
    ("Kendall tau", lambda r: r.get("wm_kendall_tau")),
    ("distinct programs", lambda r: r.get("policy_distinct_programs")),
    ("entropy", lambda r: r.get("policy_entropy")),
)


def block_means(bench: Path, method: str, block: int) -> list[tuple[str, list[tuple[float, int] | None]]]:
    """``[(steps label, [(mean, number of values) per column of COLUMNS, None where undefined])]`` for
    ``method``'s runs.

    Raises:
        FileNotFoundError: the bench has no finished run of ``method`` (no ``seed*/metrics.jsonl``).
    """
    runs = sorted((bench / method).glob("seed*/metrics.jsonl"))
    if not runs:
        raise FileNotFoundError(f"{bench / method}: no seed*/metrics.jsonl; is {method!r} a method of this bench?")
    steps = [read_jsonl(p) for p in runs]
    last = max(int(r["step"]) for lines in steps for r in lines)
    out = []
    for lo in range(1, last + 1, block):
        hi = min(lo + block - 1, last)
        cells: list[tuple[float, int] | None] = []
        for _, read in COLUMNS:
            raw = [read(r) for lines in steps for r in lines if lo <= int(r["step"]) <= hi]
            vals = [float(v) for v in raw if v is not None and math.isfinite(float(v))]
            cells.append((float(np.mean(vals)), len(vals)) if vals else None)
        out.append((f"{lo}-{hi}", cells))
    return out


def table(bench: Path, methods: list[str], block: int) -> str:
    """The Markdown table: one row per method and block of steps."""
    head = "| method | steps | " + " | ".join(c for c, _ in COLUMNS) + " |"
    rows = [head, "|---" * (2 + len(COLUMNS)) + "|"]
    for m in methods:
        for label, cells in block_means(bench, m, block):
            text = ["" if v is None else f"{v[0]:.2f}" + (f" ({v[1]})" if name == "Kendall tau" else "")
                    for (name, _), v in zip(COLUMNS, cells)]
            rows.append(f"| {m} | {label} | " + " | ".join(text) + " |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bench", type=Path)
    ap.add_argument("--methods", default=None, help="comma-separated; default every method folder of the bench")
    ap.add_argument("--block", type=int, default=10, help="steps per row (default 10)")
    ap.add_argument("--out", type=Path, default=None, help="also write the table to this Markdown file")
    a = ap.parse_args()
    if a.block < 1:
        ap.error(f"--block must be >= 1, got {a.block}")
    methods = a.methods.split(",") if a.methods else sorted(
        p.name for p in a.bench.iterdir() if p.is_dir() and any(p.glob("seed*/metrics.jsonl")))
    try:
        text = table(a.bench, methods, a.block)
    except FileNotFoundError as e:
        ap.error(str(e))
    print(text)
    if a.out is not None:
        a.out.write_text(f"`python studies/benchmark/learning_curves.py {a.bench} --methods {','.join(methods)} "
                         f"--block {a.block}`: per block of steps, the mean over the steps and the seeds.\n\n"
                         + text + "\n")


if __name__ == "__main__":
    main()

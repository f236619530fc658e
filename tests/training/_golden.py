"""The before/after check of the recipe redesign: a 3-step tiny-model run of every method and
the CI miniature bench, reduced to the numbers that must not change when the code is reorganised.

``PYTHONPATH=. python tests/training/_golden.py capture OUT.json`` records them (it was run on commit c7022aa, before
the step recipe moved into ``wmrl.core.recipe``; the file is ``tests/training/golden/recipe_3step.json``);
``tests/training/test_recipe_golden.py`` reruns the same runs and compares, value by value, to 1e-6.

What is compared (everything that is a function of the seeds, not of the clock):

- per step (metrics.jsonl): rewards (true, world model raw and calibrated, used), the fusion statistics
  (alpha, variances, lambda, weights), the loss, KL, clip fraction and gradient norm, counts;
- per trajectory (samples.jsonl): stream, rewards, advantage, weight, completion tokens;
- the final evaluation's percentile and valid rate;
- the mini bench's results.csv numbers that are not times or CPU-seconds.
"""
from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
GOLDEN = Path(__file__).resolve().parent / "golden" / "recipe_3step.json"

#: Each method of the check and the ``--set`` overrides that select it.
METHODS: dict[str, list[str]] = {
    "grpo": ["method=grpo"],
    "wm": ["method=wm"],
    "wmrl": ["method=wmrl"],
    "wmrl-no-debias": ["method=wmrl-no-debias"],
    "wmrl-no-denoise": ["method=wmrl-no-denoise"],
    "wmrl-ppi": ["method=wmrl-ppi"],
    "wmrl-bias-aware": ["method=wmrl-bias-aware"],
}

#: Overrides of every run: 3 steps; the inverse-variance estimate from 2 anchor pairs on (one anchor group of
#: 2 samples a step), so that the fusion branches differ from the first step; the sampling implementation of
#: c7022aa (``rollout.engine=generate``: the shared-prompt sampler draws other samples from the same
#: distribution, so only the old one can reproduce the recorded draws).
COMMON = ["optim.steps=3", "wmrl.fusion.min_pairs=2", "rollout.engine=generate"]

#: Per-step keys (metrics.jsonl) that depend only on the seeds.
STEP_KEYS = (
    "n_groups", "n_samples", "n_anchor_groups", "n_wm_groups", "n_infra_errors", "reward_true_mean",
    "valid_rate_anchor", "reward_wm_mean", "reward_wm_calibrated_mean", "reward_wm_anchor_mean",
    "reward_used_mean", "wm_bias", "wm_bias_calibrated", "calibrator_n_anchors", "calibrator_mode",
    "completion_tokens_mean", "alpha", "var_anchor", "var_wm", "residual_var", "ppi_lambda", "weight_anchor",
    "weight_wm", "n_anchor_samples", "n_wm_samples", "fusion_mode", "loss", "kl", "clip_frac", "grad_norm",
    "update_rows", "exec_count",
)
#: Per-trajectory keys (samples.jsonl).
SAMPLE_KEYS = ("group", "task_id", "stream", "reward_true", "status", "reward_wm", "reward_wm_calibrated",
               "reward_used", "advantage", "weight", "dropped", "completion_tokens")
#: results.csv columns of the mini bench that are not clock- or CPU-time figures.
BENCH_KEYS = ("train_percentile", "initial_train_percentile", "heldout_percentile", "heldout_valid_rate",
              "train_executions", "steps", "wm_anchor_pairs", "wm_spearman", "alpha_mean")


def run_methods(tasks_root: Path, out: Path, methods: dict[str, list[str]] = METHODS) -> dict[str, Any]:
    """Run every method 3 steps on the tiny config and return ``{method: {steps, samples, eval}}``."""
    from wmrl.training.config import load_config
    from wmrl.runs.rundir import RunDir, read_jsonl
    from wmrl.training.run import run_training

    res: dict[str, Any] = {}
    for name, ov in methods.items():
        run = out / name
        cfg = load_config(TINY, [f"tasks.root={tasks_root}", f"run_dir={run}", *COMMON, *ov])
        run_training(cfg)
        rd = RunDir(run)
        ev = read_jsonl(rd.eval)
        res[name] = {
            "steps": [{k: r.get(k) for k in STEP_KEYS} for r in read_jsonl(rd.metrics)],
            "samples": [{k: s.get(k) for k in SAMPLE_KEYS} for s in read_jsonl(rd.samples)],
            "eval": [{k: e.get(k) for k in ("step", "split", "percentile", "valid_rate", "n_samples")} for e in ev],
        }
    return res


def run_mini_bench(root: Path, overrides: tuple[str, ...] = ("rollout.engine=generate",)) -> Path:
    """The CI miniature bench (:mod:`tests.support.real_runs`) with ``overrides``; returns its folder."""
    from tests.support.real_runs import run_mini_bench as run

    return run(root, overrides)[0]


def bench_numbers(bench_out: Path) -> dict[str, Any]:
    """The mini bench's seed-determined numbers per method (results.csv)."""
    import pandas as pd

    res = pd.read_csv(bench_out / "results.csv").set_index("method")
    return {m: {k: (None if pd.isna(res.loc[m, k]) else float(res.loc[m, k])) for k in BENCH_KEYS if k in res}
            for m in res.index}


#: Keys compared more loosely, and why. ``grad_norm``: the update's log-probs now come from the
#: shared-prompt forward (one prompt pass per group), equal to the per-sample forward to about 1e-5 in float32
#: (tests/models/test_shared_prompts.py), so the float32 gradient norm moves in its 6th digit.
LOOSE_KEYS = {"grad_norm": 1e-4}


def differences(a: Any, b: Any, path: str = "", tol: float = 1e-6) -> list[str]:
    """Where ``a`` and ``b`` differ (numbers to ``tol``, or to :data:`LOOSE_KEYS`' tolerance for those keys;
    NaN equal to NaN and to None)."""
    def num(x):
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}.{k}: key only on one side" for k in set(a) ^ set(b)]
        for k in sorted(set(a) & set(b)):
            out += differences(a[k], b[k], f"{path}.{k}", LOOSE_KEYS.get(k, tol))
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: length {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]", tol)]
    nanlike = lambda x: x is None or (num(x) and math.isnan(x))  # noqa: E731
    if nanlike(a) and nanlike(b):
        return []
    if num(a) and num(b):
        return [] if abs(a - b) <= tol * max(1.0, abs(a), abs(b)) else [f"{path}: {a!r} != {b!r}"]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def capture(dest: Path) -> None:
    """Record the runs and the mini bench into ``dest`` (JSON)."""
    from wmrl.tasks.build import build_suite
    from wmrl.tasks.datasets import SMALL_TASKS

    with tempfile.TemporaryDirectory() as d:
        tasks = Path(d) / "tasks"
        build_suite(tasks, SMALL_TASKS)
        runs = run_methods(tasks, Path(d) / "runs")
        out = run_mini_bench(Path(d) / "bench")
        bench = bench_numbers(out)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps({"runs": runs, "bench": bench}, indent=1, default=float) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "capture":
        sys.exit("usage: python tests/training/_golden.py capture OUT.json")
    capture(Path(sys.argv[2]))

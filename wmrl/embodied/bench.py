"""The embodied bench: every recipe x every seed from one shared SFT checkpoint, resumable, one table.

``run_bench`` runs the runs one after another in this process (they share the environment pool and the
cached SFT + progress-predictor artefacts). A run with ``summary.json`` is done and read back; a run with a
checkpoint is resumed; a run folder without one is started again. So the same command, run again after a
kill, continues where it stopped. After every run ``bench.json`` (all summaries) and ``table.md`` are
rewritten.

Table: success rate at the end of training on the training initial states and on held-out initial states,
mean over seeds +- the standard error over seeds (sample std / sqrt(n_seeds)); the ``sft`` row is the SFT
policy evaluated with each seed's evaluation noise. Every method of one seed shares that seed's evaluation
noise (paired). Compute: training CPU-seconds of the run (trainer process; the simulator runs in it) and the
success labels it read (anchor episodes).
"""
from __future__ import annotations

import json
import math
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from wmrl.embodied.config import load_config
from wmrl.runs.rundir import RunDir, write_json_atomic, write_text_atomic
from wmrl.embodied.trainer import build_artefacts, make_suite
from wmrl.embodied.progress import ProgressPredictor, collapse
from wmrl.embodied.policy import GaussianPolicy
from wmrl.embodied.env import rollout, shared_pool
from wmrl.embodied.trainer import run_embodied

DEFAULT_RECIPES = ["sft", "grpo", "wm", "wmrl", "wmrl-no-debias", "wmrl-no-denoise", "anchor-only"]

LABELS = {
    "sft": "SFT (behaviour cloning, no RL)",
    "grpo": "GRPO, sparse success only (every group)",
    "wm": "GRPO, raw dense progress only (no anchors)",
    "wmrl": "WMRL (anchors + debias + denoise)",
    "wmrl-no-debias": "WMRL without debiasing",
    "wmrl-no-denoise": "WMRL without denoising",
    "wmrl-ppi": "WMRL with PPI++ fusion",
    "anchor-only": "GRPO on the anchor groups' success only",
}


def _mean_se(xs: list[float]) -> tuple[float | None, float | None]:
    if not xs:
        return None, None
    m = float(np.mean(xs))
    se = float(np.std(xs, ddof=1) / math.sqrt(len(xs))) if len(xs) > 1 else None
    return m, se


def run_one(out: Path, recipe: str, seed: int, preset: str, overrides: list[str], log: Any) -> dict[str, Any]:
    """Run (or resume, or read back) one bench run in ``out/<recipe>-s<seed>``."""

    d = out / f"{recipe}-s{seed}"
    rd = RunDir(d)
    if rd.summary.is_file():
        return json.loads(rd.summary.read_text())
    if rd.config.is_file() and rd.resume_candidates()[0]:
        log(f"resuming {d}")
        return run_embodied(resume_dir=d, progress=True)
    if d.exists():
        shutil.rmtree(d)
    cfg = load_config(preset=preset, overrides=list(overrides) + [f"method={recipe}", f"seed={seed}",
                                                                  f"run_dir={d}", f"name={recipe}-s{seed}"])
    return run_embodied(cfg, progress=True)


def run_bench(out: str | Path, *, preset: str = "bench", recipes: list[str] | None = None,
              seeds: list[int] | None = None, overrides: list[str] | None = None) -> dict[str, Any]:
    """Run every (recipe, seed); returns ``{"runs": [...], "table": [...], "failed": [...]}`` (also bench.json)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    recipes = list(recipes or DEFAULT_RECIPES)
    seeds = list(seeds if seeds is not None else [0, 1, 2])
    # fail fast, before any run: a bad preset or override, or a recipe that is not registered
    load_config(preset=preset, overrides=list(overrides or []))
    for r in recipes:
        load_config(preset=preset, overrides=[*(overrides or []), f"method={r}"])
    meta = {"preset": preset, "recipes": recipes, "seeds": seeds, "overrides": list(overrides or []),
            "command": " ".join(sys.argv), "started": time.time()}
    if not (out / "bench_meta.json").is_file():
        write_json_atomic(out / "bench_meta.json", meta)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    runs, failed = [], []
    for seed in seeds:  # seeds outer: a bench cut short still has every method for the first seeds
        for r in recipes:
            try:
                runs.append(run_one(out, r, seed, preset, list(overrides or []), log))
            except Exception as e:  # noqa: BLE001 - one failed run must not end the bench; it is reported
                failed.append({"method": r, "seed": seed, "error": f"{type(e).__name__}: {e}"})
                (out / f"{r}-s{seed}.error.txt").write_text(traceback.format_exc())
                log(f"run {r} seed {seed} failed: {e}")
            res = summarise(runs, failed, recipes)
            write_json_atomic(out / "bench.json", res)
            write_text_atomic(out / "table.md", format_table(res))
    return res


def summarise(runs: list[dict[str, Any]], failed: list[dict[str, Any]], recipes: list[str]) -> dict[str, Any]:
    rows = []
    sft = {r["seed"]: r["final"] for r in runs if r["method"] == "sft"}
    for name in recipes:
        rs = [r for r in runs if r["method"] == name]
        if not rs:
            continue
        row: dict[str, Any] = {"method": name, "label": LABELS.get(name, name), "n_seeds": len(rs),
                               "seeds": [r["seed"] for r in rs]}
        for split in ("train", "heldout", "heldout_tasks"):
            xs = [r["final"][split] for r in rs if r["final"].get(split) is not None]
            if not xs:
                continue
            row[f"{split}_mean"], row[f"{split}_se"] = _mean_se(xs)
            ds = [r["final"][split] - sft[r["seed"]][split] for r in rs if r["seed"] in sft and split in sft[r["seed"]]]
            row[f"{split}_delta_mean"], row[f"{split}_delta_se"] = _mean_se(ds) if name != "sft" else (None, None)
        row["train_compute_cpu_s"] = float(np.mean([r["train_compute_cpu_s"] for r in rs]))
        row["success_labels"] = float(np.mean([r["success_labels"] for r in rs]))
        row["wall_s"] = float(np.mean([r["wall_s"] for r in rs]))
        rows.append(row)
    return {"runs": runs, "table": rows, "failed": failed}


def _pm(m: float | None, se: float | None, pct: bool = True) -> str:
    if m is None:
        return "-"
    f = 100.0 if pct else 1.0
    return f"{m * f:.1f} ± {se * f:.1f}" if se is not None else f"{m * f:.1f}"


def ordering(table: list[dict[str, Any]], split: str = "heldout") -> str:
    """Whether the paper's ordering sparse (grpo) < dense (wm) < both (wmrl) holds on ``split`` means."""
    by = {r["method"]: r.get(f"{split}_mean") for r in table}
    if any(by.get(k) is None for k in ("grpo", "wm", "wmrl")):
        return f"{split}: not all of grpo, wm, wmrl ran"
    g, w, b = by["grpo"], by["wm"], by["wmrl"]
    assert g is not None and w is not None and b is not None  # all three ran (checked above)
    order = " < ".join(k for k, _ in sorted((("sparse", g), ("dense", w), ("both", b)), key=lambda x: x[1]))
    holds = g < w < b
    return (f"{split}: sparse {g * 100:.1f}, dense {w * 100:.1f}, both {b * 100:.1f} -> observed order {order}; "
            f"the paper's sparse < dense < both {'holds' if holds else 'does not hold'} (means; see the SEs)")


def format_table(res: dict[str, Any]) -> str:
    """The markdown table of docs/embodied.md."""
    lines = ["| method | train states % | held-out states % | Δ train vs SFT | Δ held-out vs SFT | "
             "train CPU-s | success labels | seeds |", "|---|---|---|---|---|---|---|---|"]
    for r in res["table"]:
        lines.append(f"| {r['label']} (`{r['method']}`) | {_pm(r.get('train_mean'), r.get('train_se'))} | "
                     f"{_pm(r.get('heldout_mean'), r.get('heldout_se'))} | "
                     f"{_pm(r.get('train_delta_mean'), r.get('train_delta_se'))} | "
                     f"{_pm(r.get('heldout_delta_mean'), r.get('heldout_delta_se'))} | "
                     f"{r['train_compute_cpu_s']:.0f} | {r['success_labels']:.0f} | {r['n_seeds']} |")
    lines.append("")
    lines.append("Ordering: " + ordering(res["table"], "heldout"))
    lines.append("Ordering: " + ordering(res["table"], "train"))
    if res.get("failed"):
        lines.append("")
        lines += [f"- failed: {f['method']} seed {f['seed']}: {f['error']}" for f in res["failed"]]
    return "\n".join(lines) + "\n"


def _auc(score: np.ndarray, label: np.ndarray) -> float | None:
    """Probability that a random success scores above a random failure (ties count 1/2); None without both."""
    pos, neg = score[label > 0.5], score[label <= 0.5]
    if pos.size == 0 or neg.size == 0:
        return None
    diff = pos[:, None] - neg[None, :]
    return float((diff > 0).mean() + 0.5 * (diff == 0).mean())


def collapse_study(cfg: Any, split: str = "train", samples_per_state: int = 2, seed: int = 777) -> dict[str, Any]:
    """How well each collapse (shaping, peak, final) of the progress predictor ranks the SFT policy's episodes
    by the simulator's success, on fresh roll-outs of ``split``.

    Returns per collapse: ``auc`` (success vs failure), ``mean_success`` / ``mean_failure`` (scores), and
    ``fail_above_success_median``: the fraction of failed episodes scoring at least the median successful
    episode (what a world model would reward as if it had succeeded; only the anchors can expose it).
    """
    import torch  # noqa: PLC0415 - heavy


    art = build_artefacts(cfg)
    suite = make_suite(cfg)
    pool = shared_pool(suite)
    pol, wm = GaussianPolicy.load(art / "policy"), ProgressPredictor.load(art / "progress")
    states = [s for s in suite.states(split) for _ in range(samples_per_state)]
    eb = rollout(pool, states, pol.act, lambda t: pol.index(suite.instruction(t)), torch.Generator().manual_seed(seed))
    out: dict[str, Any] = {"split": split, "n_episodes": eb.B, "success_rate": float(eb.success.mean()),
                           "k": cfg.world_model.k, "collapses": {}}
    for mode in ("shaping", "peak", "final"):
        sc = np.asarray([collapse(wm.score_states(eb.visited(i), np.full(int(eb.length[i]) + 1,
                                                                          wm.instructions.index(suite.instruction(s.task)))),
                                  mode, cfg.world_model.k) for i, s in enumerate(states)])
        ok = eb.success > 0.5
        med = float(np.median(sc[ok])) if ok.any() else None
        out["collapses"][mode] = {
            "auc": _auc(sc, eb.success), "mean_success": float(sc[ok].mean()) if ok.any() else None,
            "mean_failure": float(sc[~ok].mean()) if (~ok).any() else None,
            "fail_above_success_median": float((sc[~ok] >= med).mean()) if med is not None and (~ok).any() else None}
    return out

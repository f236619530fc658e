"""Recalled executions on the simulated bandit: does training world-model samples of already-measured arms on
their measured reward keep WMRL on the true reward, and does it need a small program space?

    python studies/simulation/recall_study.py [--seeds 3] [--arms 32,256,2048] [--out studies/simulation/recall]

The bandit of docs/simulation.md (20 tasks, 8 samples a group, 200 steps, rho = 0.1) with K arms per task, for
world models with a monotone distortion, a group offset and an exploitable error (10% of each task's arms
over-rated by B), and the methods ``grpo``, ``wm``, ``wmrl-raw``, ``wmrl-no-recall`` (the paper's WMRL),
``wmrl`` (with recall) and ``wmrl-ppi`` (with recall). With K = 2048 the 20 x 2048 arms are ten times the
3,200 anchor samples a run executes, so the anchors cannot measure the space: recall can only help where the
policy revisits arms. Written: ``finals.csv`` (one row per run) and ``summary.md`` (mean +- SE of the final
true reward J over seeds, and its gap to GRPO).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd

from wmrl.sim.bandit import WorldModelSpec
from wmrl.sim.engine import RunSpec, SimConfig, simulate

WORLD_MODELS = {
    "monotone B=0.9": WorldModelSpec("monotone", 0.9, 0.1),
    "offset B=1.0": WorldModelSpec("offset", 1.0, 0.1),
    "exploit B=0.5": WorldModelSpec("exploit", 0.5, 0.1),
    "exploit B=1.0": WorldModelSpec("exploit", 1.0, 0.1),
}
METHODS = ("grpo", "wm", "wmrl-raw", "wmrl-no-recall", "wmrl", "wmrl-ppi")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--arms", default="32,256,2048")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "recall")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    frames, t0 = [], time.perf_counter()
    for K in (int(k) for k in a.arms.split(",")):
        names = [n for n in WORLD_MODELS for _ in METHODS for _ in range(a.seeds)]
        runs = [RunSpec(m, WORLD_MODELS[n], 0.1, seed=s) for n in WORLD_MODELS for m in METHODS
                for s in range(a.seeds)]
        _, f = simulate(runs, SimConfig(n_arms=K))
        f = f.drop(columns=["exploit_mass", "alarm_steps", "alarm_reasons"], errors="ignore")
        f["world_model"], f["arms"] = names, K
        frames.append(f)
        print(f"K={K}: {len(runs)} runs, {time.perf_counter() - t0:.0f} s", flush=True)
    f = pd.concat(frames, ignore_index=True)
    f.to_csv(a.out / "finals.csv", index=False)
    grpo = f[f.method == "grpo"].set_index(["arms", "world_model", "seed"])["J_final"]
    f["vs_grpo"] = f["J_final"].to_numpy() - grpo.loc[list(zip(f.arms, f.world_model, f.seed))].to_numpy()
    lines = ["# Recalled executions on the bandit", "",
             f"`python studies/simulation/recall_study.py --seeds {a.seeds} --arms {a.arms}`: 20 tasks x K arms, "
             "200 steps, rho = 0.1, noise sigma = 0.1. Final true reward J (mean ± SE over seeds) and, in "
             "brackets, its paired difference to GRPO (which executes every sample: 10x the executions).", ""]
    for K, sub in f.groupby("arms"):
        lines += [f"## K = {K} arms per task (optimum J* = {sub.J_star.mean():.3f})", "",
                  "| world model | " + " | ".join(f"`{m}`" for m in METHODS) + " |",
                  "|---|" + "---|" * len(METHODS)]
        for n in WORLD_MODELS:
            cells = []
            for m in METHODS:
                r = sub[(sub.world_model == n) & (sub.method == m)]
                se = r.J_final.std(ddof=1) / len(r) ** 0.5 if len(r) > 1 else float("nan")
                cell = f"{r.J_final.mean():.3f} ± {se:.3f}"
                if m != "grpo":
                    cell += f" ({r.vs_grpo.mean():+.3f})"
                cells.append(cell)
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
        lines.append("")
    (a.out / "summary.md").write_text("\n".join(lines))
    (a.out / "meta.json").write_text(json.dumps({"seeds": a.seeds, "arms": a.arms, "runs": len(f),
                                                 "wall_s": round(time.perf_counter() - t0, 1)}, indent=1))


if __name__ == "__main__":
    main()

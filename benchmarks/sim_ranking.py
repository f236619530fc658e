"""Which correction reaches the true optimum when the world model misorders programs, and which stops at the
world model's favourite: the simulation's ``rank`` world model (``wmrl.sim.bandit``: a persistent error per
program, so a monotone map of the score keeps the wrong order inside every group).

The shape of the ``cpu-small`` bench (4 tasks a step x 4 samples, rho = 0.1, so most steps have no anchor group),
64 programs per task, 300 steps, with and without recalled executions (without: every program is new to the
world model, the regime where programs rarely repeat). For each world-model error B it prints J* (the best
program of every task), the J of the world model's favourite programs, and each method's final J (mean and SE
over seeds) with the share of the way from the world model's favourites to J* that it covered (0 %: it ends at the
world model's favourites, 100 %: at the true optimum).

    python benchmarks/sim_ranking.py [--seeds 4] [--steps 300] [--out FILE.md]

About 5 minutes on 2 idle CPU cores. The result is in docs/simulation.md, "Measured: a world model that misorders".
"""
from __future__ import annotations

import argparse
import platform
import time
from datetime import date
from pathlib import Path

import numpy as np

from wmrl.sim.bandit import BanditProblem, WorldModelSpec
from wmrl.sim.engine import RunSpec, SimConfig, simulate

#: (recipe, favourite verification) arms, in the order of the table's columns.
ARMS = (("grpo", False), ("wm", False), ("anchor-only", False), ("wmrl-raw", False), ("wmrl", False),
        ("wmrl-ppi", False), ("wmrl-cv", False), ("wmrl", True), ("wmrl-cv", True))
BIASES = (0.15, 0.3)


def _label(method: str, verify: bool) -> str:
    return f"`{method}`" + (" +verify" if verify else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--out", type=Path, default=None, help="also write the table to this Markdown file")
    a = ap.parse_args()
    C, G, K = 4, 4, 64
    cfg = SimConfig(n_tasks=C, n_arms=K, group_size=G, steps=a.steps, log_every=max(1, a.steps // 20))
    seeds = range(a.seeds)
    lines = [f"`python benchmarks/sim_ranking.py --seeds {a.seeds} --steps {a.steps}`, {date.today()}, "
             f"{platform.machine()} CPU; {C} tasks x {G} samples a step, {K} programs per task, rho 0.1, "
             f"{a.steps} steps, seeds 0-{a.seeds - 1}. Final J: mean ± SE over seeds, and in brackets the share of the "
             "way from the world model's favourites to J* it covered.", ""]
    t0 = time.time()
    for recall in (False, True):
        runs = [RunSpec(m, WorldModelSpec("rank", b, 0.0), rho=0.1, seed=s, recall=recall, verify=v)
                for m, v in ARMS for b in BIASES for s in seeds]
        _, finals = simulate(runs, cfg)
        lines += [f"**{'with' if recall else 'without'} recalled executions**", "",
                  "| B | J* | J of the world model's favourites | " + " | ".join(_label(m, v) for m, v in ARMS) + " |",
                  "|---" * (3 + len(ARMS)) + "|"]
        for b in BIASES:
            j_star = float(np.mean([BanditProblem.make(C, K, s).optimum for s in seeds]))
            j_fav = float(np.mean([BanditProblem.make(C, K, s).world_model_optimum(WorldModelSpec("rank", b, 0.0))
                                   for s in seeds]))
            cells = []
            for m, v in ARMS:
                sel = finals[(finals.bias == b) & (finals.method == m) & (finals.verify == v)]
                j = sel.J_final.to_numpy()
                se = j.std(ddof=1) / np.sqrt(j.size) if j.size > 1 else float("nan")
                cells.append(f"{j.mean():.3f} ± {se:.3f} ({100 * (j.mean() - j_fav) / (j_star - j_fav):.0f} %; "
                             f"{sel.executions.mean():.0f} ex.)")
            lines.append(f"| {b} | {j_star:.3f} | {j_fav:.3f} | " + " | ".join(cells) + " |")
        lines.append("")
    lines.append(f"{time.time() - t0:.0f} s wall.")
    text = "\n".join(lines)
    print(text)
    if a.out is not None:
        a.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

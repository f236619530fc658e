"""Which correction reaches the true optimum when the world model misorders programs, and which stops at the
world model's favourite: the simulation's ``rank`` world model (``wmrl.sim.bandit``: a persistent error per
program, so a monotone map of the score keeps the wrong order inside every group).

The shape of the ``cpu-small`` bench (4 tasks a step x 4 samples, rho = 0.1, so most steps have no anchor group),
64 programs per task, 300 steps, with and without recalled executions (without: every program is new to the
world model, the regime where programs rarely repeat). For each world-model error B it prints J* (the best
program of every task), the J of the world model's favourite programs, and each method's final J (mean and SE
over seeds) with the share of the way from the world model's favourites to J* that it covered (0 %: it ends at the
world model's favourites, 100 %: at the true optimum).

    python benchmarks/sim_ranking.py [--seeds 4] [--steps 300] [--out FILE.md] [--time-to-target PREFIX]

With ``--time-to-target PREFIX`` it also writes ``PREFIX.md`` and ``PREFIX.png``: the executions each arm needs to
first reach GRPO's final J of the same seed (its time-to-target, the compute-matched form of the paper's claim),
and the curves of J against executions.

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
from wmrl.sim.study import executions_to_reach

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
    ap.add_argument("--time-to-target", type=Path, default=None, metavar="PREFIX",
                    help="also write PREFIX.md (executions to reach GRPO's final J) and PREFIX.png (the curves)")
    a = ap.parse_args()
    C, G, K = 4, 4, 64
    cfg = SimConfig(n_tasks=C, n_arms=K, group_size=G, steps=a.steps, log_every=max(1, a.steps // 20))
    seeds = range(a.seeds)
    lines = [f"`python benchmarks/sim_ranking.py --seeds {a.seeds} --steps {a.steps}`, {date.today()}, "
             f"{platform.machine()} CPU; {C} tasks x {G} samples a step, {K} programs per task, rho 0.1, "
             f"{a.steps} steps, seeds 0-{a.seeds - 1}. Final J: mean ± SE over seeds, and in brackets the share of the "
             "way from the world model's favourites to J* it covered.", ""]
    t0 = time.time()
    results = {}
    for recall in (False, True):
        runs = [RunSpec(m, WorldModelSpec("rank", b, 0.0), rho=0.1, seed=s, recall=recall, verify=v)
                for m, v in ARMS for b in BIASES for s in seeds]
        curves, finals = simulate(runs, cfg)
        results[recall] = (curves, finals)
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
    if a.time_to_target is not None:
        write_time_to_target(results, a.time_to_target, lines[0].split(". Final J")[0], seeds)


#: Targets of the time-to-target table: the share of GRPO's gain (from the initial J to its final J, same seed)
#: that an arm's J must first reach.
TARGETS = (1.0, 0.9)


def time_to_target(curves, finals) -> list[dict]:
    """Per arm, bias, seed and target share q (:data:`TARGETS`): the executions its curve needs to first reach
    J_0 + q (J_GRPO - J_0), with J_0 the initial J and J_GRPO GRPO's final J on the same seed and bias
    (:func:`wmrl.sim.study.executions_to_reach`; inf if it never does)."""
    rows = []
    for _, r in finals.iterrows():
        ref = finals[(finals.method == "grpo") & (~finals.verify) & (finals.bias == r.bias) & (finals.seed == r.seed)]
        c = curves[curves.run == r.run].sort_values("executions")
        j0 = float(c[c.step == 0].J.iloc[0])
        for q in TARGETS:
            target = j0 + q * (float(ref.J_final.iloc[0]) - j0)
            rows.append({"method": r.method, "verify": bool(r.verify), "bias": float(r.bias), "seed": int(r.seed),
                         "share": q, "to_target": executions_to_reach(c, target),
                         "executions": float(r.executions)})
    return rows


def write_time_to_target(results: dict, prefix: Path, header: str, seeds: range) -> None:
    """Write ``prefix.md`` (per arm: median executions over seeds to each target of :data:`TARGETS`) and
    ``prefix.png`` (mean J against executions at the larger world-model error)."""
    import matplotlib  # noqa: PLC0415 - heavy
    import pandas as pd  # noqa: PLC0415 - heavy

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 - heavy

    lines = [header + ". Time-to-target: the executions an arm needs until its true expected reward J first reaches "
             "GRPO's final J on the same seed (100 %), or 90 % of GRPO's gain over the initial J; the median over "
             "seeds (`never` when fewer than half reached it), in brackets the seeds that reached it and the median "
             "as a multiple of GRPO's own. Total: the arm's executions in the whole run.", ""]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, recall in zip(axes, (False, True)):
        curves, finals = results[recall]
        t = pd.DataFrame(time_to_target(curves, finals))
        cols = [(b, q) for b in BIASES for q in TARGETS]
        lines += [f"**{'with' if recall else 'without'} recalled executions**", "",
                  "| arm | total | " + " | ".join(f"B {b}: {100 * q:.0f} %" for b, q in cols) + " |",
                  "|---" * (2 + len(cols)) + "|"]
        for m, v in ARMS:
            cells = []
            for b, q in cols:
                sel = (t.bias == b) & (t.share == q)
                grpo = float(np.median(t[sel & (t.method == "grpo")].to_target))
                x = t[sel & (t.method == m) & (t.verify == v)].to_target.to_numpy()
                med = float(np.median(x))
                cells.append("never" if not np.isfinite(med) else
                             f"{med:.0f} ({int(np.isfinite(x).sum())}/{x.size}; {med / grpo:.2f}x)")
            total = float(t[(t.method == m) & (t.verify == v)].executions.mean())
            lines.append(f"| {_label(m, v)} | {total:.0f} | " + " | ".join(cells) + " |")
        lines.append("")
        b = max(BIASES)
        for m, v in ARMS:
            runs = finals[(finals.method == m) & (finals.verify == v) & (finals.bias == b)].run
            c = curves[curves.run.isin(runs)].groupby("step")[["executions", "J"]].mean()
            ax.plot(c.executions.clip(lower=1), c.J, label=_label(m, v).replace("`", ""), ls="--" if v else "-")
        target = float(finals[(finals.method == "grpo") & (finals.bias == b)].J_final.mean())
        ax.axhline(target, color="k", lw=0.8, ls=":", label="GRPO's final J")
        ax.set_xscale("log")
        ax.set_xlabel("executions (training compute; 1 = none)")
        ax.set_title(f"{'with' if recall else 'without'} recalled executions, B = {b}")
    axes[0].set_ylabel(f"J (mean over {len(seeds)} seeds)")
    axes[1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(prefix.with_suffix(".png"), dpi=110)
    prefix.with_suffix(".md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

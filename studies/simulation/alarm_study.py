"""The exploitation alarm on the simulated bandit: detection delay, false alarms, and what the
``raise_anchors`` response buys.

    python studies/simulation/alarm_study.py [--seeds 8] [--steps 300] [--out studies/simulation/alarm]

Runs the ``wmrl`` recipe without recalled executions (the paper's recipe) at rho = 0.1 (20 tasks, 2 anchor groups a
step) against world models that can be exploited (``exploit``: 10% of each task's arms over-rated by B) and world models
that cannot (``monotone`` distortion, pure noise, a group offset), for each CUSUM threshold h, with the alarm only
recorded (response ``none``) and with ``raise_anchors``. Onset of exploitation: the first step at which the policy puts
twice its initial mass (0.2) on the over-rated arms. Written: ``alarm.csv`` (one row per run) and ``alarm.md`` (the
table).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from wmrl.sim.bandit import WorldModelSpec
from wmrl.sim.engine import RunSpec, SimConfig, simulate

WORLD_MODELS = {
    "exploit B=0.2": WorldModelSpec("exploit", 0.2, 0.05),
    "exploit B=0.4": WorldModelSpec("exploit", 0.4, 0.05),
    "monotone B=0.5": WorldModelSpec("monotone", 0.5, 0.05),
    "noise only": WorldModelSpec("monotone", 0.0, 0.1),
    "offset B=0.2": WorldModelSpec("offset", 0.2, 0.05),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--thresholds", default="5,8,12")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "alarm")
    a = ap.parse_args()
    rows = []
    t0 = time.perf_counter()
    for h in [float(x) for x in a.thresholds.split(",")]:
        cfg = SimConfig(steps=a.steps, alarm_threshold=h)
        runs = [RunSpec("wmrl", wm, 0.1, seed=s, recall=False, alarm_response=resp)
                for s in range(a.seeds) for wm in WORLD_MODELS.values() for resp in ("none", "raise_anchors")]
        _, finals = simulate(runs, cfg)
        labels = {v.label: k for k, v in WORLD_MODELS.items()}
        for spec, (_, f) in zip(runs, finals.iterrows()):
            onset = next((t for t, m in enumerate(f.exploit_mass) if m >= 0.2), None)
            first = f.alarm_steps[0] if f.alarm_steps else None
            rows.append(dict(h=h, world_model=labels[spec.wm.label], response=spec.alarm_response, seed=spec.seed,
                             J_final=f.J_final, J_star=f.J_star, n_alarms=len(f.alarm_steps), first_alarm=first,
                             onset=onset, rho_final=f.rho_final, executions=f.executions,
                             reasons=json.dumps(f.alarm_reasons)))
    df = pd.DataFrame(rows)
    a.out.mkdir(parents=True, exist_ok=True)
    df.to_csv(a.out / "alarm.csv", index=False)
    groups_per_run = 2 * a.steps  # 20 tasks x rho 0.1 anchor groups a step
    lines = ["# The exploitation alarm on the simulated bandit\n",
             f"`python studies/simulation/alarm_study.py --seeds {a.seeds} --steps {a.steps}` "
             f"({time.perf_counter() - t0:.0f} s). `wmrl` at rho 0.1, {a.seeds} seeds, {a.steps} steps, drift k = 0.5; "
             f"about {groups_per_run} anchor groups a run. Onset: the policy's mass on the over-rated arms reaches 0.2 "
             "(twice the uniform policy's). Delay: first alarm minus onset, in steps (median over runs with both; "
             "negative = before the onset). False alarms: alarms per 1000 anchor groups where nothing can be "
             "exploited. J: final true expected reward, response none -> raise_anchors (executions x).\n",
             "| h | world model | runs alarmed | alarms per 1000 groups | median delay (steps) | J none "
             "| J raise_anchors | executions x |",
             "|---|---|---|---|---|---|---|---|"]
    for (h, wm), d in df.groupby(["h", "world_model"], sort=False):
        n = d[d.response == "none"]
        r = d[d.response == "raise_anchors"]
        delays = [fa - on for fa, on in zip(n.first_alarm, n.onset) if fa is not None and on is not None
                  and not (pd.isna(fa) or pd.isna(on))]
        alarmed = int((n.n_alarms > 0).sum())
        rate = 1000 * n.n_alarms.mean() / groups_per_run
        delay = f"{np.median(delays):.0f}" if delays else "-"
        lines.append(f"| {h:g} | {wm} | {alarmed}/{len(n)} | {rate:.2f} | {delay} |")
        lines[-1] += (f" {n.J_final.mean():.3f} | {r.J_final.mean():.3f} | "
                      f"{r.executions.mean() / n.executions.mean():.2f} |")
    (a.out / "alarm.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

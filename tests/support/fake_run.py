"""A hand-written run directory that follows docs/run-directory.md, for fast report tests.

The numbers are generated from a seeded RNG with the structure of a real run (a world model with a
monotone bias, anchors a fraction of groups, a ledger that adds up); the end-to-end test in
test_report_real_run.py renders a run directory written by the real trainer.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml


def write_fake_run(root: Path, method: str = "wmrl", steps: int = 6, seed: int = 0,
                   finished: bool = True, **wmrl_opts) -> Path:
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    cfg = {"method": method, "name": f"{method}-fake", "seed": seed,
           "model": {"name": "tiny"}, "scaffold": {"name": "grammar"},
           "optim": {"steps": steps}, "rollout": {"tasks_per_step": 4, "group_size": 4},
           "wmrl": {"anchor_fraction": 0.25, **wmrl_opts}}
    (root / "config.yaml").write_text(yaml.safe_dump(cfg))
    metrics, cal = [], []
    cum = {"compute": 50.0, "exec": 0, "sbx": 0.0, "wall": 0.0}
    n_anchor_groups = 4 if method == "grpo" else (0 if method == "wm" else 1)
    for s in range(1, steps + 1):
        r = np.clip(rng.normal(0.3 + 0.03 * s, 0.15, 4 * n_anchor_groups), 0, 1)
        wm = np.clip(0.5 * r + 0.3 + rng.normal(0, 0.05, r.size), 0, 1)
        ex_cpu = float(r.size * 2.0)
        cum["exec"] += r.size
        cum["sbx"] += ex_cpu
        cum["compute"] += 10.0 + ex_cpu
        cum["wall"] += 8.0
        metrics.append({
            "step": s, "time": 1.7e9 + s, "method": method, "n_groups": 4, "n_samples": 16,
            "n_anchor_groups": n_anchor_groups, "n_wm_groups": 4 - n_anchor_groups,
            "reward_true_mean": float(r.mean()) if r.size else None,
            "valid_rate_anchor": 0.8 if r.size else None,
            "reward_wm_mean": None if method == "grpo" else float(0.45 + 0.01 * s),
            "reward_wm_calibrated_mean": None if method == "grpo" else float(0.35 + 0.02 * s),
            "alpha": 1.0 if method == "grpo" else (0.0 if method == "wm" else 0.4 + 0.02 * s),
            "var_anchor": 0.02, "residual_var": None if method == "grpo" else 0.01,
            "wall_s.generate": 3.0, "cpu_s.generate": 5.0, "wall_s.update": 2.0, "cpu_s.update": 4.0,
            "exec_count": int(r.size), "exec_sandbox_cpu_s": ex_cpu,
            "cum_wall_s": cum["wall"], "cum_exec_count": cum["exec"], "cum_exec_sandbox_cpu_s": cum["sbx"],
            "cum_compute_cpu_s": cum["compute"],
            "wm_kendall_tau": float(0.2 + 0.05 * s) if method not in ("grpo", "wm") else None,
            "policy_distinct_programs": max(1.0, 4.0 - 0.5 * s), "policy_entropy": max(0.1, 6.0 - 0.8 * s),
        })
        if method != "grpo" and r.size:
            cal.append({"step": s, "mode": "isotonic" if s > 2 else "identity", "n_window": 4 * (s - 1),
                        "map_x": list(np.linspace(0, 1, 11)),
                        "map_y": list(np.clip((np.linspace(0, 1, 11) - 0.3) * 2, 0, 1)),
                        "anchor_wm": wm.tolist(), "anchor_wm_calibrated": np.clip((wm - 0.3) * 2, 0, 1).tolist(),
                        "anchor_true": r.tolist(), "anchor_task_ids": ["t"] * r.size})
    with open(root / "metrics.jsonl", "w") as fh:
        for m in metrics:
            fh.write(json.dumps(m) + "\n")
    with open(root / "calibration.jsonl", "w") as fh:
        for c in cal:
            fh.write(json.dumps(c) + "\n")
    evals = []
    for st in (0, steps):
        evals.append({"step": st, "split": "heldout", "checkpoint": None, "n_tasks": 2, "n_samples": 8,
                      "mean_percentile": float(0.2 + 0.05 * st / steps + 0.05 * rng.random()),
                      "valid_rate": 0.75, "medals": {"gold": 0, "silver": 0, "bronze": 1},
                      "per_task": {"a": {"mean_percentile": 0.3, "n": 4}}, "wall_s": 5.0, "sandbox_cpu_s": 9.0})
    with open(root / "eval.jsonl", "w") as fh:
        for e in evals:
            fh.write(json.dumps(e) + "\n")
    totals = {"wall_s": cum["wall"] + 20, "trainer_cpu_s": cum["compute"] - cum["sbx"], "sandbox_cpu_s": cum["sbx"],
              "train_compute_cpu_s": cum["compute"], "eval_compute_cpu_s": 18.0, "executions": cum["exec"]}
    ledger = {"method": method, "steps": steps,
              "stages": {"generate": {"wall_s": 3.0 * steps, "cpu_s": 5.0 * steps, "calls": steps},
                         "update": {"wall_s": 2.0 * steps, "cpu_s": 4.0 * steps, "calls": steps},
                         "log": {"wall_s": 0.1, "cpu_s": 1.0 * steps, "calls": steps}},
              "executions": {"anchor": {"count": cum["exec"], "sandbox_cpu_s": cum["sbx"], "wall_s": 1.0,
                                        "infra_errors": 0, "ok": cum["exec"]},
                             "warmup": {"count": 0, "sandbox_cpu_s": 0.0, "wall_s": 0.0, "infra_errors": 0, "ok": 0},
                             "eval": {"count": 16, "sandbox_cpu_s": 18.0, "wall_s": 10.0, "infra_errors": 0, "ok": 12}},
              "phases": {"setup": {"wall_s": 5.0, "cpu_s": 50.0}},
              "groups": {"total": 4 * steps, "anchor": n_anchor_groups * steps, "wm": (4 - n_anchor_groups) * steps,
                         "anchor_fraction": n_anchor_groups / 4, "anchor_fraction_configured": 0.25},
              "totals": totals}
    (root / "ledger.json").write_text(json.dumps(ledger))
    if finished:
        (root / "summary.json").write_text(json.dumps({
            "run_dir": str(root), "method": method, "status": "completed", "steps": steps,
            "wall_s": totals["wall_s"], "ledger_totals": totals,
            "final_eval": {"heldout": evals[-1]}, "last_metrics": metrics[-1]}))
    return root

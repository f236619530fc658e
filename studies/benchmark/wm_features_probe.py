"""Can the regression world model's features tell programs apart? Grouped cross-validation on an executed corpus.

    python studies/benchmark/wm_features_probe.py BENCH_DIR/corpus/executions.sqlite [--seed 0]

Ridge regression (penalty by internal CV among 0.1 ... 1000) of the executed reward on three feature sets, each
program predicted by a fit that never saw its group (8 folds of whole groups):

- ``backbone``: the regression world model's pooled features [h_last ; h_mean] of the tiny backbone of ``--seed``
  (the cpu-small preset's world model, standardised);
- ``program``: the hashed program-choice features of :mod:`wmrl.world_model.program_features` (1024 columns);
- ``both``: the two side by side (``world_model.program_features: 1024``).

Printed per set: the fraction of within-group pairs with different rewards that the prediction orders correctly
(what GRPO's advantages feel; chance 0.5), Spearman's rho per task, and the mean squared error against the
variance of the rewards.
"""
from __future__ import annotations

import argparse

import numpy as np
from scipy.stats import spearmanr
from sklearn.linear_model import RidgeCV

from wmrl.execution.log import ExecutionLog
from wmrl.models.backbone import tiny_backbone
from wmrl.world_model.data import examples_from_records
from wmrl.world_model.program_features import program_features
from wmrl.world_model.regression import RegressionWorldModel


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpus")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    ex, _ = examples_from_records([r for r in ExecutionLog(a.corpus).records() if r["trajectory"] is not None])
    y = np.array([e["reward"] for e in ex])
    tasks = np.array([e["task_id"] for e in ex])
    prompts, comps = [e["prompt"] for e in ex], [e["completion"] for e in ex]
    model, tok = tiny_backbone(seed=a.seed)
    Xa = RegressionWorldModel(model, tok, lora=None).features(prompts, comps).numpy().astype(np.float64)
    Xa = (Xa - Xa.mean(0)) / np.where(Xa.std(0) < 1e-6, 1.0, Xa.std(0))
    Xb = program_features(prompts, comps, 1024).astype(np.float64)
    groups = sorted({repr(e["group"]) for e in ex})
    gi = np.array([groups.index(repr(e["group"])) for e in ex])
    print(f"{len(ex)} executed programs, {len(groups)} groups, {len(set(tasks))} tasks")
    for name, X in (("backbone", Xa), ("program", Xb), ("both", np.hstack([Xa, Xb]))):
        pred = np.zeros_like(y)
        for f in range(8):
            te = np.isin(gi, np.flatnonzero(np.arange(len(groups)) % 8 == f))
            pred[te] = RidgeCV(alphas=[0.1, 1, 10, 100, 1000]).fit(X[~te], y[~te]).predict(X[te])
        ok = tot = 0
        for g in range(len(groups)):
            idx = np.flatnonzero(gi == g)
            for i in idx:
                for j in idx:
                    if i < j and y[i] != y[j]:
                        tot += 1
                        ok += (pred[i] - pred[j]) * (y[i] - y[j]) > 0
        rho = [spearmanr(pred[tasks == t], y[tasks == t])[0] for t in sorted(set(tasks))]
        print(f"{name:9s} within-group pair accuracy {ok / tot:.3f} ({tot} pairs); Spearman per task "
              f"{np.round(rho, 3).tolist()}; MSE {np.mean((pred - y) ** 2):.4f} (variance {y.var():.4f})")


if __name__ == "__main__":
    main()

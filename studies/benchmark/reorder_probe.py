"""Which world-model refit orders the policy's *new* programs? A replay of GRPO's executed trajectories.

    python studies/benchmark/reorder_probe.py BENCH_DIR [--seeds 0,1,2,3] [--out FILE.md]

A GRPO run executes every program its policy writes, so its ``samples.jsonl`` is the policy's real trajectory
(40 steps x 4 groups x 4 programs, each with its true reward). The probe replays it as a WMRL run would see it:
one group in 2.5 (rho = 0.1 of 4 groups a step, 64 anchor programs over 40 steps) is an anchor group, executed;
every other group is scored by a world model refitted, before each step, on the bench's warm-up corpus
(``BENCH_DIR/corpus/executions.sqlite``) plus the anchors of the earlier steps. For each refit scheme it prints
the within-group pairwise accuracy (pairs with different true rewards; chance 0.5; what GRPO's advantages
feel) on the world-model groups, over all pairs and over the pairs of two programs never executed before
(neither in the corpus nor an earlier anchor: the rare-repeat regime, where recall cannot answer), per block
of 10 steps, mean over runs. Schemes:

- ``ridge``: the preset's world model: ridge head (penalty by group K-fold) on the frozen tiny backbone's
  pooled features of the run's seed, standardised on the corpus (``RegressionWorldModel``, no adapter);
- ``ridge-anchors-x10``: the same, anchors weighted 10 against the corpus (same penalty);
- ``family``: ridge, plus the shrunk mean residual of the executed programs of the same task and the same
  estimator family (``(sum of residuals) / (n + 2)``): a recall that generalises to a program's neighbours;
- ``neighbours``: ridge, plus the kernel-weighted residual of the 8 executed programs of the same prompt nearest
  in the standardised feature space (:class:`wmrl.world_model.neighbours.ResidualNeighbours`, the world model's
  ``residual_neighbours: 8``);
- ``recall``: ridge, with an executed program's measured reward where the very program was executed
  (``wmrl``'s recall; equal to ``ridge`` on new pairs by construction).
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
from sklearn.linear_model import Ridge

from wmrl.execution.log import ExecutionLog
from wmrl.models.backbone import tiny_backbone
from wmrl.world_model.data import WorldModelExample, examples_from_records
from wmrl.world_model.neighbours import ResidualNeighbours
from wmrl.world_model.regression import RegressionWorldModel, ridge_fit

SCHEMES = ("ridge", "ridge-anchors-x10", "family", "neighbours", "recall")


def family(completion: str) -> str:
    """The estimator of a grammar completion: its last call (``make_pipeline(..., Model(...))``)."""
    calls = re.findall(r"(\w+)\(", completion)
    return calls[-1] if calls else "?"


def is_anchor(step: int, group: int) -> bool:
    """One group in 2.5: group ``step % 4`` on the steps where floor(0.4 step) grows (16 of 40 steps)."""
    return int(0.4 * step) > int(0.4 * (step - 1)) and group == step % 4


def samples_of(run: Path) -> list[dict]:
    """A run's ``samples.jsonl`` with every prompt filled in (the file writes a prompt once, at its first sample)."""
    samples = [json.loads(x) for x in open(run / "samples.jsonl")]
    prompt_of = {s["prompt_sha256"]: s["prompt"] for s in samples if s["prompt"] is not None}
    for s in samples:
        s["prompt"] = prompt_of[s["prompt_sha256"]]
    return samples


def corpus_and_features(bench: Path, samples: list[dict], seed: int
                        ) -> tuple[list[WorldModelExample], list[tuple[str, str]], np.ndarray]:
    """The bench's warm-up corpus, the (prompt, completion) of its rows then of ``samples``, and their features
    [N, 2H] float64 under the preset's world model (frozen tiny backbone of ``seed``), standardised on the corpus."""
    corpus, _ = examples_from_records([r for r in ExecutionLog(bench / "corpus/executions.sqlite").records()
                                       if r["trajectory"] is not None])
    model, tok = tiny_backbone(seed=seed)
    wm = RegressionWorldModel(model, tok, lora=None)
    texts = [(e["prompt"], e["completion"]) for e in corpus] + [(s["prompt"], s["completion"]) for s in samples]
    X = wm.features([t[0] for t in texts], [t[1] for t in texts]).double().numpy()
    mu, sd = X[:len(corpus)].mean(0), np.clip(X[:len(corpus)].std(0), 1e-6, None)
    return corpus, texts, (X - mu) / sd


def replay(bench: Path, seed: int) -> dict[str, dict[int, list[float]]]:
    """Per scheme, per block of 10 steps: [correct pairs, pairs, correct new pairs, new pairs]."""
    samples = samples_of(bench / f"grpo/seed{seed}")
    corpus, texts, Z = corpus_and_features(bench, samples, seed)
    nc = len(corpus)
    y = np.array([e["reward"] for e in corpus] + [s["reward_true"] for s in samples])
    task = [e["task_id"] for e in corpus] + [s["task_id"] for s in samples]
    fam = [family(t[1]) for t in texts]
    grp = [repr(e["group"]) for e in corpus] + [f"{s['step']}/{s['group']}" for s in samples]
    out: dict[str, dict[int, list[float]]] = {k: {} for k in SCHEMES}
    executed = list(range(nc))  # rows the world model may learn from: corpus, then anchors as they arrive
    for step in sorted({s["step"] for s in samples}):
        rows = [nc + i for i, s in enumerate(samples) if s["step"] == step]
        tr = np.array(executed)
        w, b, alpha, _ = ridge_fit(Z[tr], y[tr], [grp[i] for i in tr], seed=seed)
        base = Z @ w + b
        wts = np.where(tr >= nc, 10.0, 1.0)
        weighted = Ridge(alpha=alpha).fit(Z[tr], y[tr], sample_weight=wts).predict(Z)
        seen = {texts[i] for i in tr}
        measured = {texts[i]: y[i] for i in tr}
        res = y - base
        preds: dict[str, np.ndarray] = {"ridge": base, "ridge-anchors-x10": weighted}
        fam_p, nb_p, rec_p = base.copy(), base.copy(), base.copy()
        nb = ResidualNeighbours(8)
        nb.fit(Z[tr], res[tr], [texts[j][0] for j in tr], [texts[j][1] for j in tr])
        nb_p[rows] += nb.correction(Z[rows], [texts[i][0] for i in rows], [texts[i][1] for i in rows])
        for i in rows:
            f = [j for j in tr if task[j] == task[i] and fam[j] == fam[i]]
            fam_p[i] += res[f].sum() / (len(f) + 2)
            if texts[i] in measured:
                rec_p[i] = measured[texts[i]]
        preds.update(family=fam_p, neighbours=nb_p, recall=rec_p)
        block = (step - 1) // 10
        for g in {samples[i - nc]["group"] for i in rows}:
            idx = [i for i in rows if samples[i - nc]["group"] == g]
            if is_anchor(step, g):
                continue
            for name, p in preds.items():
                acc = out[name].setdefault(block, [0.0, 0.0, 0.0, 0.0])
                for a in idx:
                    for c in idx:
                        if a < c and y[a] != y[c]:
                            ok = float((p[a] - p[c]) * (y[a] - y[c]) > 0)
                            acc[0] += ok
                            acc[1] += 1
                            if texts[a] not in seen and texts[c] not in seen:
                                acc[2] += ok
                                acc[3] += 1
        executed += [i for i in rows if is_anchor(step, samples[i - nc]["group"])]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench", type=Path)
    ap.add_argument("--seeds", default="0,1,2,3")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    runs = [replay(a.bench, s) for s in seeds]
    blocks = sorted({b for r in runs for b in r["ridge"]})
    cells: dict[str, list[str]] = {}
    for name in SCHEMES:
        for b in blocks:
            allp = [r[name][b][0] / r[name][b][1] for r in runs if r[name].get(b, [0, 0])[1]]
            newp = [r[name][b][2] / r[name][b][3] for r in runs if r[name].get(b, [0, 0, 0, 0])[3]]
            n_new = np.mean([r[name].get(b, [0, 0, 0, 0])[3] for r in runs])
            cells.setdefault(name, []).append(
                f"{np.mean(allp):.2f} / {np.mean(newp) if newp else float('nan'):.2f} ({n_new:.0f})")
    write_block_table(f"Within-group pairwise accuracy of refit schemes on GRPO's trajectories, {a.bench.name}, "
                      f"seeds {seeds} (mean over runs; all pairs / pairs of two never-executed programs, with their "
                      "count per run)", blocks, cells, a.out)


def write_block_table(title: str, blocks: list[int], cells: dict[str, list[str]], out: Path | None) -> None:
    """Print (and write to ``out``) a markdown table: ``title``, then one row per scheme of ``cells`` with one cell
    per block of 10 steps."""
    lines = [title, "", "| scheme | " + " | ".join(f"steps {10 * b + 1}-{10 * b + 10}" for b in blocks) + " |",
             "|---|" + "---|" * len(blocks)]
    lines += [f"| {name} | " + " | ".join(row) + " |" for name, row in cells.items()]
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        out.write_text(text)


if __name__ == "__main__":
    main()

"""How faithful is the world model's intermediate feedback?

In a world-model group of a multi-turn episode the agent is shown, instead of a real run's feedback, the
world model's: its predicted leaderboard percentile turned into a validation score by the template
:func:`wmrl.episodes.observation.observation_from_prediction` (``score_at_percentile``, the inverse of the
leaderboard), or a failed run below ``error_threshold``. This script measures that feedback against the real one
on programs the world model never saw, for each world-model kind, raw and isotonic-calibrated:

1. Programs: an executed corpus of grammar-scaffold completions on real train tasks (the bench's shared warm-up
   corpus by default: 128 programs of the ``tiny`` initial policy on 4 tasks).
2. A seeded 50/50 split of each task's programs. Each world model is fitted on the first half's real rewards
   (the corpus's full-task grades) with the trainer's settings (``WorldModelConfig`` defaults and the preset's
   overrides, on the backbone the corpus came from, as ``wmrl.training.parts`` builds it).
3. The second half is executed for real on the validation views (``validation_view``): the real observations
   (``observation_from_result``). The world models predict the same programs; their observations come from
   ``observation_from_prediction`` with the raw r_hat, or with r_hat through an ``IsotonicCalibrator`` (the
   trainer's settings) fitted on first-half pairs: in-sample (the pairs the world model was fitted on) or
   2-fold out-of-fold (what anchors are to a trained world model: programs it has not seen).
4. ``feedback_fidelity`` (each task is one "episode", every two of its programs two revisions): relative
   validation-score error, error/no-error accuracy, pairwise agreement on which program is better, plus the
   per-task Spearman of predicted vs real validation score; bootstrap standard errors over programs (resampled
   within tasks). Two reference rows: ``task prior`` (every program of a task gets the first half's mean reward
   of the task: no information about the program) and ``oracle percentile`` (the program's own real test-set
   reward through the same template: the template's floor, what a perfect percentile predictor would show).

    PYTHONPATH=. WMRL_HOME=... python studies/multiturn/feedback_fidelity.py                      # bench corpus, tiny
    PYTHONPATH=. WMRL_HOME=... python studies/multiturn/feedback_fidelity.py --setting multiturn-smollm2

Prints a table and merges the setting's results into ``feedback_fidelity.json`` next to this file.
"""
from __future__ import annotations

import argparse
import copy
import datetime as _dt
import hashlib
import json
import math
import platform
import random
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from wmrl.training.config import EpisodeConfig, WorldModelConfig
from wmrl.tasks.loader import default_suite
from wmrl.report.machine import machine_line
from wmrl.episodes.observation import observation_from_prediction, observation_from_result
from wmrl.core.recipe import RecipeSettings
from wmrl.core.calibration import IsotonicCalibrator
import torch
from wmrl.episodes.fidelity import feedback_fidelity
from scipy.stats import spearmanr
from wmrl.tasks.validation import validation_view
from wmrl.execution.types import ExecutionRequest, ExecutionResult, ExecutionStatus
from wmrl.execution.sandbox import SandboxConfig
from wmrl.execution.pool import LocalExecutor
from wmrl.world_model.factory import new_world_model
from wmrl.models.types import LoraSettings
from wmrl.models import backbone as bb
from wmrl.execution.log import ExecutionLog
import shutil

HERE = Path(__file__).resolve().parent

#: Where the corpora come from (paths relative to the working directory, the repository root when run as the
#: docstring says; ``--corpus`` gives another). ``overrides``: the world_model settings of the config that produced
#: the corpus
#: (cpu-small bench preset; configs/multiturn.yaml); everything else is a WorldModelConfig default.
SETTINGS: dict[str, dict[str, Any]] = {
    "bench-tiny": {
        "corpus": "runs/bench-cpu-small-k2/corpus/executions.sqlite",
        "model": "tiny", "backbone_seed": 0, "streams": ["warmup"],
        "what": "the cpu-small bench's shared warm-up corpus (tiny initial policy, seed 0, grammar scaffold)",
        "config": "wmrl/bench/configs/cpu-small.yaml", "overrides": {"adapter": False, "heldout_fraction": 0.0},
    },
    "multiturn-smollm2": {
        "corpus": "runs/multiturn-s0/executions.sqlite",
        "model": "smollm2-135m", "backbone_seed": 0, "streams": ["warmup", "eval"],
        "what": ("run multiturn-s0 (configs/multiturn.yaml, SmolLM2-135M): its warm-up corpus and its step-0 and "
                 "final evaluation samples on the 4 train tasks"),
        "config": "configs/multiturn.yaml", "overrides": {"adapter": False, "heldout_fraction": 0.25},
    },
}


# ------------------------------------------------------------------------------------------------------------
def load_corpus(path: str, streams: list[str], train_ids: set[str] | None) -> list[dict[str, Any]]:
    """Executed, rewarded trajectories of the log at ``path`` (read from a private copy: the log may be live)."""


    src = Path(path)
    if not src.is_file():
        raise SystemExit(f"corpus {src} not found (give --corpus)")
    tmp = Path(tempfile.mkdtemp(prefix="fidelity-corpus-"))
    for suffix in ("", "-wal", "-shm"):
        if Path(str(src) + suffix).is_file():
            shutil.copy2(str(src) + suffix, tmp / (src.name + suffix))
    rows = []
    for r in ExecutionLog(tmp / src.name).records():
        t = r["trajectory"]
        if t is None or t.stream not in streams or r["status"] == "infra_error":
            continue
        if r["reward"] is None or not math.isfinite(float(r["reward"])):
            continue
        if train_ids is not None and r["task_id"] not in train_ids:
            continue
        rows.append(r)
    shutil.rmtree(tmp, ignore_errors=True)
    rows.sort(key=lambda r: int(r["id"]))
    return rows


def split_half(rows: list[dict[str, Any]], seed: int) -> tuple[list[dict], list[dict]]:
    """Seeded 50/50 split of each task's programs (the first half fits, the second is measured)."""
    rng = random.Random(seed)
    by_task: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_task[r["task_id"]].append(r)
    fit, test = [], []
    for tid in sorted(by_task):
        rs = by_task[tid][:]
        rng.shuffle(rs)
        k = len(rs) // 2
        fit += rs[:k]
        test += rs[k:]
    return fit, test


def backbone(name: str, seed: int) -> tuple[Any, Any]:
    """The world model's backbone as ``wmrl.training.parts`` gives it (``tiny`` seeded; its initial weights)."""

    return bb.tiny_backbone(seed=seed) if name == "tiny" else bb.load_backbone(name)


def cpu_s() -> float:
    """CPU seconds of this process (user + sys, all threads)."""
    return time.process_time()


def fit_world_model(kind: str, adapter: bool, records: list[dict], base: tuple[Any, Any], wmc: Any, seed: int,
                    epochs: int, lr: float) -> tuple[Any, dict[str, Any]]:
    """A fresh world model of ``kind`` on a copy of the backbone, fitted as the trainer's ``_fit`` does."""


    torch.manual_seed(seed)
    model, tok = copy.deepcopy(base[0]), base[1]
    lora = LoraSettings(r=wmc.lora_r, alpha=2 * wmc.lora_r) if adapter else None
    c0, w0 = cpu_s(), time.perf_counter()
    wm = new_world_model(kind, model, tok, lora=lora, max_length=wmc.max_length)
    extra = {"head_lr": wmc.head_lr} if kind == "regression" else {}
    rep = wm.fit(records, epochs=epochs, lr=lr, batch_size=wmc.batch_size, heldout_fraction=0.0, seed=seed,
                 time_budget_s=wmc.fit_time_budget_s, **extra)
    info = {"fit_cpu_s": cpu_s() - c0, "fit_wall_s": time.perf_counter() - w0, "steps": rep.get("steps"),
            "train_loss": rep.get("train_loss"), "ridge_alpha": rep.get("ridge_alpha"),
            "train_spearman": (rep.get("train") or {}).get("spearman")}
    return wm, info


def predict(wm: Any, rows: list[dict]) -> tuple[np.ndarray, float]:
    """r_hat of ``rows`` (the trainer's base prompt and the completion) and the CPU seconds it took."""
    c0 = cpu_s()
    p = wm.predict([r["trajectory"].prompt for r in rows], [r["trajectory"].completion for r in rows])
    return np.asarray(p, dtype=np.float64), cpu_s() - c0


# ------------------------------------------------------------------------------------------------------------
def execute_on_views(rows: list[dict], tasks: dict[str, Any], fraction: float, workers: int,
                     cache: Path | None) -> tuple[list[Any], int]:
    """The real validation-view execution of every row's program (cached by task, program and fraction;
    identical programs run once): the results, and how many were run now (the others came from ``cache``)."""

    def key(r: dict) -> str:
        return hashlib.sha256(f"{r['task_id']}|{fraction}|{r['program']}".encode()).hexdigest()[:24]

    store: dict[str, dict] = json.loads(cache.read_text()) if cache and cache.is_file() else {}
    views = {tid: validation_view(t, fraction) for tid, t in tasks.items()}
    todo = {}
    for r in rows:
        k = key(r)
        if k not in store and k not in todo:
            todo[k] = ExecutionRequest(task=views[r["task_id"]], program=r["program"], request_id=f"fidelity-{k}",
                                       trajectory=r["trajectory"])
    if todo:
        with LocalExecutor(max_workers=workers, sandbox=SandboxConfig()) as ex:
            results = ex.run_batch(list(todo.values()))
        for k, res in zip(todo, results):
            d = res.to_dict()
            d["stdout"], d["stderr"] = d["stdout"][-500:], d["stderr"][-2000:]
            store[k] = d
        if cache:
            cache.write_text(json.dumps(store))
    out = [ExecutionResult(**{**store[key(r)], "status": ExecutionStatus(store[key(r)]["status"])}) for r in rows]
    return out, len(todo)


# ------------------------------------------------------------------------------------------------------------
def _metrics(tasks_of: list[str], real: list[dict], pred: list[dict], idx: np.ndarray) -> dict[str, Any]:
    """The fidelity figures of the programs ``idx`` (with repeats: a bootstrap sample).

    ``feedback_fidelity`` (each task one episode, the resampled programs its turns) plus pairwise agreement with
    prediction ties counted 1/2 (``feedback_fidelity`` counts them as wrong) and the mean per-task Spearman."""


    turns = [{"episode": tasks_of[i], "turn": j + 1, "executed": True, "observation": real[i],
              "observation_wm": pred[i]} for j, i in enumerate(idx)]
    f = feedback_fidelity(turns)
    by_task: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for i in idx:
        v, p = real[i].get("validation_score"), pred[i].get("validation_score")
        if real[i]["status"] == "ok" and pred[i]["status"] == "ok" and v is not None and p is not None:
            by_task[tasks_of[i]].append((float(v), float(p)))
    half, n_pairs, ties, rho = [], 0, 0, {}
    for tid, vp in by_task.items():
        a = np.array(vp)
        if len(a) < 2:
            continue
        dv = np.sign(a[:, 0][:, None] - a[:, 0][None, :])
        dp = np.sign(a[:, 1][:, None] - a[:, 1][None, :])
        iu = np.triu_indices(len(a), 1)
        dv, dp = dv[iu], dp[iu]
        keep = dv != 0
        sc = np.where(dp[keep] == 0, 0.5, (dv[keep] == dp[keep]).astype(float))
        half += list(sc)
        n_pairs += int(keep.sum())
        ties += int((dp[keep] == 0).sum())
        if np.ptp(a[:, 0]) > 0 and np.ptp(a[:, 1]) > 0:
            rho[tid] = float(spearmanr(a[:, 0], a[:, 1]).statistic)
    rel = {t: [abs(p - v) / max(abs(v), 1e-9) for v, p in vp] for t, vp in by_task.items()}
    allrel = [x for xs in rel.values() for x in xs]
    f["validation_rel_error_median"] = float(np.median(allrel)) if allrel else None
    f["validation_rel_error_by_task"] = {t: float(np.mean(xs)) for t, xs in rel.items()}
    f["validation_abs_error_by_task"] = {t: float(np.mean([abs(p - v) for v, p in vp])) for t, vp in by_task.items()}
    f["pairwise_ties_half"] = float(np.mean(half)) if half else None
    f["pair_ties_fraction"] = ties / n_pairs if n_pairs else None
    f["spearman_by_task"] = rho
    f["spearman_mean"] = float(np.mean(list(rho.values()))) if rho else None
    return f


def fidelity(tasks_of: list[str], real: list[dict], pred: list[dict], n_boot: int, seed: int) -> dict[str, Any]:
    """Point figures and bootstrap standard errors (programs resampled with replacement within each task)."""
    n = len(real)
    point = _metrics(tasks_of, real, pred, np.arange(n))
    groups = defaultdict(list)
    for i, t in enumerate(tasks_of):
        groups[t].append(i)
    rng = np.random.default_rng(seed)
    keys = ("validation_rel_error", "validation_rel_error_median", "status_accuracy", "pairwise_agreement",
            "pairwise_ties_half", "spearman_mean")
    samples: dict[str, list[float]] = {k: [] for k in keys}
    for _ in range(n_boot):
        idx = np.concatenate([rng.choice(g, size=len(g), replace=True) for g in groups.values()])
        m = _metrics(tasks_of, real, pred, idx)
        for k in keys:
            samples[k].append(m[k] if m[k] is not None and math.isfinite(m[k]) else math.nan)
    point["se"] = {k: _se(np.array(v)) for k, v in samples.items()}
    point["_boot"] = {k: np.array(v) for k, v in samples.items()}
    return point


def _se(x: np.ndarray) -> float | None:
    x = x[np.isfinite(x)]
    return float(np.std(x, ddof=1)) if len(x) > 1 else None


def paired(a: dict[str, Any], b: dict[str, Any], key: str) -> dict[str, Any] | None:
    """a - b of ``key`` and its paired bootstrap SE (both rows were resampled with the same program indices)."""
    if a[key] is None or b[key] is None:
        return None
    return {"diff": a[key] - b[key], "se": _se(a["_boot"][key] - b["_boot"][key])}


# ------------------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--setting", default="bench-tiny", choices=sorted(SETTINGS),
                    help="which corpus and backbone (default: bench-tiny)")
    ap.add_argument("--corpus", default=None, help="execution log to read instead of the setting's")
    ap.add_argument("--seed", type=int, default=0, help="split, fits, bootstrap (default 0)")
    ap.add_argument("--kinds", default="regression,generative", help="world-model kinds (default both)")
    ap.add_argument("--gen-long", default="20:1e-3",
                    help="also a longer generative fit, EPOCHS:LR ('' = none; default 20:1e-3); the config-default "
                         "fit (fit_epochs, fit_lr) always runs")
    ap.add_argument("--regression-lora", action="store_true",
                    help="also a regression world model with its LoRA adapter (world_model.adapter: true)")
    ap.add_argument("--no-crossfit", action="store_true",
                    help="skip the 2-fold out-of-fold calibration (saves two fits per world model)")
    ap.add_argument("--fraction", type=float, default=0.2, help="validation_fraction of the views (default 0.2)")
    ap.add_argument("--error-threshold", type=float, default=None,
                    help="predicted percentile shown as a failure below this (default: episode.wm_error_threshold)")
    ap.add_argument("--workers", type=int, default=2, help="execution workers (default 2)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples (default 1000)")
    ap.add_argument("--exec-cache", default=None, help="JSON file caching the validation-view executions")
    ap.add_argument("--out", default=str(HERE / "feedback_fidelity.json"), help="JSON to merge the results into")
    a = ap.parse_args(argv)



    torch.set_num_threads(a.threads)
    t_start, c_start = time.perf_counter(), cpu_s()
    st = dict(SETTINGS[a.setting])
    corpus = a.corpus or st["corpus"]
    wmc = WorldModelConfig(**st["overrides"])
    thr = EpisodeConfig().wm_error_threshold if a.error_threshold is None else a.error_threshold
    rs = RecipeSettings()

    suite = default_suite()
    rows = load_corpus(corpus, st["streams"], None)
    if st["streams"] != ["warmup"]:  # keep the train tasks of the run (those its warm-up corpus covers)
        train_ids = {r["task_id"] for r in rows if r["trajectory"].stream == "warmup"}
        rows = [r for r in rows if r["task_id"] in train_ids]
    tasks = {tid: suite.get(tid) for tid in sorted({r["task_id"] for r in rows})}
    fit_rows, test_rows = split_half(rows, a.seed)
    seen = {(r["task_id"], r["trajectory"].completion) for r in fit_rows}
    novel = [(r["task_id"], r["trajectory"].completion) not in seen for r in test_rows]
    print(f"[{a.setting}] {len(rows)} programs on {len(tasks)} tasks ({', '.join(tasks)}); fit {len(fit_rows)}, "
          f"measure {len(test_rows)} ({sum(novel)} with a completion not in the fit half)", flush=True)

    # real observations on the validation views
    w0 = time.perf_counter()
    results, n_exec = execute_on_views(test_rows, tasks, a.fraction, a.workers,
                                                 Path(a.exec_cache) if a.exec_cache else None)
    exec_wall = time.perf_counter() - w0
    uniq = {(r["task_id"], r["program"]): res for r, res in zip(test_rows, results)}
    exec_cpu = sum(float(res.cpu_s) for res in uniq.values())
    real = [observation_from_result(res, tasks[r["task_id"]], 1).to_dict() for r, res in zip(test_rows, results)]
    print(f"{len(uniq)} distinct programs on validation views ({n_exec} run now, {exec_wall:.0f} s wall; "
          f"{exec_cpu:.0f} sandbox CPU-s in all); "
          f"statuses: {dict(sorted(_count(o['status'] for o in real).items()))}", flush=True)

    wall: dict[str, float | None] = {}
    for tid in tasks:
        ws = sorted(float(r["wall_s"]) for r in fit_rows if r["task_id"] == tid)
        wall[tid] = ws[len(ws) // 2] if ws else None
    tasks_of = [r["task_id"] for r in test_rows]
    r_fit = np.array([float(r["reward"]) for r in fit_rows])

    def observations(p: np.ndarray) -> list[dict]:
        return [observation_from_prediction(tasks[t], 1, float(x), wall[t], thr).to_dict() for t, x in zip(tasks_of, p)]

    def calibrator(x: np.ndarray, y: np.ndarray) -> IsotonicCalibrator:
        c = IsotonicCalibrator(window=rs.calibrator_window, min_anchors=rs.calibrator_min_anchors,
                               fallback=rs.calibrator_fallback, tie_break=rs.calibrator_tie_break)
        c.update(x, y, step=0)
        return c

    rows_out: list[dict[str, Any]] = []

    def add(name: str, kind: str, calib: str, p: np.ndarray, cost: dict[str, Any], mode: str | None = None) -> None:
        f = fidelity(tasks_of, real, observations(p), a.bootstrap, a.seed)
        fn = (fidelity([t for t, k in zip(tasks_of, novel) if k], [o for o, k in zip(real, novel) if k],
                       [o for o, k in zip(observations(p), novel) if k], 0, a.seed)
              if 0 < sum(novel) < len(novel) else None)
        true_r = np.array([float(res.reward) if res.reward is not None else np.nan for res in results])
        rows_out.append({"name": name, "kind": kind, "calibration": calib, "calibrator_mode": mode, **cost,
                         "r_hat_mean": float(np.mean(p)), "r_hat_range": [float(np.min(p)), float(np.max(p))],
                         "reward_mae_view": float(np.nanmean(np.abs(p - true_r))), "fidelity": f,
                         "fidelity_novel_programs": fn})

    # references
    prior = {t: float(np.mean([float(r["reward"]) for r in fit_rows if r["task_id"] == t])) for t in tasks}
    add("task prior (no program information)", "reference", "none", np.array([prior[t] for t in tasks_of]), {})
    add("oracle percentile (the program's real test reward)", "reference", "none",
        np.array([float(r["reward"]) for r in test_rows]), {})

    variants = []
    kinds = [k.strip() for k in a.kinds.split(",") if k.strip()]
    if "regression" in kinds:
        variants.append(("regression, frozen backbone + ridge head" if not wmc.adapter else "regression + LoRA",
                         "regression", wmc.adapter, wmc.fit_epochs, wmc.fit_lr))
        if a.regression_lora and not wmc.adapter:
            variants.append(("regression + LoRA (adapter: true)", "regression", True, wmc.fit_epochs, wmc.fit_lr))
    if "generative" in kinds:
        variants.append((f"generative, LoRA ({wmc.fit_epochs} ep, lr {wmc.fit_lr:g}: config defaults)", "generative",
                         True, wmc.fit_epochs, wmc.fit_lr))
        if a.gen_long:
            ep, lr = a.gen_long.split(":")
            variants.append((f"generative, LoRA ({int(ep)} ep, lr {float(lr):g})", "generative", True, int(ep),
                             float(lr)))
    base = backbone(st["model"], st["backbone_seed"])
    for name, kind, adapter, ep, lr in variants:
        wm, info = fit_world_model(kind, adapter, fit_rows, base, wmc, a.seed, ep, lr)
        p_test, pc_test = predict(wm, test_rows)
        p_fit, pc_fit = predict(wm, fit_rows)
        del wm
        cost = {**info, "predict_cpu_s": pc_test, "predict_cpu_s_per_program": pc_test / len(test_rows),
                "n_fit": len(fit_rows)}
        print(f"  {name}: fit {info['fit_cpu_s']:.1f} CPU-s, predict {pc_test:.1f} CPU-s for {len(test_rows)}; "
              f"r_hat in [{p_test.min():.3f}, {p_test.max():.3f}]", flush=True)
        add(name, kind, "raw", p_test, cost)
        c = calibrator(p_fit, r_fit)
        add(name, kind, "isotonic, in-sample pairs", c.transform(p_test), cost, c.mode)
        if not a.no_crossfit:  # 2-fold out-of-fold r_hat of the fit half: pairs of programs each model did not see
            halves = split_half(fit_rows, a.seed + 1)
            oof = {}
            cx = 0.0
            for tr, te in (halves, halves[::-1]):
                m, inf = fit_world_model(kind, adapter, tr, base, wmc, a.seed, ep, lr)
                pp, pc = predict(m, te)
                cx += inf["fit_cpu_s"] + pc
                oof.update({int(r["id"]): float(x) for r, x in zip(te, pp)})
                del m
            x = np.array([oof[int(r["id"])] for r in fit_rows])
            c = calibrator(x, r_fit)
            add(name, kind, "isotonic, out-of-fold pairs", c.transform(p_test), {**cost, "crossfit_cpu_s": cx}, c.mode)

    prior_f = rows_out[0]["fidelity"]
    ref = next((r for r in rows_out if r["kind"] == "regression" and r["calibration"] == "raw"), None)
    for r in rows_out:
        f = r["fidelity"]
        r["vs_task_prior"] = {k: paired(f, prior_f, k) for k in ("validation_rel_error", "validation_rel_error_median")}
        if ref is not None and r is not ref:
            r["vs_regression_raw"] = {k: paired(f, ref["fidelity"], k) for k in
                                      ("validation_rel_error", "pairwise_ties_half", "spearman_mean")}
    for r in rows_out:
        r["fidelity"].pop("_boot", None)
        if r["fidelity_novel_programs"]:
            r["fidelity_novel_programs"].pop("_boot", None)
    out = {"setting": a.setting, "what": st["what"], "corpus": corpus, "model": st["model"],
           "backbone_seed": st["backbone_seed"], "config": st["config"],
           "world_model_config": wmc.model_dump(), "error_threshold": thr, "validation_fraction": a.fraction,
           "calibrator": {"window": rs.calibrator_window, "min_anchors": rs.calibrator_min_anchors,
                          "fallback": rs.calibrator_fallback, "tie_break": rs.calibrator_tie_break},
           "seed": a.seed, "bootstrap": a.bootstrap, "n_programs": len(rows), "n_fit": len(fit_rows),
           "n_measured": len(test_rows), "n_measured_novel": int(sum(novel)),
           "tasks": {t: {"metric": tasks[t].metric, "lower_is_better": bool(tasks[t].lower_is_better),
                         "n_measured": tasks_of.count(t)} for t in tasks},
           "executions": {"n_distinct": len(uniq), "n_run_now": n_exec, "n_from_cache": len(uniq) - n_exec,
                          "wall_s_now": exec_wall, "sandbox_cpu_s": exec_cpu,
                          "sandbox_cpu_s_per_program": exec_cpu / max(1, len(uniq)),
                          "statuses": _count(o["status"] for o in real)},
           "rows": rows_out, "total_wall_s": time.perf_counter() - t_start, "driver_cpu_s": cpu_s() - c_start,
           "command": " ".join(["python", "studies/multiturn/feedback_fidelity.py"]
                               + (argv if argv is not None else sys.argv[1:])),
           "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d"), "machine": machine_line(),
           "python": platform.python_version(), "torch": torch.__version__}
    print_table(out)
    path = Path(a.out)
    doc = json.loads(path.read_text()) if path.is_file() else {}
    doc.setdefault("settings", {})[a.setting] = out
    path.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    print(f"wrote {path}")


def _count(xs) -> dict[str, int]:
    d: dict[str, int] = defaultdict(int)
    for x in xs:
        d[x] += 1
    return dict(d)


def _fmt(v: Any, se: Any = None, d: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    s = f"{v:.{d}f}"
    return s + (f" ± {se:.{d}f}" if se is not None else "")


def print_table(out: dict[str, Any]) -> None:
    """The markdown tables of one setting: the figures, then paired differences."""
    print(f"\n{out['setting']}: {out['n_measured']} programs measured ({out['n_measured_novel']} novel), "
          f"world models fitted on {out['n_fit']}; ± = bootstrap SE over programs ({out['bootstrap']} resamples)")
    print("| world model | feedback from | val. score rel. error, mean | median | error/no-error acc. | "
          "pairwise agreement (ties wrong) | pairwise (ties 1/2) | pairwise (ties 1/2), novel programs | "
          "Spearman per task, mean | "
          "pairs | fit CPU-s | predict CPU-s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in out["rows"]:
        f, se = r["fidelity"], r["fidelity"]["se"]
        fn = r.get("fidelity_novel_programs") or {}
        cal = r["calibration"] + (f" ({r['calibrator_mode']})" if r.get("calibrator_mode") else "")
        print(f"| {r['name']} | {cal} | {_fmt(f['validation_rel_error'], se['validation_rel_error'])} | "
              f"{_fmt(f['validation_rel_error_median'], se['validation_rel_error_median'])} | "
              f"{_fmt(f['status_accuracy'], se['status_accuracy'])} | "
              f"{_fmt(f['pairwise_agreement'], se['pairwise_agreement'])} | "
              f"{_fmt(f['pairwise_ties_half'], se['pairwise_ties_half'])} | {_fmt(fn.get('pairwise_ties_half'))} | "
              f"{_fmt(f['spearman_mean'], se['spearman_mean'])} | {f['n_pairs_pairwise']} | "
              f"{_fmt(r.get('fit_cpu_s'), d=1)} | {_fmt(r.get('predict_cpu_s'), d=1)} |")
    print("\nPaired differences (same bootstrap resamples): rel. error minus the task prior's; pairwise (ties 1/2) "
          "and Spearman minus the raw frozen-backbone regression's")
    print("| world model | feedback from | Δ rel. error vs task prior | Δ median rel. error vs task prior | "
          "Δ pairwise vs regression raw | Δ Spearman vs regression raw |")
    print("|---|---|---|---|---|---|")

    def d(x: Any) -> str:
        return "-" if not x else (f"{x['diff']:+.3f}" + (f" ± {x['se']:.3f}" if x.get("se") is not None else ""))

    for r in out["rows"][1:]:
        vs = r.get("vs_regression_raw") or {}
        print(f"| {r['name']} | {r['calibration']} | {d(r['vs_task_prior']['validation_rel_error'])} | "
              f"{d(r['vs_task_prior']['validation_rel_error_median'])} | "
              f"{d(vs.get('pairwise_ties_half'))} | {d(vs.get('spearman_mean'))} |")


if __name__ == "__main__":
    main()

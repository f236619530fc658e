"""Reading a bench folder (``wmrl bench``): one row per finished run, the world model's quality on its
anchors, the runs not finished yet, and the reward-against-compute curves.

The folder layout, written by :mod:`wmrl.bench`: ``OUT/<method>/seed<k>/`` run directories (see
docs/run-directory.md), ``OUT/bench.json`` (the plan) and ``OUT/corpus/`` (the shared warm-up corpus,
``corpus.json`` its cost). This module only reads files; it imports nothing of the bench or the trainer.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np
import pandas as pd

from wmrl.core.recipe import BASELINE, get_recipe, ran_as_note, recipe_names, recipes_with
from wmrl.episodes.fidelity import feedback_fidelity
from wmrl.runs.provenance import read_invocations
from wmrl.world_model.metrics import world_model_metrics
from wmrl.report.runs import load_run, read_jsonl, repeated_sandbox_cpu_s, train_executions
from wmrl.runs.ledger import TRAIN_EXEC_KINDS

#: The methods a bench can run: the registered recipes, by name (also the order of every table).
METHODS: list[str] = recipe_names()
#: The method the relative columns compare with.
REFERENCE = BASELINE


class BenchError(ValueError):
    """A preset or bench folder is not usable; the message says what is wrong and how to fix it."""


def corpus_dir(out: str | Path) -> Path:
    """The folder of a bench's shared warm-up corpus: ``OUT/corpus`` (``corpus.json``: its cost record)."""
    return Path(out).resolve() / "corpus"


def uses_world_model(method: str) -> bool:
    """Whether runs of ``method`` score programs with a world model (and so fit on a shared corpus)."""
    return get_recipe(method).uses_world_model


def now() -> str:
    """The current UTC time, ``2026-01-01T12:00:00Z`` (the bench's timestamps)."""
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_bench_meta(out: str | Path) -> dict[str, Any]:
    """``OUT/bench.json`` (the plan, command and machine), ``{}`` when absent."""
    p = Path(out) / "bench.json"
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else {}


def collect(out: str | Path) -> pd.DataFrame:
    """One row per finished run of the bench in ``out`` (``OUT/<method>/seed<k>/summary.json``).

    Columns (units): ``method``, ``seed``, ``heldout_percentile`` and ``heldout_valid_rate``
    (final held-out evaluation, [0, 1]), ``initial_percentile`` (held-out evaluation of the initial
    policy, step 0, when the run made one), ``train_executions`` (anchor + warm-up executions),
    ``train_sandbox_cpu_s`` (CPU-seconds of those executions), ``train_repeat_sandbox_cpu_s`` (the part of it spent
    re-running programs the run had executed on the same task, which the exact execution cache would not have paid:
    :func:`~wmrl.report.runs.repeated_sandbox_cpu_s`; NaN without the run's execution log), ``train_compute_cpu_s``
    (trainer CPU + training sandbox CPU), ``eval_compute_cpu_s``, ``total_cpu_s`` (train + eval compute),
    ``wall_s`` (the run's wall seconds, evaluation included), ``steps``, ``anchor_fraction``,
    ``train_percentile`` and ``initial_train_percentile`` (the final and the initial policy on the train
    tasks, in distribution, when evaluated: see :func:`_eval_at`), ``corpus_cpu_s`` (the compute of the
    bench's shared warm-up corpus, paid once per bench, for the runs that fit on it; 0 otherwise), and the
    per-unit costs of :func:`_unit_costs` (to tell work from measurement noise on a shared machine),
    and the world model's quality on the training anchors (:func:`world_model_quality`), and for multi-turn runs
    the columns of :func:`multiturn_columns` (turn 1 to turn K, the feedback's fidelity; None for one turn).
    Unfinished runs are left out (they appear in :func:`missing_runs`).
    """
    corpus_json = corpus_dir(out) / "corpus.json"
    corpus = json.loads(corpus_json.read_text(encoding="utf-8")) if corpus_json.is_file() else None
    rows = []
    for rd in sorted(Path(out).glob("*/seed*")):
        if not (rd / "summary.json").is_file() or rd.parent.name not in METHODS:
            continue
        run = load_run(rd)
        tot = run.totals()
        ev = run.final_eval("heldout") or {}
        ex = (run.ledger or {}).get("executions") or {}
        sbx = sum(float((ex.get(k) or {}).get("sandbox_cpu_s") or 0.0) for k in TRAIN_EXEC_KINDS)
        train_c = tot.get("train_compute_cpu_s")
        eval_c = tot.get("eval_compute_cpu_s")
        n_steps = int(run.metrics["step"].max()) if not run.metrics.empty else 0
        init = _eval_at(run, "heldout", 0)
        quality = world_model_quality(run)
        modes = list(run.metrics["calibrator_mode"]) if "calibrator_mode" in run.metrics else []
        rows.append({
            "method": rd.parent.name,
            "seed": int(rd.name.removeprefix("seed")),
            "heldout_percentile": ev.get("mean_percentile"),
            "initial_percentile": init.get("mean_percentile"),
            "heldout_valid_rate": ev.get("valid_rate"),
            "heldout_samples": ev.get("n_samples"),
            "train_percentile": _eval_at(run, "train", n_steps).get("mean_percentile"),
            "initial_train_percentile": _eval_at(run, "train", 0).get("mean_percentile"),
            "train_executions": train_executions(run),
            "train_sandbox_cpu_s": sbx,
            "train_repeat_sandbox_cpu_s": repeated_sandbox_cpu_s(rd),
            "train_compute_cpu_s": train_c,
            "eval_compute_cpu_s": eval_c,
            "total_cpu_s": (train_c or 0.0) + (eval_c or 0.0) if train_c is not None else None,
            "wall_s": tot.get("wall_s"),
            "steps": n_steps,
            "anchor_fraction": ((run.ledger or {}).get("groups") or {}).get("anchor_fraction"),
            "corpus_cpu_s": corpus["compute_cpu_s"] if corpus and uses_world_model(rd.parent.name) else 0.0,
            **_unit_costs(run),
            **quality,
            **run_dynamics(run),
            **multiturn_columns(run, n_steps),
            "ran_as": ran_as_note(get_recipe(rd.parent.name), [m if isinstance(m, str) else None for m in modes],
                                  int(quality["wm_anchor_pairs"]) if get_recipe(rd.parent.name).uses_world_model
                                  else None),
            **run_provenance(rd),
        })
    cols = ["method", "seed", "heldout_percentile", "initial_percentile", "heldout_valid_rate", "heldout_samples",
            "train_percentile", "initial_train_percentile", "train_executions",
            "train_sandbox_cpu_s", "train_repeat_sandbox_cpu_s", "train_compute_cpu_s", "eval_compute_cpu_s",
            "total_cpu_s", "wall_s",
            "steps", "anchor_fraction", "corpus_cpu_s", "train_samples", "gen_cpu_s_per_sample",
            "sandbox_cpu_s_per_execution",
            "update_cpu_s_per_step", *WM_QUALITY_COLUMNS, *DYNAMICS_COLUMNS, *MULTITURN_COLUMNS,
            "ran_as", "commit", "dirty"]
    df = pd.DataFrame(rows, columns=cols)
    order = {m: i for i, m in enumerate(METHODS)}
    if not df.empty:
        df = df.sort_values(["method", "seed"], key=lambda s: s.map(order) if s.name == "method" else s)
    return df.reset_index(drop=True)


def run_provenance(run_dir: Path) -> dict[str, Any]:
    """``commit`` and ``dirty`` of the code that trained the run, from its ``provenance.json``
    (:mod:`wmrl.runs.provenance`, written by the trainer and by ``wmrl bench``): the commits of every invocation
    that trained or resumed it, distinct, joined by ``;`` (``None`` when not recorded, e.g. a run from before the
    record or one trained outside a git checkout), and whether any of them had uncommitted changes."""
    invocations = read_invocations(run_dir)  # unreadable: the run counts as not recorded
    versions = [inv.get("code_version") or {} for inv in invocations]
    commits = list(dict.fromkeys(str(v["commit"]) for v in versions if v.get("commit")))
    dirty = [v.get("dirty") for v in versions if v.get("dirty") is not None]
    return {"commit": ";".join(commits) or None, "dirty": any(dirty) if dirty else None}


def eval_records(run: Any) -> list[dict[str, Any]]:
    """Every evaluation record of a run: the trainer's (``eval.jsonl``) then ``wmrl eval``'s (``eval_cli.jsonl``),
    in that order."""
    recs = [] if run.evals.empty else run.evals.to_dict("records")
    return recs + read_jsonl(Path(run.path) / "eval_cli.jsonl", skip_bad=True)


def _eval_at(run: Any, split: str, step: int) -> dict[str, Any]:
    """The last evaluation record of ``split`` at ``step``: from the trainer (``eval.jsonl``), else from
    ``wmrl eval`` (``eval_cli.jsonl``: ``--checkpoint initial`` for step 0, the final checkpoint for the
    last step; ``--train-tasks`` evaluates the train tasks of a run that did not). ``{}`` when none."""
    hits = [r for r in eval_records(run) if r.get("split") == split and r.get("step") == step]
    return hits[-1] if hits else {}


def _unit_costs(run: Any) -> dict[str, float | int | None]:
    """Per-unit costs of one run, from its ledger and metrics.

    ``train_samples``: trajectories generated for training (steps plus warm-up corpus).
    ``gen_cpu_s_per_sample``: trainer CPU-seconds of the ``generate`` stage and the ``warmup`` phase
    per training trajectory (the warm-up phase is generation plus waiting for its executions).
    ``sandbox_cpu_s_per_execution``: sandbox CPU-seconds per training execution.
    ``update_cpu_s_per_step``: trainer CPU-seconds of the policy update per step.
    On an oversubscribed machine the trainer's CPU-seconds per unit of work grow with the load
    (threads waiting for a core), so comparing these across runs shows how much of a compute
    difference is work and how much is measurement.
    """
    led = run.ledger or {}
    stages, phases, ex = led.get("stages") or {}, led.get("phases") or {}, led.get("executions") or {}
    m = run.metrics
    n_steps = int(m["step"].max()) if not m.empty and "step" in m else 0
    warm_n = int((ex.get("warmup") or {}).get("count") or 0)
    samples = int(pd.to_numeric(m.get("n_samples"), errors="coerce").sum()) if "n_samples" in m else 0
    samples += warm_n
    gen = (float((stages.get("generate") or {}).get("cpu_s") or 0.0)
           + float((phases.get("warmup") or {}).get("cpu_s") or 0.0))
    n_exec = sum(int((ex.get(k) or {}).get("count") or 0) for k in TRAIN_EXEC_KINDS)
    sbx = sum(float((ex.get(k) or {}).get("sandbox_cpu_s") or 0.0) for k in TRAIN_EXEC_KINDS)
    upd = float((stages.get("update") or {}).get("cpu_s") or 0.0)
    return {
        "train_samples": samples,
        "gen_cpu_s_per_sample": gen / samples if samples else None,
        "sandbox_cpu_s_per_execution": sbx / n_exec if n_exec else None,
        "update_cpu_s_per_step": upd / n_steps if n_steps else None,
    }


#: The fidelity card's figures in the bench's results (column ``wm_<figure>``; ``fidelity.json`` of each run).
FIDELITY_COLUMNS = ("status_acc1", "failure_auc", "ece", "mae")
WM_QUALITY_COLUMNS = ("wm_anchor_pairs", "wm_spearman", "wm_pairwise_accuracy", "debias_sq_err_ratio", "alpha_mean",
                      "exploit_alarms", "exploit_first_alarm", *(f"wm_{k}" for k in FIDELITY_COLUMNS))


def world_model_quality(run: Any) -> dict[str, float | int]:
    """How well the world model scored the programs that were also executed (the training anchors)
    of one run, and what the trainer did with it. NaN where the method has no such data (``grpo``:
    no world model; ``wm``: no anchors).

    - ``wm_anchor_pairs``: anchor trajectories with both a true reward r and a raw prediction r_hat
      (``samples.jsonl``).
    - ``wm_spearman``, ``wm_pairwise_accuracy``: Spearman correlation of r_hat with r over those pairs,
      and the fraction of within-group pairs (different r) that r_hat orders correctly, ties 1/2
      (:func:`wmrl.world_model.metrics.world_model_metrics`; 0.5 = no better than chance). GRPO's
      advantages only use the order and spread inside a group, so the pairwise accuracy is what the
      policy gradient feels.
    - ``debias_sq_err_ratio``: out-of-sample effect of the isotonic debiasing: over the
      steps whose map was fitted (``calibration.jsonl``, mode not ``identity``), sum (f_hat(r_hat) - r)^2
      / sum (r_hat - r)^2 on that step's anchors, which the map had not seen (fitted on earlier steps
      only). < 1: the debiasing brought the world model closer to the truth. NaN without debiasing.
    - ``alpha_mean``: mean over steps of the fused weight of the anchor gradient (``metrics.jsonl``).
    - ``exploit_alarms``: times the exploitation alarm fired (``exploit_alarms_total`` of the last step;
      docs/training.md), and ``exploit_first_alarm`` the step of the first (NaN: never, or no alarm logged).
    - ``wm_status_acc1``, ``wm_failure_auc``, ``wm_ece``, ``wm_mae``: the point values of the run's fidelity card
      on its anchors (``fidelity.json``, :mod:`wmrl.world_model.fidelity`): status accuracy at 1, ROC AUC of
      P(fail), the reward's calibration error over equal-mass bins, mean absolute error. NaN without a card (no
      anchor scored by a world model, a run from before the card) or where the card has no value (a world model
      without status probabilities, one outcome class only).
    """
    nan = math.nan
    out: dict[str, float | int] = {"wm_anchor_pairs": 0, "wm_spearman": nan, "wm_pairwise_accuracy": nan,
                                   "debias_sq_err_ratio": nan, "alpha_mean": nan, "exploit_alarms": nan,
                                   "exploit_first_alarm": nan, **{f"wm_{k}": nan for k in FIDELITY_COLUMNS}}
    pairs = [r for r in read_jsonl(Path(run.path) / "samples.jsonl", skip_bad=True)
             if r.get("stream") == "anchor" and _finite_num(r.get("reward_true")) and _finite_num(r.get("reward_wm"))]
    if pairs:
        q = world_model_metrics([r["reward_wm"] for r in pairs], [r["reward_true"] for r in pairs],
                                [(r["step"], r["group"]) for r in pairs])
        out.update(wm_anchor_pairs=len(pairs), wm_spearman=q["spearman"], wm_pairwise_accuracy=q["pairwise_accuracy"])
    figures = (run.fidelity or {}).get("figures") or {}
    for k in FIDELITY_COLUMNS:
        v = (figures.get(k) or {}).get("value")
        if _finite_num(v):
            out[f"wm_{k}"] = float(v)
    raw = cal = 0.0
    for rec in run.calibration:
        if rec.get("mode") in (None, "identity") or not rec.get("anchor_true"):
            continue
        t = np.asarray(rec["anchor_true"], dtype=np.float64)
        raw += float(np.sum((np.asarray(rec["anchor_wm"], dtype=np.float64) - t) ** 2))
        cal += float(np.sum((np.asarray(rec["anchor_wm_calibrated"], dtype=np.float64) - t) ** 2))
    if raw > 0:
        out["debias_sq_err_ratio"] = cal / raw
    if "alpha" in run.metrics and run.method in recipes_with(anchors="fraction"):  # alpha is 1 or 0 otherwise
        a = pd.to_numeric(run.metrics["alpha"], errors="coerce")
        if a.notna().any():
            out["alpha_mean"] = float(a.mean())
    if "exploit_alarms_total" in run.metrics:
        total = pd.to_numeric(run.metrics["exploit_alarms_total"], errors="coerce").dropna()
        if len(total):
            out["exploit_alarms"] = int(total.iloc[-1])
            fired = run.metrics.loc[run.metrics["exploit_alarm"].fillna(False).astype(bool), "step"]
            if len(fired):
                out["exploit_first_alarm"] = int(fired.iloc[0])
    return out


DYNAMICS_COLUMNS = ("wm_kendall_tau", "wm_favourite_regret", "recall_hit_rate", "calibrator_fitted_steps",
                    "final_distinct_programs", "final_policy_entropy")
#: Steps at the end of a run whose concentration figures are averaged.
FINAL_STEPS = 5


def run_dynamics(run: Any) -> dict[str, float]:
    """What a run's steps did, from ``metrics.jsonl`` (:mod:`wmrl.core.ranking`); NaN where a figure was not
    logged (a method without anchors or a world model, a run from before the figure).

    - ``wm_kendall_tau``, ``wm_favourite_regret``: means over the steps with anchors of the world model's
      within-group Kendall tau-b against the executed rewards and of the true reward lost by the world model's
      favourite program of each anchor group.
    - ``recall_hit_rate``: world-model samples trained on a recalled measured reward, over all world-model samples.
    - ``calibrator_fitted_steps``: share of steps whose debiasing map was fitted (mode not ``identity``): 0 means
      the run's debiasing never acted.
    - ``final_distinct_programs``, ``final_policy_entropy``: means over the last :data:`FINAL_STEPS` steps of the
      distinct programs per group and of the sequence-entropy estimate (nats): how far the policy collapsed.
    """
    m = run.metrics
    out = dict.fromkeys(DYNAMICS_COLUMNS, math.nan)

    def col(name: str) -> pd.Series:
        return pd.to_numeric(m[name], errors="coerce") if name in m else pd.Series(dtype=float)

    for key in ("wm_kendall_tau", "wm_favourite_regret"):
        v = col(key).dropna()
        if len(v):
            out[key] = float(v.mean())
    rec, n_wm = col("n_recalled").sum(), col("n_wm_samples").sum()
    if n_wm > 0:
        out["recall_hit_rate"] = float(rec / n_wm)
    if "calibrator_mode" in m and m["calibrator_mode"].notna().any():
        modes = m["calibrator_mode"].dropna()
        out["calibrator_fitted_steps"] = float((modes != "identity").mean())
    for key, name in (("final_distinct_programs", "policy_distinct_programs"),
                      ("final_policy_entropy", "policy_entropy")):
        v = col(name).dropna()
        if len(v):
            out[key] = float(v.iloc[-FINAL_STEPS:].mean())
    return out


MULTITURN_COLUMNS = ("max_turns", "heldout_turn1_percentile", "heldout_turn_gain", "initial_heldout_turn_gain",
                     "train_turn_gain", "initial_train_turn_gain", "heldout_submitted_rate",
                     "feedback_turns", "feedback_validation_rel_error", "feedback_validation_rel_error_median",
                     "feedback_status_accuracy",
                     "feedback_pairwise_agreement")


def multiturn_columns(run: Any, n_steps: int) -> dict[str, Any]:
    """The multi-turn columns of one run (``episode.max_turns`` K > 1; docs/multiturn.md); None for K = 1.

    - ``max_turns``: K (1 for a single-turn run).
    - ``heldout_turn1_percentile``: the final policy's held-out mean percentile after its first turn;
      ``heldout_turn_gain``: after turn K minus after turn 1 (``eval.jsonl``'s ``turn_gain``: each episode's
      current submission after each turn, real execution of every turn); ``initial_heldout_turn_gain``: the same
      for the initial policy (step 0); ``train_turn_gain``, ``initial_train_turn_gain``: on the train tasks.
    - ``heldout_submitted_rate``: the final held-out episodes that submitted before turn K.
    - ``feedback_*``: the world model's feedback against the real one on every executed training anchor turn
      (:func:`wmrl.episodes.fidelity.feedback_fidelity`; None without a world model).
    """
    ev = {(sp, st): _eval_at(run, sp, st) for sp in ("heldout", "train") for st in (0, n_steps)}
    k = int(((run.config or {}).get("episode") or {}).get("max_turns") or 1)
    out: dict[str, Any] = dict.fromkeys(MULTITURN_COLUMNS)
    out["max_turns"] = k
    if k == 1:
        return out
    final = ev[("heldout", n_steps)]
    out.update(heldout_turn1_percentile=(final.get("mean_percentile_turn") or [None])[0],
               heldout_turn_gain=final.get("turn_gain"), initial_heldout_turn_gain=ev[("heldout", 0)].get("turn_gain"),
               train_turn_gain=ev[("train", n_steps)].get("turn_gain"),
               initial_train_turn_gain=ev[("train", 0)].get("turn_gain"),
               heldout_submitted_rate=final.get("submitted_rate"))
    turns = [dict(t, episode=(r["step"], r["group"], i)) for i, r in
             enumerate(read_jsonl(Path(run.path) / "samples.jsonl", skip_bad=True)) for t in r.get("turns") or []]
    fid = feedback_fidelity(turns)
    if fid["n_turns"]:
        out.update(feedback_turns=fid["n_turns"], feedback_validation_rel_error=fid["validation_rel_error"],
                   feedback_validation_rel_error_median=fid["validation_rel_error_median"],
                   feedback_status_accuracy=fid["status_accuracy"],
                   feedback_pairwise_agreement=fid["pairwise_agreement"])
    return out


def _finite_num(x: Any) -> TypeGuard[float]:
    return isinstance(x, (int, float)) and math.isfinite(x)


def missing_runs(out: str | Path) -> list[str]:
    """``"<method> seed <k>"`` for every planned run of ``out/bench.json`` without ``summary.json``."""
    meta_path = Path(out) / "bench.json"
    if not meta_path.is_file():
        return []
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    return [f"{r['method']} seed {r['seed']}" for r in meta.get("runs", [])
            if not (Path(out) / r["run_dir"] / "summary.json").is_file()]


def step0_compute(m: pd.DataFrame) -> float:
    """Compute (CPU-s) spent before step 1: setup, warm-up and world-model fit.

    ``cum_compute_cpu_s`` at step 1 minus that step's own trainer CPU and sandbox CPU.
    """
    first = m.iloc[0]
    c = float(first.get("cum_compute_cpu_s") or 0.0)
    c -= float(first.get("step_cpu_s") or 0.0) + float(first.get("exec_sandbox_cpu_s") or 0.0)
    return max(c, 0.0)


def curves(out: str | Path) -> tuple[dict[str, list], dict[str, list]]:
    """Reward-against-compute curves of every finished run, grouped by method.

    Returns ``(train, heldout)``: ``{method: [(compute_cpu_h [S], reward [S]) per seed]}``. ``train``:
    the true reward of each step's executed trajectories (none for ``wm``) against cumulative
    training compute. ``heldout``: each held-out evaluation's mean percentile against the training
    compute spent up to the evaluated step. Step 0 (the initial policy, evaluated once per seed when
    the preset has ``eval_initial``) is shared by every method of that seed and placed at each run's
    own pre-training compute (set-up, warm-up and world-model fit).
    """
    loaded = []
    initial: dict[int, float] = {}
    for rd in sorted(Path(out).glob("*/seed*")):
        if not (rd / "summary.json").is_file() or rd.parent.name not in METHODS:
            continue
        run = load_run(rd)
        seed = int(rd.name.removeprefix("seed"))
        ev = run.evals
        if not ev.empty and "split" in ev:
            ev = ev[ev["split"] == "heldout"]
            e0 = ev[ev["step"] == 0]
            if not e0.empty and e0.iloc[-1]["mean_percentile"] is not None:
                initial.setdefault(seed, float(e0.iloc[-1]["mean_percentile"]))
        loaded.append((rd.parent.name, seed, run, ev))
    train: dict[str, list] = {}
    held: dict[str, list] = {}
    for method, seed, run, ev in loaded:
        m = run.metrics
        if m.empty or "cum_compute_cpu_s" not in m:
            continue
        x = pd.to_numeric(m["cum_compute_cpu_s"], errors="coerce").to_numpy(float) / 3600.0
        y = (pd.to_numeric(m["reward_true_mean"], errors="coerce").to_numpy(float)
             if "reward_true_mean" in m else np.full_like(x, np.nan))
        train.setdefault(method, []).append((x, y))
        step_to_c = dict(zip(m["step"].astype(int), x))
        step_to_c[0] = step0_compute(m) / 3600.0
        pts = {}
        if seed in initial:
            pts[0] = (step_to_c[0], initial[seed])
        if not ev.empty and "mean_percentile" in ev:
            for st, p in zip(ev["step"], ev["mean_percentile"]):
                if p is not None and math.isfinite(float(p)):
                    pts[int(st)] = (step_to_c.get(int(st), math.nan), float(p))
        if pts:
            xs, ys = zip(*[pts[k] for k in sorted(pts)])
            held.setdefault(method, []).append((np.array(xs), np.array(ys)))
    order = {mm: i for i, mm in enumerate(METHODS)}
    return (dict(sorted(train.items(), key=lambda kv: order[kv[0]])),
            dict(sorted(held.items(), key=lambda kv: order[kv[0]])))


"""Where each run of a bench converged (:mod:`wmrl.report.convergence`): the execution logs read, each
run's final world model loaded and asked to rank every program the bench executed, ``convergence.json``
written per run.

For every finished run ``OUT/<method>/seed<k>`` (``summary.json``):

* the **candidates** are every execution with a reward in the shared corpus (``OUT/corpus``) and in the
  execution logs of every finished run, any stream (warm-up, anchors, evaluations), averaged over repeats
  of the same completion (:func:`wmrl.report.convergence.candidate_programs`);
* the **modal programs** come from the run's final evaluation of its train tasks (the ``eval`` executions
  of split ``train`` at the run's last step);
* the **scorer** is the run's final world model: the backbone rebuilt from the run's config
  (:func:`wmrl.training.parts.load_policy_backbone`, :func:`~wmrl.training.parts.world_model_backbone`,
  :func:`~wmrl.training.parts.policy_lora`) and the weights of the last complete checkpoint's
  ``world_model/`` (when ``trainer_state.json`` says ``world_model_in_checkpoint``) or of the run's
  ``world_model/`` (the initial fit, never refitted); the calibrated f_hat(r_hat) uses the calibrator of
  that checkpoint's recipe state. Methods without a world model get no scorer.

``OUT/<method>/seed<k>/convergence.json`` (written atomically) is recomputed only when its key changes:
the SHA-256 of the candidate set, the ``summary.json`` mtime and :data:`VERSION`. A world model that
cannot be loaded (files missing, another backbone) leaves the prediction and rank columns empty and says
why in the file's ``notes``; the table is written all the same.
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from wmrl.core.calibration import IsotonicCalibrator
from wmrl.execution.log import ExecutionLog
from wmrl.report.bench_page import write_outputs
from wmrl.report.bench_results import METHODS, corpus_dir, now, uses_world_model
from wmrl.report.convergence import TOLERANCE, VERDICTS, candidate_programs, convergence_rows, modal_programs
from wmrl.report.convergence_page import FILE as CONVERGENCE_FILE
from wmrl.report.runs import read_jsonl
from wmrl.training import parts
from wmrl.training.config import load_config
from wmrl.world_model.factory import load_world_model

#: Bumped when the content of ``convergence.json`` changes, so that older files are recomputed.
VERSION = 1

Log = Callable[[str], None]

_ROW_KEYS = ("task_id", "completion", "prompt", "reward", "stream", "split", "step")


def execution_rows(path: str | Path) -> pd.DataFrame:
    """The executions of one execution log that hold a policy's trajectory.

    Returns:
        One row per execution: ``task_id``, ``completion``, ``prompt`` (str), ``reward`` (float, NaN when
        the execution got none), ``stream`` (``warmup``/``anchor``/``eval``), ``split`` (``train``/
        ``heldout`` for evaluations, else None) and ``step`` (int). Empty when ``path`` is not a file.

    Raises:
        sqlite3.DatabaseError: ``path`` is not an execution log.
    """
    p = Path(path)
    if not p.is_file():
        return pd.DataFrame(columns=list(_ROW_KEYS))
    log = ExecutionLog(p)
    try:
        recs = log.records()
    finally:
        log.close()
    rows = [{"task_id": t.task_id, "completion": t.completion, "prompt": t.prompt,
             "reward": math.nan if r.get("reward") is None else float(r["reward"]), "stream": t.stream,
             "split": t.split, "step": int(t.step)}
            for r in recs if (t := r["trajectory"]) is not None]
    return pd.DataFrame(rows, columns=list(_ROW_KEYS))


def candidates_sha256(candidates: pd.DataFrame) -> str:
    """SHA-256 of a candidate set (:func:`~wmrl.report.convergence.candidate_programs`): its tasks,
    completions, execution counts and mean rewards (to 12 digits), in sorted order."""
    h = hashlib.sha256()
    for t, c, r, n in sorted(zip(candidates["task_id"], candidates["completion"], candidates["true_reward"],
                                 candidates["n_executions"])):
        h.update(json.dumps([t, c, round(float(r), 12), int(n)]).encode("utf-8", "surrogatepass"))
    return h.hexdigest()


def finished_runs(out: str | Path) -> list[tuple[str, int, Path]]:
    """``(method, seed, run_dir)`` of every finished run of the bench in ``out``, in table order."""
    order = {m: i for i, m in enumerate(METHODS)}
    runs = [(rd.parent.name, int(rd.name.removeprefix("seed")), rd) for rd in Path(out).glob("*/seed*")
            if (rd / "summary.json").is_file() and rd.parent.name in METHODS and rd.name.removeprefix("seed").isdigit()]
    return sorted(runs, key=lambda r: (order[r[0]], r[1]))


def final_checkpoint(run_dir: Path) -> Path | None:
    """The run's newest complete checkpoint (:meth:`wmrl.runs.rundir.RunDir.resume_candidates`), or None."""
    from wmrl.runs.rundir import RunDir  # noqa: PLC0415

    good, _ = RunDir(run_dir).resume_candidates()
    return good[0] if good else None


def final_world_model_dir(run_dir: Path, checkpoint: Path | None) -> Path:
    """The folder of the run's final world model: ``checkpoint/world_model`` when the checkpoint's
    ``trainer_state.json`` says ``world_model_in_checkpoint``, else ``run_dir/world_model``."""
    if checkpoint is not None:
        st = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
        if st.get("world_model_in_checkpoint"):
            return checkpoint / "world_model"
    return run_dir / "world_model"


def load_final_world_model(run_dir: Path, checkpoint: Path | None) -> tuple[Any, Path]:
    """The run's final world model on the backbone of its config, and the folder it came from.

    Raises:
        FileNotFoundError: the config or the world model folder is missing.
        ConfigError: the run's config does not validate.
        ValueError: the saved world model does not fit the backbone (or is of another kind).
    """
    cfg = load_config(run_dir / "config.yaml")
    src = final_world_model_dir(run_dir, checkpoint)
    if not (src / "world_model.json").is_file():
        raise FileNotFoundError(f"{src.relative_to(run_dir)}/world_model.json is missing")
    model, tok = parts.load_policy_backbone(cfg)
    model.eval()
    backbone = parts.world_model_backbone(model, parts.policy_lora(cfg))
    return load_world_model(src, backbone, tok, kind=cfg.world_model.kind), src


def final_calibrator(checkpoint: Path | None) -> Callable[[np.ndarray], np.ndarray] | None:
    """f_hat of the checkpoint's recipe state (the isotonic calibrator), or None when it holds none."""
    if checkpoint is None:
        return None

    st = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
    state = (st.get("recipe") or {}).get("calibrator", st.get("calibrator"))
    if not state:
        return None
    cal = IsotonicCalibrator.from_state_dict(state)
    return lambda x: cal.transform(np.asarray(x, dtype=np.float64))


def _final_step(run_dir: Path) -> int | None:
    m = read_jsonl(run_dir / "metrics.jsonl", skip_bad=True)
    steps = [int(r["step"]) for r in m if isinstance(r.get("step"), (int, float))]
    return max(steps) if steps else None


def _prompts(samples: pd.DataFrame, fallback: pd.DataFrame) -> dict[str, str]:
    """Per task the most frequent prompt of ``samples`` (the run's final evaluation), else of ``fallback``."""
    out: dict[str, str] = {}
    for frame in (fallback, samples):  # the run's own prompts win
        for t, g in frame.groupby("task_id", sort=False):
            out[t] = Counter(g["prompt"]).most_common(1)[0][0]
    return out


def diagnose_run(run_dir: Path, method: str, seed: int, rows: pd.DataFrame, candidates: pd.DataFrame,
                 everything: pd.DataFrame, key: dict[str, Any], log: Log) -> dict[str, Any]:
    """The ``convergence.json`` document of one finished run (not written).

    Args:
        rows: the run's own executions (:func:`execution_rows`); candidates: the bench's candidate set;
            everything: every execution row read (for the task prompts).
        key: the cache key stored in the document.

    Returns:
        ``{version, method, seed, key, tolerance, final_step, eval_step, world_model: {uses, loaded, source,
        calibrated}, n_candidates, n_scored, score_seconds, notes, tasks: [rows of
        convergence_rows], counts: {verdict: n}, written_at}``: ``n_candidates`` is the size of the bench's
        candidate set (every task; each row has its task's own), ``n_scored`` the programs the world model
        predicted (the candidates of the run's train tasks and the modal programs), ``score_seconds`` their
        wall seconds.
    """
    notes: list[str] = []
    doc: dict[str, Any] = {"version": VERSION, "method": method, "seed": seed, "key": key, "tolerance": TOLERANCE,
                           "final_step": _final_step(run_dir), "eval_step": None,
                           "world_model": {"uses": uses_world_model(method), "loaded": False, "source": None,
                                           "calibrated": False},
                           "n_candidates": int(len(candidates)), "n_scored": 0, "score_seconds": None,
                           "notes": notes, "tasks": [], "counts": dict.fromkeys(VERDICTS, 0), "written_at": now()}
    ev = rows[(rows["stream"] == "eval") & (rows["split"] == "train")]
    if ev.empty:
        notes.append("no evaluation of the train tasks in the run's execution log (eval.train_tasks: false?), so no "
                     "modal programs")
        return doc
    eval_step = int(ev["step"].max())
    doc["eval_step"] = eval_step
    if doc["final_step"] is not None and eval_step != doc["final_step"]:
        notes.append(f"the last evaluation of the train tasks is at step {eval_step}, the run ended at step "
                     f"{doc['final_step']}: the modal programs are those of step {eval_step}")
    ev = ev[ev["step"] == eval_step]
    modal = modal_programs(ev)
    score = calibrate = None
    timing: dict[str, float] = {}
    wm_doc = doc["world_model"]
    if wm_doc["uses"]:
        ckpt = final_checkpoint(run_dir)
        try:
            t0 = time.perf_counter()
            wm, src = load_final_world_model(run_dir, ckpt)
            wm_doc.update(loaded=True, source=str(src.relative_to(run_dir)))
            log(f"convergence: {method} seed {seed}: world model {wm_doc['source']} loaded in "
                f"{time.perf_counter() - t0:.1f} s")
        except Exception as exc:  # noqa: BLE001 - the table must be written without it
            notes.append(f"the final world model could not be loaded ({type(exc).__name__}: {exc}): no predictions "
                         "or ranks")
            log(f"convergence: {method} seed {seed}: {notes[-1]}")
        else:
            prompts = _prompts(ev, everything)

            def score(task_ids: Any, completions: Any) -> np.ndarray:
                t1 = time.perf_counter()
                with torch.no_grad():
                    r = wm.predict([prompts[t] for t in task_ids], list(completions))
                timing["s"], timing["n"] = time.perf_counter() - t1, len(completions)
                return r
            try:
                calibrate = final_calibrator(ckpt)
            except (KeyError, TypeError, ValueError) as exc:
                notes.append(f"the final calibrator could not be read ({type(exc).__name__}: {exc}): no f_hat")
            wm_doc["calibrated"] = calibrate is not None
    try:
        table = convergence_rows(candidates, modal, score=score, calibrate=calibrate)
    except (ValueError, RuntimeError) as exc:  # the world model's predictions are unusable: true rewards only
        if score is None:
            raise
        notes.append(f"the final world model's predictions failed ({type(exc).__name__}: {exc}): no predictions "
                     "or ranks")
        wm_doc.update(loaded=False, calibrated=False)
        timing.clear()
        table = convergence_rows(candidates, modal)
    if "s" in timing:
        doc.update(n_scored=int(timing["n"]), score_seconds=round(timing["s"], 3))
        log(f"convergence: {method} seed {seed}: scored {timing['n']} programs of {len(modal)} tasks in "
            f"{timing['s']:.1f} s")
    doc["tasks"] = table.to_dict("records")
    doc["counts"] = {v: int((table["verdict"] == v).sum()) for v in VERDICTS}
    return doc


def diagnose_bench(out: str | Path, log: Log | None = None, force: bool = False) -> list[Path]:
    """Write ``convergence.json`` for every finished run of the bench in ``out`` (see the module docstring).

    Args:
        force: recompute even where the key is unchanged.

    Returns:
        The ``convergence.json`` paths of the finished runs (fresh or up to date), in table order.

    Raises:
        sqlite3.DatabaseError: an execution log is not one.
    """
    from wmrl.runs.rundir import write_json_atomic  # noqa: PLC0415

    log = log or (lambda msg: print(msg, flush=True))
    out = Path(out)
    runs = finished_runs(out)
    if not runs:
        return []
    t0 = time.perf_counter()
    own = [execution_rows(rd / "executions.sqlite").assign(source=f"{m} seed {s}") for m, s, rd in runs]
    frames = [f for f in [execution_rows(corpus_dir(out) / "executions.sqlite").assign(source="corpus"), *own]
              if not f.empty]
    everything = (pd.concat(frames, ignore_index=True) if frames else
                  pd.DataFrame(columns=[*_ROW_KEYS, "source"]))
    candidates = candidate_programs(everything)
    digest = candidates_sha256(candidates)
    paths, fresh = [], 0
    for (method, seed, rd), rows in zip(runs, own):
        path = rd / CONVERGENCE_FILE
        key = {"version": VERSION, "candidates_sha256": digest,
               "summary_mtime_ns": (rd / "summary.json").stat().st_mtime_ns}
        if not force and path.is_file():
            try:
                if json.loads(path.read_text(encoding="utf-8")).get("key") == key:
                    paths.append(path)
                    continue
            except (OSError, ValueError):
                pass
        doc = diagnose_run(rd, method, seed, rows, candidates, everything, key, log)
        write_json_atomic(path, doc)
        paths.append(path)
        fresh += 1
    log(f"convergence: {len(runs)} runs ({fresh} recomputed, {len(runs) - fresh} up to date), {len(candidates)} "
        f"candidate programs, {time.perf_counter() - t0:.1f} s")
    return paths


def write_bench_outputs(out: str | Path, log: Log | None = None, mixed_commits: bool = False) -> dict[str, Path]:
    """:func:`diagnose_bench`, then :func:`wmrl.report.bench_page.write_outputs` (the table; ``mixed_commits``:
    write it although the runs come from several code versions). A diagnosis that fails is logged and the table
    written without it.

    Raises:
        BenchError: ``out`` holds no finished run, or runs of several code versions without ``mixed_commits``.
    """
    log = log or (lambda msg: print(msg, flush=True))
    try:
        diagnose_bench(out, log)
    except Exception as exc:  # noqa: BLE001 - the table matters more than its diagnosis
        log(f"convergence: not computed ({type(exc).__name__}: {exc})")
    return write_outputs(out, mixed_commits=mixed_commits)

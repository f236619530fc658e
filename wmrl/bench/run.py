"""Running a bench: every planned run trained, resumed or skipped, ``bench.json`` written, the shared
corpus collected first, and the outputs (:func:`wmrl.report.bench_page.write_outputs`) after every
complete seed and at the end.

Each (method, seed) is a normal run directory ``OUT/<method>/seed<k>`` written by
:func:`wmrl.training.run.run_training`; the final policy is evaluated with real execution on the
held-out tasks by the trainer's end-of-run evaluation (``eval.at_end``). The bench is resumable: a run
with ``summary.json`` is skipped, a run with a complete checkpoint is resumed, anything else restarts.

Several invocations may work on one folder at once (for example one per CPU, each with its own
``--methods``, or the same command twice): each run is claimed with a lock file
``OUT/<method>/.seed<k>.lock`` while it trains, and a run claimed by another invocation is skipped, never
restarted under it; the shared corpus is collected by one invocation while the others wait for it.

Outputs in ``OUT``: ``bench.json`` (plan, command, machine), ``results.csv`` (one row per run),
``table.csv``, ``bench.md`` and ``bench.html`` (the table, the reward-against-compute plot, the command,
the machine, notes on overlapping standard errors, where each run converged) and ``reward_vs_compute.png``;
per run ``convergence.json`` (:mod:`wmrl.bench.convergence`) and their rows in ``convergence.csv``.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from wmrl.bench.convergence import write_bench_outputs
from wmrl.bench.corpus import ensure_corpus
from wmrl.bench.plan import PlannedRun, check_existing, plan, run_state
from wmrl.bench.presets import METHODS, BenchError, Preset, preset_dir
from wmrl.report.bench_results import now, uses_world_model
from wmrl.report.machine import machine_info
from wmrl.runs.provenance import code_version, record_invocation
from wmrl.runs.rundir import write_json_atomic
from wmrl.training import run as trainer
from wmrl.training.config import TrainConfig


TrainFn = Callable[..., Any]


def _default_train_fn(config: TrainConfig, resume: bool) -> Any:
    if resume:
        return trainer.run_training(config, resume=True)
    return trainer.run_training(config)


def run_bench(
    preset: Preset,
    out: str | Path,
    seeds: int | None = None,
    steps: int | None = None,
    methods: Sequence[str] | None = None,
    overrides: Sequence[str] = (),
    command: str = "",
    train_fn: TrainFn | None = None,
    log: Callable[[str], None] | None = None,
    mixed_commits: bool = False,
) -> dict[str, Path]:
    """Run (or resume) the whole bench, then write the table and plot. Returns the output paths.

    ``train_fn(config, resume: bool)`` trains one run; default :func:`wmrl.training.run.run_training`.
    A run that raises is logged, left as it is (resumable if it checkpointed) and the bench goes on
    with the next one; the table is written from the runs that finished and says which are missing. Each run
    trained records this invocation's code version, command and preset hash
    (:data:`wmrl.runs.provenance.PROVENANCE`); a run that did not do what its method's name says
    (``results.csv`` column ``ran_as``) gets a warning line when it ends.
    ``mixed_commits``: write the table although the runs come from several code versions.

    Raises:
        BenchError: a run folder holds a run with other settings (see :func:`check_existing`).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runs = plan(preset, out, seeds, steps, methods, overrides)
    for r in runs:
        check_existing(r)
    version = code_version()  # once per invocation: bench.json and every run it trains record the same
    meta = _bench_meta(preset, runs, command, out, version)
    _write_meta(out, meta)
    train = train_fn or _default_train_fn
    log = log or (lambda msg: print(msg, flush=True))
    if any(uses_world_model(r.method) for r in runs):
        meta["corpus"] = ensure_corpus(preset, out, log, overrides=list(overrides))
        _write_meta(out, meta)
    failures: list[str] = []
    t0 = time.time()
    prov = _provenance(preset, command, version)
    for i, r in enumerate(runs, 1):
        _run_one(r, f"[{i}/{len(runs)}] {r.method} seed {r.seed}", train, failures, log, t0, prov)
        if i < len(runs) and runs[i].seed != r.seed:
            # A table after every complete seed, so an interrupted bench still has one.
            try:
                write_bench_outputs(out, log, mixed_commits)
                log(f"seed {r.seed} done: table so far in {out / 'bench.md'}")
            except BenchError as exc:
                log(f"seed {r.seed} done; no table so far: {exc}")
    meta["finished_at"] = now()
    meta["failures"] = failures
    _write_meta(out, meta)
    if failures and all(run_state(r.run_dir) != "finished" for r in runs):
        raise BenchError(f"all {len(runs)} planned runs failed (the first: {failures[0]}); every failure is in "
                         f"{out / 'bench.json'}")
    return write_bench_outputs(out, log, mixed_commits)


def _provenance(preset: Preset, command: str, version: dict[str, Any]) -> dict[str, Any]:
    """What this invocation records in each run it trains (:data:`~wmrl.runs.provenance.PROVENANCE`, beside the
    trainer's own entry): the code version (commit and whether the checkout had uncommitted changes), the command
    and the preset file's SHA-256."""
    digest = None
    if preset.path and Path(preset.path).is_file():
        digest = hashlib.sha256(Path(preset.path).read_bytes()).hexdigest()
    return {"code_version": version, "command": command, "preset": preset.name, "preset_sha256": digest}


def _run_one(r: PlannedRun, tag: str, train: TrainFn, failures: list[str], log: Callable[[str], None],
             t0: float, prov: dict[str, Any] | None = None) -> None:
    """Train, resume or skip one planned run (see :func:`run_bench`); failures are appended, not raised."""
    claim = FileLock(r.run_dir.parent / f".{r.run_dir.name}.lock")
    r.run_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        claim.acquire(timeout=0)
    except Timeout:
        log(f"{tag}: being trained by another bench invocation on this folder, skipped")
        return
    try:
        _train_claimed(r, tag, train, failures, log, t0, prov)
    finally:
        claim.release()


def _train_claimed(r: PlannedRun, tag: str, train: TrainFn, failures: list[str], log: Callable[[str], None],
                   t0: float, prov: dict[str, Any] | None = None) -> None:
    """:func:`_run_one` once this invocation holds the run's claim."""
    state = run_state(r.run_dir)
    if state == "finished":
        log(f"{tag}: finished earlier, skipped")
        return
    if state == "partial":
        # Started but never checkpointed: nothing to resume; start again from scratch.
        shutil.rmtree(r.run_dir)
    resume = state == "resumable"
    log(f"{tag}: {'resuming' if resume else 'training'} -> {r.run_dir} ({time.time() - t0:.0f} s into the bench)")
    try:
        train(r.config, resume)
        if prov is not None and r.run_dir.is_dir():
            record_invocation(r.run_dir, {**prov, "resumed": resume, "finished_at": now()})
    except KeyboardInterrupt:
        log(f"{tag}: interrupted; rerun the same command to resume")
        raise
    except Exception as exc:  # noqa: BLE001 - one broken run must not lose the others
        failures.append(f"{r.method} seed {r.seed}: {type(exc).__name__}: {exc}")
        log(f"{tag}: FAILED: {type(exc).__name__}: {exc}")


def _bench_meta(preset: Preset, runs: list[PlannedRun], command: str, out: Path,
                version: dict[str, Any]) -> dict[str, Any]:
    """This invocation's ``bench.json`` record (:func:`_write_meta` merges it with the folder's)."""
    cfg0 = runs[0].config
    # Paths relative to the bench folder (and the preset's to the repository when inside it), so a
    # committed bench.json names no machine's absolute paths.
    return {
        "preset": preset.name,
        "preset_path": _repo_relative(preset.path) if preset.path else None,
        "description": preset.description,
        "backbone_note": preset.backbone_note,
        "steps": cfg0.optim.steps,
        "model": cfg0.model.name,
        "scaffold": cfg0.scaffold.name,
        "train_tasks": cfg0.tasks.train,
        "heldout_tasks": cfg0.tasks.heldout,
        "rollout": {"tasks_per_step": cfg0.rollout.tasks_per_step, "group_size": cfg0.rollout.group_size},
        "anchor_fraction": cfg0.wmrl.routing.anchor_fraction,
        "command": command,
        "commands": [command] if command else [],
        "machine": machine_info(),
        "code_versions": [version],
        "started_at": now(),
        "runs": [{"method": r.method, "seed": r.seed, "run_dir": str(Path(r.run_dir).relative_to(out))}
                 for r in runs],
        "corpus": None,
    }


def _write_meta(out: Path, meta: dict[str, Any]) -> None:
    """Write ``OUT/bench.json``: ``meta`` merged with what the file holds, under a lock, atomically.

    Several invocations on one folder (one after another, e.g. first ``--methods grpo,wmrl --seeds 2``, then
    the rest, or at once) add up: the planned runs, the commands and each invocation's code version (a bench
    resumed across days must still come from one commit; the page says when it does not) are unions, the
    start time is the first one's.
    """
    path = out / "bench.json"
    with FileLock(out / ".bench.json.lock"):
        old: dict[str, Any] = {}
        if path.is_file():
            try:
                old = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError:
                old = {}
        order = {m: i for i, m in enumerate(METHODS)}
        planned = {r["run_dir"]: r for r in [*old.get("runs", []), *meta["runs"]]}
        runs = sorted(planned.values(), key=lambda r: (r["seed"], order.get(r["method"], 99)))
        merged = {
            **meta,
            "methods": sorted({r["method"] for r in runs}, key=lambda m: order.get(m, 99)),
            "seeds": sorted({r["seed"] for r in runs}),
            "commands": list(dict.fromkeys([*(old.get("commands") or []), *meta["commands"]])),
            "code_versions": _unique([*(old.get("code_versions") or []), *meta["code_versions"]]),
            "started_at": old.get("started_at") or meta["started_at"],
            "runs": runs,
            "corpus": meta.get("corpus") or old.get("corpus"),
        }
        write_json_atomic(path, merged)


def _unique(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``items`` without repeats, in first-seen order."""
    seen: list[dict[str, Any]] = []
    for it in items:
        if it not in seen:
            seen.append(it)
    return seen


def _repo_relative(p: Path) -> str:
    """``p`` relative to the folder holding the ``wmrl`` package (the checkout, or site-packages of an install),
    so a shipped preset reads ``wmrl/bench/configs/NAME.yaml`` wherever wmrl lies; other paths as given."""
    root = preset_dir().parents[2]
    try:
        return str(Path(p).resolve().relative_to(root))
    except ValueError:
        return str(p)

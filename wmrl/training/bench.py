"""``wmrl bench``: WMRL side by side with real-execution GRPO and the ablations (issue 7).

A bench runs a *method matrix* on the same train tasks, seeds and step budget. The methods are the
registered recipes of :mod:`wmrl.core.recipe` (``grpo``, ``wm``, ``wmrl`` and its ablations); a run of
method m is the preset's config with ``method=m``.

Each (method, seed) is a normal run directory ``OUT/<method>/seed<k>`` written by
:func:`wmrl.training.trainer.run_training`; the final policy is evaluated with real execution on the
held-out tasks by the trainer's end-of-run evaluation (``eval.at_end``). The bench is resumable: a run
with ``summary.json`` is skipped, a run with a complete checkpoint is resumed, anything else restarts.

A *preset* is a YAML file in ``configs/bench/`` (or any path)::

    preset: cpu-small
    description: one paragraph shown in the output
    backbone_note: how the policy is built (e.g. a small backbone trained from scratch + grammar scaffold)
    seeds: 4                 # number of seeds (0 .. seeds-1)
    methods: [grpo, wm, wmrl, wmrl-no-debias, wmrl-no-denoise, wmrl-ppi]
    expected_hours: 2.0      # rough wall time on the machine it was sized for
    eval_initial: true       # also evaluate the initial policy (step 0) once per seed, in the grpo run
    corpus:                  # optional: one warm-up corpus, executed once, shared by the world-model runs
      samples_per_task: 32
      group_size: 4
      seed: 0
    config: {...}            # a wmrl.training.config.TrainConfig, validated by its loader

With ``corpus`` the bench first collects a warm-up corpus (``OUT/corpus/executions.sqlite``, from the
initial policy of ``corpus.seed``, executed for real) and every ``wm``/``wmrl`` run fits its world model
on it (``world_model.warmup_corpus``) instead of collecting its own. Its cost is paid once per bench:
``OUT/corpus/corpus.json`` records it, ``results.csv`` repeats it per run (``corpus_cpu_s``) and the
table gives the compute ratio both without it and with it charged in full to every run.

Outputs in ``OUT``: ``bench.json`` (plan, command, machine), ``results.csv`` (one row per run),
``table.csv``, ``bench.md`` and ``bench.html`` (the table, the reward-against-compute plot, the command,
the machine, notes on overlapping standard errors) and ``reward_vs_compute.png``.

Why one long file (about 1,200 lines): planning, running, collecting, aggregating, the tables and
the plot all read one bench folder layout and one results frame; the output half is the first
candidate to move to ``wmrl.report`` when the recipe issue reshapes the layout.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from wmrl.core.recipe import get_recipe, recipe_names

from wmrl.training.config import (
    ConfigError,
    TrainConfig,
    apply_overrides,
    config_from_dict,
    config_to_dict,
    load_yaml,
)

#: The methods a bench can run: the registered recipes, by name.
METHODS: list[str] = recipe_names()
REFERENCE = "grpo"


class BenchError(ValueError):
    """A preset or bench folder is not usable; the message says what is wrong and how to fix it."""


def preset_dir() -> Path:
    """The folder of the shipped presets: ``<repo>/configs/bench``."""
    return Path(__file__).resolve().parents[2] / "configs" / "bench"


def list_presets() -> list[str]:
    """Names of the shipped presets (YAML files in :func:`preset_dir`), sorted."""
    d = preset_dir()
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


@dataclass
class Preset:
    """A bench preset (see the module docstring); ``config`` is the raw base config dict."""

    name: str
    description: str
    backbone_note: str
    seeds: int
    methods: list[str]
    config: dict[str, Any]
    expected_hours: float | None = None
    eval_initial: bool = False
    path: Path | None = None
    corpus: dict[str, int] | None = None


def load_preset(name_or_path: str | Path) -> Preset:
    """Load a preset by name (``configs/bench/NAME.yaml``) or path, and validate it.

    Every method's config is built once with the trainer's loader, so a bad key fails here, before
    anything runs.

    Raises:
        BenchError: unknown preset name, missing keys, unknown methods, or an invalid config
            (the trainer's :class:`ConfigError` message is included).
    """
    p = Path(name_or_path)
    if not p.suffix and not p.exists():
        p = preset_dir() / f"{name_or_path}.yaml"
    if not p.is_file():
        raise BenchError(
            f"unknown bench preset {str(name_or_path)!r}: choose one of {', '.join(list_presets()) or '(none)'} "
            f"or pass a YAML file path"
        )
    try:
        data = load_yaml(p.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise BenchError(f"{p}: not valid YAML: {exc}") from exc
    allowed = {"preset", "description", "backbone_note", "seeds", "methods", "config", "expected_hours",
               "eval_initial", "corpus"}
    unknown = set(data) - allowed
    if unknown:
        raise BenchError(f"{p}: unknown preset keys {sorted(unknown)}; allowed: {sorted(allowed)}")
    if not isinstance(data.get("config"), dict):
        raise BenchError(f"{p}: needs a 'config:' mapping (a wmrl train config)")
    raw_methods = data.get("methods") or list(METHODS)
    if not isinstance(raw_methods, list) or not all(isinstance(m, str) for m in raw_methods):
        raise BenchError(f"{p}: methods must be a list of method names like [grpo, wmrl], got {raw_methods!r}")
    methods = list(raw_methods)
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise BenchError(f"{p}: unknown methods {bad}; known: {', '.join(METHODS)}")
    seeds = data.get("seeds", 1)
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise BenchError(f"{p}: seeds must be an integer >= 1, got {seeds!r}")
    for key in ("eval_initial",):
        if key in data and not isinstance(data[key], bool):
            raise BenchError(f"{p}: {key} must be true or false, got {data[key]!r}")
    hours = data.get("expected_hours")
    if hours is not None and (isinstance(hours, bool) or not isinstance(hours, (int, float)) or hours <= 0):
        raise BenchError(f"{p}: expected_hours must be a positive number of hours, got {hours!r}")
    preset = Preset(
        name=str(data.get("preset") or p.stem),
        description=str(data.get("description") or "").strip(),
        backbone_note=str(data.get("backbone_note") or "").strip(),
        seeds=seeds,
        methods=methods,
        config=data["config"],
        expected_hours=data.get("expected_hours"),
        eval_initial=bool(data.get("eval_initial", False)),
        path=p,
        corpus=_check_corpus(p, data.get("corpus")),
    )
    for m in methods:
        try:
            method_config(preset, m, seed=0, run_dir=Path("/nonexistent"))
        except ConfigError as exc:
            raise BenchError(f"{p}: config for method {m!r} is invalid: {exc}") from exc
    return preset


_CORPUS_KEYS = {"samples_per_task": 1, "group_size": 1, "seed": 0}  # key -> minimum


def _check_corpus(p: Path, corpus: Any) -> dict[str, int] | None:
    """The preset's ``corpus`` mapping with its defaults, or None; BenchError on a bad one."""
    if corpus is None:
        return None
    if not isinstance(corpus, dict):
        raise BenchError(f"{p}: corpus must be a mapping with {sorted(_CORPUS_KEYS)}, got {corpus!r}")
    unknown = set(corpus) - set(_CORPUS_KEYS)
    if unknown:
        raise BenchError(f"{p}: unknown corpus keys {sorted(unknown)}; allowed: {sorted(_CORPUS_KEYS)}")
    out = {"samples_per_task": 32, "group_size": 4, "seed": 0}
    for k, lo in _CORPUS_KEYS.items():
        v = corpus.get(k, out[k])
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise BenchError(f"{p}: corpus.{k} must be an integer >= {lo}, got {v!r}")
        out[k] = v
    if out["samples_per_task"] % out["group_size"]:
        raise BenchError(f"{p}: corpus.group_size={out['group_size']} must divide "
                         f"corpus.samples_per_task={out['samples_per_task']}")
    return out


def corpus_log(out: str | Path) -> Path:
    """The shared warm-up corpus of a bench folder: ``OUT/corpus/executions.sqlite``."""
    return Path(out).resolve() / "corpus" / "executions.sqlite"


def _uses_world_model(method: str) -> bool:
    return get_recipe(method).uses_world_model


def _corpus_settings(preset: Preset, overrides: Sequence[str]) -> dict[str, Any]:
    """What a shared corpus depends on: the preset's ``corpus`` and the config parts that make its programs."""
    base = config_to_dict(method_config(preset, REFERENCE, seed=preset.corpus["seed"], run_dir=Path("unused"),
                                        overrides=overrides))
    return {**preset.corpus, **{k: base[k] for k in ("model", "scaffold", "tasks", "rollout")}}


def ensure_corpus(preset: Preset, out: str | Path, log: Callable[[str], None] = print,
                  overrides: Sequence[str] = ()) -> dict[str, Any] | None:
    """Collect the preset's shared warm-up corpus once (see the module docstring); resumable.

    The corpus is made with the same config as the bench's runs (the preset's config plus the bench's
    ``overrides``: tasks, model, scaffold, rollout), from the initial policy of ``corpus.seed``.

    Returns:
        The cost record of ``OUT/corpus/corpus.json`` (:func:`wmrl.training.parts.collect_corpus`), with
        the settings it was made with under ``settings``; None when the preset has no ``corpus``. A folder
        left by an interrupted collection is removed and the corpus collected again; the record is
        written last, atomically.

    Raises:
        BenchError: ``OUT/corpus`` holds a corpus made with other settings (the message names them).
        As :func:`wmrl.training.parts.collect_corpus` (a suite not built, an unknown task or model).
    """
    if not preset.corpus:
        return None
    d = corpus_log(out).parent
    done = d / "corpus.json"
    settings = json.loads(json.dumps(_corpus_settings(preset, overrides), default=str))
    if done.is_file():
        rec = json.loads(done.read_text(encoding="utf-8"))
        if rec.get("settings") != settings:
            old = rec.get("settings") or {}
            diff = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
            raise BenchError(f"{d} holds a shared corpus made with other settings ({', '.join(diff)}); rerun with "
                             f"the same preset and --set options, or pass another --out")
        return rec
    from wmrl.training import parts  # noqa: PLC0415 - heavy (torch)
    from wmrl.training.rundir import write_json_atomic  # noqa: PLC0415

    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    c = preset.corpus
    log(f"shared warm-up corpus: {c['samples_per_task']} programs per train task from the initial policy of seed "
        f"{c['seed']}, executed once -> {corpus_log(out)}")
    base = method_config(preset, REFERENCE, seed=c["seed"], run_dir=d / "unused", overrides=overrides)
    cost = parts.collect_corpus(base, corpus_log(out), samples_per_task=c["samples_per_task"],
                                group_size=c["group_size"], seed=c["seed"])
    cost["settings"] = settings
    write_json_atomic(done, cost)
    log(f"shared warm-up corpus: {cost['executions']} executions, {cost['compute_cpu_s']:.0f} CPU-s, "
        f"{cost['wall_s']:.0f} s wall")
    return cost


def method_config(
    preset: Preset, method: str, seed: int, run_dir: Path, overrides: Sequence[str] = ()
) -> TrainConfig:
    """The train config of one bench run: the preset's config + the method's overrides + seed,
    run directory and name, then the user's ``overrides`` (applied last, to every method).

    With ``preset.eval_initial`` the reference method's run also evaluates the initial policy
    (``eval.at_start``): every method of a seed starts from the same seeded policy, so one step-0
    evaluation per seed is the baseline of all of them (evaluation is not training compute).

    Raises:
        ConfigError: an override names an unknown key or a bad value.
        KeyError: ``method`` is not in :data:`METHODS`.
    """
    data = json.loads(json.dumps(preset.config))  # deep copy of plain YAML data
    if method not in METHODS:
        raise KeyError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    data["method"] = method
    data["seed"] = seed
    data["run_dir"] = str(run_dir)
    data["name"] = f"{method}-seed{seed}"
    data["progress"] = False
    if preset.eval_initial and method == REFERENCE:
        data.setdefault("eval", {})["at_start"] = True
    apply_overrides(data, list(overrides))
    return config_from_dict(data)


@dataclass
class PlannedRun:
    """One cell of the method matrix."""

    method: str
    seed: int
    run_dir: Path
    config: TrainConfig


def plan(
    preset: Preset,
    out: Path,
    seeds: int | None = None,
    steps: int | None = None,
    methods: Sequence[str] | None = None,
    overrides: Sequence[str] = (),
) -> list[PlannedRun]:
    """The runs of a bench, seed-major (all methods of seed 0, then seed 1, ...) so that an
    interrupted bench has complete seeds to compare.

    Args:
        seeds: number of seeds (``0..seeds-1``); default the preset's.
        steps: training steps of every run (``optim.steps``); default the preset's.
        methods: subset of the preset's methods; default all of them. ``grpo`` should be among
            them for the relative columns.

    Raises:
        BenchError: unknown method, or ``seeds``/``steps`` below 1.
    """
    n_seeds = preset.seeds if seeds is None else int(seeds)
    if n_seeds < 1:
        raise BenchError(f"--seeds must be >= 1, got {n_seeds}")
    ms = list(methods) if methods else list(preset.methods)
    bad = [m for m in ms if m not in METHODS]
    if bad:
        raise BenchError(f"unknown methods {bad}; known: {', '.join(METHODS)}")
    ov = list(overrides)
    if steps is not None:
        if int(steps) < 1:
            raise BenchError(f"--steps must be >= 1, got {steps}")
        ov.append(f"optim.steps={int(steps)}")
    runs = []
    for s in range(n_seeds):
        for m in ms:
            rd = Path(out) / m / f"seed{s}"
            shared = [f"world_model.warmup_corpus={corpus_log(out)}"] if preset.corpus and _uses_world_model(m) else []
            runs.append(PlannedRun(m, s, rd, method_config(preset, m, s, rd, shared + ov)))
    return runs


def run_state(run_dir: Path) -> str:
    """``"finished"`` (summary.json), ``"resumable"`` (a complete checkpoint the trainer would resume
    from: :meth:`wmrl.training.rundir.RunDir.resume_candidates`, so a broken ``latest`` falls back to an
    earlier complete one as ``--resume`` does), ``"partial"`` (the folder exists without either) or
    ``"new"``."""
    from wmrl.training.rundir import RunDir  # noqa: PLC0415

    rd = Path(run_dir)
    if (rd / "summary.json").is_file():
        return "finished"
    if rd.exists() and RunDir(rd).resume_candidates()[0]:
        return "resumable"
    return "partial" if rd.exists() else "new"


_IGNORED_KEYS = {"run_dir", "progress", "name"}


def _config_mismatch(saved: dict[str, Any], planned: dict[str, Any], prefix: str = "") -> list[str]:
    diffs = []
    for k in sorted(set(saved) | set(planned)):
        if not prefix and k in _IGNORED_KEYS:
            continue
        a, b = saved.get(k), planned.get(k)
        key = f"{prefix}{k}"
        if isinstance(a, dict) and isinstance(b, dict):
            diffs += _config_mismatch(a, b, key + ".")
        elif a != b:
            diffs.append(f"{key}: {a!r} on disk, {b!r} planned")
    return diffs


def check_existing(run: PlannedRun) -> None:
    """Refuse to mix runs of different settings in one bench folder.

    Raises:
        BenchError: ``run.run_dir/config.yaml`` exists and differs from the planned config (lists
            the differing keys and says to use another ``--out`` or the same options as before).
    """
    cfg_path = run.run_dir / "config.yaml"
    if not cfg_path.is_file():
        return
    saved = yaml.safe_load(cfg_path.read_text(encoding="utf-8")) or {}
    diffs = _config_mismatch(saved, config_to_dict(run.config))
    if diffs:
        raise BenchError(
            f"{run.run_dir} was trained with other settings ({'; '.join(diffs[:5])}"
            f"{'; ...' if len(diffs) > 5 else ''}); rerun with the same preset and options, or pass another --out"
        )


TrainFn = Callable[..., Any]


def _default_train_fn(config: TrainConfig, resume: bool) -> Any:
    from wmrl.training import trainer  # noqa: PLC0415 - heavy (torch)

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
) -> dict[str, Path]:
    """Run (or resume) the whole bench, then write the table and plot. Returns the output paths.

    ``train_fn(config, resume: bool)`` trains one run; default :func:`wmrl.training.trainer.run_training`.
    A run that raises is logged, left as it is (resumable if it checkpointed) and the bench goes on
    with the next one; the table is written from the runs that finished and says which are missing.

    Raises:
        BenchError: a run folder holds a run with other settings (see :func:`check_existing`).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runs = plan(preset, out, seeds, steps, methods, overrides)
    for r in runs:
        check_existing(r)
    meta = _bench_meta(preset, runs, command, out)
    (out / "bench.json").write_text(json.dumps(meta, indent=2, default=str), encoding="utf-8")
    train = train_fn or _default_train_fn
    log = log or (lambda msg: print(msg, flush=True))
    if any(_uses_world_model(r.method) for r in runs):
        meta["corpus"] = ensure_corpus(preset, out, log, overrides=list(overrides))
        (out / "bench.json").write_text(json.dumps(meta, indent=2, default=str), encoding="utf-8")
    failures: list[str] = []
    t0 = time.time()
    for i, r in enumerate(runs, 1):
        _run_one(r, f"[{i}/{len(runs)}] {r.method} seed {r.seed}", train, failures, log, t0)
        if i < len(runs) and runs[i].seed != r.seed:
            # A table after every complete seed, so an interrupted bench still has one.
            try:
                write_outputs(out)
                log(f"seed {r.seed} done: table so far in {out / 'bench.md'}")
            except BenchError:
                pass
    meta["finished_at"] = _now()
    meta["failures"] = failures
    (out / "bench.json").write_text(json.dumps(meta, indent=2, default=str), encoding="utf-8")
    if failures and all(run_state(r.run_dir) != "finished" for r in runs):
        raise BenchError(f"all {len(runs)} planned runs failed (the first: {failures[0]}); every failure is in "
                         f"{out / 'bench.json'}")
    return write_outputs(out)


def _run_one(r: PlannedRun, tag: str, train: TrainFn, failures: list[str], log: Callable[[str], None],
             t0: float) -> None:
    """Train, resume or skip one planned run (see :func:`run_bench`); failures are appended, not raised."""
    state = run_state(r.run_dir)
    if state == "finished":
        log(f"{tag}: finished earlier, skipped")
        return
    if state == "partial":
        # Started but never checkpointed: nothing to resume; start again from scratch.
        shutil.rmtree(r.run_dir)
    resume = state == "resumable"
    log(f"{tag}: {'resuming' if resume else 'training'} -> {r.run_dir} ({time.time() - t0:.0f} s into the bench)")
    r.run_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        train(r.config, resume)
    except KeyboardInterrupt:
        log(f"{tag}: interrupted; rerun the same command to resume")
        raise
    except Exception as exc:  # noqa: BLE001 - one broken run must not lose the others
        failures.append(f"{r.method} seed {r.seed}: {type(exc).__name__}: {exc}")
        log(f"{tag}: FAILED: {type(exc).__name__}: {exc}")


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _bench_meta(preset: Preset, runs: list[PlannedRun], command: str, out: Path) -> dict[str, Any]:
    from wmrl.report.machine import machine_info  # noqa: PLC0415

    old = {}
    if (out / "bench.json").is_file():
        try:
            old = json.loads((out / "bench.json").read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            old = {}
    cfg0 = runs[0].config
    # Several invocations on one folder (e.g. first `--methods grpo,wmrl --seeds 2`, then the rest) add up.
    # Paths relative to the bench folder (and the preset's to the repository when inside it), so a
    # committed bench.json names no machine's absolute paths.
    planned = {r["run_dir"]: r for r in old.get("runs", [])}
    for r in runs:
        rel = str(Path(r.run_dir).relative_to(out))
        planned[rel] = {"method": r.method, "seed": r.seed, "run_dir": rel}
    order = {m: i for i, m in enumerate(METHODS)}
    all_runs = sorted(planned.values(), key=lambda r: (r["seed"], order.get(r["method"], 99)))
    return {
        "preset": preset.name,
        "preset_path": _repo_relative(preset.path) if preset.path else None,
        "description": preset.description,
        "backbone_note": preset.backbone_note,
        "methods": sorted({r["method"] for r in all_runs}, key=lambda m: order.get(m, 99)),
        "seeds": sorted({r["seed"] for r in all_runs}),
        "steps": cfg0.optim.steps,
        "model": cfg0.model.name,
        "scaffold": cfg0.scaffold.name,
        "train_tasks": cfg0.tasks.train,
        "heldout_tasks": cfg0.tasks.heldout,
        "rollout": {"tasks_per_step": cfg0.rollout.tasks_per_step, "group_size": cfg0.rollout.group_size},
        "anchor_fraction": cfg0.wmrl.anchor_fraction,
        "command": command,
        "commands": list(dict.fromkeys((old.get("commands") or []) + ([command] if command else []))),
        "machine": machine_info(),
        "started_at": old.get("started_at") or _now(),
        "runs": all_runs,
        "corpus": old.get("corpus"),
    }


def _repo_relative(p: Path) -> str:
    root = preset_dir().parents[1]
    try:
        return str(Path(p).resolve().relative_to(root))
    except ValueError:
        return str(p)


# ---------------------------------------------------------------------------------------------
# collecting results


def collect(out: str | Path) -> pd.DataFrame:
    """One row per finished run of the bench in ``out`` (``OUT/<method>/seed<k>/summary.json``).

    Columns (units): ``method``, ``seed``, ``heldout_percentile`` and ``heldout_valid_rate``
    (final held-out evaluation, [0, 1]), ``initial_percentile`` (held-out evaluation of the initial
    policy, step 0, when the run made one), ``train_executions`` (anchor + warm-up executions),
    ``train_sandbox_cpu_s`` (CPU-seconds of those executions), ``train_compute_cpu_s`` (trainer CPU +
    training sandbox CPU), ``eval_compute_cpu_s``, ``total_cpu_s`` (train + eval compute),
    ``wall_s`` (the run's wall seconds, evaluation included), ``steps``, ``anchor_fraction``,
    ``train_percentile`` and ``initial_train_percentile`` (the final and the initial policy on the train
    tasks, in distribution, when evaluated: see :func:`_eval_at`), ``corpus_cpu_s`` (the compute of the
    bench's shared warm-up corpus, paid once per bench, for the runs that fit on it; 0 otherwise), and the
    per-unit costs of :func:`_unit_costs` (to tell work from measurement noise on a shared machine),
    and the world model's quality on the training anchors (:func:`world_model_quality`).
    Unfinished runs are left out (they appear in :func:`missing_runs`).
    """
    from wmrl.report.runs import load_run, train_executions  # noqa: PLC0415

    corpus_json = corpus_log(out).parent / "corpus.json"
    corpus = json.loads(corpus_json.read_text(encoding="utf-8")) if corpus_json.is_file() else None
    rows = []
    for rd in sorted(Path(out).glob("*/seed*")):
        if not (rd / "summary.json").is_file() or rd.parent.name not in METHODS:
            continue
        run = load_run(rd)
        tot = run.totals()
        ev = run.final_eval("heldout") or {}
        ex = (run.ledger or {}).get("executions") or {}
        sbx = sum(float((ex.get(k) or {}).get("sandbox_cpu_s") or 0.0) for k in ("anchor", "warmup"))
        train_c = tot.get("train_compute_cpu_s")
        eval_c = tot.get("eval_compute_cpu_s")
        n_steps = int(run.metrics["step"].max()) if not run.metrics.empty else 0
        init = _eval_at(run, "heldout", 0)
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
            "train_compute_cpu_s": train_c,
            "eval_compute_cpu_s": eval_c,
            "total_cpu_s": (train_c or 0.0) + (eval_c or 0.0) if train_c is not None else None,
            "wall_s": tot.get("wall_s"),
            "steps": n_steps,
            "anchor_fraction": ((run.ledger or {}).get("groups") or {}).get("anchor_fraction"),
            "corpus_cpu_s": corpus["compute_cpu_s"] if corpus and _uses_world_model(rd.parent.name) else 0.0,
            **_unit_costs(run),
            **world_model_quality(run),
        })
    cols = ["method", "seed", "heldout_percentile", "initial_percentile", "heldout_valid_rate", "heldout_samples",
            "train_percentile", "initial_train_percentile", "train_executions",
            "train_sandbox_cpu_s", "train_compute_cpu_s", "eval_compute_cpu_s", "total_cpu_s", "wall_s",
            "steps", "anchor_fraction", "corpus_cpu_s", "train_samples", "gen_cpu_s_per_sample", "sandbox_cpu_s_per_execution",
            "update_cpu_s_per_step", *WM_QUALITY_COLUMNS]
    df = pd.DataFrame(rows, columns=cols)
    order = {m: i for i, m in enumerate(METHODS)}
    if not df.empty:
        df = df.sort_values(["method", "seed"], key=lambda s: s.map(order) if s.name == "method" else s)
    return df.reset_index(drop=True)


def _eval_at(run: Any, split: str, step: int) -> dict[str, Any]:
    """The last evaluation record of ``split`` at ``step``: from the trainer (``eval.jsonl``), else from
    ``wmrl eval`` (``eval_cli.jsonl``: ``--checkpoint initial`` for step 0, the final checkpoint for the
    last step; ``--train-tasks`` evaluates the train tasks of a run that did not). ``{}`` when none."""
    from wmrl.training.rundir import read_jsonl  # noqa: PLC0415

    recs = [] if run.evals.empty else run.evals.to_dict("records")
    recs += read_jsonl(Path(run.path) / "eval_cli.jsonl")
    hits = [r for r in recs if r.get("split") == split and r.get("step") == step]
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
    gen = float((stages.get("generate") or {}).get("cpu_s") or 0.0) + float((phases.get("warmup") or {}).get("cpu_s") or 0.0)
    n_exec = sum(int((ex.get(k) or {}).get("count") or 0) for k in ("anchor", "warmup"))
    sbx = sum(float((ex.get(k) or {}).get("sandbox_cpu_s") or 0.0) for k in ("anchor", "warmup"))
    upd = float((stages.get("update") or {}).get("cpu_s") or 0.0)
    return {
        "train_samples": samples,
        "gen_cpu_s_per_sample": gen / samples if samples else None,
        "sandbox_cpu_s_per_execution": sbx / n_exec if n_exec else None,
        "update_cpu_s_per_step": upd / n_steps if n_steps else None,
    }


WM_QUALITY_COLUMNS = ("wm_anchor_pairs", "wm_spearman", "wm_pairwise_accuracy", "debias_sq_err_ratio", "alpha_mean")


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
    - ``debias_sq_err_ratio``: out-of-sample effect of the isotonic debiasing (DESIGN.md §3): over the
      steps whose map was fitted (``calibration.jsonl``, mode not ``identity``), sum (f_hat(r_hat) - r)^2
      / sum (r_hat - r)^2 on that step's anchors, which the map had not seen (fitted on earlier steps
      only). < 1: the debiasing brought the world model closer to the truth. NaN without debiasing.
    - ``alpha_mean``: mean over steps of the fused weight of the anchor gradient (``metrics.jsonl``).
    """
    from wmrl.world_model.metrics import world_model_metrics  # noqa: PLC0415
    from wmrl.training.rundir import read_jsonl  # noqa: PLC0415

    nan = math.nan
    out: dict[str, float | int] = {"wm_anchor_pairs": 0, "wm_spearman": nan, "wm_pairwise_accuracy": nan,
                                   "debias_sq_err_ratio": nan, "alpha_mean": nan}
    pairs = [r for r in read_jsonl(Path(run.path) / "samples.jsonl")
             if r.get("stream") == "anchor" and _finite_num(r.get("reward_true")) and _finite_num(r.get("reward_wm"))]
    if pairs:
        q = world_model_metrics([r["reward_wm"] for r in pairs], [r["reward_true"] for r in pairs],
                                [(r["step"], r["group"]) for r in pairs])
        out.update(wm_anchor_pairs=len(pairs), wm_spearman=q["spearman"], wm_pairwise_accuracy=q["pairwise_accuracy"])
    raw = cal = 0.0
    for rec in run.calibration:
        if rec.get("mode") in (None, "identity") or not rec.get("anchor_true"):
            continue
        t = np.asarray(rec["anchor_true"], dtype=np.float64)
        raw += float(np.sum((np.asarray(rec["anchor_wm"], dtype=np.float64) - t) ** 2))
        cal += float(np.sum((np.asarray(rec["anchor_wm_calibrated"], dtype=np.float64) - t) ** 2))
    if raw > 0:
        out["debias_sq_err_ratio"] = cal / raw
    if "alpha" in run.metrics and run.method not in (REFERENCE, "wm"):
        a = pd.to_numeric(run.metrics["alpha"], errors="coerce")
        if a.notna().any():
            out["alpha_mean"] = float(a.mean())
    return out


def _finite_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def world_model_table(results: pd.DataFrame) -> pd.DataFrame:
    """Per method with world-model data: mean ± SE over seeds of :func:`world_model_quality`'s columns
    (strings, ready for Markdown/HTML). Empty when no run has anchors scored by a world model."""
    from wmrl.report.stats import mean_se  # noqa: PLC0415

    rows = []
    for method, g in results.groupby("method", sort=False):
        if not (pd.to_numeric(g.get("wm_anchor_pairs"), errors="coerce") > 0).any():
            continue
        rows.append({
            "method": method,
            "anchor pairs": _num(float(pd.to_numeric(g["wm_anchor_pairs"]).mean()), 0),
            "Spearman(r_hat, r)": mean_se(list(g["wm_spearman"])).fmt(2),
            "pairwise accuracy in groups": mean_se(list(g["wm_pairwise_accuracy"])).fmt(2),
            "debiased / raw squared error": mean_se(list(g["debias_sq_err_ratio"])).fmt(2),
            "mean alpha": mean_se(list(g["alpha_mean"])).fmt(2),
        })
    return pd.DataFrame(rows)


WM_TABLE_HELP = (
    "The world model on the training anchors (programs both scored and executed), per run, then mean ± SE "
    "over seeds. Spearman and pairwise accuracy (within groups, chance = 0.5) use the raw prediction r_hat. "
    "Debiased / raw squared error: on each step's anchors, with the isotonic map fitted on earlier steps only "
    "(out of sample); < 1 means the debiasing helped (n/a without debiasing). Mean alpha: the fused weight "
    "of the anchor gradient. `wm` has no anchors, so it has no row."
)


def missing_runs(out: str | Path) -> list[str]:
    """``"<method> seed <k>"`` for every planned run of ``out/bench.json`` without ``summary.json``."""
    meta_path = Path(out) / "bench.json"
    if not meta_path.is_file():
        return []
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    return [f"{r['method']} seed {r['seed']}" for r in meta.get("runs", [])
            if not (Path(out) / r["run_dir"] / "summary.json").is_file()]


@dataclass
class MethodRow:
    """Aggregated numbers of one method over seeds (see :func:`bench_table`)."""

    method: str
    n: int
    percentile: Any
    paired: Any | None
    valid_rate: Any
    executions: float
    sandbox_cpu_h: float
    train_cpu_h: float
    total_cpu_h: float
    wall_h: float
    compute_ratio: float | None
    train_percentile: Any = None
    train_paired: Any | None = None
    train_gain: Any | None = None
    compute_ratio_corpus: float | None = None
    notes: list[str] = field(default_factory=list)


def aggregate(results: pd.DataFrame, reference: str = REFERENCE) -> list[MethodRow]:
    """Per-method aggregates over seeds of :func:`collect`'s rows.

    ``percentile``: mean ± SE (over seeds) of the final held-out mean leaderboard percentile.
    ``paired``: mean ± SE over seeds of (method - reference) on the seeds both finished.
    ``train_percentile``, ``train_paired``: the same on the train tasks; ``train_gain``: mean ± SE over
    seeds of (final - initial) train-task percentile, paired by seed (the initial policy is the seed's).
    ``compute_ratio``: mean training compute of the method / that of the reference (CPU-seconds of
    trainer + training sandbox; < 1 means cheaper); ``compute_ratio_corpus``: the same with the shared
    warm-up corpus (``corpus_cpu_s``) charged in full to every run that used it. Resource columns are
    means per seed (hours).
    """
    from wmrl.report.stats import mean_se, paired_difference  # noqa: PLC0415

    if results.empty:
        return []
    ref = results[results["method"] == reference]
    ref_pct = dict(zip(ref["seed"], ref["heldout_percentile"]))
    ref_train = dict(zip(ref["seed"], ref["train_percentile"]))
    train_gains = gains_vs_initial(results, "train_percentile", "initial_train_percentile")
    ref_compute = float(pd.to_numeric(ref["train_compute_cpu_s"], errors="coerce").mean()) if not ref.empty else math.nan
    rows = []
    for method, g in results.groupby("method", sort=False):
        pct = mean_se(list(g["heldout_percentile"]))
        paired = None
        if method != reference and ref_pct:
            paired = paired_difference(dict(zip(g["seed"], g["heldout_percentile"])), ref_pct)

        def mean(col: str, scale: float = 1.0) -> float:
            v = pd.to_numeric(g[col], errors="coerce")
            return float(v.mean()) / scale if v.notna().any() else math.nan

        tc = mean("train_compute_cpu_s")
        ok_ref = bool(ref_compute and math.isfinite(ref_compute) and ref_compute > 0)
        ratio = tc / ref_compute if ok_ref else None
        corpus = mean("corpus_cpu_s") if "corpus_cpu_s" in g else 0.0
        ratio_corpus = (tc + corpus) / ref_compute if ok_ref and math.isfinite(corpus) else None
        train_by_seed = dict(zip(g["seed"], g["train_percentile"]))
        train_paired = (paired_difference(train_by_seed, ref_train) if method != reference and ref_train
                        else None)
        train_gain = train_gains.get(method)
        rows.append(MethodRow(
            method=str(method), n=len(g), percentile=pct, paired=paired,
            valid_rate=mean_se(list(g["heldout_valid_rate"])),
            executions=mean("train_executions"), sandbox_cpu_h=mean("train_sandbox_cpu_s", 3600.0),
            train_cpu_h=tc / 3600.0, total_cpu_h=mean("total_cpu_s", 3600.0), wall_h=mean("wall_s", 3600.0),
            compute_ratio=ratio, train_percentile=mean_se(list(g["train_percentile"])),
            train_paired=train_paired if train_paired is not None and train_paired.n else None,
            train_gain=train_gain if train_gain is not None and train_gain.n else None,
            compute_ratio_corpus=ratio_corpus,
        ))
    return rows


INITIAL = "initial policy (step 0)"


def initial_row(results: pd.DataFrame, reference: str = REFERENCE) -> MethodRow | None:
    """The held-out percentile of the initial policy (step-0 evaluations), one value per seed, and
    its paired difference to the reference's final policy (initial - reference, so a negative value
    means the reference improved on the initial policy). ``None`` when no run evaluated step 0."""
    from wmrl.report.stats import mean_se, paired_difference  # noqa: PLC0415

    if results.empty or "initial_percentile" not in results:
        return None
    per_seed = results.dropna(subset=["initial_percentile"]).groupby("seed")["initial_percentile"].first()
    if per_seed.empty:
        return None
    ref = results[results["method"] == reference]
    paired = paired_difference(per_seed.to_dict(), dict(zip(ref["seed"], ref["heldout_percentile"])))
    nan = math.nan
    train0 = results.dropna(subset=["initial_train_percentile"]).groupby("seed")["initial_train_percentile"].first()
    return MethodRow(method=INITIAL, n=len(per_seed), percentile=mean_se(list(per_seed)),
                     paired=paired if paired.n else None, valid_rate=mean_se([]), executions=nan,
                     sandbox_cpu_h=nan, train_cpu_h=nan, total_cpu_h=nan, wall_h=nan, compute_ratio=None,
                     train_percentile=mean_se(list(train0)))


def _ratio(r: float | None) -> str:
    if r is None:
        return ""
    return f"{r:.2f}x" + (f" ({1 / r:.1f}x less)" if 0 < r < 1 else "")


def bench_table(rows: Sequence[MethodRow], reference: str = REFERENCE) -> pd.DataFrame:
    """The bench table (strings, ready for Markdown/HTML), one row per method.

    Columns: ``method``, ``seeds``, ``train-task percentile`` (final, mean ± SE), ``train Δ vs initial``
    (paired by seed, mean ± SE), ``train Δ vs grpo`` (paired), ``held-out percentile`` (mean ± SE),
    ``held-out Δ vs grpo (paired)``, ``valid rate``, ``real executions`` (training, per seed),
    ``sandbox CPU-h`` (training executions, per seed), ``train compute CPU-h`` (trainer + sandbox),
    ``total CPU-h`` (training + evaluation), ``wall h``, ``compute vs grpo`` (ratio of training compute)
    and, when the bench shared a warm-up corpus, ``compute vs grpo, corpus charged`` (with its cost
    charged in full to every run). The train-task columns appear when the train tasks were evaluated.
    """
    def fmt(x: Any, dash: bool = False) -> str:
        return "—" if dash else (x.fmt(3) if x is not None and x.n else "n/a")

    out = []
    for r in rows:
        is_ref, is_init = r.method == reference, r.method == INITIAL
        out.append({
            "method": r.method,
            "seeds": r.n,
            "train-task percentile": fmt(r.train_percentile),
            "train Δ vs initial": "" if is_init else fmt(r.train_gain),
            f"train Δ vs {reference}": "" if is_init else fmt(r.train_paired, dash=is_ref),
            "held-out percentile": r.percentile.fmt(3),
            f"held-out Δ vs {reference} (paired)": fmt(r.paired, dash=is_ref),
            "valid rate": "" if is_init else r.valid_rate.fmt(2),
            "real executions": "0" if is_init else _num(r.executions, 0),
            "sandbox CPU-h": "" if is_init else _num(r.sandbox_cpu_h, 3),
            "train compute CPU-h": "" if is_init else _num(r.train_cpu_h, 3),
            "total CPU-h": "" if is_init else _num(r.total_cpu_h, 3),
            "wall h": "" if is_init else _num(r.wall_h, 3),
            f"compute vs {reference}": "" if is_init else ("1.00x" if is_ref else _ratio(r.compute_ratio)),
            f"compute vs {reference}, corpus charged": "" if is_init else _ratio(r.compute_ratio_corpus),
        })
    df = pd.DataFrame(out)
    if not any(r.train_percentile is not None and r.train_percentile.n for r in rows):
        df = df.drop(columns=["train-task percentile", "train Δ vs initial", f"train Δ vs {reference}"])
    if all(r.compute_ratio_corpus is None or r.compute_ratio_corpus == r.compute_ratio for r in rows
           if r.method != INITIAL):
        df = df.drop(columns=[f"compute vs {reference}, corpus charged"])
    return df


def _num(x: float, digits: int) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def overlap_notes(rows: Sequence[MethodRow], reference: str = REFERENCE,
                  methods: Sequence[str] | None = None) -> list[str]:
    """Plain-language notes comparing each method's held-out percentile with the reference's.

    Says whether the ``mean ± SE`` intervals overlap (then the bench does not separate the two
    methods at this number of seeds) and whether the paired difference is more than two paired
    SEs from zero.
    """
    from wmrl.report.stats import intervals_overlap  # noqa: PLC0415

    ref = next((r for r in rows if r.method == reference), None)
    if ref is None:
        return [f"No finished {reference} run: the relative columns are empty."]
    notes = []
    for r in rows:
        if r.method == reference or (methods is not None and r.method not in methods):
            continue
        ov = intervals_overlap(r.percentile, ref.percentile)
        s = (f"{r.method} vs {reference}: held-out percentile {r.percentile.fmt(3)} vs {ref.percentile.fmt(3)}; "
             + ("standard errors OVERLAP, so this bench does not separate them" if ov
                else "standard errors do not overlap"))
        if r.paired is not None and r.paired.n >= 2 and math.isfinite(r.paired.se):
            z = r.paired.mean / r.paired.se if r.paired.se > 0 else (math.inf if r.paired.mean != 0 else 0.0)
            s += (f"; paired difference {r.paired.fmt(3)} over {r.paired.n} seeds "
                  + ("is more than 2 SE from zero" if abs(z) > 2 else "is within 2 SE of zero"))
        elif r.paired is not None:
            s += f"; paired difference {r.paired.fmt(3)} from {r.paired.n} seed(s), SE undefined"
        notes.append(s + ".")
    return notes


def gains_vs_initial(results: pd.DataFrame, final: str, initial: str) -> dict[str, Any]:
    """Per method, the paired difference over seeds of (column ``final`` - the seed's ``initial``
    percentile; the step-0 evaluation is made once per seed and shared by its methods), as
    :func:`wmrl.report.stats.paired_difference` (mean ± SE); ``{}`` when no run evaluated step 0."""
    from wmrl.report.stats import paired_difference  # noqa: PLC0415

    if results.empty or results[initial].isna().all():
        return {}
    init = results.dropna(subset=[initial]).groupby("seed")[initial].first().to_dict()
    return {str(m): paired_difference(dict(zip(g["seed"], g[final])), init)
            for m, g in results.groupby("method", sort=False)}


def learning_notes(results: pd.DataFrame) -> list[str]:
    """Did each method improve on the initial policy? Per method and evaluation (held-out tasks, and the
    train tasks when evaluated), the paired difference over seeds of (final percentile - the seed's
    step-0 percentile), and whether it is more than two SEs from zero, in which direction. Empty when no
    step-0 evaluation exists."""
    notes = []
    for where, final, initial in (("held-out", "heldout_percentile", "initial_percentile"),
                                  ("train-task", "train_percentile", "initial_train_percentile")):
        for method, d in gains_vs_initial(results, final, initial).items():
            if d.n == 0:
                continue
            if d.n >= 2 and math.isfinite(d.se):
                resolved = d.se == 0 and d.mean != 0 or d.se > 0 and abs(d.mean / d.se) > 2
                verdict = ((f"more than 2 SE {'above' if d.mean > 0 else 'below'} zero: the policy got "
                            f"{'better' if d.mean > 0 else 'worse'}") if resolved
                           else "within 2 SE of zero: no change resolved")
            else:
                verdict = "one seed, SE undefined"
            notes.append(f"{method} vs the initial policy: {where} change {d.fmt(3)} over {d.n} seed(s), {verdict}.")
    return notes


# ---------------------------------------------------------------------------------------------
# curves and outputs


def _step0_compute(m: pd.DataFrame) -> float:
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
    from wmrl.report.runs import load_run  # noqa: PLC0415

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
        step_to_c[0] = _step0_compute(m) / 3600.0
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


def fig_curves(train: dict[str, list], held: dict[str, list]) -> Any | None:
    """Two panels: true training reward against compute, and held-out percentile against compute.

    Colours are fixed per method (in :data:`METHODS` order); thin lines are seeds, thick lines the
    seed average with a band of ± one standard error over seeds (left: on a common compute grid, each
    seed smoothed by a centred rolling mean over a sixth of its steps; right: per evaluation, at the
    mean compute).
    """
    if not any(train.values()) and not any(held.values()):
        return None
    from wmrl.report.plots import _plt, color_for, finish_axes  # noqa: PLC0415

    plt = _plt()
    fig, (ax_t, ax_h) = plt.subplots(1, 2, figsize=(13, 4.8))
    idx = {m: i for i, m in enumerate(METHODS)}
    for method, seeds in train.items():
        c = color_for(idx[method])
        good = []
        for x, y in seeds:
            ok = np.isfinite(x) & np.isfinite(y)
            if ok.sum() == 0:
                continue
            ax_t.plot(x[ok], y[ok], color=c, alpha=0.2, lw=0.8)
            w = max(1, int(ok.sum()) // 6)
            ys = pd.Series(y[ok]).rolling(w, min_periods=1, center=True).mean().to_numpy()
            good.append((x[ok], ys))
        if not good:
            continue
        lo = max(g[0].min() for g in good)
        hi = min(g[0].max() for g in good)
        if hi > lo:
            grid = np.linspace(lo, hi, 60)
            ys_grid = np.array([np.interp(grid, gx, gy) for gx, gy in good])
            avg = ys_grid.mean(axis=0)
            ax_t.plot(grid, avg, color=c, lw=2.4, label=f"{method} ({len(good)} seeds)")
            if len(good) > 1:
                se = ys_grid.std(axis=0, ddof=1) / math.sqrt(len(good))
                ax_t.fill_between(grid, avg - se, avg + se, color=c, alpha=0.18, lw=0)
        else:
            ax_t.plot(good[0][0], good[0][1], color=c, lw=2.4, label=f"{method} ({len(good)} seeds)")
    for method, seeds in held.items():
        c = color_for(idx[method])
        for x, y in seeds:
            ax_h.plot(x, y, "o-", color=c, alpha=0.25, lw=0.8, ms=3)
        n = min(len(x) for x, _ in seeds)
        xs = np.nanmean([x[:n] for x, _ in seeds], axis=0)
        ys_all = np.array([y[:n] for _, y in seeds])
        ys = np.nanmean(ys_all, axis=0)
        ax_h.plot(xs, ys, "o-", color=c, lw=2.4, label=f"{method} ({len(seeds)} seeds)")
        if len(seeds) > 1:
            se = np.nanstd(ys_all, axis=0, ddof=1) / math.sqrt(len(seeds))
            ax_h.fill_between(xs, ys - se, ys + se, color=c, alpha=0.18, lw=0)
    ax_t.set_title("true reward of executed training trajectories\n(grpo: all groups; wmrl: anchors; wm: none)", fontsize=10)
    ax_t.set_ylabel("leaderboard percentile")
    ax_h.set_title("held-out mean leaderboard percentile (real execution)", fontsize=10)
    return finish_axes(fig, (ax_t, ax_h), "training compute so far (CPU-hours: trainer + sandbox)")


def write_outputs(out: str | Path) -> dict[str, Path]:
    """Write ``results.csv``, ``table.csv``, ``bench.md``, ``bench.html`` and
    ``reward_vs_compute.png`` for the bench in ``out`` from the runs finished so far.

    Raises:
        BenchError: ``out`` holds no finished run.
    """
    from wmrl.report import html as H  # noqa: PLC0415
    from wmrl.report.html import figure_to_data_uri  # noqa: PLC0415
    from wmrl.report.machine import machine_line  # noqa: PLC0415

    out = Path(out)
    results = collect(out)
    if results.empty:
        raise BenchError(f"{out}: no finished bench run (no <method>/seed<k>/summary.json); run `wmrl bench` first")
    meta = json.loads((out / "bench.json").read_text(encoding="utf-8")) if (out / "bench.json").is_file() else {}
    rows = aggregate(results)
    init = initial_row(results)
    table = bench_table(rows + ([init] if init else []))
    wm_table = world_model_table(results)
    notes = overlap_notes(rows)
    if any(r.method == "wmrl" for r in rows):
        ablations = [m for m in ("wm", "wmrl-no-debias", "wmrl-no-denoise", "wmrl-ppi") if m in set(results["method"])]
        if ablations:
            notes += overlap_notes(aggregate(results, reference="wmrl"), reference="wmrl", methods=ablations)
    notes += learning_notes(results)
    missing = missing_runs(out)
    results.to_csv(out / "results.csv", index=False)
    table.to_csv(out / "table.csv", index=False)
    train, held = curves(out)
    fig = fig_curves(train, held)
    png = out / "reward_vs_compute.png"
    uri = None
    if fig is not None:
        fig.savefig(png, dpi=110, bbox_inches="tight")
        uri = figure_to_data_uri(fig)

    machine = meta.get("machine")
    mline = machine_line(machine) if machine else machine_line()
    cmds = meta.get("commands") or ([meta["command"]] if meta.get("command") else [])
    setting = (
        f"preset `{meta.get('preset', '?')}`; methods {', '.join(meta.get('methods', []))}; seeds "
        f"{meta.get('seeds')}; {meta.get('steps')} steps of {meta.get('rollout', {}).get('tasks_per_step')} tasks x "
        f"{meta.get('rollout', {}).get('group_size')} samples; anchor fraction {meta.get('anchor_fraction')}; "
        f"model `{meta.get('model')}`, scaffold `{meta.get('scaffold')}`; train tasks {meta.get('train_tasks')}; "
        f"held-out tasks {meta.get('heldout_tasks')}."
    )
    legend = [f"- `{m}`: {get_recipe(m).help}" for m in meta.get("methods", []) if m in METHODS]
    cols_help = (
        "Train-task percentile (when evaluated): the final policy's mean leaderboard percentile (MLE-Dojo position "
        "score, [0, 1]) over the tasks it was trained on and the same samples per task, executed for real; mean ± "
        "standard error over seeds. Train Δ vs initial: mean ± SE over seeds of the per-seed (final - initial) "
        "difference. Train Δ vs grpo, held-out Δ vs grpo: mean ± SE over seeds of the per-seed difference to grpo. "
        "Held-out percentile: the same on tasks never trained on. Real executions, sandbox CPU-h: training "
        "executions (anchors + a run's own world-model warm-up), per seed. Train compute: trainer-process CPU + "
        "training sandbox CPU, per seed. Total CPU-h adds evaluation. Wall h: the run's wall time including "
        "evaluation. Compute vs grpo: ratio of mean training compute; 'corpus charged' adds the shared warm-up "
        "corpus's whole cost to every run that used it. The initial-policy row (when the preset evaluates step 0) is "
        "the seeded policy before any training, the same for every method of a seed; its held-out Δ is initial - "
        "grpo final."
    )
    corpus = meta.get("corpus")
    corpus_line = "" if not corpus else (
        f"**Shared warm-up corpus.** {corpus['executions']} programs ({corpus['samples_per_task']} per train task, in "
        f"groups of {corpus['group_size']}) sampled from the initial policy of seed {corpus['seed']} and executed once "
        f"for the whole bench: {corpus['compute_cpu_s']:.0f} CPU-s ({corpus['sandbox_cpu_s']:.0f} in the sandbox), "
        f"{corpus['wall_s']:.0f} s wall. Every world-model run fits on it and refits on its own anchors; its cost is "
        f"not in a run's train compute (see 'corpus charged').")
    md = [f"# wmrl bench: {meta.get('preset', out.name)}", ""]
    if meta.get("description"):
        md += [meta["description"], ""]
    if meta.get("backbone_note"):
        md += [f"**Backbone and scaffold.** {meta['backbone_note']}", ""]
    md += [f"**Setting.** {setting}", "", f"**Machine.** {mline}", ""]
    if corpus_line:
        md += [corpus_line, ""]
    md += ["**Command.**", "", "```bash", *cmds, "```", ""]
    md += [H.table_markdown(table), "", cols_help, ""]
    md += ["**Methods.**", "", *legend, ""]
    if not wm_table.empty:
        md += ["**World model on the training anchors.**", "", H.table_markdown(wm_table), "", WM_TABLE_HELP, ""]
    md += ["**Standard errors.**", "", *[f"- {n}" for n in notes], ""]
    if missing:
        md += [f"**Not finished** (left out of the table): {', '.join(missing)}.", ""]
    if meta.get("failures"):
        md += ["**Failed runs:**", "", *[f"- {f}" for f in meta["failures"]], ""]
    if fig is not None:
        md += [f"![reward against compute]({png.name})", ""]
    md += [f"Per-run numbers: `results.csv`. Generated {_now()}."]
    (out / "bench.md").write_text("\n".join(md) + "\n", encoding="utf-8")

    parts = []
    if meta.get("description"):
        parts.append(H.paragraph(meta["description"]))
    if meta.get("backbone_note"):
        parts.append(f"<p><b>Backbone and scaffold.</b> {H.esc(meta['backbone_note'])}</p>")
    parts.append(f"<p><b>Setting.</b> {H.esc(setting)}</p><p><b>Machine.</b> {H.esc(mline)}</p>")
    if corpus_line:
        parts.append(H.paragraph(corpus_line.replace("**", "")))
    parts.append("<p><b>Command.</b></p>" + H.pre("\n".join(cmds)))
    parts.append(H.table_html(table) + H.paragraph(cols_help, "note"))
    parts.append("<ul>" + "".join(f"<li><code>{H.esc(m)}</code>: {H.esc(get_recipe(m).help)}</li>"
                                  for m in meta.get("methods", []) if m in METHODS) + "</ul>")
    if not wm_table.empty:
        parts.append("<p><b>World model on the training anchors.</b></p>" + H.table_html(wm_table)
                     + H.paragraph(WM_TABLE_HELP, "note"))
    parts.append("<p><b>Standard errors.</b></p><ul>" + "".join(f"<li>{H.esc(n)}</li>" for n in notes) + "</ul>")
    if missing:
        parts.append(H.paragraph(f"Not finished (left out of the table): {', '.join(missing)}.", "warn"))
    if meta.get("failures"):
        parts.append(H.paragraph("Failed runs: " + "; ".join(meta["failures"]), "warn"))
    if uri:
        parts.append(f'<img alt="reward against compute" src="{uri}">')
    parts.append(H.details("per-run numbers", H.table_html(results)))
    (out / "bench.html").write_text(H.render_page(f"wmrl bench: {meta.get('preset', out.name)}", parts),
                                    encoding="utf-8")
    paths = {"markdown": out / "bench.md", "html": out / "bench.html", "results": out / "results.csv",
             "table": out / "table.csv"}
    if fig is not None:
        paths["plot"] = png
    return paths

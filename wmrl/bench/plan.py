"""The method matrix of a bench: one :class:`PlannedRun` per (seed, method), each a normal run directory
``OUT/<method>/seed<k>`` with its train config; the state of a planned run on disk, and the refusal to
mix runs of other settings into one bench folder.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from wmrl.bench.corpus import corpus_log
from wmrl.bench.presets import METHODS, BenchError, Preset, method_config
from wmrl.report.bench_results import uses_world_model
from wmrl.runs.config import migrate_keys
from wmrl.training.config import TrainConfig, config_to_dict


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
            shared = [f"world_model.warmup_corpus={corpus_log(out)}"] if preset.corpus and uses_world_model(m) else []
            runs.append(PlannedRun(m, s, rd, method_config(preset, m, s, rd, shared + ov)))
    return runs


def run_state(run_dir: Path) -> str:
    """``"finished"`` (summary.json), ``"resumable"`` (a complete checkpoint the trainer would resume
    from: :meth:`wmrl.runs.rundir.RunDir.resume_candidates`, so a broken ``latest`` falls back to an
    earlier complete one as ``--resume`` does), ``"partial"`` (the folder exists without either) or
    ``"new"``."""
    from wmrl.runs.rundir import RunDir  # noqa: PLC0415

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
            the differing keys and says to use another ``--out`` or the same options as before); a key given
            there under a name renamed since is compared under its new name.
    """
    cfg_path = run.run_dir / "config.yaml"
    if not cfg_path.is_file():
        return
    saved = migrate_keys(TrainConfig, yaml.safe_load(cfg_path.read_text(encoding="utf-8")) or {})  # keys renamed since
    diffs = _config_mismatch(saved, config_to_dict(run.config))
    if diffs:
        raise BenchError(
            f"{run.run_dir} was trained with other settings ({'; '.join(diffs[:5])}"
            f"{'; ...' if len(diffs) > 5 else ''}); rerun with the same preset and options, or pass another --out"
        )

"""Bench presets: the shipped ``NAME.yaml`` (package data in ``wmrl/bench/configs/``, read with
:mod:`importlib.resources`, so an installed wheel has them) or any path, loaded and validated, and the train
config of one (method, seed) under a preset.

A *preset* is a YAML file::

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

The methods are the registered recipes of :mod:`wmrl.core.recipe`; a run of method m is the preset's
config with ``method=m``.
"""
from __future__ import annotations

import json
from importlib.resources import files
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from wmrl.report.bench_results import METHODS, REFERENCE, BenchError
from wmrl.training.config import ConfigError, TrainConfig, apply_overrides, config_from_dict, load_yaml

__all__ = ["METHODS", "REFERENCE", "BenchError", "Preset", "list_presets", "load_preset", "method_config",
           "preset_dir"]


def preset_dir() -> Path:
    """The folder of the shipped presets: ``configs/`` of the ``wmrl.bench`` package (``wmrl/bench/configs``,
    in a checkout or wherever wmrl is installed).

    Raises:
        BenchError: wmrl is imported from something that is not a folder (a zip archive), where the presets
            cannot be read as files; install it as a folder (``pip install``).
    """
    d = files("wmrl.bench") / "configs"
    if not isinstance(d, Path):
        raise BenchError(f"the shipped bench presets are in {d}, which is not a folder (wmrl is imported from a "
                         "zip archive); install wmrl with pip, or pass a preset YAML path")
    return d


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
    """Load a preset by name (a shipped preset, ``NAME.yaml`` in :func:`preset_dir`) or path, and validate it.

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
    for ov in overrides:
        key = ov.split("=", 1)[0].strip()
        if key in ("method", "seed", "run_dir", "name"):
            raise ConfigError(f"--set {key}: the bench sets {key} for each of its runs; choose methods with "
                              "--methods (e.g. --methods grpo,wmrl) and seeds with --seeds")
    apply_overrides(data, list(overrides))
    return config_from_dict(data)

"""Configuration of the embodied track: typed dataclasses, presets, YAML and ``--set`` overrides.

Parsing, type coercion and range checks are the text track's (:mod:`wmrl.training.config`: ``load_yaml``
refuses duplicate keys, ``_build`` refuses unknown keys with a suggestion, ``_check_ranges`` checks the
``min``/``max``/``gt`` of every field). Presets: ``tiny`` (CI: one task, a tiny policy, seconds) and
``bench`` (the bench of record of docs/embodied.md, sized for about an hour on a loaded 2-core machine).
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from wmrl.training.config import ConfigError, _build, _check_ranges, _f, load_yaml


@dataclass
class SuiteConfig:
    """Tasks and initial-state splits (:class:`wmrl.embodied.env.Suite`)."""

    tasks: list[str] = _f(None, "Meta-World v3 tasks trained on.", factory=lambda: ["push-v3"])
    heldout_tasks: list[str] = _f(None, "Tasks evaluated on only (held-out instructions).", factory=list)
    n_train_states: int = _f(10, "Initial states 0..n-1 of each task: demonstrations and RL start here.",
                             min=1, max=50)
    n_heldout_states: int = _f(10, "The next n states of each task: evaluation only.", min=0, max=49)
    max_steps: int = _f(100, "Episode cap in environment steps.", min=1)
    state_seed: int = _f(0, "Seed of Meta-World's 50 pre-sampled initial states per task.")


@dataclass
class SftConfig:
    """Behaviour cloning of the scripted experts; the SFT checkpoint every RL run starts from."""

    demos_per_state: int = _f(2, "Expert episodes per training initial state.", min=1)
    demo_noise_std: float = _f(0.1, "Std of the Gaussian noise added to executed expert actions.", min=0.0)
    epochs: int = _f(30, "BC epochs.", min=1)
    lr: float = _f(1e-3, "BC learning rate (Adam).", gt=0.0)
    batch_size: int = _f(256, "BC batch size (transitions).", min=1)
    hidden: int = _f(128, "Policy MLP width.", min=1)
    layers: int = _f(2, "Policy MLP hidden layers.", min=1)
    lang_dim: int = _f(16, "Instruction embedding size.", min=1)
    init_std: float = _f(0.3, "Action std of the SFT policy (exploration noise of every RL run).", gt=0.0)
    seed: int = _f(0, "Seed of demonstrations and BC (shared by every RL run).")


@dataclass
class WorldModelConfig:
    """The progress predictor and its collapse to one score per episode."""

    collapse: str = _f("shaping", "Episode score: shaping (mean last k - mean first k), peak or final.")
    k: int = _f(5, "k of the shaping collapse (states).", min=1)
    warmup_rollouts_per_state: int = _f(2, "SFT-policy roll-outs per training state to fit on (with success "
                                        "labels; counted as warm-up executions).", min=0)
    epochs: int = _f(30, "Fit epochs.", min=1)
    lr: float = _f(1e-3, "Fit learning rate (Adam).", gt=0.0)
    hidden: int = _f(128, "MLP width.", min=1)


@dataclass
class RolloutConfig:
    groups_per_step: int = _f(8, "M: groups (initial states) per step.", min=1)
    group_size: int = _f(4, "G: episodes per group, all from the same initial state.", min=1)


@dataclass
class RecipeConfig:
    """Anchor routing and the recipe's settings (:class:`wmrl.embodied.recipe.RecipeSettings`)."""

    anchor_fraction: float = _f(0.25, "rho: long-run fraction of groups whose success is observed (wmrl*).",
                                min=0.0, max=1.0)
    min_anchor_every: int = _f(4, "At least one anchor group every N steps (0 = off).", min=0)
    calibrator_window: int = _f(256, "Anchor pairs the isotonic map is fitted on.", min=1)
    calibrator_min_anchors: int = _f(32, "Identity map below this many anchor pairs.", min=1)
    fusion_min_pairs: int = _f(8, "Pooled alpha below this many out-of-sample pairs.", min=1)
    alpha_floor: float = _f(0.05, "Lower clip of alpha.", min=0.0, max=1.0)
    alpha_ceiling: float = _f(0.95, "Upper clip of alpha.", min=0.0, max=1.0)
    normalize_std: bool = _f(True, "Divide group advantages by the group std.")


@dataclass
class OptimConfig:
    steps: int = _f(20, "RL steps.", min=0)
    lr: float = _f(3e-4, "Adam learning rate.", gt=0.0)
    epochs_per_step: int = _f(2, "Passes of the clipped surrogate over each step's episodes.", min=1)
    clip_low: float = _f(0.2, "PPO clip (low).", min=0.0)
    clip_high: float = _f(0.2, "PPO clip (high).", min=0.0)
    grad_clip: float = _f(1.0, "Gradient-norm clip (0 = off).", min=0.0)


@dataclass
class EvalConfig:
    samples_per_state: int = _f(2, "Episodes per initial state per evaluation.", min=1)
    at_start: bool = _f(True, "Evaluate the SFT policy at step 0.")
    every_k: int = _f(0, "Also evaluate every k steps (0 = only at the start and the end).", min=0)
    seed: int = _f(12345, "Seed of evaluation noise (the same for every method: paired comparison).")


@dataclass
class EmbodiedConfig:
    """One embodied training run."""

    name: str | None = _f(None, "Run name (default: the recipe).")
    recipe: str = _f("wmrl", "grpo | wm | wmrl | wmrl-no-debias | wmrl-no-denoise | wmrl-ppi | sft (no RL).")
    seed: int = _f(0, "Seed of RL sampling (the SFT checkpoint is shared).")
    run_dir: str | None = _f(None, "Run directory (default runs/embodied-<name>-<time>).")
    checkpoint_every: int = _f(5, "Checkpoint every N steps (and at the end).", min=1)
    keep_checkpoints: int = _f(2, "Checkpoints kept.", min=1)
    threads: int = _f(1, "torch threads.", min=1)
    suite: SuiteConfig = dataclasses.field(default_factory=SuiteConfig)
    sft: SftConfig = dataclasses.field(default_factory=SftConfig)
    world_model: WorldModelConfig = dataclasses.field(default_factory=WorldModelConfig)
    rollout: RolloutConfig = dataclasses.field(default_factory=RolloutConfig)
    wmrl: RecipeConfig = dataclasses.field(default_factory=RecipeConfig)
    optim: OptimConfig = dataclasses.field(default_factory=OptimConfig)
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)


PRESETS: dict[str, dict[str, Any]] = {
    # CI: seconds. One short task, a tiny policy, 3 steps.
    "tiny": {
        "suite": {"tasks": ["reach-v3"], "n_train_states": 2, "n_heldout_states": 1, "max_steps": 20},
        "sft": {"demos_per_state": 1, "epochs": 2, "hidden": 16, "layers": 1, "lang_dim": 4},
        "world_model": {"warmup_rollouts_per_state": 1, "epochs": 2, "hidden": 16, "k": 3},
        "rollout": {"groups_per_step": 4, "group_size": 2},
        "wmrl": {"anchor_fraction": 0.5, "calibrator_min_anchors": 4, "fusion_min_pairs": 2,
                 "min_anchor_every": 1},
        "optim": {"steps": 3, "epochs_per_step": 1},
        "eval": {"samples_per_state": 1},
        "checkpoint_every": 1,
    },
    # The bench of record (docs/embodied.md).
    "bench": {
        "suite": {"tasks": ["push-v3", "button-press-topdown-v3", "plate-slide-v3", "faucet-open-v3"],
                  "heldout_tasks": [], "n_train_states": 10, "n_heldout_states": 10, "max_steps": 100},
        "sft": {"demos_per_state": 2, "epochs": 30},
        "world_model": {"warmup_rollouts_per_state": 2},
        "rollout": {"groups_per_step": 8, "group_size": 4},
        "optim": {"steps": 30},
        "eval": {"samples_per_state": 2, "at_start": False},
        "checkpoint_every": 5,
    },
}


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def _set(data: dict[str, Any], dotted: str, raw: str) -> None:
    node = data
    parts = dotted.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--set: {dotted!r}: {p!r} is a value, not a section")
    try:
        node[parts[-1]] = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        node[parts[-1]] = raw


def config_from_dict(data: dict[str, Any] | None) -> EmbodiedConfig:
    """Build and validate (keys, types, ranges, recipe and collapse names).

    Raises:
        ConfigError: with the offending key named.
    """
    from wmrl.embodied.recipe import RECIPES

    cfg = _build(EmbodiedConfig, dict(data or {}), "")
    _check_ranges(cfg)
    if cfg.recipe not in RECIPES and cfg.recipe != "sft":
        raise ConfigError(f"recipe: {cfg.recipe!r} is not one of sft, {', '.join(RECIPES)}")
    if cfg.world_model.collapse not in ("shaping", "peak", "final"):
        raise ConfigError(f"world_model.collapse: {cfg.world_model.collapse!r} is not shaping, peak or final")
    s = cfg.suite
    if s.n_train_states + s.n_heldout_states > 50:
        raise ConfigError(f"suite: n_train_states + n_heldout_states = {s.n_train_states + s.n_heldout_states} "
                          "> 50 (Meta-World's initial states per task)")
    if cfg.wmrl.alpha_floor > cfg.wmrl.alpha_ceiling:
        raise ConfigError("wmrl.alpha_floor must not exceed wmrl.alpha_ceiling")
    if cfg.recipe == "wmrl-ppi" and cfg.optim.epochs_per_step != 1:
        raise ConfigError("recipe wmrl-ppi merges its anchor rows assuming one update per batch: set "
                          "optim.epochs_per_step=1")
    return cfg


def load_config(path: str | Path | None = None, overrides: list[str] | None = None,
                preset: str | None = None) -> EmbodiedConfig:
    """Preset (optional) <- YAML file (optional) <- ``key.sub=value`` overrides, then validated.

    Raises:
        ConfigError: unknown preset, bad YAML, bad override, invalid config. FileNotFoundError: ``path``.
    """
    data: dict[str, Any] = {}
    if preset is not None:
        if preset not in PRESETS:
            raise ConfigError(f"unknown preset {preset!r}; use one of {', '.join(PRESETS)}")
        data = copy.deepcopy(PRESETS[preset])
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"config file {p} does not exist")
        try:
            loaded = load_yaml(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{p}: {e}") from e
        if not isinstance(loaded, dict):
            raise ConfigError(f"{p}: expected a mapping at the top level")
        data = _merge(data, loaded)
    for ov in overrides or []:
        if "=" not in ov or not ov.split("=", 1)[0].strip():
            raise ConfigError(f"--set expects key=value (e.g. optim.steps=3), got {ov!r}")
        k, v = ov.split("=", 1)
        _set(data, k.strip(), v)
    return config_from_dict(data)


def config_to_dict(cfg: EmbodiedConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def artefact_key(cfg: EmbodiedConfig) -> str:
    """Hash of what the SFT checkpoint and the progress predictor depend on (suite, sft, world_model)."""
    d = {k: config_to_dict(cfg)[k] for k in ("suite", "sft", "world_model")}
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]

"""Configuration of the embodied track: typed pydantic sections, presets, YAML and ``--set`` overrides.

The sections are the run kit's config sections (:mod:`wmrl.runs.config`: unknown keys refused, ranges and types
checked by pydantic, errors that name the key, numbers required finite, strict YAML, ``--set`` overrides checked
against the models). Presets: ``tiny`` (CI: one task, a tiny policy, seconds) and
``bench`` (the bench of record of docs/embodied.md, sized for about an hour on a loaded 2-core machine).
"""
from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from collections.abc import Callable
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from wmrl.core.recipe import recipe_names
from wmrl.runs.config import ConfigError, Float, Int, OptStr, _Section, apply_overrides, dotted_value, migrate_keys, \
    model_from_dict, read_config_file
from wmrl.step.config import RENAMED_KEYS, RecipeConfig, with_track_defaults
from wmrl.step.environment import EnvironmentName
from wmrl.step.environment import environment_factory as checked_factory
from wmrl.runs.tracking import TRACKERS_HELP, Trackers, TrackingConfig, default_trackers


class SuiteConfig(_Section):
    """Tasks and initial-state splits (:class:`wmrl.embodied.env.Suite`)."""

    tasks: list[str] = Field(default_factory=lambda: ["push-v3"], description="Meta-World v3 tasks trained on.")
    heldout_tasks: list[str] = Field(default_factory=list, description="Tasks evaluated on only (held-out "
                                     "instructions).")
    n_train_states: Int = Field(10, ge=1, le=50, description="Initial states 0..n-1 of each task: demonstrations "
                                "and RL start here.")
    n_heldout_states: Int = Field(10, ge=0, le=49, description="The next n states of each task: evaluation only.")
    max_steps: Int = Field(100, ge=1, description="Episode cap in environment steps.")
    state_seed: Int = Field(0, description="Seed of Meta-World's 50 pre-sampled initial states per task.")


class SftConfig(_Section):
    """Behaviour cloning of the scripted experts; the SFT checkpoint every RL run starts from."""

    demos_per_state: Int = Field(2, ge=1, description="Expert episodes per training initial state.")
    demo_noise_std: Float = Field(0.1, ge=0.0, description="Std of the Gaussian noise added to executed expert "
                                  "actions.")
    epochs: Int = Field(30, ge=1, description="BC epochs.")
    lr: Float = Field(1e-3, gt=0.0, description="BC learning rate (Adam).")
    batch_size: Int = Field(256, ge=1, description="BC batch size (transitions).")
    hidden: Int = Field(128, ge=1, description="Policy MLP width.")
    layers: Int = Field(2, ge=1, description="Policy MLP hidden layers.")
    lang_dim: Int = Field(16, ge=1, description="Instruction embedding size.")
    init_std: Float = Field(0.3, gt=0.0, description="Action std of the SFT policy (exploration noise of every RL "
                            "run).")
    seed: Int = Field(0, description="Seed of demonstrations and BC (shared by every RL run).")


class WorldModelConfig(_Section):
    """The progress predictor and its collapse to one score per episode."""

    collapse: Literal["shaping", "peak", "final"] = Field("shaping", description="Episode score: shaping (mean of "
                                                         "the last k minus mean of the first k), peak or final.")
    k: Int = Field(5, ge=1, description="k of the shaping collapse (states).")
    warmup_rollouts_per_state: Int = Field(2, ge=0, description="SFT-policy roll-outs per training state to fit on "
                                           "(with success labels; counted in the artefacts' report).")
    epochs: Int = Field(30, ge=1, description="Fit epochs.")
    lr: Float = Field(1e-3, gt=0.0, description="Fit learning rate (Adam).")
    hidden: Int = Field(128, ge=1, description="MLP width.")


class RolloutConfig(_Section):
    """Groups of episodes per step."""

    groups_per_step: Int = Field(8, ge=1, description="M: groups (initial states) per step.")
    group_size: Int = Field(4, ge=1, description="G: episodes per group, all from the same initial state.")


class OptimConfig(_Section):
    """The policy update (clipped surrogate of wmrl.core.losses.grpo_loss, Adam)."""

    steps: Int = Field(20, ge=0, description="RL steps.")
    lr: Float = Field(3e-4, gt=0.0, description="Adam learning rate.")
    epochs_per_step: Int = Field(2, ge=1, description="Passes of the clipped surrogate over each step's episodes.")
    clip_low: Float = Field(0.2, ge=0.0, le=1.0, description="PPO clip (low).")
    clip_high: Float = Field(0.2, ge=0.0, description="PPO clip (high).")
    grad_clip: Float = Field(1.0, ge=0.0, description="Gradient-norm clip (0 = off).")
    normalize_std: bool = Field(True, description="Divide group advantages by the group std (False = Dr. GRPO).")


class EvalConfig(_Section):
    """Evaluation on the training and held-out initial states."""

    samples_per_state: Int = Field(2, ge=1, description="Episodes per initial state per evaluation.")
    at_start: bool = Field(True, description="Evaluate the SFT policy at step 0.")
    every_k: Int = Field(0, ge=0, description="Also evaluate every k steps (0 = only at the start and the end).")
    seed: Int = Field(12345, description="Base seed of evaluation noise (the same for every method of one run "
                      "seed: paired comparison).")


#: The keyword arguments the embodied trainer builds its environment with
#: (:class:`wmrl.embodied.environment.MetaWorldEnvironment`'s).
EMBODIED_ENVIRONMENT_ARGS = ("pool", "train_states", "instruction_index", "world_model", "wm_instruction_index",
                             "groups_per_step", "group_size", "seed", "collapse", "k")


def environment_factory(name: str) -> Callable[..., Any]:
    """The factory of the registered environment ``name``, checked to take :data:`EMBODIED_ENVIRONMENT_ARGS`
    (:func:`wmrl.step.environment.environment_factory`); called before a run touches its folder.

    Raises:
        ConfigError: no such environment, its module fails to import, or its factory does not take the embodied
            trainer's arguments (an environment of the text track, e.g. ``kaggle``).
    """
    try:
        return checked_factory(name, EMBODIED_ENVIRONMENT_ARGS, "embodied trainer",
                               "an embodied environment takes those of the 'metaworld' one "
                               "(wmrl.embodied.config.EMBODIED_ENVIRONMENT_ARGS); a text environment trains with "
                               "`wmrl train`")
    except ValueError as e:
        raise ConfigError(str(e)) from None


#: The embodied track's own defaults of the recipe's section (:class:`wmrl.step.config.RecipeConfig`; the other
#: fields keep the text track's): a larger rho and floor for its 8 groups a step, no exploitation alarm (the alarm is
#: the text trainer's).
EMBODIED_RECIPE_DEFAULTS: dict[str, dict[str, Any]] = {
    "routing": {"anchor_fraction": 0.25, "min_anchor_every": 4},
    "alarm": {"response": "none"},
}

#: What of the recipe's section the embodied trainer does not run, with the value it runs with (a config that sets
#: another is refused).
TEXT_TRACK_ONLY = {"wmrl.routing.verify_favourites": False, "wmrl.asynchronous.staleness": 0,
                   "wmrl.alarm.response": "none"}


class EmbodiedConfig(_Section):
    """One embodied training run."""

    removed_keys: ClassVar[dict[str, str]] = {"recipe": "it is called method now, as in the text track: method=NAME"}
    renamed_keys: ClassVar[dict[str, str]] = {**RENAMED_KEYS, "wmrl.normalize_std": "optim.normalize_std"}

    name: OptStr = Field(None, description="Run name (default: the method).")
    method: str = Field("wmrl", description="The method: a registered recipe (grpo, wm, wmrl, wmrl-no-debias, "
                        "wmrl-no-denoise, wmrl-ppi, anchor-only, ...) or sft (no RL: evaluate the SFT checkpoint).")
    environment: EnvironmentName = Field("metaworld", description=(
        "The registered environment the embodied trainer samples and rewards (wmrl.step.environment): 'metaworld', "
        "or one registered by a module or an entry point (docs/plugins.md) whose factory takes the embodied "
        "trainer's arguments (wmrl.embodied.config.EMBODIED_ENVIRONMENT_ARGS)."))
    seed: Int = Field(0, description="Seed of RL sampling (the SFT checkpoint is shared).")
    run_dir: OptStr = Field(None, description="Run directory (default runs/embodied-<name>-<time>).")
    checkpoint_every: Int = Field(5, ge=1, description="Checkpoint every N steps (and at the end).")
    keep_checkpoints: Int = Field(2, ge=1, description="Checkpoints kept.")
    threads: Int = Field(1, ge=1, description="torch threads.")
    suite: SuiteConfig = Field(default_factory=SuiteConfig)
    sft: SftConfig = Field(default_factory=SftConfig)
    world_model: WorldModelConfig = Field(default_factory=WorldModelConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    wmrl: RecipeConfig = Field(default_factory=RecipeConfig, description=(
        "The recipe's settings in sub-sections (wmrl.step.config), the text track's section with the embodied "
        "track's defaults (wmrl.embodied.config.EMBODIED_RECIPE_DEFAULTS)."))
    optim: OptimConfig = Field(default_factory=OptimConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    trackers: Trackers = Field(default_factory=default_trackers, description=TRACKERS_HELP)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)

    @model_validator(mode="before")
    @classmethod
    def _recipe_defaults(cls, data: Any) -> Any:
        """The embodied track's defaults of the recipe's section (:data:`EMBODIED_RECIPE_DEFAULTS`)."""
        return with_track_defaults(data, EMBODIED_RECIPE_DEFAULTS)


PRESETS: dict[str, dict[str, Any]] = {
    # CI: seconds. One short task, a tiny policy, 3 steps.
    "tiny": {
        "suite": {"tasks": ["reach-v3"], "n_train_states": 2, "n_heldout_states": 1, "max_steps": 20},
        "sft": {"demos_per_state": 1, "epochs": 2, "hidden": 16, "layers": 1, "lang_dim": 4},
        "world_model": {"warmup_rollouts_per_state": 1, "epochs": 2, "hidden": 16, "k": 3},
        "rollout": {"groups_per_step": 4, "group_size": 2},
        "wmrl": {"routing": {"anchor_fraction": 0.5, "min_anchor_every": 1}, "calibration": {"min_anchors": 4},
                 "fusion": {"min_pairs": 2}},
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


def config_from_dict(data: dict[str, Any] | None) -> EmbodiedConfig:
    """Build and validate (keys, types, ranges, recipe and collapse names).

    Raises:
        ConfigError: with the offending key named.
    """
    cfg = model_from_dict(EmbodiedConfig, data)
    if cfg.method not in recipe_names() and cfg.method != "sft":
        raise ConfigError(f"method: {cfg.method!r} is not one of sft, {', '.join(recipe_names())}")
    s = cfg.suite
    if s.n_train_states + s.n_heldout_states > 50:
        raise ConfigError(f"suite: n_train_states + n_heldout_states = {s.n_train_states + s.n_heldout_states} "
                          "> 50 (Meta-World's initial states per task)")
    for key, runs_with in TEXT_TRACK_ONLY.items():
        value = dotted_value(cfg, key)
        if value != runs_with:
            raise ConfigError(f"{key}={value!r}: the embodied trainer does not run it (the text trainer does); set "
                              f"{key}={str(runs_with).lower()}")
    if cfg.method == "wmrl-ppi" and cfg.optim.epochs_per_step != 1:
        raise ConfigError("method wmrl-ppi merges its anchor rows assuming one update per batch: set "
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
    data = _merge(data, migrate_keys(EmbodiedConfig, read_config_file(path)))
    apply_overrides(EmbodiedConfig, data, overrides)
    return config_from_dict(data)


def config_to_dict(cfg: EmbodiedConfig) -> dict[str, Any]:
    """The config as plain nested dicts (YAML/JSON-serialisable), fields in declaration order."""
    return cfg.model_dump()


def artefact_key(cfg: EmbodiedConfig) -> str:
    """Hash of what the SFT checkpoint and the progress predictor depend on (suite, sft, world_model)."""
    d = {k: config_to_dict(cfg)[k] for k in ("suite", "sft", "world_model")}
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]

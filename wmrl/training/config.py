"""Typed training configuration: nested dataclasses, YAML loading, ``--set`` overrides, validation.

Every field carries a help text (``field(metadata={"help": ...})``) that ``wmrl config show`` prints.
Unknown keys and bad values raise :class:`ConfigError` with a message that names the key, the bad
value and the allowed values or range, so a typo in a YAML file never trains silently with defaults.

Usage::

    cfg = load_config("configs/quickstart.yaml", overrides=["optim.steps=3", "method=grpo"])
    save_config(cfg, run_dir / "config.yaml")

Why one long file (about 580 lines): every config section with its help texts and validation, so
that `wmrl config show` and the errors have one source.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, get_args, get_origin

import yaml

from wmrl.core.recipe import get_recipe, recipe_names


class ConfigError(ValueError):
    """A config key or value is not valid; the message names it and says what is allowed."""


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses a key given twice in one mapping (plain YAML keeps the last)."""


def _no_duplicate_keys(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is given twice in one mapping (line {key_node.start_mark.line + 1}); "
                "keep one", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicate_keys)


def load_yaml(text: str) -> Any:
    """Parse YAML text like ``yaml.safe_load``, but refuse a key given twice in one mapping.

    Raises:
        yaml.YAMLError: bad YAML, or a duplicate key (the message names it and its line).
    """
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass


def _f(default: Any = dataclasses.MISSING, help: str = "", *, factory: Any = None,
       min: float | None = None, max: float | None = None, gt: float | None = None) -> Any:
    """A dataclass field with a help text and an optional numeric range: ``min <= v <= max`` and,
    with ``gt``, ``v > gt`` (an open lower bound, e.g. a learning rate). Numbers must be finite."""
    meta = {"help": help, "min": min, "max": max, "gt": gt}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


#: The methods: the registered recipes of :mod:`wmrl.core.recipe` (one name per method and ablation).
Method = Literal[tuple(recipe_names())]  # type: ignore[valid-type]

#: Keys that existed once, with what replaces them (their error says so).
REMOVED_KEYS = {
    "wmrl.debias": "the ablation is a method now: method=wmrl-no-debias",
    "wmrl.denoise": "the ablation is a method now: method=wmrl-no-denoise",
    "wmrl.fusion": "the fusion rule is part of the method now: method=wmrl (ivw) or method=wmrl-ppi",
    "wmrl.bias_aware": "the bias-aware alpha is a method now: method=wmrl-bias-aware",
}


def _removed_hint(where: str) -> str:
    return f" ({where} was removed: {REMOVED_KEYS[where]})" if where in REMOVED_KEYS else ""


@dataclass
class ModelConfig:
    """The policy's backbone and LoRA adapter."""

    name: str = _f("smollm2-135m", "Backbone: 'smollm2-135m' (the embedded default LM), 'tiny' (a small "
                   "random model for tests), a Hugging Face model id or a local model folder.")
    finetune: Literal["auto", "lora", "full"] = _f("auto", "Which policy weights train: 'lora' (a LoRA adapter on a "
                                                   "frozen backbone), 'full' (every weight) or 'auto' (full for "
                                                   "a randomly initialised backbone such as 'tiny', LoRA for a "
                                                   "pretrained one). A random backbone needs its embeddings, "
                                                   "head and norms trained to express a peaked policy "
                                                   "(docs/training.md).")
    lora_r: int = _f(8, "LoRA rank of the policy adapter.", min=1)
    lora_alpha: int = _f(16, "LoRA alpha (scaling = alpha / r).", min=1)
    lora_dropout: float = _f(0.0, "LoRA dropout probability.", min=0.0, max=1.0)


@dataclass
class ScaffoldConfig:
    """How completions become solution programs."""

    name: Optional[str] = _f(None, "Scaffold name (see `wmrl scaffolds`); null = the models package's "
                             "default scaffold.")


@dataclass
class TasksConfig:
    """Which tasks train and which evaluate."""

    root: Optional[str] = _f(None, "Where tasks live (the same setting as `wmrl tasks --root` and "
                             "$WMRL_TASKS_ROOT): one folder or several joined by ':', searched recursively for "
                             "wmrl, MLE-bench, MLE-Dojo and DSBench tasks; null = $WMRL_TASKS_ROOT, else the "
                             "built-in suite under $WMRL_HOME/tasks (build it with `wmrl tasks build`).")
    train: Optional[list[str]] = _f(None, "Task ids used for RL; null = every task of the 'train' split.")
    heldout: Optional[list[str]] = _f(None, "Task ids used only for evaluation; null = every task of the "
                                      "'heldout' split; [] = no held-out evaluation.")
    heldout_split: Optional[str] = _f(None, "Held-out split instead of listed ids: 'benchmark:NAME' (e.g. "
                                      "benchmark:dsbench), 'list:FILE' (ids one per line) or 'fraction:F' "
                                      "(seeded by `seed`); train = the other tasks unless tasks.train lists "
                                      "them. Recorded in the run's tasks.json.")


@dataclass
class RolloutConfig:
    """Sampling of trajectories (groups) each step."""

    tasks_per_step: int = _f(4, "M: groups (tasks) per step; tasks are cycled through in a seeded "
                             "shuffled order.", min=1)
    group_size: int = _f(4, "G: trajectories sampled per task (one group); at least 2 (group-relative "
                         "advantages are all 0 with one).")
    max_new_tokens: int = _f(96, "Completion length limit, tokens.", min=1)
    temperature: float = _f(1.0, "Sampling temperature.", min=1e-6)
    top_p: float = _f(1.0, "Nucleus sampling threshold.", min=1e-6, max=1.0)


@dataclass
class WmrlConfig:
    """Options of the WMRL method (anchors and corrections); ignored by `grpo` and `wm`."""

    anchor_fraction: float = _f(0.1, "rho: long-run fraction of groups executed for real (anchors).",
                                min=0.0, max=1.0)
    min_anchor_every: int = _f(10, "Guarantee at least one anchor group every N steps (0 = off). With few "
                               "groups per step and a small rho this keeps the calibrator fed; the router "
                               "pays the forced anchor back later, so the long-run fraction stays rho.",
                               min=0)
    router: Literal["fraction", "stratified"] = _f("fraction", "Anchor router: 'fraction' (carry the "
                                                   "fractional part between steps) or 'stratified' "
                                                   "(also balance anchors across tasks).")
    calibrator_window: int = _f(256, "Anchor pairs (most recent) the calibrator is fitted on.", min=1)
    calibrator_min_anchors: int = _f(32, "Below this many anchor pairs the calibrator falls back to an "
                                     "identity/affine map. 32: with 24 anchors or fewer per run the isotonic map "
                                     "made the out-of-sample squared error 1.06-1.21x the raw one in the cpu-small "
                                     "bench (docs/training.md); the paper's reference waits for 200.", min=1)
    fusion_min_pairs: int = _f(8, "Below this many out-of-sample anchor pairs the fusion weight alpha is the "
                               "pooled n_A / (n_A + n_W) instead of the inverse-variance estimate.", min=1)
    calibrator_fallback: Literal["identity", "affine"] = _f("identity", "Map used below "
                                                            "calibrator_min_anchors: 'identity' or 'affine' "
                                                            "(least squares with positive slope).")
    alpha_floor: float = _f(0.05, "Lower clip of alpha (anchor-gradient weight).", min=0.0, max=1.0)
    alpha_ceiling: float = _f(0.95, "Upper clip of alpha.", min=0.0, max=1.0)


@dataclass
class WorldModelConfig:
    """The world model that scores trajectories without running them (the policy's backbone, shared,
    plus its own LoRA adapter and a regression head, or an adapter that writes the score as text)."""

    kind: Literal["regression", "generative"] = _f("regression", "World model: 'regression' (adapter + scalar "
                                                   "head on pooled hidden states, fitted by MSE) or 'generative' "
                                                   "(adapter fine-tuned to write the score as text '0.DD'; predicts "
                                                   "the expected value of the digit distributions; needs "
                                                   "adapter: true). A saved world model (world_model.path) must "
                                                   "be of this kind.")
    path: Optional[str] = _f(None, "A pre-fitted world model folder (`wmrl wm fit`); null = fit one on a "
                             "warm-up corpus at the start of the run (its cost goes into the ledger).")
    adapter: bool = _f(True, "Train a LoRA adapter of the world model (true) or only its regression head on "
                       "frozen backbone features (false: much cheaper on CPU; regression kind only).")
    lora_r: int = _f(8, "LoRA rank of the world model's adapter.", min=1)
    max_length: int = _f(320, "Tokens per world-model input (prompt + program, left-truncated).", min=8)
    warmup_samples_per_task: int = _f(8, "Warm-up corpus: programs sampled from the initial policy and "
                                      "executed per train task.", min=1)
    warmup_corpus: Optional[str] = _f(None, "Reuse an execution log (SQLite) as the warm-up corpus instead "
                                      "of collecting one.")
    fit_epochs: int = _f(3, "Epochs of world-model fitting.", min=1)
    fit_lr: float = _f(3e-4, "Learning rate of the world model's LoRA weights.", gt=0.0)
    head_lr: float = _f(3e-3, "Learning rate of the world model's regression head (regression kind only).", gt=0.0)
    fit_time_budget_s: Optional[float] = _f(None, "Stop fitting after this many wall seconds (null = no limit).",
                                            min=1.0)
    heldout_fraction: float = _f(0.2, "Fraction of warm-up groups held out to report the world model's "
                                 "accuracy (0 = fit on all).", min=0.0, max=0.9)
    batch_size: int = _f(8, "World-model fit batch size (trajectories per gradient step).", min=1)
    refresh_every_k: int = _f(0, "Refit the world model on the warm-up corpus plus all anchors gathered "
                              "so far every K steps (0 = off; the paper keeps it fixed).", min=0)


@dataclass
class OptimConfig:
    """Policy optimisation (GRPO loss and AdamW)."""

    steps: int = _f(10, "Training steps.", min=1)
    lr: float = _f(1e-5, "AdamW learning rate.", gt=0.0)
    weight_decay: float = _f(0.0, "AdamW weight decay.", min=0.0)
    clip_low: float = _f(0.2, "PPO clip epsilon below 1 (ratio >= 1 - clip_low).", min=0.0, max=1.0)
    clip_high: float = _f(0.2, "PPO clip epsilon above 1 (ratio <= 1 + clip_high; DAPO uses 0.28).",
                          min=0.0)
    beta: float = _f(0.0, "KL penalty weight (k3 estimator against the reference policy); 0 = off.",
                     min=0.0)
    aggregation: Literal["token_mean", "seq_mean"] = _f("token_mean", "Loss aggregation: 'token_mean' (every "
                                                        "completion token weighs the same) or 'seq_mean' "
                                                        "(per-sequence token mean).")
    normalize_std: bool = _f(True, "Divide group advantages by the group std (False = Dr. GRPO).")
    adv_eps: float = _f(1e-6, "Added to the group std before dividing.", min=0.0)
    grad_clip: float = _f(1.0, "Max gradient norm (0 = no clipping).", min=0.0)
    micro_batch: int = _f(4, "Trajectories per forward/backward pass (gradient accumulation).", min=1)


@dataclass
class ExecutorConfig:
    """Where real executions run."""

    kind: Literal["local", "ray"] = _f("local", "'local' (process pool on this machine) or 'ray'.")
    workers: int = _f(2, "Concurrent executions.", min=1)
    address: Optional[str] = _f(None, "Ray address (kind=ray); null = start a local Ray instance.")
    sandbox: bool = _f(True, "Run programs inside the bubblewrap sandbox (turn off only for trusted code).")
    time_limit_s: Optional[float] = _f(None, "Per-execution wall limit, seconds; null = each task's own.",
                                       min=0.1)


@dataclass
class EvalConfig:
    """Held-out evaluation with real execution."""

    every_k: int = _f(0, "Evaluate every K steps (0 = only at the end).", min=0)
    at_start: bool = _f(False, "Also evaluate the initial policy (step 0).")
    at_end: bool = _f(True, "Evaluate the final policy.")
    samples_per_task: int = _f(4, "Trajectories sampled and executed per evaluation task.", min=1)
    temperature: float = _f(1.0, "Sampling temperature during evaluation.", min=1e-6)
    train_tasks: bool = _f(True, "Also evaluate on the training tasks.")


@dataclass
class TrainConfig:
    """Everything `wmrl train` needs. See docs/training.md."""

    method: Method = _f("wmrl", "The registered recipe (wmrl.core.recipe): 'grpo' (every group executed: the "
                        "baseline), 'wm' (pure world model), 'wmrl' (anchors + debiasing + inverse-variance "
                        "fusion), or an ablation: 'wmrl-no-debias', 'wmrl-no-denoise', 'wmrl-ppi', "
                        "'wmrl-bias-aware', 'anchor-only', 'wmrl-flat'.")
    name: str = _f("", "Free-form run name (shown in reports); empty = the method.")
    run_dir: Optional[str] = _f(None, "Run directory; null = runs/<method>-<UTC timestamp>.")
    seed: int = _f(0, "Seed of every RNG (python, numpy, torch, task order, router).", min=0)
    checkpoint_every: int = _f(1, "Checkpoint every N steps (1 = a SIGKILL loses at most the step in "
                               "flight).", min=1)
    keep_checkpoints: int = _f(2, "Complete checkpoints kept on disk (older ones are pruned).", min=1)
    progress: bool = _f(True, "Show a live progress bar.")
    threads: int = _f(0, "torch intra-op threads (0 = leave torch's default).", min=0)
    model: ModelConfig = _f(factory=ModelConfig)
    scaffold: ScaffoldConfig = _f(factory=ScaffoldConfig)
    tasks: TasksConfig = _f(factory=TasksConfig)
    rollout: RolloutConfig = _f(factory=RolloutConfig)
    wmrl: WmrlConfig = _f(factory=WmrlConfig)
    world_model: WorldModelConfig = _f(factory=WorldModelConfig)
    optim: OptimConfig = _f(factory=OptimConfig)
    executor: ExecutorConfig = _f(factory=ExecutorConfig)
    eval: EvalConfig = _f(factory=EvalConfig)


# --------------------------------------------------------------------------------------------------
# conversion and validation


def _is_section(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in get_args(tp))
    if origin is list:
        return f"list[{_type_name(get_args(tp)[0])}]"
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Coerce ``value`` to the annotated type ``tp`` or raise :class:`ConfigError` naming ``key``."""
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if value is None or (isinstance(value, str) and value.strip().lower() in ("null", "none", "~")):
            if type(None) in args:
                return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, key)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(f"{key}: {value!r} is not a valid {_type_name(tp)}")
    if origin is Literal:
        allowed = get_args(tp)
        if value in allowed:
            return value
        close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"{key}: {value!r} is not allowed; choose one of {', '.join(map(repr, allowed))}{hint}")
    if origin is list:
        (inner,) = get_args(tp)
        if isinstance(value, str):
            parsed = yaml.safe_load(value) if value.strip().startswith("[") else [
                v.strip() for v in value.split(",") if v.strip()]
            value = parsed
        if isinstance(value, tuple):
            value = list(value)
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list ({_type_name(tp)}), got {value!r}")
        return [_coerce(v, inner, f"{key}[{i}]") for i, v in enumerate(value)]
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "yes", "on", "1"):
            return True
        if isinstance(value, str) and value.strip().lower() in ("false", "no", "off", "0"):
            return False
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                pass
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    raise ConfigError(f"{key}: unsupported type {tp!r}")  # pragma: no cover


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _build(cls: type, data: dict[str, Any], prefix: str) -> Any:
    """Build dataclass ``cls`` from a (possibly partial) dict, checking keys and types (ranges: :func:`validate`)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping of keys, got {data!r}")
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for k in data:
        if k not in fields:
            where = f"{prefix}.{k}" if prefix else k
            close = difflib.get_close_matches(str(k), list(fields), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            hint = _removed_hint(where) or hint
            raise ConfigError(f"unknown config key {where!r}.{hint} Allowed keys"
                              f"{' in ' + prefix if prefix else ''}: {', '.join(fields)}")
    kwargs = {}
    for name, f in fields.items():
        key = f"{prefix}.{name}" if prefix else name
        tp = hints[name]
        if _is_section(tp):
            kwargs[name] = _build(tp, data.get(name) or {}, key)
            continue
        if name not in data:
            continue
        kwargs[name] = _coerce(data[name], tp, key)
    return cls(**kwargs)


def _range_text(meta: Any) -> str:
    """The allowed range of a field as text (``'0.0 .. 1.0'``, ``'> 0.0'``, ``'>= 1'``), '' when none."""
    lo, hi, gt = meta.get("min"), meta.get("max"), meta.get("gt")
    low = f"> {gt}" if gt is not None else (f">= {lo}" if lo is not None else "")
    if hi is None:
        return low
    if gt is None and lo is not None:
        return f"{lo} .. {hi}"
    return f"{low} and <= {hi}" if low else f"<= {hi}"


def _check_range(v: Any, meta: Any, key: str) -> None:
    """Raise :class:`ConfigError` naming ``key`` and the allowed range when the number ``v`` is not
    finite or outside the field's range (``min``, ``max``, ``gt`` of its metadata)."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return
    rng = _range_text(meta)
    kind = "an integer" if isinstance(v, int) else "a finite number"
    allowed = kind + ((f" in {rng}" if ".." in rng else f" {rng}") if rng else "")
    lo, hi, gt = meta.get("min"), meta.get("max"), meta.get("gt")
    if not math.isfinite(v):
        raise ConfigError(f"{key}: {v!r} is not allowed; expected {allowed}")
    if gt is not None and not v > gt:
        raise ConfigError(f"{key}: {v!r} is not above the minimum {gt}; expected {allowed}")
    if lo is not None and v < lo:
        raise ConfigError(f"{key}: {v!r} is below the minimum {lo}; expected {allowed}")
    if hi is not None and v > hi:
        raise ConfigError(f"{key}: {v!r} is above the maximum {hi}; expected {allowed}")


def _check_ranges(obj: Any, prefix: str = "") -> None:
    """:func:`_check_range` on every numeric field of the dataclass tree ``obj``."""
    for f in dataclasses.fields(obj):
        key = f"{prefix}.{f.name}" if prefix else f.name
        v = getattr(obj, f.name)
        if dataclasses.is_dataclass(v):
            _check_ranges(v, key)
        else:
            _check_range(v, f.metadata, key)


def validate(cfg: TrainConfig) -> TrainConfig:
    """Range checks of every field (finite numbers within their ``min``/``max``/``gt``) and cross-field
    checks; returns ``cfg`` or raises :class:`ConfigError` naming the key and the allowed range."""
    _check_ranges(cfg)
    w = cfg.wmrl
    if w.alpha_floor > w.alpha_ceiling:
        raise ConfigError(f"wmrl.alpha_floor ({w.alpha_floor}) must not exceed wmrl.alpha_ceiling "
                          f"({w.alpha_ceiling})")
    if get_recipe(cfg.method).anchors == "fraction" and w.anchor_fraction <= 0.0 and w.min_anchor_every == 0:
        raise ConfigError(f"method {cfg.method!r} needs anchors: set wmrl.anchor_fraction > 0 (or use method "
                          "'wm' for a pure world model)")
    if cfg.world_model.kind == "generative" and not cfg.world_model.adapter:
        raise ConfigError("world_model.kind 'generative' learns only through its LoRA adapter: set "
                          "world_model.adapter=true (or use world_model.kind=regression for a head on frozen features)")
    if cfg.rollout.group_size < 2:
        raise ConfigError(f"rollout.group_size: {cfg.rollout.group_size} trajectory per group cannot train: every "
                          f"method uses group-relative advantages (reward minus the group's mean), which are all 0 "
                          f"with one trajectory, so every update would be skipped; set rollout.group_size >= 2")
    if cfg.tasks.train is not None and len(cfg.tasks.train) == 0:
        raise ConfigError("tasks.train is empty: list at least one task id, or null for the train split")
    return cfg


def config_from_dict(data: dict[str, Any] | None) -> TrainConfig:
    """Build and validate a :class:`TrainConfig` from nested dicts (e.g. parsed YAML).

    Raises:
        ConfigError: unknown key, wrong type, out-of-range or disallowed value.
    """
    return validate(_build(TrainConfig, dict(data or {}), ""))


def config_to_dict(cfg: TrainConfig) -> dict[str, Any]:
    """The config as plain nested dicts (YAML/JSON-serialisable)."""
    return dataclasses.asdict(cfg)


def _set_path(data: dict[str, Any], dotted: str, raw: str) -> None:
    """Set ``data[a][b] = value`` for ``dotted='a.b'``, checking every part against the dataclasses."""
    parts = dotted.split(".")
    cls: Any = TrainConfig
    node = data
    for i, part in enumerate(parts):
        hints = _hints(cls)
        names = [f.name for f in dataclasses.fields(cls)]
        where = ".".join(parts[: i + 1])
        if part not in names:
            close = difflib.get_close_matches(part, names, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            hint = _removed_hint(where) or hint
            raise ConfigError(f"--set: unknown config key {where!r}.{hint} Allowed: {', '.join(names)}")
        tp = hints[part]
        if i < len(parts) - 1:
            if not _is_section(tp):
                raise ConfigError(f"--set: {where!r} is a value, not a section")
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
            cls = tp
            continue
        if _is_section(tp):
            raise ConfigError(f"--set: {dotted!r} is a section; set one of its keys, e.g. "
                              f"{dotted}.{dataclasses.fields(tp)[0].name}=...")
        # YAML parsing gives numbers, booleans, null and lists; the type coercion does the rest.
        # String fields keep the raw text (so "model.name=1e3" stays "1e3"), except null.
        try:
            value = yaml.safe_load(raw) if raw.strip() != "" else ""
        except yaml.YAMLError:
            value = raw
        str_like = tp is str or (get_origin(tp) in (typing.Union, types.UnionType) and str in get_args(tp))
        if str_like and value is not None:
            value = raw
        node[part] = value


def apply_overrides(data: dict[str, Any], overrides: list[str] | None) -> dict[str, Any]:
    """Apply ``key.sub=value`` strings to nested dict ``data`` (in place; also returned).

    Raises:
        ConfigError: an override without ``=`` or naming an unknown key.
    """
    for ov in overrides or []:
        if "=" not in ov:
            raise ConfigError(f"--set expects key=value (e.g. optim.steps=3), got {ov!r}")
        k, v = ov.split("=", 1)
        k = k.strip()
        if not k:
            raise ConfigError(f"--set expects key=value, got {ov!r}")
        _set_path(data, k, v)
    return data


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> TrainConfig:
    """Read a YAML config (or the defaults when ``path`` is None), apply overrides, validate.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ConfigError: ``path`` is a folder, invalid YAML (message: file, line, column, problem), unknown
            keys or bad values (message names them).
    """
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if p.is_dir():
            raise ConfigError(f"config {str(p)!r} is a folder, not a YAML file")
        if not p.is_file():
            raise FileNotFoundError(f"config file {str(p)!r} not found")
        try:
            data = load_yaml(p.read_text()) or {}
        except UnicodeDecodeError as e:
            raise ConfigError(f"cannot parse {p} as YAML: not a text file ({e.reason} at byte {e.start})") from e
        except yaml.YAMLError as e:
            raise ConfigError(f"cannot parse {p} as YAML: {_yaml_error_text(e)}") from e
        if not isinstance(data, dict):
            raise ConfigError(f"{p}: the top level must be a mapping of keys, got {type(data).__name__}")
    data = _deep_copy(data)
    apply_overrides(data, overrides)
    return config_from_dict(data)


def _yaml_error_text(e: yaml.YAMLError) -> str:
    """A parser error on one line: ``line L, column C: problem (while <context> at line L', column C')``."""
    problem = getattr(e, "problem", None)
    mark = getattr(e, "problem_mark", None)
    if problem is None or mark is None:
        return " ".join(str(e).split())
    text = f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    context, cmark = getattr(e, "context", None), getattr(e, "context_mark", None)
    if context:
        text += f" ({context}" + (f" at line {cmark.line + 1}, column {cmark.column + 1})" if cmark else ")")
    return text


def _deep_copy(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _deep_copy(v) for k, v in d.items()}
    if isinstance(d, list):
        return [_deep_copy(v) for v in d]
    return d


def dump_config(cfg: TrainConfig) -> str:
    """The resolved config as YAML text (every field, sections in declaration order)."""
    return yaml.safe_dump(config_to_dict(cfg), sort_keys=False, default_flow_style=False)


def save_config(cfg: TrainConfig, path: str | Path) -> None:
    """Write the resolved config as YAML (atomically: temp file + rename)."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(dump_config(cfg))
    tmp.replace(p)


def describe_fields(cls: type = TrainConfig, prefix: str = "", obj: Any = None) -> list[tuple[str, str, str, str]]:
    """Rows ``(key, type, value, help)`` for every field, nested sections flattened with dots.

    ``obj`` (an instance of ``cls``) gives the values; defaults are used when it is None.
    """
    obj = obj if obj is not None else cls()
    rows = []
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        key = f"{prefix}.{f.name}" if prefix else f.name
        tp = hints[f.name]
        if _is_section(tp):
            rows.extend(describe_fields(tp, key, getattr(obj, f.name)))
            continue
        help_text = f.metadata.get("help", "")
        rng = _range_text(f.metadata)
        if rng:
            help_text += f" [range: {rng}]"
        rows.append((key, _type_name(tp), yaml.safe_dump(getattr(obj, f.name), default_flow_style=True)
                     .strip().removesuffix("...").strip(), help_text))
    return rows

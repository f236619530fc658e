"""Typed training configuration: pydantic v2 models, YAML loading, ``--set`` overrides, validation.

Every option is one typed pydantic field whose ``Field(description=...)`` is the help text that
``wmrl config show`` prints; its range is the field's ``ge``/``gt``/``le`` and its choices a ``Literal``.
Pydantic does the coercion and checks; this module adds what pydantic does not: YAML that refuses a key
given twice, ``--set a.b=value`` overrides, a ``describe_fields`` table, and :class:`ConfigError`
messages that name the key path, the bad value and what is allowed (with a did-you-mean for typos),
so a typo in a YAML file never trains silently with defaults.

Usage::

    cfg = load_config("configs/quickstart.yaml", overrides=["optim.steps=3", "method=grpo"])
    save_config(cfg, run_dir / "config.yaml")

Why one long file (about 600 lines): the nine config sections with their 80 help texts (about 230 lines)
sit next to the engine that turns pydantic's errors into these messages, so that `wmrl config show` and
the errors have one source.
"""
from __future__ import annotations

import difflib
import math
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeGuard, get_args, get_origin

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

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


# --------------------------------------------------------------------------------------------------
# field types: pydantic's lax mode, plus the few leniencies and refusals the YAML/--set inputs need

def _not_bool(v: Any) -> Any:
    """Refuse a boolean where a number is expected (pydantic would read ``true`` as 1)."""
    if isinstance(v, bool):
        raise PydanticCustomError("bool_for_number", "a boolean is not a number")
    return v


def _integer(v: Any) -> Any:
    """:func:`_not_bool`, and a float with an integral value (``3.0``, ``1e20``) is that integer."""
    return int(v) if isinstance(_not_bool(v), float) and v.is_integer() else v


def _nullable(v: Any) -> Any:
    """The words ``null``, ``none`` and ``~`` (any case) stand for null in an optional field."""
    return None if isinstance(v, str) and v.strip().lower() in ("null", "none", "~") else v


def _id_list(v: Any) -> Any:
    """A list of ids may also be given as text: ``'[a, b]'`` (YAML) or ``'a, b'`` (comma-separated)."""
    v = _nullable(v)
    if isinstance(v, str) and not v.strip().startswith("["):
        return [x.strip() for x in v.split(",") if x.strip()]
    try:
        return yaml.safe_load(v) if isinstance(v, str) else v
    except yaml.YAMLError:
        return v  # not a list: pydantic says so, naming the key


Int = Annotated[int, BeforeValidator(_integer)]
Float = Annotated[float, BeforeValidator(_not_bool)]
OptStr = Annotated[str | None, BeforeValidator(_nullable)]
OptFloat = Annotated[Float | None, BeforeValidator(_nullable)]
OptIds = Annotated[list[str] | None, BeforeValidator(_id_list)]

#: The training methods: the one place their names are checked (``method: ...`` and ``--set method=``).
#: The methods: the registered recipes of :mod:`wmrl.core.recipe` (one name per method and ablation).
if TYPE_CHECKING:  # the names are known only at run time; pydantic validates against them
    Method = str
else:
    Method = Literal[tuple(recipe_names())]

#: Keys that existed once, with what replaces them (their error says so).
REMOVED_KEYS = {
    "wmrl.debias": "the ablation is a method now: method=wmrl-no-debias",
    "wmrl.denoise": "the ablation is a method now: method=wmrl-no-denoise",
    "wmrl.fusion": "the fusion rule is part of the method now: method=wmrl (ivw) or method=wmrl-ppi",
    "wmrl.bias_aware": "the bias-aware alpha is a method now: method=wmrl-bias-aware",
}


def _removed_hint(where: str) -> str:
    return f" ({where} was removed: {REMOVED_KEYS[where]})" if where in REMOVED_KEYS else ""


class _Section(BaseModel):
    """Base of every config section: unknown keys refused, assignments validated, numbers given for text
    kept as text. Built or assigned in Python, a bad value raises pydantic's ``ValidationError``; loaded
    (:func:`config_from_dict`, :func:`load_config`) or checked (:func:`validate`), a :class:`ConfigError`."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, coerce_numbers_to_str=True)


class ModelConfig(_Section):
    """The policy's backbone and LoRA adapter."""

    name: str = Field("smollm2-135m", description=(
        "Backbone: 'smollm2-135m' (the embedded default LM), 'tiny' (a small random model for tests), a Hugging Face "
        "model id or a local model folder."))
    finetune: Literal["auto", "lora", "full"] = Field("auto", description=(
        "Which policy weights train: 'lora' (a LoRA adapter on a frozen backbone), 'full' (every weight) or 'auto' "
        "(full for a randomly initialised backbone such as 'tiny', LoRA for a pretrained one). A random backbone "
        "needs its embeddings, head and norms trained to express a peaked policy (docs/training.md)."))
    lora_r: Int = Field(8, ge=1, description="LoRA rank of the policy adapter.")
    lora_alpha: Int = Field(16, ge=1, description="LoRA alpha (scaling = alpha / r).")
    lora_dropout: Float = Field(0.0, ge=0.0, le=1.0, description="LoRA dropout probability.")


class ScaffoldConfig(_Section):
    """How completions become solution programs."""

    name: OptStr = Field(None, description=(
        "Scaffold name (see `wmrl scaffolds`); null = the models package's default scaffold."))


class TasksConfig(_Section):
    """Which tasks train and which evaluate."""

    root: OptStr = Field(None, description=(
        "Where tasks live (the same setting as `wmrl tasks --root` and $WMRL_TASKS_ROOT): one folder or several "
        "joined by ':', searched recursively for wmrl, MLE-bench, MLE-Dojo and DSBench tasks; null = "
        "$WMRL_TASKS_ROOT, else the built-in suite under $WMRL_HOME/tasks (build it with `wmrl tasks build`)."))
    train: OptIds = Field(None, description="Task ids used for RL; null = every task of the 'train' split.")
    heldout: OptIds = Field(None, description=(
        "Task ids used only for evaluation; null = every task of the 'heldout' split; [] = no held-out evaluation."))
    heldout_split: OptStr = Field(None, description=(
        "Held-out split instead of listed ids: 'benchmark:NAME' (e.g. benchmark:dsbench), 'list:FILE' (ids one per "
        "line) or 'fraction:F' (seeded by `seed`); train = the other tasks unless tasks.train lists them. Recorded in"
        " the run's tasks.json."))

    @model_validator(mode="after")
    def _some_train_tasks(self) -> TasksConfig:
        if self.train is not None and len(self.train) == 0:
            raise ValueError("tasks.train is empty: list at least one task id, or null for the train split")
        return self


class RolloutConfig(_Section):
    """Sampling of trajectories (groups) each step."""

    tasks_per_step: Int = Field(4, ge=1, description=(
        "M: groups (tasks) per step; tasks are cycled through in a seeded shuffled order."))
    group_size: Int = Field(4, description=(
        "G: trajectories sampled per task (one group); at least 2 (group-relative advantages are all 0 with one)."))
    max_new_tokens: Int = Field(96, ge=1, description="Completion length limit, tokens.")
    temperature: Float = Field(1.0, ge=1e-6, description="Sampling temperature.")
    top_p: Float = Field(1.0, ge=1e-6, le=1.0, description="Nucleus sampling threshold.")
    engine: Literal["shared", "generate"] = Field("shared", description=(
        "Sampling implementation: 'shared' (each group's prompt prefilled once, batched grammar masks; docs/models.md) "
        "or 'generate' (transformers' generate, one prefill per row: the earlier implementation). Both "
        "sample the same distribution, not the same draws."))

    @model_validator(mode="after")
    def _groups_of_two(self) -> RolloutConfig:
        if self.group_size < 2:
            raise ValueError(f"rollout.group_size: {self.group_size} trajectory per group cannot train: every "
                             "method uses group-relative advantages (reward minus the group's mean), which are all "
                             "0 with one trajectory, so every update would be skipped; set rollout.group_size >= 2")
        return self


class WmrlConfig(_Section):
    """Options of the WMRL method (anchors and corrections); ignored by `grpo` and `wm`."""

    anchor_fraction: Float = Field(0.1, ge=0.0, le=1.0, description=(
        "rho: long-run fraction of groups executed for real (anchors)."))
    min_anchor_every: Int = Field(10, ge=0, description=(
        "Guarantee at least one anchor group every N steps (0 = off). With few groups per step and a small rho this "
        "keeps the calibrator fed; the router pays the forced anchor back later, so the long-run fraction stays rho."))
    router: Literal["fraction", "stratified"] = Field("fraction", description=(
        "Anchor router: 'fraction' (carry the fractional part between steps) or 'stratified' (also balance anchors "
        "across tasks)."))
    calibrator_window: Int = Field(256, ge=1, description="Anchor pairs (most recent) the calibrator is fitted on.")
    calibrator_min_anchors: Int = Field(32, ge=1, description=(
        "Below this many anchor pairs the calibrator falls back to an identity/affine map. 32: with 24 anchors or "
        "fewer per run the isotonic map made the out-of-sample squared error 1.06-1.21x the raw one in the cpu-small "
        "bench (docs/training.md); the paper's reference waits for 200."))
    fusion_min_pairs: Int = Field(8, ge=1, description=(
        "Below this many out-of-sample anchor pairs the fusion weight alpha is the pooled n_A / (n_A + n_W) instead "
        "of the inverse-variance estimate."))
    calibrator_fallback: Literal["identity", "affine"] = Field("identity", description=(
        "Map used below calibrator_min_anchors: 'identity' or 'affine' (least squares with positive slope)."))
    alpha_floor: Float = Field(0.05, ge=0.0, le=1.0, description="Lower clip of alpha (anchor-gradient weight).")
    alpha_ceiling: Float = Field(0.95, ge=0.0, le=1.0, description="Upper clip of alpha.")
    anchor_staleness: Int = Field(0, ge=0, description=(
        "k, the staleness bound of the asynchronous anchor stream (steps): anchor executions run while training "
        "goes on and are consumed when they finish, at most k steps after their own (the trainer waits there); "
        "late ones go where wmrl.late_anchors says. 0 = synchronous (every step waits for its "
        "anchors). wmrl recipes only (docs/scaling.md)."))
    late_anchors: Literal["gradient", "calibration"] = Field("gradient", description=(
        "What an anchor group consumed after its own step does (anchor_staleness > 0): 'gradient' (left out of its "
        "own step, it enters the loss of its arrival step, importance-corrected by the clipped ratio to the policy "
        "that sampled it, and feeds the calibration) or 'calibration' (it trains as a world-model group at its own "
        "step and its pairs only feed the calibrator and the fusion window). The simulation's staleness axis chose "
        "'gradient' (docs/scaling.md)."))
    late_ratio_max: Float = Field(2.0, gt=1.0, description=(
        "Late anchor rows in the gradient keep their importance ratio pi_now / pi_sampled in [0.001, this] (PPO's "
        "[0.8, 1.2] cuts off too much of a stale sample; the simulation's staleness axis chose 2, docs/scaling.md)."))
    steps_without_anchors: Literal["skip", "update"] = Field("skip", description=(
        "A step of the asynchronous stream (anchor_staleness > 0, late_anchors 'gradient') whose own anchor groups "
        "are all still running and at which no other anchor group arrives (the first steps of a run, and gaps "
        "between arrivals): 'skip' makes no policy update there (its anchors enter the loss when they arrive) or "
        "'update' trains on its world-model groups alone, the pure world-model update an exploitable world model "
        "feeds. The simulation chose 'skip' (docs/scaling.md)."))
    over_bound_anchors: Literal["wait", "calibration", "drop"] = Field("wait", description=(
        "What an anchor group still running when its staleness reaches wmrl.anchor_staleness does: 'wait' (the "
        "step blocks until it is done, stage anchor_wait, and consumes it as a late group), 'calibration' (not "
        "waited for: its executions keep running and, when they arrive, their pairs feed only the calibrator and "
        "the fusion window, no gradient: beyond the bound the importance ratio is not trusted) or 'drop' (not "
        "waited for; its results are discarded, which biases the calibration toward fast programs where run time "
        "follows quality). With 'calibration' or 'drop' generation never waits on "
        "executions (anchor_wait is 0). Needs anchor_staleness >= 1 unless 'wait' (docs/scaling.md)."))
    exploit_alarm: Literal["none", "warn", "raise_anchors", "refit", "stop"] = Field("warn", description=(
        "The exploitation alarm: a sequential (CUSUM) test on each step's anchors for a policy moving onto programs "
        "the world model over-rates (anchors scoring below their calibrated predictions, or ordered worse than "
        "chance by the world model). When it fires: 'warn' (train.log, console, metrics), 'raise_anchors' (also "
        "double the anchor fraction, up to exploit_alarm_max_anchor_fraction), 'refit' (also refit the world model "
        "on every anchor so far), 'stop' (also stop at the step's checkpoint; resume to continue), or 'none' (no "
        "test). Recipes with both streams only (docs/training.md)."))
    exploit_alarm_threshold: Float = Field(8.0, gt=0.0, description=(
        "h of the alarm's CUSUM tests, in standard deviations: larger = fewer false alarms, later detection "
        "(docs/simulation.md measures both)."))
    exploit_alarm_drift: Float = Field(0.5, ge=0.0, description=(
        "k of the alarm's CUSUM tests: the drift allowed per anchor group, in standard deviations."))
    exploit_alarm_max_anchor_fraction: Float = Field(0.5, gt=0.0, le=1.0, description=(
        "The highest anchor fraction the 'raise_anchors' response doubles up to."))

    @model_validator(mode="after")
    def _floor_below_ceiling(self) -> WmrlConfig:
        if self.alpha_floor > self.alpha_ceiling:
            raise ValueError(f"wmrl.alpha_floor ({self.alpha_floor}) must not exceed wmrl.alpha_ceiling "
                             f"({self.alpha_ceiling})")
        if self.over_bound_anchors != "wait" and not self.anchor_staleness:
            raise ValueError(f"wmrl.over_bound_anchors={self.over_bound_anchors!r} needs an asynchronous anchor "
                             f"stream: set wmrl.anchor_staleness to the bound k >= 1 (with k = 0 every step waits "
                             f"for its own anchors), or leave wmrl.over_bound_anchors at 'wait'")
        return self


class WorldModelConfig(_Section):
    """The world model that scores trajectories without running them (the policy's backbone, shared,
    plus its own LoRA adapter and a regression head, or an adapter that writes the outcome as the World Model RL
    paper's judge does)."""

    kind: Literal["regression", "generative"] = Field("regression", description=(
        "World model: 'regression' (adapter + scalar head and a status classifier on pooled hidden states, fitted "
        "by MSE) or 'generative' (the World Model RL paper's judge: adapter fine-tuned to write the outcome as "
        "JSON, a status and for a valid program a quality bucket; predicts the expected reward of that "
        "distribution; needs adapter: true). A saved world model (world_model.path) must be of this kind."))
    ladder: Literal["percentile", "paper"] = Field("percentile", description=(
        "Generative kind: the reward of each predicted outcome. 'percentile': failures 0, a valid program the "
        "position its quality bucket stands for (the scale of the executed reward); 'paper': the World Model RL "
        "paper's ladder (runtime error 0.1, no submission 0.2, valid 0.5 + 0.5 x position)."))
    path: OptStr = Field(None, description=(
        "A pre-fitted world model folder (`wmrl wm fit`); null = fit one on a warm-up corpus at the start of the run "
        "(its cost goes into the ledger)."))
    adapter: bool = Field(True, description=(
        "Train a LoRA adapter of the world model (true) or only its regression head on frozen backbone features "
        "(false: much cheaper on CPU; regression kind only)."))
    lora_r: Int = Field(8, ge=1, description="LoRA rank of the world model's adapter.")
    max_length: Int = Field(320, ge=8, description="Tokens per world-model input (prompt + program, left-truncated).")
    program_features: Int = Field(0, ge=0, description=(
        "Regression kind: P hashed program-choice features (identifiers and name=value arguments, globally and per "
        "task) appended to the backbone features, so the head can tell apart programs that differ in one choice "
        "(0 = off; 1024 is plenty for the grammar scaffold)."))
    warmup_samples_per_task: Int = Field(8, ge=1, description=(
        "Warm-up corpus: programs sampled from the initial policy and executed per train task."))
    warmup_corpus: OptStr = Field(None, description=(
        "Reuse an execution log (SQLite) as the warm-up corpus instead of collecting one."))
    fit_epochs: Int = Field(3, ge=1, description="Epochs of world-model fitting.")
    fit_lr: Float = Field(3e-4, gt=0.0, description="Learning rate of the world model's LoRA weights.")
    head_lr: Float = Field(3e-3, gt=0.0, description=(
        "Learning rate of the world model's regression head (regression kind only)."))
    fit_time_budget_s: OptFloat = Field(None, ge=1.0, description=(
        "Stop fitting after this many wall seconds (null = no limit)."))
    heldout_fraction: Float = Field(0.2, ge=0.0, le=0.9, description=(
        "Fraction of warm-up groups held out to report the world model's accuracy (0 = fit on all)."))
    batch_size: Int = Field(8, ge=1, description="World-model fit batch size (trajectories per gradient step).")
    refresh_every_k: Int = Field(0, ge=0, description=(
        "Refit the world model on the warm-up corpus plus all anchors gathered so far every K steps (0 = off; the "
        "paper keeps it fixed)."))

    @model_validator(mode="after")
    def _generative_needs_adapter(self) -> WorldModelConfig:
        if self.kind == "generative" and not self.adapter:
            raise ValueError("world_model.kind 'generative' learns only through its LoRA adapter: set "
                             "world_model.adapter=true (or use world_model.kind=regression for a head on frozen "
                             "features)")
        if self.kind == "generative" and self.program_features:
            raise ValueError("world_model.program_features feeds the regression head; the generative world model "
                             "has none: set world_model.program_features=0 or world_model.kind=regression")
        return self


class OptimConfig(_Section):
    """Policy optimisation (GRPO loss and AdamW)."""

    steps: Int = Field(10, ge=1, description="Training steps.")
    lr: Float = Field(1e-5, gt=0.0, description="AdamW learning rate.")
    weight_decay: Float = Field(0.0, ge=0.0, description="AdamW weight decay.")
    clip_low: Float = Field(0.2, ge=0.0, le=1.0, description="PPO clip epsilon below 1 (ratio >= 1 - clip_low).")
    clip_high: Float = Field(0.2, ge=0.0, description=(
        "PPO clip epsilon above 1 (ratio <= 1 + clip_high; DAPO uses 0.28)."))
    beta: Float = Field(0.0, ge=0.0, description=(
        "KL penalty weight (k3 estimator against the reference policy); 0 = off."))
    aggregation: Literal["token_mean", "seq_mean"] = Field("token_mean", description=(
        "Loss aggregation: 'token_mean' (every completion token weighs the same) or 'seq_mean' (per-sequence token "
        "mean)."))
    normalize_std: bool = Field(True, description="Divide group advantages by the group std (False = Dr. GRPO).")
    adv_eps: Float = Field(1e-6, ge=0.0, description="Added to the group std before dividing.")
    grad_clip: Float = Field(1.0, ge=0.0, description="Max gradient norm (0 = no clipping).")
    micro_batch: Int = Field(4, ge=1, description="Trajectories per forward/backward pass (gradient accumulation).")


class ExecutorConfig(_Section):
    """Where real executions run."""

    kind: Literal["local", "ray"] = Field("local", description="'local' (process pool on the local machine) or 'ray'.")
    workers: Int = Field(2, ge=1, description="Concurrent executions.")
    address: OptStr = Field(None, description="Ray address (kind=ray); null = start a local Ray instance.")
    sandbox: bool = Field(True, description=(
        "Run programs inside the bubblewrap sandbox (turn off only for trusted code)."))
    time_limit_s: OptFloat = Field(None, ge=0.1, description=(
        "Per-execution wall limit, seconds; null = each task's own."))
    recheck_infra_errors: bool = Field(True, description=(
        "Re-execute a program once when it ends in infra_error; an error that comes back counts as the "
        "program's failure (failure reward), not as a missing outcome."))
    infra_background_rate: Float = Field(0.01, ge=0.0, lt=1.0, description=(
        "The executor's infra-error probability per execution when nothing is wrong; a step, group or "
        "evaluation whose infra errors are improbable under it raises the infra alarm."))
    infra_alarm_alpha: Float = Field(1e-3, gt=0.0, lt=1.0, description=(
        "False-alarm probability of each infra-alarm test (one-sided binomial test against "
        "infra_background_rate)."))


class EvalConfig(_Section):
    """Held-out evaluation with real execution."""

    every_k: Int = Field(0, ge=0, description="Evaluate every K steps (0 = only at the end).")
    at_start: bool = Field(False, description="Also evaluate the initial policy (step 0).")
    at_end: bool = Field(True, description="Evaluate the final policy.")
    samples_per_task: Int = Field(4, ge=1, description="Trajectories sampled and executed per evaluation task.")
    temperature: Float = Field(1.0, ge=1e-6, description="Sampling temperature during evaluation.")
    train_tasks: bool = Field(True, description="Also evaluate on the training tasks.")


class EpisodeConfig(_Section):
    """Multi-turn research episodes (docs/multiturn.md): the agent sees feedback and revises."""

    max_turns: Int = Field(1, ge=1, le=16, description=(
        "K: turns per episode (1 = single-turn trajectories, the default). Turn i's prompt holds the "
        "task and each earlier solution with its feedback; the episode's reward is the grade of its final submission. "
        "The paper runs up to 4."))
    validation_fraction: Float = Field(0.2, gt=0.0, lt=1.0, description=(
        "With max_turns > 1: fraction of train.csv the harness holds out as the validation split whose score is the "
        "feedback (seeded, stratified; never the test answers). Every execution of an episode fits on the rest."))
    error_chars: Int = Field(400, ge=0, description="Longest error tail an observation shows, characters.")
    wm_error_threshold: Float = Field(0.05, ge=0.0, le=1.0, description=(
        "World-model feedback: a calibrated predicted percentile below this is shown as a failed run (failures get "
        "the task's failure reward, 0)."))


class TrainConfig(_Section):
    """Everything `wmrl train` needs. See docs/training.md."""

    method: Method = Field("wmrl", description=(
        "The registered recipe (wmrl.core.recipe): 'grpo' (every group executed: the baseline), 'wm' (pure world "
        "model), 'wmrl' (anchors + debiasing + inverse-variance fusion), or an ablation: 'wmrl-raw' (the raw "
        "mixture), 'wmrl-no-debias', 'wmrl-no-denoise', 'wmrl-ppi', 'wmrl-bias-aware', 'anchor-only', 'wmrl-flat'."))
    name: str = Field("", description="Free-form run name (shown in reports); empty = the method.")
    run_dir: OptStr = Field(None, description="Run directory; null = runs/<method>-<UTC timestamp>.")
    seed: Int = Field(0, ge=0, description="Seed of every RNG (python, numpy, torch, task order, router).")
    checkpoint_every: Int = Field(1, ge=1, description=(
        "Checkpoint every N steps (1 = a SIGKILL loses at most the step in flight)."))
    keep_checkpoints: Int = Field(2, ge=1, description="Complete checkpoints kept on disk (older ones are pruned).")
    progress: bool = Field(True, description="Show a live progress bar.")
    threads: Int = Field(0, ge=0, description="torch intra-op threads (0 = leave torch's default).")
    model: ModelConfig = Field(default_factory=ModelConfig)
    scaffold: ScaffoldConfig = Field(default_factory=ScaffoldConfig)
    tasks: TasksConfig = Field(default_factory=TasksConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    wmrl: WmrlConfig = Field(default_factory=WmrlConfig)
    world_model: WorldModelConfig = Field(default_factory=WorldModelConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    episode: EpisodeConfig = Field(default_factory=EpisodeConfig)

    @model_validator(mode="before")
    @classmethod
    def _empty_sections(cls, data: Any) -> Any:
        """A section given with no keys (``model:`` alone in YAML is null) takes its defaults."""
        if isinstance(data, dict):
            return {k: {} if v is None and _is_section(getattr(cls.model_fields.get(k), "annotation", None)) else v
                    for k, v in data.items()}
        return data

    @model_validator(mode="after")
    def _wmrl_has_anchors(self) -> TrainConfig:
        if (get_recipe(self.method).anchors == "fraction" and self.wmrl.anchor_fraction <= 0.0
                and self.wmrl.min_anchor_every == 0):
            raise ValueError(f"method {self.method!r} needs anchors: set wmrl.anchor_fraction > 0 (or use method "
                             "'wm' for a pure world model)")
        if self.wmrl.anchor_staleness and not get_recipe(self.method).fuses:
            raise ValueError(f"wmrl.anchor_staleness={self.wmrl.anchor_staleness} needs a method with both an anchor "
                             f"and a world-model stream (the wmrl recipes: a step trains on the world model while "
                             f"its anchors are still running); method {self.method!r} has not both; set "
                             f"wmrl.anchor_staleness=0, or in a bench choose the wmrl methods with --methods")
        if self.wmrl.anchor_staleness and self.episode.max_turns > 1:
            raise ValueError(f"episode.max_turns={self.episode.max_turns} needs synchronous anchors: an anchor "
                             f"episode's next turn shows the feedback of its previous one, so it cannot run "
                             f"{self.wmrl.anchor_staleness} steps late; set wmrl.anchor_staleness=0 or "
                             f"episode.max_turns=1")
        return self


# --------------------------------------------------------------------------------------------------
# pydantic's errors as messages that name the key path, the value and what is allowed

def _strip(tp: Any) -> tuple[Any, bool]:
    """``(base type, nullable)`` of an annotation, without ``Annotated`` and ``Optional``."""
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    if get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        return _strip(args[0])[0], True
    return tp, False


def _is_section(tp: Any) -> TypeGuard[type[BaseModel]]:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _type_name(tp: Any) -> str:
    """An annotation as the type column of ``wmrl config show``: ``int``, ``str | null``, ``'a' | 'b'``."""
    base, nullable = _strip(tp)
    if get_origin(base) is Literal:
        name = " | ".join(repr(a) for a in get_args(base))
    elif get_origin(base) is list:
        name = f"list[{_type_name(get_args(base)[0])}]"
    else:
        name = getattr(base, "__name__", str(base))
    return name + (" | null" if nullable else "")


def _range_text(f: FieldInfo) -> str:
    """The allowed range of a field as text (``'0.0 .. 1.0'``, ``'> 0.0'``, ``'>= 1'``), '' when none."""
    b = {k: getattr(m, k) for m in f.metadata for k in ("ge", "gt", "le", "lt") if hasattr(m, k)}  # annotated-types
    lo, hi, gt = b.get("ge"), b.get("le"), b.get("gt")
    low = f"> {gt}" if gt is not None else (f">= {lo}" if lo is not None else "")
    if b.get("lt") is not None:
        return f"{low} and < {b['lt']}" if low else f"< {b['lt']}"
    if hi is None:
        return low
    if gt is None and lo is not None:
        return f"{lo} .. {hi}"
    return f"{low} and <= {hi}" if low else f"<= {hi}"


def _allowed(f: FieldInfo) -> str:
    """``'a finite number in 0.0 .. 1.0'``, ``'an integer >= 1'``: what a numeric field accepts."""
    rng = _range_text(f)
    kind = "an integer" if _strip(f.annotation)[0] is int else "a finite number"
    return kind + ((f" in {rng}" if ".." in rng else f" {rng}") if rng else "")


_EXPECTED = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
_RANGE_ERRORS = {"greater_than": ("is not above the minimum", "gt"),
                 "greater_than_equal": ("is below the minimum", "ge"),
                 "less_than_equal": ("is above the maximum", "le"),
                 "less_than": ("is not below the maximum", "lt")}


def _key(loc: tuple[Any, ...]) -> str:
    """``('tasks', 'train', 0)`` -> ``'tasks.train[0]'``."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


def _error_text(err: Any, root: type[BaseModel] | None = None) -> str:
    """One pydantic error (an item of ``ValidationError.errors()``) as a message naming the key path;
    ``root`` is the model the error's location starts at (default :class:`TrainConfig`)."""
    root = root or TrainConfig
    kind, loc, value = err["type"], tuple(err["loc"]), err.get("input")
    if kind == "value_error":  # a cross-field rule: its message names its keys itself
        return str(err["ctx"]["error"])
    owner: type[BaseModel] | None = root  # walk the models along the error's location
    field, item = None, False
    for part in loc:
        if isinstance(part, int):
            item = True
        elif owner is not None and part in owner.model_fields:
            field, item = owner.model_fields[part], False
            owner = field.annotation if _is_section(field.annotation) else None
    key = _key(loc)
    if kind in ("extra_forbidden", "invalid_key"):
        section, names = _key(loc[:-1]), list((owner or root).model_fields)
        name = value if kind == "invalid_key" else loc[-1]
        close = difflib.get_close_matches(str(name), names, n=1)
        removed = _removed_hint(f"{section}.{name}" if section else str(name)) if root is TrainConfig else ""
        hint = removed or (f" Did you mean {close[0]!r}?" if close else "")
        return (f"unknown config key {(f'{section}.{name}' if section else name)!r}.{hint} Allowed keys"
                f"{' in ' + section if section else ''}: {', '.join(names)}")
    base, nullable = _strip(field.annotation if field else root)
    if item:
        base, nullable = _strip(get_args(base)[0])
    if get_origin(base) is Literal:
        allowed = get_args(base)
        close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"{key}: {value!r} is not allowed; choose one of {', '.join(map(repr, allowed))}{hint}"
    if kind in _RANGE_ERRORS and field is not None:
        v = float(value) if base is float else value  # as pydantic read it ('nan' -> nan)
        if isinstance(v, float) and not math.isfinite(v):
            return f"{key}: {v!r} is not allowed; expected {_allowed(field)}"
        words, bound = _RANGE_ERRORS[kind]
        return f"{key}: {v!r} {words} {err['ctx'][bound]}; expected {_allowed(field)}"
    expected = ("a mapping of keys" if _is_section(base) else f"a list ({_type_name(base)})"
                if get_origin(base) is list else _EXPECTED.get(base, _type_name(base)))
    return f"{key or 'config'}: expected {expected}{' or null' if nullable else ''}, got {value!r}"


def _errors_text(e: ValidationError, root: type[BaseModel] | None = None) -> str:
    """Every error of ``e`` as :func:`_error_text` (locations from ``root``, default :class:`TrainConfig`),
    one per line."""
    return "\n".join(dict.fromkeys(_error_text(err, root) for err in e.errors(include_url=False)))


def _require_finite(obj: BaseModel, prefix: str = "") -> None:
    """Raise :class:`ConfigError` for a non-finite number anywhere in ``obj``. Pydantic's ``gt``/``ge``
    admit ``inf``; a config is loaded or trained only with finite numbers (:func:`validate`)."""
    for name, f in type(obj).model_fields.items():
        v, key = getattr(obj, name), f"{prefix}.{name}" if prefix else name
        if isinstance(v, BaseModel):
            _require_finite(v, key)
        elif isinstance(v, float) and not math.isfinite(v):
            raise ConfigError(f"{key}: {v!r} is not allowed; expected {_allowed(f)}")


def validate(cfg: TrainConfig) -> TrainConfig:
    """Check ``cfg`` as a whole again (types, ranges, choices and cross-field rules, also across sections
    assigned after it was built) and require every number finite; returns ``cfg`` or raises
    :class:`ConfigError` naming the key and what is allowed."""
    config_from_dict(config_to_dict(cfg))
    return cfg


def config_from_dict(data: dict[str, Any] | None) -> TrainConfig:
    """Build and validate a :class:`TrainConfig` from nested dicts (e.g. parsed YAML).

    Raises:
        ConfigError: unknown key, wrong type, out-of-range or disallowed value.
    """
    try:
        cfg = TrainConfig.model_validate(dict(data or {}))
    except ValidationError as e:
        raise ConfigError(_errors_text(e)) from None
    _require_finite(cfg)
    return cfg


def config_to_dict(cfg: TrainConfig) -> dict[str, Any]:
    """The config as plain nested dicts (YAML/JSON-serialisable), fields in declaration order."""
    return cfg.model_dump()


def _set_path(data: dict[str, Any], dotted: str, raw: str) -> None:
    """Set ``data[a][b] = value`` for ``dotted='a.b'``, checking every part against the models."""
    parts = dotted.split(".")
    cls: Any = TrainConfig
    node = data
    for i, part in enumerate(parts):
        names = list(cls.model_fields)
        where = ".".join(parts[: i + 1])
        if part not in names:
            close = difflib.get_close_matches(part, names, n=1)
            hint = _removed_hint(where) or (f" Did you mean {close[0]!r}?" if close else "")
            raise ConfigError(f"--set: unknown config key {where!r}.{hint} Allowed: {', '.join(names)}")
        tp = cls.model_fields[part].annotation
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
                              f"{dotted}.{next(iter(tp.model_fields))}=...")
        # YAML parsing gives numbers, booleans, null and lists; the models' types do the rest.
        # String fields keep the raw text (so "model.name=1e3" stays "1e3"), except null.
        try:
            value = yaml.safe_load(raw) if raw.strip() != "" else ""
        except yaml.YAMLError:
            value = raw
        if _strip(tp)[0] is str and value is not None:
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
    apply_overrides(data, overrides)  # ``data`` is this call's own parse: changing it in place is safe
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


def dump_config(cfg: TrainConfig) -> str:
    """The resolved config as YAML text (every field, sections in declaration order)."""
    return yaml.safe_dump(config_to_dict(cfg), sort_keys=False, default_flow_style=False)


def save_config(cfg: TrainConfig, path: str | Path) -> None:
    """Write the resolved config as YAML (atomically: temp file + rename)."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(dump_config(cfg))
    tmp.replace(p)


def describe_fields(cls: type[BaseModel] = TrainConfig, prefix: str = "",
                    obj: Any = None) -> list[tuple[str, str, str, str]]:
    """Rows ``(key, type, value, help)`` for every field, nested sections flattened with dots.

    ``obj`` (an instance of ``cls``) gives the values; defaults when None.
    """
    obj = obj if obj is not None else cls()
    rows = []
    for name, f in cls.model_fields.items():
        key = f"{prefix}.{name}" if prefix else name
        if _is_section(f.annotation):
            rows.extend(describe_fields(f.annotation, key, getattr(obj, name)))
            continue
        rng = _range_text(f)
        help_text = (f.description or "") + (f" [range: {rng}]" if rng else "")
        rows.append((key, _type_name(f.annotation), yaml.safe_dump(getattr(obj, name), default_flow_style=True)
                     .strip().removesuffix("...").strip(), help_text))
    return rows

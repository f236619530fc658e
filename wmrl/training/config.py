"""Typed training configuration: pydantic v2 models, YAML loading, ``--set`` overrides, validation.

Every option is one typed pydantic field whose ``Field(description=...)`` is the help text that
``wmrl config show`` prints; its range is the field's ``ge``/``gt``/``le`` and its choices a ``Literal``.
Pydantic does the coercion and checks; :mod:`wmrl.runs.config` adds YAML that refuses a key given twice,
``--set a.b=value`` overrides, a ``describe_fields`` table, and :class:`ConfigError` messages that name the key
path, the bad value and what is allowed (with a did-you-mean for typos), so a typo in a YAML file never trains
silently with defaults.

Usage::

    cfg = load_config("configs/quickstart.yaml", overrides=["optim.steps=3", "method=grpo"])
    save_config(cfg, run_dir / "config.yaml")

The config kit under it (strict YAML, overrides, the error messages) is :mod:`wmrl.runs.config`, shared with
the embodied track; the recipe's section (``wmrl``) is :class:`wmrl.step.config.RecipeConfig`, shared with it too.
"""
from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, model_validator

from wmrl.core.recipe import BASELINE, RECIPES, WMRL, get_recipe, recipe_names
from wmrl.models.backbone import CONTEXT_TOKENS
from wmrl.models.scaffolds import SCAFFOLDS
from wmrl.step.config import RENAMED_KEYS, RecipeConfig
from wmrl.step.environment import EnvironmentName
from wmrl.world_model.factory import WORLD_MODELS
from wmrl.runs import config as _kit
from wmrl.runs.plugins import import_plugins, plugin_files_from
from wmrl.runs.tracking import TRACKERS_HELP, Trackers, TrackingConfig, default_trackers
from wmrl.runs.config import (  # noqa: F401 (the kit's names, re-exported for the text track's callers)
    ConfigError, ConfigSection, Float, Int, OptFloat, OptIds, OptStr, Plugins, _errors_text, _is_section,
    _require_finite, _Section,
    dump_config, load_yaml, save_config)




#: The training methods: the one place their names are checked (``method: ...`` and ``--set method=``), against
#: the registered recipes of :mod:`wmrl.core.recipe` (one name per method and ablation), when the config is
#: validated (so a recipe registered after this module was imported is accepted).
Method = Annotated[str, AfterValidator(partial(RECIPES.check, key="method"))]

#: A name checked against a registry when the config is validated (a name registered after this module was
#: imported, by a module of ``plugins``, or offered by an entry point, is accepted): the world-model kind, the
#: scaffold (the environment: :data:`wmrl.step.environment.EnvironmentName`, and the router:
#: :data:`wmrl.step.config.RouterName`, shared with the embodied track).
WorldModelKind = Annotated[str, AfterValidator(partial(WORLD_MODELS.check, key="world_model.kind"))]
ScaffoldName = Annotated[OptStr, AfterValidator(lambda v: v if v is None else SCAFFOLDS.check(v, key="scaffold.name"))]

#: The environment whose real rewards are the sandbox's executions (the execution log, multi-turn feedback and
#: favourite verification are that environment's).
SANDBOX_ENVIRONMENT = "kaggle"

#: The method's help: the headline recipes described, the ablations listed from the registry.
_METHOD_HELP = (
    f"The registered recipe (wmrl.core.recipe): {BASELINE!r} (every group executed: the baseline), 'wm' (pure world "
    f"model), {WMRL!r} (anchors + debiasing + inverse-variance fusion + recalled executions), or an ablation: "
    + ", ".join(repr(n) for n in recipe_names() if n not in (BASELINE, "wm", WMRL))
    + " (docs/training.md, Methods).")

#: Keys that existed once, with what replaces them (their error says so).
REMOVED_KEYS = {
    "wmrl.debias": "the ablation is a method now: method=wmrl-no-debias",
    "wmrl.denoise": "the ablation is a method now: method=wmrl-no-denoise",
    "wmrl.fusion": "the fusion rule is part of the method now: method=wmrl (ivw) or method=wmrl-ppi",
    "wmrl.bias_aware": "the bias-aware alpha is a method now: method=wmrl-bias-aware",
}


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

    name: ScaffoldName = Field(None, description=(
        f"Scaffold name: {', '.join(SCAFFOLDS.names())} or a registered one (see `wmrl scaffolds`); null = the "
        "models package's default scaffold."))


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
        "or 'generate' (transformers' generate, one prefill per row: the baseline of `wmrl models bench`). Both "
        "sample the same distribution, not the same draws."))

    @model_validator(mode="after")
    def _groups_of_two(self) -> RolloutConfig:
        if self.group_size < 2:
            raise ValueError(f"rollout.group_size: {self.group_size} trajectory per group cannot train: every "
                             "method uses group-relative advantages (reward minus the group's mean), which are all "
                             "0 with one trajectory, so every update would be skipped; set rollout.group_size >= 2")
        return self


class WorldModelConfig(_Section):
    """The world model that scores trajectories without running them (the policy's backbone, shared,
    plus its own LoRA adapter and a regression head, or an adapter that writes the outcome as the World Model RL
    paper's judge does)."""

    kind: WorldModelKind = Field("regression", description=(
        "World model: 'regression' (adapter + scalar head and a status classifier on pooled hidden states, fitted "
        "by MSE) or 'generative' (the WMRL paper's judge: adapter fine-tuned to write the outcome as "
        "JSON, a status and for a valid program a quality bucket; predicts the expected reward of that "
        "distribution; needs adapter: true). A saved world model (world_model.path) must be of this kind."))
    ladder: Literal["percentile", "paper"] = Field("percentile", description=(
        "Generative kind: the reward of each predicted outcome. 'percentile': failures 0, a valid program the "
        "position its quality bucket stands for (the scale of the executed reward); 'paper': the World Model RL "
        "paper's ladder (runtime error 0.1, no submission 0.2, valid 0.5 + 0.5 x position)."))
    path: OptStr = Field(None, description=(
        "A pre-fitted world model folder (`wmrl wm fit`); null = fit one on a warm-up corpus at the start of the run "
        "(its cost goes into the ledger). Its kind, program_features and residual_neighbours must be this "
        "config's."))
    adapter: bool = Field(True, description=(
        "Train a LoRA adapter of the world model (true) or only its regression head on frozen backbone features "
        "(false: much cheaper on CPU; regression kind only)."))
    lora_r: Int = Field(8, ge=1, description="LoRA rank of the world model's adapter.")
    max_length: Int = Field(320, ge=8, description="Tokens per world-model input (prompt + program, left-truncated).")
    program_features: Int = Field(0, ge=0, description=(
        "Regression kind: P hashed program-choice features (identifiers and name=value arguments, globally and per "
        "task) appended to the backbone features, so the head can tell apart programs that differ in one choice "
        "(0 = off; 1024 is plenty for the grammar scaffold)."))
    residual_neighbours: Int = Field(0, ge=0, description=(
        "Regression kind: correct each prediction by the kernel-weighted residual of the K executed programs of the "
        "same prompt (corpus and anchors) nearest in feature space, so an executed program informs its neighbours "
        "(0 = off; under a method without recall a program's own executions are left out; docs/models.md, "
        "'Residual of executed neighbours')."))
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
    url: OptStr = Field(None, description=(
        "Base URL of a `wmrl serve world-model` service (e.g. http://gpu-host:8766) that scores the trajectories; "
        "null = the world model runs in the trainer. A served model is neither fitted nor refreshed by the run "
        "(no warm-up, world_model.path unused; docs/services.md)."))
    token_env: str = Field("WMRL_SERVE_TOKEN", description=(
        "Environment variable holding the world-model service's bearer token (unset: no token sent)."))

    @model_validator(mode="after")
    def _served_model_is_not_fitted(self) -> WorldModelConfig:
        if self.url and (self.path or self.warmup_corpus or self.refresh_every_k):
            raise ValueError("world_model.url serves a model fitted elsewhere: leave world_model.path, "
                             "world_model.warmup_corpus and world_model.refresh_every_k unset (fit the served model "
                             "with `wmrl wm fit` and restart the service on it)")
        if self.url and (self.program_features or self.residual_neighbours):
            raise ValueError("world_model.url serves a model fitted elsewhere, whose program features and residual "
                             "neighbours are its own: leave world_model.program_features and "
                             "world_model.residual_neighbours at 0 (they only apply to a world model the run builds)")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"world_model.url {self.url!r} must start with http:// or https://")
        return self

    @model_validator(mode="after")
    def _generative_needs_adapter(self) -> WorldModelConfig:
        if self.kind == "generative" and not self.adapter:
            raise ValueError("world_model.kind 'generative' learns only through its LoRA adapter: set "
                             "world_model.adapter=true (or use world_model.kind=regression for a head on frozen "
                             "features)")
        if self.kind == "generative" and self.residual_neighbours:
            raise ValueError("world_model.residual_neighbours corrects the regression head; the generative world "
                             "model has none: set world_model.residual_neighbours=0 or world_model.kind=regression")
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

    kind: Literal["local", "ray", "remote"] = Field("local", description=(
        "'local' (process pool on the local machine), 'ray', or 'remote' (a `wmrl serve sandbox` service at "
        "executor.url; docs/services.md)."))
    workers: Int = Field(2, ge=1, description="Concurrent executions.")
    address: OptStr = Field(None, description="Ray address (kind=ray); null = start a local Ray instance.")
    sandbox: bool = Field(True, description=(
        "Run programs inside the bubblewrap sandbox (turn off only for trusted code)."))
    time_limit_s: OptFloat = Field(None, ge=0.1, description=(
        "Per-execution wall limit, seconds; null = each task's own."))
    cache: bool = Field(False, description=(
        "Execute each distinct (task, program) once per run and answer repeats from the execution log at no "
        "compute (executions are deterministic; wmrl.execution.cache). Off by default, as in the WMRL paper's "
        "GRPO; a user running GRPO would turn it on."))
    recheck_infra_errors: bool = Field(True, description=(
        "Re-execute a program once when it ends in infra_error; an error that comes back counts as the "
        "program's failure (failure reward), not as a missing outcome."))
    infra_background_rate: Float = Field(0.01, ge=0.0, lt=1.0, description=(
        "The executor's infra-error probability per execution when nothing is wrong; a step, group or "
        "evaluation whose infra errors are improbable under it raises the infra alarm."))
    infra_alarm_alpha: Float = Field(1e-3, gt=0.0, lt=1.0, description=(
        "False-alarm probability of each infra-alarm test (one-sided binomial test against "
        "infra_background_rate)."))
    url: OptStr = Field(None, description=(
        "Base URL of the `wmrl serve sandbox` service (kind=remote), e.g. http://cpu-host:8765; executor.workers "
        "requests are in flight at once."))
    token_env: str = Field("WMRL_SERVE_TOKEN", description=(
        "Environment variable holding the sandbox service's bearer token (kind=remote; unset: no token sent)."))

    @model_validator(mode="after")
    def _remote_needs_url(self) -> ExecutorConfig:
        if self.kind == "remote" and not self.url:
            raise ValueError("executor.kind=remote needs executor.url, the `wmrl serve sandbox` service's base URL "
                             "(e.g. http://cpu-host:8765)")
        if self.url and self.kind != "remote":
            raise ValueError(f"executor.url is set but executor.kind is {self.kind!r}: set executor.kind=remote "
                             "to use the service, or drop executor.url")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"executor.url {self.url!r} must start with http:// or https://")
        return self


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
        "The WMRL paper runs up to 4."))
    validation_fraction: Float = Field(0.2, gt=0.0, lt=1.0, description=(
        "With max_turns > 1: fraction of train.csv the harness holds out as the validation split whose score is the "
        "feedback (seeded, stratified; never the test answers). Every execution of an episode fits on the rest."))
    error_chars: Int = Field(400, ge=0, description="Longest error tail an observation shows, characters.")
    wm_error_threshold: Float = Field(0.05, ge=0.0, le=1.0, description=(
        "World-model feedback: a calibrated predicted percentile below this is shown as a failed run (failures get "
        "the task's failure reward, 0)."))


class TrainConfig(_Section):
    """Everything `wmrl train` needs. See docs/training.md."""

    removed_keys: ClassVar[dict[str, str]] = REMOVED_KEYS
    renamed_keys: ClassVar[dict[str, str]] = RENAMED_KEYS

    method: Method = Field(WMRL, description=_METHOD_HELP)
    environment: EnvironmentName = Field("kaggle", description=(
        "The registered environment the text trainer samples and rewards (wmrl.step.environment): 'kaggle' (the "
        "tasks' programs run in the sandbox and graded), or one of a plugin or an entry point (docs/plugins.md). "
        "Multi-turn episodes, recall from the execution log and wmrl.routing.verify_favourites read the sandbox's "
        "executions, so they need 'kaggle'."))
    plugins: Plugins = Field(default_factory=list, description=(
        "Python modules imported before the other keys are checked, each registering its own recipes, environments, "
        "routers, ... (docs/plugins.md): a module name on the Python path, or a .py file (in a config file relative "
        "to the file's folder, in --set relative to the current directory), e.g. [lint_env.py]."))
    name: str = Field("", description="Free-form run name (shown in reports); empty = the method.")
    run_dir: OptStr = Field(None, description="Run directory; null = runs/<name or method>-<UTC timestamp>.")
    seed: Int = Field(0, ge=0, le=_kit.MAX_SEED, description=(
        "Seed of every RNG (python, numpy, torch, task order, router); numpy's global RNG takes at most 2**32 - 1."))
    checkpoint_every: Int = Field(1, ge=1, description=(
        "Checkpoint every N steps (1 = a SIGKILL loses at most the step in flight)."))
    keep_checkpoints: Int = Field(2, ge=1, description="Complete checkpoints kept on disk (older ones are pruned).")
    progress: bool = Field(True, description="Show a live progress bar.")
    threads: Int = Field(0, ge=0, description="torch intra-op threads (0 = leave torch's default).")
    model: ModelConfig = Field(default_factory=ModelConfig)
    scaffold: ScaffoldConfig = Field(default_factory=ScaffoldConfig)
    tasks: TasksConfig = Field(default_factory=TasksConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    wmrl: RecipeConfig = Field(default_factory=RecipeConfig, description=(
        "The recipe's settings in sub-sections (wmrl.step.config): routing, calibration, fusion, asynchronous "
        "anchors, the exploitation alarm; the same section as the embodied track's."))
    world_model: WorldModelConfig = Field(default_factory=WorldModelConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    episode: EpisodeConfig = Field(default_factory=EpisodeConfig)
    trackers: Trackers = Field(default_factory=default_trackers, description=TRACKERS_HELP)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)

    @model_validator(mode="before")
    @classmethod
    def _plugins_first(cls, data: Any) -> Any:
        """The modules of ``plugins`` are imported before any other key is checked (they register names)."""
        return import_plugins(data)

    @model_validator(mode="after")
    def _tokens_fit_the_model(self) -> TrainConfig:
        context = CONTEXT_TOKENS.get(self.model.name)
        if context is not None and self.rollout.max_new_tokens >= context:
            raise ValueError(f"rollout.max_new_tokens={self.rollout.max_new_tokens} does not fit model "
                             f"{self.model.name!r}, whose context holds {context} tokens (prompt and completion); "
                             f"set it below {context}, e.g. the default 96")
        return self

    @model_validator(mode="after")
    def _wmrl_has_anchors(self) -> TrainConfig:
        recipe, w, turns = get_recipe(self.method), self.wmrl, self.episode.max_turns
        staleness, verify = w.asynchronous.staleness, w.routing.verify_favourites
        if recipe.anchors == "fraction" and w.routing.anchor_fraction <= 0.0 and w.routing.min_anchor_every == 0:
            raise ValueError(f"method {self.method!r} needs anchors: set wmrl.routing.anchor_fraction > 0 (or use "
                             "method 'wm' for a pure world model)")
        if staleness and not recipe.fuses:
            raise ValueError(f"wmrl.asynchronous.staleness={staleness} needs a method with both an anchor and a "
                             f"world-model stream (the wmrl recipes: a step trains on the world model while its "
                             f"anchors are still running); method {self.method!r} has not both; set "
                             f"wmrl.asynchronous.staleness=0, or in a bench choose the wmrl methods with --methods")
        if verify and not (recipe.recall and turns == 1):
            raise ValueError(f"wmrl.routing.verify_favourites feeds each world-model group's executed favourite in as "
                             f"a recalled reward: it needs a method with recall (one of "
                             f"{', '.join(n for n in recipe_names() if get_recipe(n).recall)}) and "
                             f"episode.max_turns=1; method {self.method!r}, episode.max_turns={turns}")
        if self.environment != SANDBOX_ENVIRONMENT and (turns > 1 or verify):
            raise ValueError(f"environment {self.environment!r}: episode.max_turns > 1 and "
                             f"wmrl.routing.verify_favourites run programs in the sandbox, so they need environment "
                             f"{SANDBOX_ENVIRONMENT!r}; set episode.max_turns=1 and "
                             f"wmrl.routing.verify_favourites=false")
        if staleness and turns > 1:
            raise ValueError(f"episode.max_turns={turns} needs synchronous anchors: an anchor episode's next turn "
                             f"shows the feedback of its previous one, so it cannot run {staleness} steps late; set "
                             f"wmrl.asynchronous.staleness=0 or episode.max_turns=1")
        return self


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
    return _kit.model_from_dict(TrainConfig, data)


def config_to_dict(cfg: TrainConfig) -> dict[str, Any]:
    """The config as plain nested dicts (YAML/JSON-serialisable), fields in declaration order."""
    return cfg.model_dump()


def apply_overrides(data: dict[str, Any], overrides: list[str] | None) -> dict[str, Any]:
    """Apply ``key.sub=value`` strings to nested dict ``data`` of a :class:`TrainConfig` (in place; also returned).

    Raises:
        ConfigError: an override without ``=`` or naming an unknown key.
    """
    return _kit.apply_overrides(TrainConfig, data, overrides)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> TrainConfig:
    """Read a YAML config (or the defaults when ``path`` is None), apply overrides, validate.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ConfigError: ``path`` is a folder, invalid YAML (message: file, line, column, problem), unknown
            keys or bad values (message names them).
    """
    data = _kit.read_config_file(path)
    if path is not None:
        plugin_files_from(data, Path(path).parent)  # the file's plugin paths are read from its folder
    apply_overrides(data, overrides)  # ``data`` is this call's own parse: changing it in place is safe
    return config_from_dict(data)


def describe_fields(cls: type[Any] | None = None, prefix: str = "", obj: Any = None) -> list[tuple[str, str, str, str]]:
    """Rows ``(key, type, value, help)`` for every field of ``cls`` (default :class:`TrainConfig`), nested sections
    flattened with dots (:func:`wmrl.runs.config.describe_fields`)."""
    return _kit.describe_fields(cls or TrainConfig, prefix, obj)

"""The recipe's config section, the ``wmrl`` section of both tracks' configs: one typed section in five sub-sections
that map onto the step engine (:class:`~wmrl.step.engine.StepEngine`) and the recipe's
:class:`~wmrl.core.recipe.RecipeSettings`.

============  ==========================================================================================
routing       which groups are executed for real: rho, the anchor floor, the router, favourite verification
calibration   the debiasing's calibrator: its window, its minimum of anchor pairs, its fallback map
fusion        the fusion of the two streams: the pooled-alpha minimum, the clip range of alpha
asynchronous  the asynchronous anchor stream: the staleness bound k and what late anchors do
alarm         the exploitation alarm: its response, the CUSUM threshold and drift, the raised anchor fraction
============  ==========================================================================================

Each field's ``Field(description=...)`` is its help (``wmrl config show``); the defaults are the text track's. A
track that needs other defaults names them in one mapping given to :func:`with_track_defaults` (the embodied
track's :data:`wmrl.embodied.config.EMBODIED_RECIPE_DEFAULTS`). The keys of this section before it had sub-sections
(``wmrl.anchor_fraction``, ...) are read as their new names by the config kit (:data:`RENAMED_KEYS`, a root
config's ``renamed_keys``; :func:`wmrl.runs.config.migrate_keys`), in files and in ``--set``.

Usage::

    engine = StepEngine.from_config(cfg.method, cfg.wmrl, seed=cfg.seed)   # wmrl.step.engine
    settings = cfg.wmrl.recipe_settings(normalize_std=cfg.optim.normalize_std)
"""
from __future__ import annotations

import copy
from collections.abc import Mapping
from functools import partial
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, model_validator

from wmrl.core.axes import RecipeSettings
from wmrl.core.routing import ROUTERS
from wmrl.runs.config import ConfigSection, Float, Int

#: Where both tracks keep this section in their root config.
SECTION = "wmrl"

#: A router name, checked against the registry when the config is validated (one registered by a plugin is
#: accepted).
RouterName = Annotated[str, AfterValidator(partial(ROUTERS.check, key=f"{SECTION}.routing.router"))]


class RoutingConfig(ConfigSection):
    """Which groups are executed for real (anchors); ignored by recipes without anchors at rho."""

    anchor_fraction: Float = Field(0.1, ge=0.0, le=1.0, description=(
        "rho: long-run fraction of groups executed for real (anchors)."))
    min_anchor_every: Int = Field(10, ge=0, description=(
        "Guarantee at least one anchor group every N steps (0 = off). With few groups per step and a small rho this "
        "keeps the calibrator fed; the router pays the forced anchor back later, so the long-run fraction stays rho."))
    router: RouterName = Field("fraction", description=(
        "Anchor router: 'fraction' (carry the fractional part between steps), 'stratified' (also balance anchors "
        "across tasks), 'hash' (each group decided by a hash of its task, no min_anchor_every floor) or a "
        "registered one (wmrl.core.routing.ROUTERS)."))
    verify_favourites: bool = Field(False, description=(
        "Favourite verification (text track): in every world-model group the program the world model scores highest "
        "is executed for real before the recipe runs (unless the run executed it before: then its measured reward is "
        "recalled for free), and its true reward replaces the world model's for that program, as a recalled "
        "execution does. A monotone calibration keeps the world model's order inside a group, so a policy following "
        "it ends at the world model's favourite; verifying the favourite is what lets the true reward reorder it. At "
        "most one execution per world-model group and step, counted in the training compute (ledger kind "
        "'verify'). Needs a recipe with recall (wmrl, wmrl-cv, wmrl-ppi, ...) and single-turn episodes "
        "(docs/training.md)."))

    @model_validator(mode="after")
    def _router_honours_settings(self) -> RoutingConfig:
        try:  # the router refuses settings it cannot honour (the hash router: a min_anchor_every floor)
            ROUTERS.get(self.router)(fraction=self.anchor_fraction, min_every=self.min_anchor_every or None)
        except ValueError as e:
            raise ValueError(f"{SECTION}.routing.router={self.router!r}: {e}") from None
        return self


class CalibrationConfig(ConfigSection):
    """The debiasing's calibrator (recipes with the ``isotonic`` debiasing)."""

    window: Int = Field(256, ge=1, description=(
        "Anchor pairs (most recent) the calibrator is fitted on; the fusion's window holds as many."))
    min_anchors: Int = Field(32, ge=1, description=(
        "Below this many anchor pairs the calibrator falls back to calibration.fallback. 32: with 24 anchors or "
        "fewer per run the isotonic map made the out-of-sample squared error 1.06-1.21x the raw one in the cpu-small "
        "bench (docs/training.md); the WMRL paper's reference waits for 200."))
    fallback: Literal["identity", "affine"] = Field("identity", description=(
        "Map used below calibration.min_anchors: 'identity' or 'affine' (least squares with positive slope)."))


class FusionConfig(ConfigSection):
    """The fusion of the anchor and world-model streams (recipes with both)."""

    min_pairs: Int = Field(8, ge=1, description=(
        "Below this many out-of-sample anchor pairs the fusion weight alpha is the pooled n_A / (n_A + n_W) instead "
        "of the inverse-variance estimate."))
    alpha_floor: Float = Field(0.05, ge=0.0, le=1.0, description="Lower clip of alpha (anchor-gradient weight).")
    alpha_ceiling: Float = Field(0.95, ge=0.0, le=1.0, description="Upper clip of alpha.")

    @model_validator(mode="after")
    def _floor_below_ceiling(self) -> FusionConfig:
        if self.alpha_floor > self.alpha_ceiling:
            raise ValueError(f"{SECTION}.fusion.alpha_floor ({self.alpha_floor}) must not exceed "
                             f"{SECTION}.fusion.alpha_ceiling ({self.alpha_ceiling})")
        return self


class AsynchronousConfig(ConfigSection):
    """The asynchronous anchor stream (text track; recipes with both streams; docs/scaling.md)."""

    staleness: Int = Field(0, ge=0, description=(
        "k, the staleness bound of the asynchronous anchor stream (steps): anchor executions run while training "
        "goes on and are consumed when they finish, at most k steps after their own (the trainer waits there); "
        "late ones go where asynchronous.late_anchors says. 0 = synchronous (every step waits for its anchors). "
        "wmrl recipes only (docs/scaling.md)."))
    late_anchors: Literal["gradient", "calibration"] = Field("gradient", description=(
        "What an anchor group consumed after its own step does (staleness > 0): 'gradient' (left out of its own "
        "step, it enters the loss of its arrival step, importance-corrected by the clipped ratio to the policy "
        "that sampled it, and feeds the calibration) or 'calibration' (it trains as a world-model group at its own "
        "step and its pairs only feed the calibrator and the fusion window). The simulation's staleness axis chose "
        "'gradient' (docs/scaling.md)."))
    late_ratio_max: Float = Field(2.0, gt=1.0, description=(
        "Late anchor rows in the gradient keep their importance ratio pi_now / pi_sampled in [0.001, this] (PPO's "
        "[0.8, 1.2] cuts off too much of a stale sample; the simulation's staleness axis chose 2, docs/scaling.md)."))
    steps_without_anchors: Literal["skip", "update"] = Field("skip", description=(
        "A step of the asynchronous stream (staleness > 0, late_anchors 'gradient') whose own anchor groups are "
        "all still running and at which no other anchor group arrives (the first steps of a run, and gaps between "
        "arrivals): 'skip' makes no policy update there (its anchors enter the loss when they arrive) or 'update' "
        "trains on its world-model groups alone, the pure world-model update an exploitable world model feeds. The "
        "simulation chose 'skip' (docs/scaling.md)."))
    over_bound_anchors: Literal["wait", "calibration", "drop"] = Field("wait", description=(
        "What an anchor group still running when its staleness reaches the bound does: 'wait' (the step blocks "
        "until it is done, stage anchor_wait, and consumes it as a late group), 'calibration' (not waited for: its "
        "executions keep running and, when they arrive, their pairs feed only the calibrator and the fusion window, "
        "no gradient: beyond the bound the importance ratio is not trusted) or 'drop' (not waited for; its results "
        "are discarded, which biases the calibration toward fast programs where run time follows quality). With "
        "'calibration' or 'drop' generation never waits on executions (anchor_wait is 0). Needs staleness >= 1 "
        "unless 'wait' (docs/scaling.md)."))

    @model_validator(mode="after")
    def _over_bound_needs_a_bound(self) -> AsynchronousConfig:
        if self.over_bound_anchors != "wait" and not self.staleness:
            key = f"{SECTION}.asynchronous"
            raise ValueError(f"{key}.over_bound_anchors={self.over_bound_anchors!r} needs an asynchronous anchor "
                             f"stream: set {key}.staleness to the bound k >= 1 (with k = 0 every step waits for its "
                             f"own anchors), or leave {key}.over_bound_anchors at 'wait'")
        return self


class AlarmConfig(ConfigSection):
    """The exploitation alarm (text track; recipes with both streams; docs/training.md)."""

    response: Literal["none", "warn", "raise_anchors", "refit", "stop"] = Field("warn", description=(
        "The exploitation alarm: a sequential (CUSUM) test on each step's anchors for a policy moving onto programs "
        "the world model over-rates (anchors scoring below their calibrated predictions, or ordered worse than "
        "chance by the world model). When it fires: 'warn' (train.log, console, metrics), 'raise_anchors' (also "
        "double the anchor fraction, up to alarm.max_anchor_fraction), 'refit' (also refit the world model on every "
        "anchor so far), 'stop' (also stop at the step's checkpoint; resume to continue), or 'none' (no test). "
        "Recipes with both streams only (docs/training.md)."))
    threshold: Float = Field(8.0, gt=0.0, description=(
        "h of the alarm's CUSUM tests, in standard deviations: larger = fewer false alarms, later detection "
        "(docs/simulation.md measures both)."))
    drift: Float = Field(0.5, ge=0.0, description=(
        "k of the alarm's CUSUM tests: the drift allowed per anchor group, in standard deviations."))
    max_anchor_fraction: Float = Field(0.5, gt=0.0, le=1.0, description=(
        "The highest anchor fraction the 'raise_anchors' response doubles up to."))


class RecipeConfig(ConfigSection):
    """The recipe's settings (anchors, calibration, fusion, asynchronous anchors, the exploitation alarm); ignored
    by ``grpo`` and ``wm`` where they concern the stream those have not."""

    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    calibration: CalibrationConfig = Field(default_factory=CalibrationConfig)
    fusion: FusionConfig = Field(default_factory=FusionConfig)
    asynchronous: AsynchronousConfig = Field(default_factory=AsynchronousConfig)
    alarm: AlarmConfig = Field(default_factory=AlarmConfig)

    def recipe_settings(self, *, normalize_std: bool = True, adv_eps: float | None = None) -> RecipeSettings:
        """The :class:`~wmrl.core.recipe.RecipeSettings` of this section: the calibrator's window, minimum and
        fallback, the fusion window (as many pairs as the calibrator's), minimum and alpha clip range; with
        the advantage settings of the track's ``optim`` section (``normalize_std``; ``adv_eps``, None: the
        settings' default)."""
        c, f = self.calibration, self.fusion
        default = RecipeSettings()
        return RecipeSettings(
            normalize_std=bool(normalize_std), adv_eps=default.adv_eps if adv_eps is None else float(adv_eps),
            calibrator_window=c.window, calibrator_min_anchors=c.min_anchors, calibrator_fallback=c.fallback,
            window_pairs=c.window, alpha_floor=f.alpha_floor, alpha_ceiling=f.alpha_ceiling,
            fusion_min_pairs=f.min_pairs)


#: The keys of this section before it had sub-sections, with their names now (dotted from the root config): the
#: config kit reads a file or a ``--set`` that gives an old name as the new one.
RENAMED_KEYS: dict[str, str] = {f"{SECTION}.{old}": f"{SECTION}.{new}" for old, new in {
    "anchor_fraction": "routing.anchor_fraction", "min_anchor_every": "routing.min_anchor_every",
    "router": "routing.router", "verify_favourites": "routing.verify_favourites",
    "calibrator_window": "calibration.window", "calibrator_min_anchors": "calibration.min_anchors",
    "calibrator_fallback": "calibration.fallback",
    "fusion_min_pairs": "fusion.min_pairs", "alpha_floor": "fusion.alpha_floor",
    "alpha_ceiling": "fusion.alpha_ceiling",
    "anchor_staleness": "asynchronous.staleness", "late_anchors": "asynchronous.late_anchors",
    "late_ratio_max": "asynchronous.late_ratio_max", "steps_without_anchors": "asynchronous.steps_without_anchors",
    "over_bound_anchors": "asynchronous.over_bound_anchors",
    "exploit_alarm": "alarm.response", "exploit_alarm_threshold": "alarm.threshold",
    "exploit_alarm_drift": "alarm.drift", "exploit_alarm_max_anchor_fraction": "alarm.max_anchor_fraction",
}.items()}


def with_track_defaults(data: Any, defaults: Mapping[str, Mapping[str, Any]]) -> Any:
    """A track root config's raw ``data`` (a dict, as given) with the track's own defaults of this section under
    what ``data`` gives: ``defaults`` maps a sub-section to ``{field: value}`` (e.g. ``{"routing":
    {"anchor_fraction": 0.25}}``). Call it from the root's ``mode="before"`` validator, after the renamed keys were
    moved (:func:`wmrl.runs.config.migrate_keys`); ``data`` that is not a dict is returned as it is (the validation
    names it)."""
    if not isinstance(data, dict):
        return data
    section = data.get(SECTION)
    if section is None:
        section = {}
    if not isinstance(section, dict):
        return data
    merged = {k: copy.deepcopy(v) for k, v in section.items()}
    for sub, values in defaults.items():
        given = merged.get(sub)
        if given is None:
            merged[sub] = dict(values)
        elif isinstance(given, dict):
            merged[sub] = {**values, **given}
    return {**data, SECTION: merged}

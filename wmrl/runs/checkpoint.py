"""The checkpoint envelope both tracks write: ``trainer_state.json`` keeps the step engine's state under the keys of
:meth:`wmrl.step.engine.StepEngine.state_dict` (``recipe``: the recipe's calibrator and anchor window; ``router``),
next to the track's own counters, and the environment's own state (an environment with ``state_dict``, e.g. the run
times of :class:`wmrl.step.multiturn.MultiTurnKaggleEnvironment`) under ``environment``. :func:`engine_state` and
:func:`environment_state` read them back from every shape a checkpoint was ever saved in, so the migrations of old
checkpoints live here and nowhere else.
"""
from __future__ import annotations

from typing import Any

#: The keys of the engine's state in ``trainer_state.json``.
ENGINE_KEYS = ("recipe", "router")


def engine_state(saved: dict[str, Any]) -> dict[str, Any]:
    """``{"recipe": ..., "router": ...}`` of a saved ``trainer_state.json`` (as a dict), from any of its shapes:
    ``recipe`` (both tracks), ``recipe_state`` (embodied checkpoints saved before one envelope), or top-level
    ``calibrator`` and ``window`` (text checkpoints saved before the recipe object).

    Raises:
        ValueError: the state holds no engine state (the message names the keys it has).
    """
    if "router" in saved:
        if "recipe" in saved:
            return {"recipe": saved["recipe"], "router": saved["router"]}
        if "recipe_state" in saved:
            return {"recipe": saved["recipe_state"], "router": saved["router"]}
        if "calibrator" in saved and "window" in saved:
            return {"recipe": {"calibrator": saved["calibrator"], "window": saved["window"]}, "router": saved["router"]}
    raise ValueError(f"the checkpoint's trainer_state.json has no engine state (keys: {', '.join(sorted(saved))}); "
                     f"expected {' and '.join(ENGINE_KEYS)}: pick an intact checkpoint")


def environment_state(saved: dict[str, Any]) -> dict[str, Any]:
    """The environment's state of a saved ``trainer_state.json`` (as a dict): ``environment``, or the top-level
    ``wall_times`` of text checkpoints saved before the environment kept them (as ``{"wall_times": ...}``); ``{}``
    when the checkpoint holds none (an environment without state)."""
    if isinstance(saved.get("environment"), dict):
        return dict(saved["environment"])
    if saved.get("wall_times"):
        return {"wall_times": saved["wall_times"]}
    return {}

"""Which world model: build one of a given kind, or load a saved one as the kind it was saved as.

Kinds (``world_model.kind`` in the training config, ``--kind`` of ``wmrl wm fit``):

* ``"regression"``: :class:`wmrl.world_model.regression.RegressionWorldModel` (adapter + scalar head; the default).
* ``"generative"``: :class:`wmrl.world_model.generative.GenerativeWorldModel` (the WMRL paper's judge: an
  adapter writing the outcome, a status and a quality bucket, as JSON).

Every saved world model folder records its kind in ``world_model.json`` (folders without one are
regression world models). The kinds are the registry :data:`WORLD_MODELS` (entry-point group
``wmrl.world_models``, an entry point naming a :class:`~wmrl.world_model.base.BackboneWorldModel` subclass); the
built-in classes are imported on first use (they load torch).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from wmrl.core.registry import Registry

if TYPE_CHECKING:
    from wmrl.world_model.base import BackboneWorldModel

#: The world-model kinds, default first: kind -> class (imported on the first :meth:`~Registry.get`).
WORLD_MODELS: Registry[type[BackboneWorldModel]] = Registry("world model kind", group="wmrl.world_models", lazy={
    "regression": "wmrl.world_model.regression:RegressionWorldModel",
    "generative": "wmrl.world_model.generative:GenerativeWorldModel"})


def world_model_class(kind: str) -> type[BackboneWorldModel]:
    """The class of world-model ``kind``.

    Raises:
        wmrl.core.registry.UnknownName: an unknown kind (a ValueError; the message lists the registered ones).
    """
    return WORLD_MODELS.get(kind)


def new_world_model(kind: str, model: Any, tokenizer: Any, **kwargs: Any) -> Any:
    """A fresh (unfitted) world model of ``kind`` on ``model``; ``kwargs`` go to its constructor
    (``lora``, ``adapter_name``, ``max_length``, ``batch_size``).

    Raises:
        ValueError: unknown kind, or settings the kind refuses (e.g. ``lora=None`` for ``generative``).
    """
    return world_model_class(kind)(model, tokenizer, **kwargs)


def saved_world_model_kind(directory: str | Path) -> str:
    """The kind recorded in ``directory/world_model.json`` (``"regression"`` when it records none).

    Raises:
        FileNotFoundError: not a saved world model folder.
    """
    from wmrl.world_model.base import BackboneWorldModel  # noqa: PLC0415 - heavy: loads torch

    return str(BackboneWorldModel.read_saved_config(directory)["kind"])


def load_world_model(directory: str | Path, model: Any, tokenizer: Any, *, kind: str | None = None,
                     adapter_name: str | None = None) -> Any:
    """Load the world model saved in ``directory`` (by its ``save``) as the class of its recorded kind.

    Args:
        model, tokenizer: the backbone it was fitted on (or the policy's ``PeftModel`` on it).
        kind: the kind the caller expects (e.g. ``world_model.kind`` of a config); None = any.
        adapter_name: override the stored adapter name.

    Raises:
        FileNotFoundError: not a saved world model folder.
        ValueError: the recorded kind is unknown or differs from ``kind``, or the weights do not fit
            this backbone.
    """
    saved = saved_world_model_kind(directory)
    if kind is not None and saved != kind:
        raise ValueError(f"{directory} holds a {saved!r} world model, but a {kind!r} one was asked for "
                         f"(world_model.kind / --kind)")
    return world_model_class(saved).load(directory, model, tokenizer, adapter_name=adapter_name)

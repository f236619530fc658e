"""The one place where the embodied trainer calls wmrl's registered step recipe (:mod:`wmrl.core.recipe`).

Everything that turns one step's per-episode arrays into rewards used, advantages and loss weights goes
through :func:`recipe_step`, which looks the recipe up with :func:`wmrl.core.recipe.get_recipe` and calls
:meth:`~wmrl.core.recipe.Recipe.step` unchanged: the same debiasing (isotonic calibrator fitted on earlier
steps' anchors), the same group advantages and the same fusion (IVW, PPI++, equal, anchor-only) as the text
track. The embodied trainer gets its :class:`~wmrl.core.recipe.StepOutputs`.

Recipes (``wmrl.core.recipe.recipe_names()``), as the embodied track reads them:

========================  =====================================================================
``grpo``                  every group gets the simulator's success (sparse reward only)
``wm``                    no anchors; the raw progress score (dense, uncorrected)
``wmrl``                  anchors (success) + calibrated progress, isotonic debias + IVW denoise
``wmrl-no-debias``        as wmrl, the progress score used raw (identity map)
``wmrl-no-denoise``       as wmrl, every sample weighted equally (no inverse-variance fusion)
``wmrl-ppi``              as wmrl, PPI++ rectified fusion instead of IVW
``anchor-only``           GRPO on the anchor groups' success only (the same labels as wmrl, no world model)
========================  =====================================================================
"""
from __future__ import annotations

import numpy as np

from wmrl.core.recipe import Recipe, RecipeSettings, RecipeState, StepInputs, StepOutputs, get_recipe, recipe_names

__all__ = ["RecipeSettings", "RecipeState", "names", "new_state", "recipe", "recipe_step"]


def names() -> list[str]:
    """The registered recipe names."""
    return recipe_names()


def recipe(name: str) -> Recipe:
    """The registered recipe ``name``.

    Raises:
        ValueError: no such recipe (the message lists the registered names).
    """
    try:
        return get_recipe(name)
    except KeyError as e:
        raise ValueError(f"unknown recipe {name!r}; use one of {', '.join(recipe_names())}") from e


def new_state(name: str, settings: RecipeSettings) -> RecipeState:
    """A fresh recipe state (calibrator for debias recipes, empty anchor window)."""
    return recipe(name).init_state(settings)


def recipe_step(name: str, state: RecipeState, settings: RecipeSettings, *, step: int, group_ids: np.ndarray,
                is_anchor: np.ndarray, valid: np.ndarray, r_true: np.ndarray, r_hat: np.ndarray) -> StepOutputs:
    """Map one step's per-episode arrays to rewards used, advantages and per-sample loss weights.

    Args:
        name: a registered recipe name.
        state: the recipe's state (updated in place with this step's anchors, after they were used).
        settings: the recipe's settings.
        step: training step (the calibrator refuses anchors of this step calibrating this step).
        group_ids: [B] int64; is_anchor, valid: [B] bool; r_true: [B] float64 success (NaN off anchors);
        r_hat: [B] float64 world-model episode scores in [0, 1].

    Returns:
        the recipe's :class:`~wmrl.core.recipe.StepOutputs` as it returned them.
    """
    x = StepInputs(step=int(step), group_ids=np.asarray(group_ids, np.int64), is_anchor=np.asarray(is_anchor, bool),
                   valid=np.asarray(valid, bool), reward_true=np.asarray(r_true, np.float64),
                   reward_wm=np.asarray(r_hat, np.float64))
    return recipe(name).step(x, state, settings)

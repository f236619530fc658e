"""WMRL inside trainers people already use: TRL's ``GRPOTrainer`` and verl (docs/integrations.md).

:mod:`wmrl.integrations.driver` drives one registered recipe from outside wmrl's own trainer (route the
groups, execute the anchors for real through a wmrl executor, score every completion with the world
model, call :meth:`wmrl.core.recipe.Recipe.step`); :mod:`wmrl.integrations.trl` and
:mod:`wmrl.integrations.verl` plug that driver into each trainer's own extension points. Neither TRL nor
verl is imported at module level: ``import wmrl.integrations.trl`` works without TRL installed, and the
TRL/verl classes are built on first use.
"""

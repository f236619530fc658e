"""wmrl.step: the step engine every trainer runs on.

:mod:`~wmrl.step.engine` (:class:`StepEngine`: route -> execute or predict -> recipe; :func:`build_router`, the
one router builder; :meth:`StepEngine.from_config`, the one place an engine is made from a config),
:mod:`~wmrl.step.config` (:class:`RecipeConfig`, the recipe's config section both tracks share),
:mod:`~wmrl.step.environment` (the :class:`Environment` protocol, its optional ``extend`` hook
(:class:`ExtendingEnvironment`), its dataclasses and registry),
:mod:`~wmrl.step.batch` (:class:`StepBatch`, what a step carries from stage to stage), :mod:`~wmrl.step.anchors`
(the anchor stream: synchronous and asynchronous executions of anchor programs),
:mod:`~wmrl.step.kaggle` (the Kaggle-task environment), :mod:`~wmrl.step.multiturn` (its multi-turn episodes).
The engine imports the recipe and the router from :mod:`wmrl.core`; the trainers (:mod:`wmrl.training`,
:mod:`wmrl.embodied`) and the integrations import it.
"""
from wmrl.step.batch import StepBatch
from wmrl.step.config import RecipeConfig
from wmrl.step.engine import StepEngine, build_router, lookup_recipe
from wmrl.step.environment import (ENVIRONMENTS, Environment, ExtendingEnvironment, Extension, Outcome, Outcomes,
                                   Predictions, Rollouts, done, environment_names, make_environment,
                                   register_environment)

__all__ = ["ENVIRONMENTS", "Environment", "ExtendingEnvironment", "Extension", "Outcome", "Outcomes", "Predictions",
           "RecipeConfig", "Rollouts", "StepBatch", "StepEngine", "build_router", "done", "environment_names",
           "lookup_recipe", "make_environment", "register_environment"]

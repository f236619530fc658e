"""wmrl.training: the end-to-end WMRL loop, in the order a step runs.

Modules: :mod:`~wmrl.training.config` (typed config on pydantic, YAML, ``--set`` overrides, validation),
:mod:`~wmrl.training.components` (the parts, typed by :mod:`wmrl.interfaces`; the seeded task and sampling
schedules), :mod:`~wmrl.training.parts` (building tasks, policy, executor, world model from a config),
:mod:`~wmrl.training.trainer` (the timed step pipeline; the method is a registered recipe of
:mod:`wmrl.core.recipe`), :mod:`~wmrl.training.update` (the GRPO update),
:mod:`~wmrl.training.run` (``run_training(config) -> RunSummary``, ``resume_training``),
:mod:`~wmrl.training.console` (step line, summary table), :mod:`~wmrl.runs.ledger` (compute ledger),
:mod:`~wmrl.runs.rundir` (run directory, atomic checkpoints), :mod:`~wmrl.training.evaluation`
(real-execution evaluation), :mod:`~wmrl.training.evaluate_cli` (``wmrl eval``).
Nothing here is imported at package import time (torch stays lazy). Run directory: docs/run-directory.md.
"""

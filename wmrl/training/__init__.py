"""wmrl.training: the end-to-end WMRL loop (issue 6).

Modules: :mod:`~wmrl.training.config` (typed config, YAML, ``--set`` overrides, validation),
:mod:`~wmrl.training.trainer` (``run_training(config) -> RunSummary``, the timed pipeline),
:mod:`~wmrl.training.fusion_step` (rewards -> advantages -> loss weights per method),
:mod:`~wmrl.training.ledger` (compute ledger), :mod:`~wmrl.training.rundir` (run directory, atomic
checkpoints), :mod:`~wmrl.training.evaluation` (real-execution evaluation),
:mod:`~wmrl.training.parts` (building tasks, policy, executor, world model from a config),
:mod:`~wmrl.training.evaluate_cli` (``wmrl eval``); ``wmrl bench`` is :mod:`wmrl.bench`.
Nothing here is imported at package import time (torch stays lazy). Run directory: docs/run-directory.md.
"""

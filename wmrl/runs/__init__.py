"""wmrl.runs: the run kit every trainer shares (the text track, the embodied track, a new environment's trainer).

:mod:`~wmrl.runs.rundir` (the run directory: paths, JSON-lines logs, atomic writes, checkpoints with manifests,
resume candidates, :class:`RunDirError`), :mod:`~wmrl.runs.ledger` (the compute ledger: wall seconds and
CPU-seconds per stage and phase, executions per kind), :mod:`~wmrl.runs.owner` (one trainer per run directory),
:mod:`~wmrl.runs.config` (typed config sections, strict YAML, ``--set`` overrides, errors that name the key),
:mod:`~wmrl.runs.loop` (the run loop: steps, evaluations and checkpoints on one schedule),
:mod:`~wmrl.runs.lifecycle` (start and resume of a run, the same for every track) and
:mod:`~wmrl.runs.tracking` (the experiment trackers: TensorBoard, W&B offline, trackio, MLflow). The layout of a run
directory is docs/run-directory.md. Nothing here imports a trainer.
"""

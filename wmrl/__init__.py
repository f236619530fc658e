"""wmrl: World Model RL (WMRL) for post-training AutoResearch agents.

The method is the WMRL paper's (README, "Citation"): GRPO where most executions of the agent's programs are
replaced by a world model's predictions, corrected by a small stream of real (anchor) executions through online
isotonic debiasing and inverse-variance fusion. One training step, stage by stage: docs/architecture.md, "One
step"; the methods (registered recipes): docs/training.md, "Methods".

Packages: :mod:`wmrl.core` (the method as pure numpy/torch functions, :mod:`wmrl.core.recipe` one step of every
method; imports nothing else of wmrl), :mod:`wmrl.tasks`, :mod:`wmrl.execution`, :mod:`wmrl.models`,
:mod:`wmrl.world_model`, :mod:`wmrl.episodes`, :mod:`wmrl.serve` (the sandbox and the world model as HTTP
services), :mod:`wmrl.step` (the step engine under every trainer: environments, the anchor stream, the recipe's
step), :mod:`wmrl.runs` (the run kit every trainer shares: run folder, owner lock, config kit, ledger, trackers),
:mod:`wmrl.training` (the trainer, typed against the protocols of :mod:`wmrl.interfaces`), :mod:`wmrl.bench`,
:mod:`wmrl.report`, :mod:`wmrl.sim`, :mod:`wmrl.embodied`, :mod:`wmrl.integrations`, :mod:`wmrl.export` (a run's
samples as one Parquet file). :mod:`wmrl.core.registry` is the one shape of every name-to-thing map (recipes,
debiasings, fusions, routers, environments, task layouts, world-model kinds, scaffolds, evaluation protocols).
Who may import whom: docs/architecture.md, "Arrows".
"""

__version__ = "0.1.0"

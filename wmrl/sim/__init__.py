"""wmrl.sim: the convergence study (``wmrl simulate``; docs/simulation.md).

:mod:`~wmrl.sim.bandit` (the seeded problem and world-model error shapes),
:mod:`~wmrl.sim.engine` (the vectorised training loop on the real ``wmrl.core`` functions),
:mod:`~wmrl.sim.study` (sweeps, tables, plots). Results and their reading: docs/simulation.md.
"""

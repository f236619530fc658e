"""wmrl.bench: ``wmrl bench``, WMRL side by side with real-execution GRPO and the ablations.

A bench runs a *method matrix* (the registered recipes of :mod:`wmrl.core.recipe`) on the same train
tasks, seeds and step budget, and writes one table. The rooms, in the order a bench flows through them:

* :mod:`wmrl.bench.presets`: ``load_preset`` (the shipped ``wmrl/bench/configs/NAME.yaml``), ``method_config``.
* :mod:`wmrl.bench.plan`: ``plan`` (one ``PlannedRun`` per seed and method), ``run_state``, ``check_existing``.
* :mod:`wmrl.bench.corpus`: ``ensure_corpus``, the warm-up corpus shared by the world-model runs.
* :mod:`wmrl.bench.run`: ``run_bench`` (train, resume or skip each run; ``bench.json``).
* :mod:`wmrl.bench.convergence`: ``diagnose_bench`` (where each run converged: its final world model's
  ranking of every executed program, ``convergence.json``), ``write_bench_outputs`` (that, then the table).
* :mod:`wmrl.bench.cli`: the ``wmrl bench`` command.

Reading a bench folder, the statistics and the outputs (``bench.md``, ``bench.html``, ``table.csv``,
``results.csv``) live in :mod:`wmrl.report` (``bench_results``, ``bench_stats``, ``bench_page``), which
imports nothing of this package. Import names from the modules (``from wmrl.bench.run import run_bench``);
this file imports nothing, so ``wmrl --help`` stays fast.
"""

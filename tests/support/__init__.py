"""Test support shared by several test folders and the benchmarks, imported as ``tests.support.<module>`` with the
repository root on ``sys.path`` (pytest does that; a script is run as ``PYTHONPATH=. python ...``):

- :mod:`tests.support.fakes`: small fakes of the trainer's parts (policy, scaffold, executor, world model, tasks);
- :mod:`tests.support.fake_run`: a run directory written without training (the report and bench tests);
- :mod:`tests.support.real_runs`: the CI miniature bench, built once per session (the report, bench and golden tests).
"""

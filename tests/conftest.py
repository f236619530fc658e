"""Fixtures shared by every test folder."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

# Validation views are split with a secret salt; a fixed one makes every test's views the same on every machine.
os.environ.setdefault("WMRL_VIEW_SECRET", "wmrl-test-suite")


@pytest.fixture(scope="session")
def small_suite(tmp_path_factory) -> Path:
    """A task suite holding the small real tasks (``SMALL_TASKS``), built once per test session, or the
    prebuilt one named by ``WMRL_TEST_TASKS_DIR``."""
    if os.environ.get("WMRL_TEST_TASKS_DIR"):
        return Path(os.environ["WMRL_TEST_TASKS_DIR"])
    from wmrl.tasks.build import build_suite
    from wmrl.tasks.datasets import SMALL_TASKS

    root = tmp_path_factory.mktemp("small-suite")
    build_suite(root, SMALL_TASKS)
    return root


@pytest.fixture(scope="module")
def public(tmp_path_factory) -> Path:
    """A folder with one small ``train.csv``, readable by anyone (what a sandbox mounts as ``public/``)."""
    d = tmp_path_factory.mktemp("pub")
    (d / "train.csv").write_text("id,x\n1,2\n")
    for p in (d, d / "train.csv"):
        os.chmod(p, os.stat(p).st_mode | stat.S_IROTH | stat.S_IXOTH)
    return d

"""wmrl as an installed package: ``scripts/check-wheel.sh`` installs the working tree into a fresh environment
outside the checkout (offline: no dependencies, no build isolation; the dependencies are those of the
interpreter running the tests) and plans the ``cpu-small`` bench from the installed package data."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "check-wheel.sh"


def test_installed_package_plans_a_bench_from_its_shipped_preset(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "TMPDIR": str(tmp_path)}
    env.pop("PYTHONPATH", None)  # the installed package, not the checkout, must be what is imported
    r = subprocess.run(["bash", str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines[-1] == "wheel check passed"
    imported = next(line for line in lines if line.startswith("wmrl /"))
    assert "/site-packages/wmrl;" in imported and "cpu-small" in imported
    planned = [line.split() for line in lines if " seed " in line]
    assert len(planned) == 4 * 8  # cpu-small: 4 seeds x 8 methods
    assert {p[0] for p in planned} >= {"grpo", "wm", "wmrl-raw", "wmrl"} and {p[3] for p in planned} == {"new"}


def test_a_venv_inside_the_checkout_is_refused(tmp_path):
    inside = SCRIPT.parents[1] / "venv-wheel-check-refused"
    r = subprocess.run(["bash", str(SCRIPT), str(inside)], env={**os.environ, "PYTHON": sys.executable},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "inside the checkout" in r.stderr and not inside.exists()

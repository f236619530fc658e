"""The sync-vs-async benchmark (benchmarks/async_anchors.py) on the real executors, shortened: sandboxed
programs with modelled latency, the local pool and Ray, synchronous and asynchronous anchors."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

pytestmark = pytest.mark.slow


def _args(executor: str, **kw):
    import async_anchors

    return async_anchors, async_anchors.argparse.Namespace(
        steps=8, k=[0], slots=4, executor=executor, tasks=4, group=2, rho=0.25, scale=0.002, gen_s=0.1, wm_s=0.02,
        seed=0, out=None, **kw)


def _check(rows):
    sync, asyn = rows
    assert sync["k"] == 0 and sync["staleness_max"] == 0 and sync["executions"] == 8 * 2
    assert asyn["k"] == 8 and asyn["wait_s"] == 0.0  # generation never waited
    assert asyn["step_s"] < sync["step_s"]  # executions (0.24 s median, plus the sandbox) no longer hold the step
    assert asyn["staleness_max"] >= 1 and asyn["executions"] >= 2
    assert 0 < sync["utilisation"] <= 1 and 0 < asyn["utilisation"] <= 1


def require_bwrap():
    from wmrl.execution.sandbox import find_bwrap

    if find_bwrap() is None:
        pytest.skip("bubblewrap not installed (apt-get install -y bubblewrap)")


def test_local_pool_sync_and_async(tmp_path):
    require_bwrap()
    mod, a = _args("local")
    _check([mod.run_one(k, a, tmp_path / f"k{k}") for k in (0, 8)])


@pytest.mark.ray
def test_ray_sync_and_async(tmp_path):
    require_bwrap()
    ray = pytest.importorskip("ray")
    mod, a = _args("ray")
    try:
        rows = [mod.run_one(k, a, tmp_path / f"k{k}") for k in (0, 8)]
    finally:
        ray.shutdown()
    _check(rows)

"""The claims of docs/simulation.md: a small fixed-seed version of the convergence study.

(i)  the pure world model ends below real-execution GRPO by a gap that grows with its bias B
     (persistent, exploitable bias) and with its noise sigma;
(ii) for errors the mitigations target (a monotone bias, a group-level offset, moderate noise),
     WMRL with both mitigations ends within MARGIN of GRPO's final true reward with a tenth of
     GRPO's executions, and above anchor-only training with the same executions.
Numbers of the full sweep: docs/simulation.md.
"""
import numpy as np
import pytest

from wmrl.sim.bandit import WorldModelSpec
from wmrl.sim.engine import RunSpec, SimConfig, simulate

MARGIN = 0.01  # reward units (J in [0, 1]); GRPO's own seed sd is about 0.003
SEEDS = (0, 1, 2)
CFG = SimConfig()  # 20 tasks x 8 samples, 200 steps: the default study's configuration

NONE0 = WorldModelSpec("monotone", 0.0, 0.0)
NOISY = WorldModelSpec("monotone", 0.0, 0.3)
EXPL_S = WorldModelSpec("exploit", 0.25, 0.0)
EXPL_L = WorldModelSpec("exploit", 1.0, 0.0)
MONO = WorldModelSpec("monotone", 0.5, 0.1)
OFFS = WorldModelSpec("offset", 1.0, 0.1)


@pytest.fixture(scope="module")
def finals():
    runs = []
    for s in SEEDS:
        runs += [RunSpec("grpo", seed=s), RunSpec("anchor-only", rho=0.1, seed=s)]
        runs += [RunSpec("wm", wm, seed=s) for wm in (NONE0, NOISY, EXPL_S, EXPL_L)]
        runs += [RunSpec("wmrl", wm, rho=0.1, seed=s) for wm in (MONO, OFFS)]
    _, f = simulate(runs, CFG)
    return f


def _mean(f, method, wm=None, col="J_final"):
    sel = f[f.method == method]
    if wm is not None:
        sel = sel[(sel["shape"] == wm.shape) & (sel.bias == wm.bias) & (sel.sigma == wm.sigma)]
    assert sel.seed.nunique() == len(SEEDS)
    return float(sel[col].mean())


def test_i_pure_world_model_gap_grows_with_bias_and_noise(finals):
    grpo = _mean(finals, "grpo")
    gap = {k: grpo - _mean(finals, "wm", wm) for k, wm in
           {"exact": NONE0, "noisy": NOISY, "bias_small": EXPL_S, "bias_large": EXPL_L}.items()}
    assert abs(gap["exact"]) < 0.005  # a perfect world model is as good as execution
    assert gap["noisy"] > gap["exact"] + 0.005  # noise leaves a gap
    assert gap["bias_small"] > gap["exact"] + 0.01  # an exploitable bias leaves a gap ...
    assert gap["bias_large"] > gap["bias_small"] + 0.1  # ... that grows with B


def test_ii_wmrl_matches_grpo_with_a_tenth_of_the_executions(finals):
    grpo = _mean(finals, "grpo")
    grpo_exec = _mean(finals, "grpo", col="executions")
    anchor_only = _mean(finals, "anchor-only")
    for wm in (MONO, OFFS):
        j = _mean(finals, "wmrl", wm)
        execs = _mean(finals, "wmrl", wm, col="executions")
        assert execs <= 0.1 * grpo_exec + CFG.group_size
        assert j > grpo - MARGIN, f"{wm.label}: WMRL {j:.4f} vs GRPO {grpo:.4f}"
        assert j > anchor_only + 0.005, f"{wm.label}: the world model stream must add to the anchors"
    assert np.isfinite(anchor_only)

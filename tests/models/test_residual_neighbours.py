"""The residual of executed neighbours: its formula on hand-computed cases, its persistence, its errors."""
from __future__ import annotations

import math

import numpy as np
import pytest

from wmrl.world_model.neighbours import ResidualNeighbours


def test_an_exact_repeat_moves_half_way_and_other_prompts_are_untouched():
    nb = ResidualNeighbours(k=8)
    nb.fit(np.array([[0.0, 0.0], [3.0, 4.0]]), np.array([0.4, -0.2]), ["task a", "task b"])
    # one row of its prompt at distance 0: h falls back to 1, w = 1, correction = 0.4 / (1 + 1)
    out = nb.correction(np.array([[0.0, 0.0], [3.0, 4.0], [1.0, 1.0]]), ["task a", "task b", "task c"])
    assert out.tolist() == pytest.approx([0.2, -0.1, 0.0])


def test_kernel_weights_and_the_k_nearest_only():
    z = np.array([[0.0], [1.0], [3.0]])
    e = np.array([0.3, -0.3, 0.6])
    nb = ResidualNeighbours(k=2)
    nb.fit(z, e, ["t"] * 3)
    # query at 0: distances 0, 1, 3; median h = 1; the two nearest weigh 1 and exp(-4)
    w = np.array([1.0, math.exp(-4.0)])
    expect = float((w * e[:2]).sum() / (1.0 + w.sum()))
    assert nb.correction(np.array([[0.0]]), ["t"])[0] == pytest.approx(expect)
    nb3 = ResidualNeighbours(k=3)
    nb3.fit(z, e, ["t"] * 3)
    assert nb3.correction(np.array([[0.0]]), ["t"])[0] != pytest.approx(expect)  # the third row counts now


def test_tensors_load_back_and_bad_input_is_refused():
    nb = ResidualNeighbours(k=4)
    nb.fit(np.random.default_rng(0).normal(size=(5, 3)), np.linspace(-0.2, 0.2, 5), ["p", "q", "p", "q", "p"])
    q = np.random.default_rng(1).normal(size=(4, 3))
    back = ResidualNeighbours(k=4)
    back.load(nb.tensors())
    assert np.array_equal(back.correction(q, ["p", "q", "r", "p"]), nb.correction(q, ["p", "q", "r", "p"]))
    assert ResidualNeighbours(k=1).correction(q, ["p"] * 4).tolist() == [0.0] * 4  # nothing kept yet
    with pytest.raises(ValueError, match=">= 1"):
        ResidualNeighbours(k=0)
    with pytest.raises(ValueError, match="prompts"):
        nb.fit(np.zeros((2, 3)), np.zeros(2), ["p"])
    with pytest.raises(ValueError, match="width"):
        nb.correction(np.zeros((1, 2)), ["p"])
    with pytest.raises(ValueError, match="lack"):
        back.load({"z": np.zeros((1, 3))})

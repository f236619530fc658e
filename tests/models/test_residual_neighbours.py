"""The residual of executed neighbours: its formula on hand-computed cases, its persistence, its errors."""
from __future__ import annotations

import math

import numpy as np
import pytest

from wmrl.world_model.neighbours import ResidualNeighbours


def test_an_exact_repeat_moves_half_way_and_other_prompts_are_untouched():
    nb = ResidualNeighbours(k=8)
    nb.fit(np.array([[0.0, 0.0], [3.0, 4.0]]), np.array([0.4, -0.2]), ["task a", "task b"], ["x", "y"])
    # one row of its prompt at distance 0: h falls back to 1, w = 1, correction = 0.4 / (1 + 1)
    out = nb.correction(np.array([[0.0, 0.0], [3.0, 4.0], [1.0, 1.0]]), ["task a", "task b", "task c"],
                        ["x", "y", "x"])
    assert out.tolist() == pytest.approx([0.2, -0.1, 0.0])


def test_without_own_program_a_program_never_uses_its_own_execution():
    z = np.array([[0.0], [1.0], [0.0]])
    e = np.array([0.4, -0.2, 0.4])
    own = ResidualNeighbours(k=8)
    other = ResidualNeighbours(k=8, own_program=False)
    for nb in (own, other):
        nb.fit(z, e, ["t"] * 3, ["a", "b", "a"])
    # program "a" (executed twice): only "b" is left, at distance 1 = its median, so w = exp(-4)
    w = math.exp(-4.0)
    assert other.correction(np.array([[0.0]]), ["t"], ["a"])[0] == pytest.approx(-0.2 * w / (1 + w))
    assert own.correction(np.array([[0.0]]), ["t"], ["a"])[0] > 0.2  # its own rows dominate
    # a program never executed sees every row either way
    q = np.array([[0.5]])
    assert other.correction(q, ["t"], ["c"])[0] == own.correction(q, ["t"], ["c"])[0]
    other.fit(z[:1], e[:1], ["t"], ["a"])
    assert other.correction(np.array([[0.0]]), ["t"], ["a"])[0] == 0.0  # nothing but itself


def test_kernel_weights_and_the_k_nearest_only():
    z = np.array([[0.0], [1.0], [3.0]])
    e = np.array([0.3, -0.3, 0.6])
    nb = ResidualNeighbours(k=2)
    nb.fit(z, e, ["t"] * 3, ["a", "b", "c"])
    # query at 0: distances 0, 1, 3; median h = 1; the two nearest weigh 1 and exp(-4)
    w = np.array([1.0, math.exp(-4.0)])
    expect = float((w * e[:2]).sum() / (1.0 + w.sum()))
    assert nb.correction(np.array([[0.0]]), ["t"], ["a"])[0] == pytest.approx(expect)
    nb3 = ResidualNeighbours(k=3)
    nb3.fit(z, e, ["t"] * 3, ["a", "b", "c"])
    assert nb3.correction(np.array([[0.0]]), ["t"], ["a"])[0] != pytest.approx(expect)  # the third row counts now


def test_tensors_load_back_and_bad_input_is_refused():
    nb = ResidualNeighbours(k=4, own_program=False)
    nb.fit(np.random.default_rng(0).normal(size=(5, 3)), np.linspace(-0.2, 0.2, 5), ["p", "q", "p", "q", "p"],
           ["a", "b", "c", "a", "b"])
    q = np.random.default_rng(1).normal(size=(4, 3))
    back = ResidualNeighbours(k=4, own_program=False)
    back.load(nb.tensors())
    args = (["p", "q", "r", "p"], ["a", "a", "b", "c"])
    assert np.array_equal(back.correction(q, *args), nb.correction(q, *args))
    assert ResidualNeighbours(k=1).correction(q, *args).tolist() == [0.0] * 4  # nothing kept yet
    with pytest.raises(ValueError, match=">= 1"):
        ResidualNeighbours(k=0)
    with pytest.raises(ValueError, match="completions"):
        nb.fit(np.zeros((2, 3)), np.zeros(2), ["p", "p"], ["a"])
    with pytest.raises(ValueError, match="width"):
        nb.correction(np.zeros((1, 2)), ["p"], ["a"])
    with pytest.raises(ValueError, match="lack"):
        back.load({"z": np.zeros((1, 3))})

"""The routers' paths that surviving mutants of ``wmrl/core/routing.py`` showed untested (docs/testing.md,
"Mutation testing")."""
from __future__ import annotations

import json

import numpy as np
import pytest

from wmrl.core.recipe import get_recipe
from wmrl.core.routing import FractionRouter, StratifiedRouter, build_router


def test_state_saved_before_the_first_anchor_keeps_the_min_every_count():
    a = FractionRouter(fraction=0.01, min_every=3, seed=0)
    assert not a.route(["a", "b"], step=5).any()  # the count of steps without an anchor starts at step 5
    b = FractionRouter(fraction=0.01, min_every=3, seed=0)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    # steps 5, 6, 7 without an anchor would be 3: step 7 is forced in both
    assert [bool(r.route(["a", "b"], step=s).any()) for s in (6, 7) for r in (a, b)] == [False, False, True, True]


def test_stratified_forces_its_anchor_on_the_task_with_the_largest_carry():
    r = StratifiedRouter(fraction=0.1, min_every=2, seed=0)
    ids = ["b", "a", "a"]
    assert not r.route(ids, step=0).any()  # carries: a 0.2, b 0.1
    mask = r.route(ids, step=1)  # carries a 0.4, b 0.2, none reaches 1; the second step without one forces it
    assert not mask[0] and int(mask[1:].sum()) == 1  # on task a, the larger carry
    assert r.task_carry == pytest.approx({"a": 0.4 - 1.0, "b": 0.2})
    # the forced anchor's debt is paid off: a's carry -0.6 + 0.2 leaves no anchor for a (not a negative count)
    assert np.array_equal(r.route(ids, step=2), np.zeros(3, dtype=bool))
    assert r.task_carry == pytest.approx({"a": 0.4 - 1.0 + 0.2, "b": 0.3})


def test_a_fraction_recipe_gets_the_configured_min_every():
    assert build_router(get_recipe("wmrl"), 0.25, min_anchor_every=7).min_every == 7

"""Extra TRL reward functions beside the wmrl reward: each adds its own group-relative advantage, weighted."""
from __future__ import annotations

import numpy as np
import pytest

from wmrl.integrations.trl import extra_advantages


def test_extra_rewards_add_their_weighted_group_advantages():
    r = np.array([[1.0, 0.0], [0.0, 0.0], [2.0, np.nan], [2.0, 3.0]])  # 2 groups of 2, 2 extra functions
    w = np.array([0.5, 2.0])
    s = np.std([1.0, 0.0], ddof=1) + 1e-4
    expected = np.array([0.5 * 0.5 / s, -0.5 * 0.5 / s, 0.0, 0.0])  # function 2: constant in group 1, one value in 2
    np.testing.assert_allclose(extra_advantages(r, w, 2, scale=True), expected, rtol=1e-12)
    np.testing.assert_allclose(extra_advantages(r, w, 2, scale=False), [0.25, -0.25, 0.0, 0.0], rtol=1e-12)
    with pytest.raises(ValueError, match="groups of 3"):
        extra_advantages(r, w, 3, scale=True)

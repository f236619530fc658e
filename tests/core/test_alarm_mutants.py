"""The exploitation alarm's record that a surviving mutant of ``ExploitationMonitor.update`` showed untested
(docs/testing.md, "Mutation testing")."""
from __future__ import annotations

import numpy as np

from wmrl.core.alarm import ExploitationMonitor


def test_the_check_counts_the_anchor_groups_of_the_step():
    mon = ExploitationMonitor()
    g = np.array([4, 4, 9, 9, 9, 2])  # three groups, in any order
    r = np.array([0.1, 0.5, 0.2, 0.4, 0.9, 0.3])
    assert mon.update(0, g, r, r, r).n_groups == 3

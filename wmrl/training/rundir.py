"""Moved to :mod:`wmrl.runs.rundir` (the run kit every trainer shares); this name keeps old imports working."""
from wmrl.runs.rundir import *  # noqa: F403

"""Moved to :mod:`wmrl.runs.owner` (the run kit every trainer shares); this name keeps old imports working."""
from wmrl.runs.owner import *  # noqa: F403

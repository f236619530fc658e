"""Moved to :mod:`wmrl.runs.ledger` (the run kit every trainer shares); this name keeps old imports working."""
from wmrl.runs.ledger import *  # noqa: F403

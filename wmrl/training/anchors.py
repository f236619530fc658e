"""Moved to :mod:`wmrl.step.anchors` (the anchor stream of the step engine); this name keeps old imports working."""
from wmrl.step.anchors import *  # noqa: F403

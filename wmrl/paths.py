"""Where wmrl keeps its caches on disk.

``WMRL_HOME`` (default ``~/.cache/wmrl``) holds the built task suite (``tasks/``) and the converted
default model (``models/``). Both can be rebuilt from installed packages at any time, offline.
"""
from __future__ import annotations

import os
from pathlib import Path


def wmrl_home() -> Path:
    """Root of wmrl's caches: ``$WMRL_HOME`` or ``~/.cache/wmrl``. Created on first use."""
    root = Path(os.environ.get("WMRL_HOME", Path.home() / ".cache" / "wmrl")).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    return root


def default_tasks_dir() -> Path:
    """Directory of the built-in task suite: ``$WMRL_TASKS_DIR`` or ``<wmrl_home>/tasks``."""
    env = os.environ.get("WMRL_TASKS_DIR")
    return Path(env).expanduser() if env else wmrl_home() / "tasks"


def default_models_dir() -> Path:
    """Directory of converted model weights: ``<wmrl_home>/models``."""
    d = wmrl_home() / "models"
    d.mkdir(parents=True, exist_ok=True)
    return d

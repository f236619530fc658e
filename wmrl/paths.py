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


#: The environment variable naming where tasks live: one folder or several joined by ``os.pathsep``.
#: The same setting is ``--root`` on the command line and ``tasks.root`` in a training config.
TASKS_ROOT_ENV = "WMRL_TASKS_ROOT"


def default_task_roots() -> list[Path]:
    """Where tasks live: ``$WMRL_TASKS_ROOT`` (folders joined by ``os.pathsep``), else the older
    ``$WMRL_TASKS_DIR``, else ``<wmrl_home>/tasks`` (the built-in suite)."""
    env = os.environ.get(TASKS_ROOT_ENV) or os.environ.get("WMRL_TASKS_DIR")
    if env:
        return [Path(p).expanduser() for p in env.split(os.pathsep) if p.strip()]
    return [wmrl_home() / "tasks"]


def default_tasks_dir() -> Path:
    """The first of :func:`default_task_roots` (``$WMRL_TASKS_ROOT``, ``$WMRL_TASKS_DIR`` or
    ``<wmrl_home>/tasks``): where ``wmrl tasks build`` writes the built-in suite."""
    return default_task_roots()[0]


def default_models_dir() -> Path:
    """Directory of converted model weights: ``<wmrl_home>/models``."""
    d = wmrl_home() / "models"
    d.mkdir(parents=True, exist_ok=True)
    return d

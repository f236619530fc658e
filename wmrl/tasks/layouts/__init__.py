"""The on-disk task layouts wmrl reads, one module each, and their registry :data:`LAYOUTS`.

Each layout module defines ``detect(path) -> bool`` (a task folder of this layout), ``load(path, search) ->
Task`` and ``fixture(out, fixture_def, source) -> folder`` (a small task written in this layout for tests), and
``LAYOUT``, the :class:`~wmrl.tasks.layouts.base.TaskLayout` naming them. :func:`wmrl.tasks.loader.load_task`,
:func:`wmrl.tasks.loader.discover` and :func:`wmrl.tasks.fixtures.build_benchmark_fixtures` iterate
:data:`LAYOUTS`; adding a layout is one module and one entry here. Order matters: a folder is read by the first
layout whose ``detect`` accepts it (wmrl's ``task.yaml`` wins over a benchmark's files beside it).
"""
from __future__ import annotations

from wmrl.tasks.layouts import builtin, dsbench, mlebench, mledojo
from wmrl.tasks.layouts.base import TaskLayout

#: Every layout, in the order a folder is tried.
LAYOUTS: tuple[TaskLayout, ...] = (builtin.LAYOUT, mlebench.LAYOUT, mledojo.LAYOUT, dsbench.LAYOUT)


def layout(name: str) -> TaskLayout:
    """The layout called ``name`` (``wmrl``, ``mlebench``, ``mledojo``, ``dsbench``).

    Raises:
        KeyError: no such layout; the message names the known ones.
    """
    for lay in LAYOUTS:
        if lay.name == name:
            return lay
    raise KeyError(f"unknown task layout {name!r}; known: {', '.join(lay.name for lay in LAYOUTS)}")

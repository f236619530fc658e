"""The on-disk task layouts wmrl reads, one module each, and their registry :data:`LAYOUTS`.

Each layout module defines ``detect(path) -> bool`` (a task folder of this layout), ``load(path, search) ->
Task`` and ``fixture(out, fixture_def, source) -> folder`` (a small task written in this layout for tests), and
``LAYOUT``, the :class:`~wmrl.tasks.layouts.base.TaskLayout` naming them. :func:`wmrl.tasks.loader.load_task`,
:func:`wmrl.tasks.loader.discover` and :func:`wmrl.tasks.fixtures.build_benchmark_fixtures` iterate
:func:`all_layouts`; adding a layout is one module and one ``LAYOUTS.register`` line here (or, from another
package, an entry point of the group ``wmrl.layouts`` naming its ``LAYOUT``). Order matters: a folder is read by
the first layout whose ``detect`` accepts it (wmrl's ``task.yaml`` wins over a benchmark's files beside it; a
layout from an entry point comes after the built-in ones).
"""
from __future__ import annotations

from wmrl.core.registry import Registry
from wmrl.tasks.layouts import builtin, dsbench, mlebench, mledojo
from wmrl.tasks.layouts.base import TaskLayout

#: The layout registry, in the order a folder is tried (entry-point group ``wmrl.layouts``; an entry point names a
#: :class:`~wmrl.tasks.layouts.base.TaskLayout`).
LAYOUTS: Registry[TaskLayout] = Registry("task layout", group="wmrl.layouts")
for _lay in (builtin.LAYOUT, mlebench.LAYOUT, mledojo.LAYOUT, dsbench.LAYOUT):
    LAYOUTS.register(_lay.name, _lay)


def all_layouts() -> tuple[TaskLayout, ...]:
    """Every registered layout, in the order a folder is tried (entry points loaded).

    Raises:
        ImportError: an entry point's module failed to import (the message names it).
    """
    return tuple(lay for _, lay in LAYOUTS.items())


def benchmark_layouts() -> tuple[str, ...]:
    """The names of the layouts that write test fixtures (the benchmarks: ``mlebench``, ``mledojo``, ``dsbench``),
    in registration order."""
    return tuple(lay.name for lay in all_layouts() if lay.fixture is not None)


def layout(name: str) -> TaskLayout:
    """The layout called ``name`` (``wmrl``, ``mlebench``, ``mledojo``, ``dsbench`` or a registered one).

    Raises:
        wmrl.core.registry.UnknownName: no such layout (a KeyError); the message names the registered ones.
    """
    return LAYOUTS.get(name)

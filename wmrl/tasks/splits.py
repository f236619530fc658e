"""Held-out splits of a set of tasks: by benchmark, by a list file, or by a seeded fraction.

A split spec is one string (``tasks.heldout_split`` in a training config):

* ``benchmark:NAME[,NAME...]`` -- hold out every task read by these adapters (``dsbench``, ``mledojo``,
  ``mlebench``, ``wmrl``): train on one benchmark, evaluate on another;
* ``list:FILE`` -- hold out the task ids in FILE (one per line; ``#`` starts a comment);
* ``fraction:F`` -- hold out ``round(F * N)`` tasks (at least one), drawn with the run's seed from the
  tasks sorted by id, so the same seed and tasks give the same split.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any
from collections.abc import Mapping, Sequence

import numpy as np

from wmrl.tasks.layouts import LAYOUTS


class SplitError(ValueError):
    """A split spec that cannot be used; the message says what was wrong and how to write it."""


def heldout_ids(tasks: Sequence[Any], spec: str, seed: int = 0,
                refused: Mapping[str, str] | None = None) -> list[str]:
    """The ids that ``spec`` holds out of ``tasks`` (objects with ``id`` and ``adapter``), sorted.

    Args:
        tasks: the tasks to split. spec: ``benchmark:NAME``, ``list:FILE`` or ``fraction:F``. seed: for
            ``fraction``. refused: ``{task id: reason}`` of tasks the loader refused, so that a list naming
            one says why it is not among ``tasks``.

    Raises:
        SplitError: an unknown spec kind, an unknown adapter, a missing list file or unknown (or refused)
            ids in it, a fraction outside (0, 1), or a split that leaves no task to train on or none held out.
    """
    kind, _, arg = str(spec).partition(":")
    kind, arg = kind.strip().lower(), arg.strip()
    ids = sorted(t.id for t in tasks)
    if kind == "benchmark":
        names = [a.strip() for a in arg.split(",") if a.strip()]
        adapters = LAYOUTS.names()
        bad = [a for a in names if a not in adapters]
        if not names or bad:
            raise SplitError(f"tasks.heldout_split {spec!r}: unknown benchmark(s) {bad or '(none)'}; write "
                             f"benchmark:NAME with NAME among {', '.join(adapters)}")
        out = sorted(t.id for t in tasks if t.adapter in names)
    elif kind == "list":
        path = Path(arg).expanduser()
        if not path.is_file():
            raise SplitError(f"tasks.heldout_split {spec!r}: list file {path} does not exist; write list:FILE with "
                             "one task id per line")
        listed = [ln.split("#", 1)[0].strip() for ln in path.read_text(encoding="utf-8").splitlines()]
        listed = [x for x in listed if x]
        why = refused or {}
        bad = [f"{x} ({why[x]})" for x in listed if x in why and x not in ids]
        if bad:
            raise SplitError(f"tasks.heldout_split {spec!r}: {path} names task(s) that were refused (cannot be "
                             f"graded): {'; '.join(bad)}; fix them or leave them out of the list")
        unknown = [x for x in listed if x not in ids]
        if unknown:
            raise SplitError(f"tasks.heldout_split {spec!r}: unknown task id(s) {unknown[:5]} in {path}; known: "
                             f"{', '.join(ids)}")
        out = sorted(set(listed))
    elif kind == "fraction":
        try:
            frac = float(arg)
        except ValueError:
            frac = math.nan
        if not 0.0 < frac < 1.0:
            raise SplitError(f"tasks.heldout_split {spec!r}: the fraction must lie strictly between 0 and 1 "
                             "(e.g. fraction:0.25)")
        k = max(1, round(frac * len(ids)))
        rng = np.random.default_rng(seed)
        out = sorted(np.asarray(ids, dtype=object)[rng.permutation(len(ids))[:k]].tolist())
    else:
        raise SplitError(f"tasks.heldout_split {spec!r}: write benchmark:NAME, list:FILE or fraction:F")
    if not out:
        raise SplitError(f"tasks.heldout_split {spec!r} holds out no task of {', '.join(ids) or '(none)'}")
    if len(out) == len(ids):
        raise SplitError(f"tasks.heldout_split {spec!r} holds out every task; leave some to train on")
    return out

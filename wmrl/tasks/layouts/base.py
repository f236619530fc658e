"""What a benchmark layout module provides (:class:`TaskLayout`), and the pieces its fixture writer shares.

A layout module (one per on-disk layout: :mod:`~wmrl.tasks.layouts.builtin`, :mod:`~wmrl.tasks.layouts.mlebench`,
:mod:`~wmrl.tasks.layouts.mledojo`, :mod:`~wmrl.tasks.layouts.dsbench`) defines ``detect``, ``load`` and
``fixture`` and a ``LAYOUT`` (:class:`TaskLayout`) naming them; :data:`wmrl.tasks.layouts.LAYOUTS` lists the
``LAYOUT`` of each module, and :mod:`wmrl.tasks.loader` and :mod:`wmrl.tasks.fixtures` iterate that list.
"""
from __future__ import annotations

import shutil
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from wmrl.tasks.spec import Task


class TaskFormatError(ValueError):
    """A task folder that cannot be loaded; the message names the folder, the file and the fix."""


@dataclass(frozen=True)
class FixtureDef:
    """One fixture: ``benchmark`` (``mledojo``, ``mlebench``, ``dsbench``), its id, the built-in task it is
    made from, and (MLE-bench) whether the competition awards medals."""

    benchmark: str
    id: str
    source_task: str
    awards_medals: bool = True


@dataclass(frozen=True)
class FixtureSource:
    """What a fixture is made from: a built-in task and what its files hold.

    Attributes:
        task: the built-in task (wmrl layout, in a temporary suite folder).
        description: its ``description.md``, the title suffixed with the fixture id.
        board: its leaderboard scores, best first (float64, one per entry).
        answers: its ``private/answers.csv`` (id column + target).
    """

    task: Task
    description: str
    board: np.ndarray
    answers: pd.DataFrame


@dataclass(frozen=True)
class TaskLayout:
    """One on-disk task layout, as :mod:`wmrl.tasks.loader` and :mod:`wmrl.tasks.fixtures` use it.

    Attributes:
        name: the layout's name (:data:`wmrl.tasks.spec.Layout`; a task's ``layout`` and ``adapter``).
        title: how messages name the benchmark (``MLE-bench``).
        expects: what a folder of this layout holds, for the error on a folder of no layout
            (``prepared/public + prepared/private``).
        detect: ``detect(path) -> bool``: ``path`` is a task folder of this layout.
        find: ``find(path) -> list of task folders or None``: the task folders that ``path`` is or holds
            for discovery (None: not this layout's; discovery then searches below ``path``).
        load: ``load(path, search) -> Task`` for a folder that ``detect`` accepts; ``search``: more folders
            where the benchmark package's competition metadata may lie. Raises :class:`TaskFormatError`.
        fixture: ``fixture(out, fixture_def, source) -> task folder``: writes a small task of this layout
            under ``out`` as the benchmark's prepare step leaves it (None: the layout has no fixture
            writer; wmrl's own folders are what ``wmrl tasks build`` writes).
        self_describing: the folder's own files say it is a task (False for DSBench, whose task folders
            are known by where they lie in the release).
        package: the benchmark's Python package whose ``competitions/<id>/`` holds competition metadata
            apart from the prepared data (``mlebench``), or None.
        no_data: ``no_data(competition id) -> reason`` for package metadata without prepared data under the
            roots (how to prepare it); set when ``package`` is.
        hidden_data: data folders inside a hidden folder by the benchmark's own default (relative parts,
            ``("mle-bench", "data")``), which discovery searches although it enters no other hidden folder.
    """

    name: str
    title: str
    expects: str
    detect: Callable[[Path], bool]
    find: Callable[[Path], list[Path] | None]
    load: Callable[[Path, Sequence[Path]], Task]
    fixture: Callable[[Path, FixtureDef, FixtureSource], Path] | None = None
    self_describing: bool = True
    package: str | None = None
    no_data: Callable[[str], str] | None = None
    hidden_data: tuple[tuple[str, ...], ...] = ()


def find_self(detect: Callable[[Path], bool]) -> Callable[[Path], list[Path] | None]:
    """The ``find`` of a layout whose task folders are known by their own files: ``[path]`` or None."""
    def find(path: Path) -> list[Path] | None:
        """``[path]`` when ``detect(path)``, else None."""
        return [path] if detect(path) else None

    return find


# Fixture metric code, one expression per wmrl metric: y (truth) and p (prediction) as pandas Series aligned by id.
FIXTURE_EXPR = {
    "accuracy": "accuracy_score(y.astype(str), p.astype(str))",
    "r2": "r2_score(y.astype(float), p.astype(float))",
    "rmse": "float(np.sqrt(mean_squared_error(y.astype(float), p.astype(float))))",
}
#: The ``sklearn.metrics`` function each fixture metric's code imports.
FIXTURE_IMPORT = {"accuracy": "accuracy_score", "r2": "r2_score", "rmse": "mean_squared_error",
                  "log_loss": "log_loss"}


def copy_public(src: Path, dst: Path) -> None:
    """Copy a built-in task's ``train.csv``, ``test.csv`` and ``sample_submission.csv`` from ``src`` into ``dst``."""
    dst.mkdir(parents=True, exist_ok=True)
    for name in ("train.csv", "test.csv", "sample_submission.csv"):
        shutil.copyfile(src / name, dst / name)


def make_public_readable(public_dir: Path) -> None:
    """Add read permission for everyone to ``public_dir`` and all below it (``chmod -R a+rX``).

    The sandbox runs solution programs as an unprivileged uid that must read ``./input``, whatever
    the builder's umask was (under ``umask 077`` the files would be 0600). ``private/`` is not touched.
    """
    paths = [public_dir, *public_dir.rglob("*")]
    for p in paths:
        if p.is_symlink():
            continue
        mode = p.stat().st_mode
        extra = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
        if p.is_dir():
            extra |= stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH
        if mode & extra != extra:
            p.chmod(stat.S_IMODE(mode) | extra)

"""Load tasks from folders of every layout with one code path: :func:`load_task`, :func:`discover`, :class:`TaskSuite`.

The layouts (wmrl's own ``task.yaml`` folders, MLE-bench's and MLE-Dojo's prepared competitions, DSBench's
data-modeling release) are read by one module each under :mod:`wmrl.tasks.layouts`, which says what each
holds; this module tries them in the order of :func:`wmrl.tasks.layouts.all_layouts` and searches task roots for
their folders. For the benchmark layouts whatever the files do not say is inferred
(:mod:`wmrl.tasks.layouts.common`); an optional hints file (same keys as ``task.yaml``; where it is read:
:func:`wmrl.tasks.spec.hints_file`) overrides any of it.
"""
from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from wmrl.tasks.layouts import all_layouts, layout
from wmrl.tasks.layouts.base import TaskFormatError
from wmrl.tasks.layouts.common import DEFAULT_TIME_LIMIT_S, GRADER_ALIASES, MAX_DEPTH, resolve_metric
from wmrl.tasks.layouts.dsbench import detect as detect_dsbench_task
from wmrl.tasks.layouts.dsbench import is_dsbench_home
from wmrl.tasks.layouts.mlebench import mlebench_default_data_dir
from wmrl.tasks.spec import Split, Task
from wmrl.paths import default_task_roots
from wmrl.tasks.checks import load_problems, one_line

__all__ = ["DEFAULT_TIME_LIMIT_S", "GRADER_ALIASES", "HIDDEN_DATA_DIRS", "MAX_DEPTH", "Discovery", "SuiteNotBuilt",
           "TaskFormatError", "TaskSuite", "default_suite", "detect_dsbench_task", "detect_layout", "discover",
           "is_dsbench_home", "load_task", "locate", "mlebench_default_data_dir", "resolve_metric", "split_roots"]


class SuiteNotBuilt(FileNotFoundError):
    """The default task suite directory is missing or empty."""


def detect_layout(path: Path) -> str | None:
    """The name of the layout (``"wmrl"``, ``"mlebench"``, ``"mledojo"``) whose own files make ``path`` a task
    folder, or ``None`` (a DSBench task folder ``data_modeling/data/data_resplit/<id>`` is known by where it
    lies, not by its files: :func:`detect_dsbench_task`)."""
    path = Path(path)
    return next((lay.name for lay in all_layouts() if lay.self_describing and lay.detect(path)), None)


#: Folders never searched for tasks (version control, caches, the raw downloads of MLE-Dojo).
_PRUNE = {".git", "__pycache__", "node_modules", ".venv", "raw", ".ipynb_checkpoints", ".mypy_cache",
          ".pytest_cache", ".tox"}
#: Benchmark data folders that lie inside a hidden folder by the benchmark's own default, searched although
#: discovery enters no other hidden folder below a root (each layout's ``hidden_data``: MLE-bench's
#: ``<user cache>/mle-bench/data``, where ``mlebench prepare`` writes without ``--data-dir``).
HIDDEN_DATA_DIRS: tuple[tuple[str, ...], ...] = tuple(rel for lay in all_layouts() for rel in lay.hidden_data)
#: How many subfolders of a skipped hidden folder are looked at to tell whether it holds task folders.
_HIDDEN_PROBE = 200


def _found(path: Path) -> tuple[str, list[Path]] | None:
    """The first layout that claims ``path`` for discovery (its ``find``: :class:`~wmrl.tasks.layouts.base.TaskLayout`)
    and the task folders that ``path`` is or holds in it, or None when no layout does."""
    for lay in all_layouts():
        found = lay.find(path)
        if found is not None:
            return lay.name, found
    return None


def _task_folders_in(hidden: Path) -> list[Path]:
    """The task folders (any layout) that a hidden folder is, or holds one level down (the first
    :data:`_HIDDEN_PROBE` subfolders looked at); empty when it holds none or cannot be read."""
    if _found(hidden) is not None:
        return [hidden]
    try:
        subs = [c for _, c in zip(range(_HIDDEN_PROBE), (c for c in hidden.iterdir() if c.is_dir()))]
    except OSError:
        return []
    return [c for c in subs if _found(c) is not None]


def load_task(path: Path | str, *, search: Sequence[Path | str] = ()) -> Task:
    """Load one task folder of any supported layout (:func:`wmrl.tasks.layouts.all_layouts`: wmrl, MLE-bench,
    MLE-Dojo, DSBench).

    Args:
        path: the task folder (MLE-bench: ``<data-dir>/<id>``; MLE-Dojo: ``<data-dir>/<id>``; DSBench:
            ``data_modeling/data/data_resplit/<id>``).
        search: more folders where the benchmark packages' competition metadata may live
            (``mlebench/competitions/<id>``, ``mledojo/competitions/<id>``); the folder's ancestors and the
            installed packages are always searched.

    A folder without any leaderboard loads fine, but its :attr:`~wmrl.tasks.spec.Task.has_reward` is
    False unless it has RPG scores; grading then gives ``reward = NaN``.

    Raises:
        TaskFormatError: the folder is not a task in any layout, its metric cannot be found (never
            guessed) or its metadata is inconsistent; the message names the task, the field and the fix.
    """
    root = Path(path).expanduser().resolve()
    extra = [Path(p).expanduser().resolve() for p in search]
    if not root.is_dir():
        raise TaskFormatError(f"task folder {root} does not exist")
    for lay in all_layouts():
        if lay.detect(root):
            return lay.load(root, extra)
    kinds = [f"{lay.expects} ({lay.title})" for lay in all_layouts()]
    raise TaskFormatError(f"{root} is not a task folder: expected {', '.join(kinds[:-1])} or {kinds[-1]}")


def load_error(folder: Path, e: BaseException) -> str:
    """Why the task folder ``folder`` failed to load, in one line: a :class:`TaskFormatError` says it itself;
    anything else names the folder and the error (its type where the message alone does not say it)."""
    if isinstance(e, TaskFormatError):
        return one_line(e)
    return f"task folder {folder} cannot be loaded: {one_line(e)}"


@dataclass
class Discovery:
    """What a recursive search of the task roots found.

    Attributes:
        tasks: loaded tasks by id (sorted).
        skipped: ``(folder, reason)`` for folders that look like a benchmark's but hold no task
            (package metadata without prepared data, an incomplete folder).
        refused: ``(task id or folder, folder, reason)`` for task folders that failed to load or failed a
            load-time check (:func:`wmrl.tasks.checks.load_problems`).
        roots: the roots searched.
    """

    tasks: dict[str, Task] = field(default_factory=dict)
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    refused: list[tuple[str, Path, str]] = field(default_factory=list)
    roots: list[Path] = field(default_factory=list)

    def summary(self) -> str:
        """One paragraph: tasks found per adapter, skipped folders grouped by reason, each refused task and why,
        and each loaded task's warnings (what the loader inferred that may be wrong)."""
        by: dict[str, int] = {}
        for t in self.tasks.values():
            by[t.adapter] = by.get(t.adapter, 0) + 1
        found = ", ".join(f"{n} {a}" for a, n in sorted(by.items())) or "none"
        lines = [f"found {len(self.tasks)} task(s) ({found}) under {', '.join(map(str, self.roots))}"]
        reasons: dict[str, int] = {}
        for _, why in self.skipped:
            reasons[why] = reasons.get(why, 0) + 1
        for why, n in sorted(reasons.items()):
            lines.append(f"skipped {n} folder(s): {why}")
        for tid, _path, why in self.refused:
            lines.append(f"refused {tid}: {why}")
        for t in self.tasks.values():
            lines += [f"warning: {w}" for w in t.warnings]
        return "\n".join(lines)


def split_roots(roots: Path | str | Sequence[Path | str] | None) -> list[Path]:
    """Task roots from one path, a list, or a string of paths joined by ``os.pathsep`` (``:``)."""
    if roots is None:
        return []
    if isinstance(roots, (str, Path)):
        roots = [p for p in str(roots).split(os.pathsep) if p.strip()]
    return [Path(r).expanduser() for r in roots]


@dataclass
class _Search:
    """What the walk over the roots found before any task is loaded (see :func:`discover`)."""

    candidates: list[tuple[str, Path]]
    packages: list[Path]
    meta_ids: dict[str, dict[str, Path]]
    hidden_tasks: dict[str, Path]

    def search_dirs(self, paths: list[Path]) -> list[Path]:
        """Where the loader looks for benchmark package metadata: the packages found, then the roots."""
        return [*self.packages, *[r.resolve() for r in paths]]


def _search(paths: list[Path], disc: Discovery) -> _Search:
    """Walk the roots (see :func:`discover`); skipped folders go to ``disc.skipped``.

    Raises:
        SuiteNotBuilt: a root does not exist or is a file.
    """
    candidates: list[tuple[str, Path]] = []
    by_package = {lay.package: lay for lay in all_layouts() if lay.package}
    meta_ids: dict[str, dict[str, Path]] = {lay.name: {} for lay in by_package.values()}
    packages: list[Path] = []  # folders holding a benchmark package found under the roots
    seen: set[Path] = set()  # folders already searched (overlapping roots)
    hidden_tasks: dict[str, Path] = {}  # task folder name -> the skipped hidden folder holding it
    for root in paths:
        if root.exists() and not root.is_dir():
            raise SuiteNotBuilt(f"task root {root} is not a folder (it is a file); give folders that hold tasks")
        if not root.is_dir():
            raise SuiteNotBuilt(f"task root {root} does not exist; build the suite with 'wmrl tasks build --out "
                                f"{root}' or give the folder your benchmark's prepare step wrote")
        stack = [(root.resolve(), 0)]
        while stack:
            d, depth = stack.pop()
            if d in seen:
                continue
            seen.add(d)
            if d.name in by_package and (d / "competitions").is_dir():
                packages.append(d.parent)
                for c in sorted((d / "competitions").iterdir()):
                    if c.is_dir() and not c.name.startswith(("_", ".")):
                        meta_ids[by_package[d.name].name][c.name] = c
                continue
            claimed = _found(d)
            if claimed is not None:
                candidates += [(claimed[0], t) for t in claimed[1]]
                continue
            if depth >= MAX_DEPTH:
                continue
            try:
                children = sorted((c for c in d.iterdir() if c.is_dir() and not c.is_symlink()), reverse=True)
            except OSError as e:
                disc.skipped.append((d, f"unreadable ({e.strerror or e})"))
                continue
            for c in children:
                if c.name in _PRUNE:
                    continue
                if not c.name.startswith("."):
                    stack.append((c, depth + 1))
                    continue
                known = [(c.joinpath(*rel), depth + 1 + len(rel)) for rel in HIDDEN_DATA_DIRS
                         if c.joinpath(*rel).is_dir()]
                if known:
                    stack += known
                    continue
                inside = _task_folders_in(c)
                if inside:
                    for folder in inside:
                        hidden_tasks.setdefault(folder.name, c)
                    names = ", ".join(f.name for f in inside[:3]) + (", ..." if len(inside) > 3 else "")
                    disc.skipped.append((c, f"hidden folder {c} holds task folders ({names}) but is not searched: "
                                            "discovery enters no hidden folder below a root; give it as a root "
                                            f"(--root {c}, or in tasks.root)"))
    return _Search(list(dict.fromkeys(candidates)), packages, meta_ids, hidden_tasks)


def discover(roots: Path | str | Sequence[Path | str], *, check: bool = True) -> Discovery:
    """Search ``roots`` recursively (up to :data:`MAX_DEPTH` levels) for tasks of every layout.

    A task folder is not searched further. Below a root, hidden folders, ``raw/`` and caches are skipped,
    except the benchmark data folders of :data:`HIDDEN_DATA_DIRS` (MLE-bench's ``~/.cache/mle-bench/data``
    under a root holding ``.cache``); a root itself is searched whatever its name (``--root ~/.cache`` works).
    A skipped hidden folder that is, or holds, task folders is reported as skipped, by name, with the fix
    (give it as a root). Benchmark package folders (``mlebench/competitions``, ``mledojo/competitions``) are
    metadata: a competition found there without prepared data is reported as skipped, saying where its data
    lies when it lies in a skipped hidden folder or in MLE-bench's default data folder outside the roots.
    Overlapping roots find each folder once. With ``check``, every benchmark task (not wmrl's own) passes
    :func:`wmrl.tasks.checks.load_problems` or is refused by name with the reason.

    Raises:
        SuiteNotBuilt: a root does not exist or is a file.
        TaskFormatError: two tasks share an id (the message names the id and both folders).
    """
    paths = split_roots(roots)
    disc = Discovery(roots=paths)
    found = _search(paths, disc)
    candidates, meta_ids, hidden_tasks = found.candidates, found.meta_ids, found.hidden_tasks
    search = found.search_dirs(paths)
    by_id: dict[str, Task] = {}
    loaded_names = {(kind, d.name) for kind, d in candidates}
    for _kind, d in candidates:
        try:
            t = load_task(d, search=search)
        except Exception as e:  # noqa: BLE001 - one broken competition is refused by name, the others load
            disc.refused.append((d.name, d, load_error(d, e)))
            continue
        if t.id in by_id:
            raise TaskFormatError(f"two task folders share the id {t.id!r} (field 'id'): {by_id[t.id].root} and "
                                  f"{t.root}; give one root per copy or rename one")
        if check and t.layout != "wmrl":
            problems = load_problems(t)
            if problems:
                disc.refused.append((t.id, d, "; ".join(p.message for p in problems)))
                continue
        by_id[t.id] = t
    for bench, ids in meta_ids.items():
        for cid, c in ids.items():
            if (bench, cid) not in loaded_names:
                disc.skipped.append((c, _no_data_reason(bench, cid, hidden_tasks)))
    disc.tasks = dict(sorted(by_id.items()))
    return disc


def locate(roots: Path | str | Sequence[Path | str], task_id: str, *, check: bool = True) -> Task | None:
    """The task ``task_id`` under ``roots``, loading only what it takes to find it (not every task there).

    The roots are walked as :func:`discover` walks them; the folders named ``task_id`` are loaded first, then
    the others one by one until a task with that id turns up (a folder whose id differs from its name); only
    that task is checked (with ``check``, a benchmark task passes :func:`wmrl.tasks.checks.load_problems`).
    A folder that fails to load is passed over unless it is named ``task_id``.

    Returns:
        The task, or None when no folder under the roots holds it.

    Raises:
        SuiteNotBuilt: a root does not exist or is a file.
        KeyError: the task was found but is refused; the message says why (as :meth:`TaskSuite.get`).
    """
    paths = split_roots(roots)
    found = _search(paths, Discovery(roots=paths))
    search = found.search_dirs(paths)
    named = [d for _, d in found.candidates if d.name == task_id]
    others = [d for _, d in found.candidates if d.name != task_id]
    for d in [*named, *others]:
        try:
            t = load_task(d, search=search)
        except Exception as e:  # noqa: BLE001 - reported for the folder named like the task, else passed over
            if d.name == task_id:
                raise KeyError(f"task {task_id!r} was refused: {load_error(d, e)}") from None
            continue
        if t.id != task_id:
            continue
        if check and t.layout != "wmrl":
            problems = load_problems(t)
            if problems:
                raise KeyError(f"task {task_id!r} was refused: {'; '.join(p.message for p in problems)}")
        return t
    return None


def _no_data_reason(bench: str, cid: str, hidden_tasks: dict[str, Path]) -> str:
    """Why a competition of a benchmark package was skipped: its prepared data lies in a skipped hidden folder,
    or the layout's ``no_data`` says (MLE-bench: in its default data folder outside the roots; else how to
    prepare it)."""
    if cid in hidden_tasks:
        h = hidden_tasks[cid]
        return (f"{bench} package metadata whose prepared data lies in the hidden folder {h}, which discovery skips "
                f"(it enters no hidden folder below a root); give {h} as a root")
    no_data = layout(bench).no_data
    return no_data(cid) if no_data is not None else f"{bench} package metadata without prepared data"



class TaskSuite:
    """All tasks found under one or several roots (any layout, searched recursively), in id order.

    Implements the ``TaskSource`` protocol of :mod:`wmrl.interfaces`. Tasks are loaded once, lazily,
    by :func:`discover`; :attr:`discovery` keeps its summary (found, skipped, refused and why).

    A task without a reward source (no leaderboard and no RPG scores) is still listed (its submissions
    can be scored, which the leaderboard rebuild needs), but grading it gives ``reward = NaN``: a trainer
    or evaluator should refuse tasks whose :attr:`~wmrl.tasks.spec.Task.has_reward` is False.
    """

    def __init__(self, root: Path | str | Sequence[Path | str], *, check: bool = True):
        self.roots = split_roots(root)
        self.root = self.roots[0] if len(self.roots) == 1 else Path(os.pathsep.join(map(str, self.roots)))
        self._check = check
        self._disc: Discovery | None = None

    @property
    def discovery(self) -> Discovery:
        """The :class:`Discovery` of the roots (searched on first use)."""
        if self._disc is None:
            self._disc = discover(self.roots, check=self._check)
        return self._disc

    def _load(self) -> dict[str, Task]:
        return self.discovery.tasks

    def tasks(self, split: Split | None = None) -> list[Task]:
        """All tasks, or those of one split (``train`` / ``heldout``), sorted by id."""
        if split not in (None, "train", "heldout"):
            raise ValueError(f"split must be None, 'train' or 'heldout', not {split!r}")
        return [t for t in self._load().values() if split is None or t.split == split]

    def get(self, task_id: str) -> Task:
        """One task by id; ``KeyError`` naming the known ids (or why the task was refused) when missing.

        Before the roots have been searched as a whole, only this task is loaded and checked (:func:`locate`);
        the whole search runs only to name the known ids when it is not found."""
        if self._disc is None:  # one task: load it alone rather than every task under the roots
            t = locate(self.roots, task_id, check=self._check)
            if t is not None:
                return t
        tasks = self._load()
        if task_id not in tasks:
            for tid, _, why in self.discovery.refused:
                if tid == task_id:
                    raise KeyError(f"task {task_id!r} was refused: {why}")
            raise KeyError(f"unknown task {task_id!r}; known tasks: {', '.join(tasks) or '(none)'}")
        return tasks[task_id]

    def ids(self) -> list[str]:
        """Task ids, sorted."""
        return list(self._load())

    def __len__(self) -> int:
        return len(self._load())

    def __iter__(self) -> Iterator[Task]:
        return iter(self._load().values())


def default_suite() -> TaskSuite:
    """The tasks under :func:`wmrl.paths.default_task_roots` (``$WMRL_TASKS_ROOT``, else the built-in suite).

    Raises:
        SuiteNotBuilt: the directory is missing or holds no task; the message says to run ``wmrl tasks build``.
    """

    roots = default_task_roots()
    missing = [r for r in roots if not r.is_dir()]
    if missing:
        raise SuiteNotBuilt(f"no task suite at {missing[0]}: run 'wmrl tasks build' (or set WMRL_TASKS_ROOT / "
                            "WMRL_HOME to where the tasks are)")
    suite = TaskSuite(roots)
    if len(suite) == 0:
        raise SuiteNotBuilt(f"no task under {', '.join(map(str, roots))}: run 'wmrl tasks build' (or set "
                            f"WMRL_TASKS_ROOT / WMRL_HOME to where the tasks are). {suite.discovery.summary()}")
    return suite

"""Which competitions of a benchmark checkout wmrl can grade with the benchmark's own code, and why not.

:func:`benchmark_coverage` reads a checkout of MLE-bench, MLE-Dojo or DSBench (detected from its
layout) and classifies every competition: **gradable** when its grading code, in the benchmark's own
convention, can run in wmrl's metric child on a CPU with the installed packages plus the benchmark's
own package from the checkout; otherwise **refused** for one of :data:`REASONS`.

The code is only read (``ast``), never imported or run. Every import of the grading file is resolved:
the standard library (``sys.stdlib_module_names``), a module of the checkout (its package, relative to
the checkout root, or a relative import), or an installed top-level module
(``importlib.util.find_spec`` on the interpreter's isolated ``sys.path``, as the metric child runs
``python -I``). Modules of the checkout are followed: their module-level imports, and the imports
inside the functions and classes the grading code takes from them. Imports guarded by
``try: ... except ImportError`` or ``if TYPE_CHECKING:`` are optional and never refuse a competition.

The conventions (read from the benchmarks' public repositories):

* **MLE-bench** ``mlebench/competitions/<id>/config.yaml`` names ``grader.grade_fn``
  (default ``mlebench.competitions.<id>.grade:grade``), a function called as
  ``grade(submission, answers)``; ``dataset.answers`` and ``dataset.sample_submission`` name the files.
* **MLE-Dojo** ``mledojo/competitions/<id>/utils/metric.py``: exactly one subclass of
  ``CompetitionMetrics`` (``mledojo.metrics.base``), instantiable without arguments, with ``evaluate``.
* **DSBench** ``data_modeling/evaluation/<id>_eval.py``: a script taking ``--answer_file``,
  ``--predict_file``, ``--path`` and ``--name``; the competitions are the names in
  ``data_modeling/data.json`` and the evaluation scripts.

For information each row also says which metric wmrl's own fast path recognises in the code
(:func:`wmrl.tasks.benchcode.recognise_metric`).

Why one file of about 750 lines: the three conventions share the import resolver and the classification into
:data:`REASONS`; a module per benchmark would each need the whole resolver.
"""
from __future__ import annotations

import ast
import importlib.util
import json
import os
import site
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from wmrl.tasks.benchcode import recognise_metric
from wmrl.tasks.layouts import layout

#: Why a competition is refused, in the order that picks a competition's main reason.
REASONS: dict[str, str] = {
    "no_grading_code": "no grading code in the benchmark's convention",
    "syntax_error": "the grading code (or a module of the checkout it imports) is not valid Python",
    "no_entry_point": "the grading code does not define the entry point the convention requires",
    "not_csv": "the benchmark's config names a submission or answers file that is not a CSV",
    "gpu_or_network": "the grading code needs a GPU or the network",
    "missing_module": "the grading code imports a module that is not installed (or not in the checkout)",
}

#: The benchmarks :func:`benchmark_coverage` reads, with their display names.

#: Top-level (or dotted) modules whose import means network access.
NETWORK_MODULES = frozenset({
    "requests", "httpx", "aiohttp", "urllib3", "socket", "ftplib", "smtplib", "kaggle", "huggingface_hub",
    "boto3", "botocore", "openai", "wandb", "urllib.request", "http.client", "xmlrpc.client",
})
#: Calls that fetch from the network.
NETWORK_CALLS = frozenset({"urlopen", "urlretrieve", "from_pretrained", "hf_hub_download", "snapshot_download"})
#: Modules that need a GPU.
GPU_MODULES = frozenset({"cupy", "pycuda", "cudf", "cuml", "tensorrt", "numba.cuda"})

_DSBENCH_ARGS = ("--answer_file", "--predict_file", "--path", "--name")
_OPTIONAL_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


class CoverageError(ValueError):
    """The path is not a checkout of MLE-bench, MLE-Dojo or DSBench; the message says what was expected."""


@dataclass(frozen=True)
class Problem:
    """One reason a competition cannot be graded by its own code.

    Attributes:
        reason: a key of :data:`REASONS`.
        detail: what exactly (the module, the file, the missing argument).
    """

    reason: str
    detail: str


@dataclass(frozen=True)
class CompetitionCoverage:
    """The coverage of one competition.

    Attributes:
        id: the competition id.
        code: the grading code file, relative to the checkout root (None when there is none).
        problems: every problem found, in :data:`REASONS` order (empty = gradable).
        missing_modules: the modules it imports that are neither installed, standard library nor in the
            checkout (top-level names; dotted names for modules the checkout lacks).
        recognised_metric: the wmrl metric :func:`~wmrl.tasks.benchcode.recognise_metric` reads in the
            code, or None.
    """

    id: str
    code: str | None
    problems: tuple[Problem, ...] = ()
    missing_modules: tuple[str, ...] = ()
    recognised_metric: str | None = None

    @property
    def gradable(self) -> bool:
        """True when nothing stops the benchmark's own code from grading this competition."""
        return not self.problems

    @property
    def reason(self) -> str | None:
        """The main reason it is refused (the first of its problems in :data:`REASONS` order), or None."""
        return self.problems[0].reason if self.problems else None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping: id, code, gradable, reason, detail, problems, missing_modules,
        recognised_metric."""
        return {"id": self.id, "code": self.code, "gradable": self.gradable, "reason": self.reason,
                "detail": self.problems[0].detail if self.problems else None,
                "problems": [{"reason": p.reason, "detail": p.detail} for p in self.problems],
                "missing_modules": list(self.missing_modules), "recognised_metric": self.recognised_metric}


@dataclass
class BenchmarkCoverage:
    """The coverage of one benchmark checkout.

    Attributes:
        benchmark: ``mlebench``, ``mledojo`` or ``dsbench``.
        root: the checkout root.
        competitions: one row per competition, sorted by id.
    """

    benchmark: str
    root: Path
    competitions: list[CompetitionCoverage] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The benchmark's display name (``MLE-bench``, ``MLE-Dojo``, ``DSBench``)."""
        return layout(self.benchmark).title

    def refused_by_reason(self) -> dict[str, int]:
        """Refused competitions per main reason, every key of :data:`REASONS` present (0 when none)."""
        counts = Counter(c.reason for c in self.competitions if c.reason)
        return {r: counts.get(r, 0) for r in REASONS}

    def missing_module_counts(self) -> dict[str, dict[str, int]]:
        """For each missing module: ``needed_by`` (competitions importing it) and ``only_blocker``
        (competitions whose one problem is this one missing module, so that installing it alone makes
        them gradable); most needed first."""
        needed = Counter(m for c in self.competitions for m in c.missing_modules)
        alone = Counter(c.missing_modules[0] for c in self.competitions
                        if len(c.missing_modules) == 1 and all(p.reason == "missing_module" for p in c.problems))
        return {m: {"needed_by": n, "only_blocker": alone.get(m, 0)}
                for m, n in sorted(needed.items(), key=lambda kv: (-kv[1], kv[0]))}

    def summary(self) -> dict[str, Any]:
        """Counts: competitions, gradable (by the benchmark's own code), refused, refused per reason,
        recognised (by wmrl's fast-path metric recognition)."""
        n_ok = sum(c.gradable for c in self.competitions)
        return {"competitions": len(self.competitions), "gradable": n_ok, "refused": len(self.competitions) - n_ok,
                "refused_by_reason": self.refused_by_reason(),
                "recognised": sum(c.recognised_metric is not None for c in self.competitions)}

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping: benchmark, name, root, the :meth:`summary` counts, missing_modules and one
        row per competition (``rows``)."""
        return {"benchmark": self.benchmark, "name": self.name, "root": str(self.root), **self.summary(),
                "missing_modules": self.missing_module_counts(),
                "rows": [c.as_dict() for c in self.competitions]}


# ----------------------------------------------------------------------------------------------- detection

def detect_benchmarks(path: Path | str) -> list[tuple[str, Path]]:
    """Which benchmark checkout ``path`` is, from its layout.

    ``path`` is the checkout root, or its package folder (``mlebench``, ``mledojo``) or DSBench's
    ``data_modeling`` folder.

    Args:
        path: the folder.

    Returns:
        ``(benchmark, checkout root)`` pairs: ``mlebench`` when ``mlebench/competitions/`` is there,
        ``mledojo`` for ``mledojo/competitions/``, ``dsbench`` for ``data_modeling/evaluation/`` (or
        ``data_modeling/data.json``); usually one.

    Raises:
        CoverageError: the path does not exist, is not a folder or holds none of the three layouts.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise CoverageError(f"{p} does not exist; give the folder of an MLE-bench, MLE-Dojo or DSBench checkout")
    if not p.is_dir():
        raise CoverageError(f"{p} is a file; give the folder of an MLE-bench, MLE-Dojo or DSBench checkout")
    p = p.resolve()
    if p.name in ("mlebench", "mledojo") and (p / "competitions").is_dir():
        p = p.parent
    elif p.name == "data_modeling" and ((p / "evaluation").is_dir() or (p / "data.json").is_file()):
        p = p.parent
    found = [(b, p) for b, marker in (("mlebench", "mlebench/competitions"), ("mledojo", "mledojo/competitions"))
             if (p / marker).is_dir()]
    dm = p / "data_modeling"
    if (dm / "evaluation").is_dir() or (dm / "data.json").is_file():
        found.append(("dsbench", p))
    if not found:
        raise CoverageError(
            f"{p} is not a benchmark checkout: expected mlebench/competitions/ (MLE-bench), "
            "mledojo/competitions/ (MLE-Dojo) or data_modeling/evaluation/ (DSBench) in it")
    return found


# ------------------------------------------------------------------------------------------ import reading

def _isolated_sys_path() -> list[str]:
    """``sys.path`` as a ``python -I`` child of this interpreter sees it: without the working folder,
    ``$PYTHONPATH`` and the user site folder."""
    drop = {os.path.abspath(d) for d in os.environ.get("PYTHONPATH", "").split(os.pathsep) if d}
    drop.add(os.path.abspath(os.getcwd()))
    try:
        drop.add(os.path.abspath(site.getusersitepackages()))
    except (AttributeError, TypeError):  # a site module without user sites
        pass
    return [p for p in sys.path if p and os.path.abspath(p) not in drop]


_INSTALLED: dict[str, bool] = {}


def is_installed(name: str) -> bool:
    """True when the top-level module ``name`` can be imported by a ``python -I`` child of this
    interpreter (found with ``importlib.util.find_spec``; nothing is imported). Cached per name.

    Args:
        name: a top-level module name (no dots).

    Returns:
        Whether it is found (standard library and built-in modules included).
    """
    if name in _INSTALLED:
        return _INSTALLED[name]
    if name in sys.stdlib_module_names or name in sys.builtin_module_names:
        found = True
    else:
        saved = sys.path[:]
        try:
            sys.path[:] = _isolated_sys_path()
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a module loaded without a spec still counts as there
            found = name in sys.modules
        finally:
            sys.path[:] = saved
    _INSTALLED[name] = found
    return found


def _catches_import_error(node: ast.Try | ast.TryStar) -> bool:
    for h in node.handlers:
        if h.type is None:
            return True
        types = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
        for t in types:
            name = t.attr if isinstance(t, ast.Attribute) else t.id if isinstance(t, ast.Name) else ""
            if name in _OPTIONAL_IMPORT_ERRORS:
                return True
    return False


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _scope(start: Sequence[ast.AST], *, skip_functions: bool):
    """Yield ``(node, optional)`` for every node under ``start``; ``optional`` for nodes guarded by an
    ``except ImportError``; ``if TYPE_CHECKING:`` bodies left out; with ``skip_functions`` the bodies of
    functions (and methods) left out."""
    stack = [(n, False) for n in reversed(start)]
    while stack:
        node, optional = stack.pop()
        yield node, optional
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and skip_functions:
            # the body runs only when called; decorators and default values run at definition
            at_def = [*node.decorator_list, *node.args.defaults, *(d for d in node.args.kw_defaults if d)]
            stack.extend((n, optional) for n in reversed(at_def))
            continue
        if isinstance(node, (ast.Try, ast.TryStar)):
            opt = optional or _catches_import_error(node)
            children: list[tuple[ast.AST, bool]] = [(s, opt) for s in node.body]
            children += [(h, optional) for h in node.handlers]
            children += [(s, optional) for s in node.orelse + node.finalbody]
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            children = [(s, optional) for s in node.orelse]
        else:
            children = [(c, optional) for c in ast.iter_child_nodes(node)]
        stack.extend(reversed(children))


def _call_name(node: ast.Call) -> str:
    fn = node.func
    return fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""


@dataclass
class _Reading:
    """What reading a grading file and the checkout modules it imports found."""

    missing: dict[str, str] = field(default_factory=dict)       # module -> file that imports it
    syntax: list[str] = field(default_factory=list)             # "file: message"
    gpu: list[str] = field(default_factory=list)                # "file: what"
    network: list[str] = field(default_factory=list)
    uses_cuda_check: bool = False


class _CheckoutReader:
    """Reads the code of one checkout: parses files once, resolves imports, follows checkout modules."""

    def __init__(self, root: Path):
        self.root = root
        self._trees: dict[Path, ast.Module | str] = {}

    def rel(self, path: Path) -> str:
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return str(path)

    def tree(self, path: Path) -> ast.Module | str:
        """The parsed module, or the syntax error's message."""
        if path not in self._trees:
            try:
                self._trees[path] = ast.parse(path.read_bytes(), filename=str(path))
            except (SyntaxError, ValueError) as exc:  # ValueError: null bytes (Python < 3.12)
                line = getattr(exc, "lineno", None)
                msg = getattr(exc, "msg", None) or str(exc)
                self._trees[path] = f"{msg}" + (f" (line {line})" if line else "")
            except OSError as exc:
                self._trees[path] = f"cannot be read: {exc.strerror or exc}"
        return self._trees[path]

    # -- module resolution inside the checkout
    def _walk(self, base: Path, parts: list[str], *, include_base_init: bool):
        """Resolve ``parts`` under the folder ``base``: (package __init__ files on the way, the target
        (a file, a folder, or None when missing))."""
        inits: list[Path] = []
        cur: Path = base
        if include_base_init and (base / "__init__.py").is_file():
            inits.append(base / "__init__.py")
        for part in parts:
            if not cur.is_dir():
                return inits, None
            if (cur / part / "__init__.py").is_file():
                cur = cur / part
                inits.append(cur / "__init__.py")
            elif (cur / f"{part}.py").is_file():
                cur = cur / f"{part}.py"
            elif (cur / part).is_dir():
                cur = cur / part  # a namespace package
            else:
                return inits, None
        return inits, cur

    def _in_checkout(self, top: str) -> bool:
        return (self.root / f"{top}.py").is_file() or (self.root / top).is_dir()

    def read(self, entry: Path) -> _Reading:
        """Read ``entry`` (all of it) and, transitively, the checkout modules it imports."""
        out = _Reading()
        done: set[tuple[Path, str]] = set()
        queue: list[tuple[Path, str]] = [(entry, "<all>")]
        while queue:
            path, what = queue.pop()
            if (path, what) in done or (path, "<all>") in done:
                continue
            done.add((path, what))
            tree = self.tree(path)
            if isinstance(tree, str):
                out.syntax.append(f"{self.rel(path)}: {tree}")
                continue
            defs = {n.name: n for n in tree.body
                    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
            if what == "<all>":
                start, skip = list(tree.body), False
            elif what == "<module>":
                start, skip = list(tree.body), True
            elif what in defs:
                start, skip = [defs[what]], False
            else:  # a name bound otherwise (an assignment, an import): module level covers it
                queue.append((path, "<module>"))
                continue
            nodes = list(_scope(start, skip_functions=skip))
            aliases: dict[str, Path] = {}
            for node, optional in nodes:
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    self._resolve(node, path, optional, out, queue, aliases)
                elif isinstance(node, ast.Call):
                    name = _call_name(node)
                    if name in NETWORK_CALLS:
                        out.network.append(f"{self.rel(path)}: calls {name}()")
                    elif name in ("is_available", "device_count"):
                        out.uses_cuda_check = True
                    args = [*node.args, *(k.value for k in node.keywords)]
                    if any(isinstance(a, ast.Constant) and isinstance(a.value, str)
                           and (a.value == "cuda" or a.value.startswith("cuda:")) for a in args):
                        out.gpu.append(f"{self.rel(path)}: puts data on 'cuda'")
                    if name == "cuda" and isinstance(node.func, ast.Attribute):
                        out.gpu.append(f"{self.rel(path)}: calls .cuda()")
            # names the scope uses from a checkout module imported as a module (``import a.b as m; m.f()``)
            if aliases:
                for node, _ in nodes:
                    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                            and node.value.id in aliases):
                        queue.append((aliases[node.value.id], node.attr))
            # the same module's functions and classes this scope refers to
            if what not in ("<all>", "<module>"):
                for node, _ in nodes:
                    if isinstance(node, ast.Name) and node.id in defs and node.id != what:
                        queue.append((path, node.id))
        return out

    def _resolve(self, node: ast.Import | ast.ImportFrom, importer: Path, optional: bool, out: _Reading,
                 queue: list[tuple[Path, str]], aliases: dict[str, Path]) -> None:
        def missing(name: str) -> None:
            if not optional:
                out.missing.setdefault(name, self.rel(importer))

        def signal(dotted: str) -> None:
            parts = dotted.split(".")
            for k in range(1, len(parts) + 1):
                prefix = ".".join(parts[:k])
                if prefix in NETWORK_MODULES and not optional:
                    out.network.append(f"{self.rel(importer)}: imports {dotted}")
                    return
                if prefix in GPU_MODULES and not optional:
                    out.gpu.append(f"{self.rel(importer)}: imports {dotted}")
                    return

        def follow(target: Path | None, inits: list[Path], names: list[str] | None, dotted: str) -> Path | None:
            """Queue the package __init__ files and the target; returns the target's module file."""
            for init in inits:
                queue.append((init, "<module>"))
            if target is None:
                missing(dotted)
                return None
            mod = target if target.is_file() else (target / "__init__.py")
            if target.is_dir() and names:
                for n in names:
                    _, sub = self._walk(target, [n], include_base_init=False)
                    if sub is not None:
                        subfile = sub if sub.is_file() else sub / "__init__.py"
                        if subfile.is_file():
                            queue.append((subfile, "<module>"))
                    elif mod.is_file():
                        queue.append((mod, n))
                    else:
                        missing(f"{dotted}.{n}")
                return mod if mod.is_file() else None
            if mod.is_file():
                queue.append((mod, "<module>"))
                for n in names or ():
                    if n != "*":
                        queue.append((mod, n))
                return mod
            return None

        def submodule_aliases(target: Path | None) -> None:
            """``from pkg import submodule [as m]``: names used as ``m.f`` are requested from it."""
            if target is None or not target.is_dir():
                return
            for a in node.names:
                sub = self._walk(target, [a.name], include_base_init=False)[1]
                subfile = None if sub is None else sub if sub.is_file() else sub / "__init__.py"
                if subfile is not None and subfile.is_file():
                    aliases[a.asname or a.name] = subfile

        if isinstance(node, ast.Import):
            for a in node.names:
                signal(a.name)
                top = a.name.split(".")[0]
                if top in sys.stdlib_module_names:
                    continue
                if self._in_checkout(top):
                    inits, target = self._walk(self.root, a.name.split("."), include_base_init=False)
                    mod = follow(target, inits, None, a.name)
                    if mod is not None and (a.asname or "." not in a.name):
                        aliases[a.asname or a.name] = mod
                elif not is_installed(top):
                    missing(top)
            return
        names = [a.name for a in node.names]
        if node.level:
            base = importer.parent
            for _ in range(node.level - 1):
                base = base.parent
            inits, target = self._walk(base, node.module.split(".") if node.module else [], include_base_init=True)
            follow(target, inits, names, "." * node.level + (node.module or ""))
            submodule_aliases(target)
            return
        module = node.module or ""
        if module == "__future__":
            return
        signal(module)
        for a in node.names:
            signal(f"{module}.{a.name}")
        top = module.split(".")[0]
        if top in sys.stdlib_module_names:
            return
        if self._in_checkout(top):
            inits, target = self._walk(self.root, module.split("."), include_base_init=False)
            follow(target, inits, names, module)
            submodule_aliases(target)
        elif not is_installed(top):
            missing(top)


# ------------------------------------------------------------------------------------ entry-point checks

def _func_problem(tree: ast.Module, fn_name: str, n_args: int) -> str | None:
    """None when ``fn_name`` is bound at module level and, if a ``def``, callable with ``n_args``
    positional arguments; else what is wrong."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == fn_name:
            a = node.args
            positional = [*a.posonlyargs, *a.args]
            required = len(positional) - len(a.defaults)
            if len(positional) < n_args and a.vararg is None:
                return f"{fn_name}() takes {len(positional)} positional argument(s), the convention passes {n_args}"
            if required > n_args:
                return f"{fn_name}() requires {required} arguments, the convention passes {n_args}"
            kw_required = [k.arg for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is None]
            if kw_required:
                return f"{fn_name}() requires keyword argument(s) {', '.join(kw_required)}"
            if isinstance(node, ast.AsyncFunctionDef):
                return f"{fn_name}() is a coroutine (async def)"
            return None
    for node in tree.body:
        targets: list[str] = []
        if isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            targets = [node.target.id]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            targets = [(a.asname or a.name).split(".")[0] for a in node.names]
        elif isinstance(node, ast.ClassDef):
            targets = [node.name]
        if fn_name in targets:
            return None
    return f"no function {fn_name}(submission, answers)"


def _base_name(expr: ast.expr) -> str:
    return expr.attr if isinstance(expr, ast.Attribute) else expr.id if isinstance(expr, ast.Name) else ""


def _mledojo_problem(tree: ast.Module) -> str | None:
    """None when the module defines exactly one CompetitionMetrics subclass, instantiable without
    arguments, with an ``evaluate`` method; else what is wrong."""
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    subs: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, c in classes.items():
            if name not in subs and any(_base_name(b) in ({"CompetitionMetrics"} | subs) for b in c.bases):
                subs.add(name)
                changed = True
    if not subs:
        return "no subclass of CompetitionMetrics"
    if len(subs) > 1:
        return f"{len(subs)} subclasses of CompetitionMetrics ({', '.join(sorted(subs))}); the convention needs one"
    (name,) = subs

    def lineage(n: str) -> list[ast.ClassDef]:
        out, todo = [], [n]
        while todo:
            c = classes.get(todo.pop(0))
            if c is not None and c not in out:
                out.append(c)
                todo.extend(_base_name(b) for b in c.bases)
        return out

    methods = {m.name: m for c in reversed(lineage(name)) for m in c.body
               if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if "evaluate" not in methods:
        return f"{name} has no evaluate(y_true, y_pred)"
    init = methods.get("__init__")
    if init is not None:
        a = init.args
        positional = [*a.posonlyargs, *a.args][1:]
        required = len(positional) - len(a.defaults)
        kw_required = [k.arg for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is None]
        if required > 0 or kw_required:
            return f"{name}() cannot be made without arguments (its __init__ requires some)"
    return None


def _dsbench_problem(tree: ast.Module) -> str | None:
    """None when the script declares the four arguments DSBench passes and requires no other."""
    declared: set[str] = set()
    other_required: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _call_name(node) == "add_argument":
            flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            declared.update(flags)
            req = next((k.value for k in node.keywords if k.arg == "required"), None)
            positional_arg = flags and not flags[0].startswith("-")
            if not set(flags) & set(_DSBENCH_ARGS) and (
                    positional_arg or (isinstance(req, ast.Constant) and req.value is True)):
                other_required.append(flags[0] if flags else "?")
    absent = [a for a in _DSBENCH_ARGS if a not in declared]
    if absent:
        return f"the script takes no {', '.join(absent)} argument"
    if other_required:
        return f"the script also requires {', '.join(other_required)}, which DSBench's runner does not pass"
    return None


# --------------------------------------------------------------------------------- per-benchmark passes

def _classify(reader: _CheckoutReader, cid: str, code: Path | None, *, entry_problem=None,
              extra: list[Problem] | None = None, missing_what: str = "") -> CompetitionCoverage:
    if code is None or not code.is_file():
        what = missing_what or (reader.rel(code) if code is not None else "the grading code")
        return CompetitionCoverage(cid, None, (Problem("no_grading_code", f"no {what}"),))
    problems: list[Problem] = []
    tree = reader.tree(code)
    recognised: str | None = None
    missing: tuple[str, ...] = ()
    if isinstance(tree, str):
        problems.append(Problem("syntax_error", f"{reader.rel(code)}: {tree}"))
    else:
        try:
            recognised = recognise_metric(code)
        except (SyntaxError, ValueError, OSError):
            recognised = None
        if entry_problem is not None:
            msg = entry_problem(tree)
            if msg:
                problems.append(Problem("no_entry_point", msg))
        problems.extend(extra or ())
        r = reader.read(code)
        for msg in dict.fromkeys(r.syntax):
            problems.append(Problem("syntax_error", msg))
        if r.network:
            problems.append(Problem("gpu_or_network", "network: " + "; ".join(dict.fromkeys(r.network))))
        if r.gpu and not r.uses_cuda_check:
            problems.append(Problem("gpu_or_network", "GPU: " + "; ".join(dict.fromkeys(r.gpu))))
        if r.missing:
            missing = tuple(sorted(r.missing))
            problems.append(Problem("missing_module", ", ".join(
                m if r.missing[m] == reader.rel(code) else f"{m} (imported by {r.missing[m]})" for m in missing)))
    order = list(REASONS)
    problems.sort(key=lambda p: order.index(p.reason))
    return CompetitionCoverage(cid, reader.rel(code), tuple(problems), missing, recognised)


def _cover_mlebench(root: Path) -> BenchmarkCoverage:
    reader = _CheckoutReader(root)
    comps = root / "mlebench" / "competitions"
    rows = []
    for d in sorted(p for p in comps.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
        if not ((d / "config.yaml").is_file() or (d / "grade.py").is_file()):
            continue
        config: dict[str, Any] = {}
        if (d / "config.yaml").is_file():
            try:
                loaded = yaml.safe_load((d / "config.yaml").read_text(encoding="utf-8"))
                config = loaded if isinstance(loaded, dict) else {}
            except (yaml.YAMLError, OSError, UnicodeDecodeError):
                config = {}
        grade_fn = str((config.get("grader") or {}).get("grade_fn") or f"mlebench.competitions.{d.name}.grade:grade")
        module, _, fn = grade_fn.partition(":")
        fn = fn or "grade"
        code = root.joinpath(*module.split(".")).with_suffix(".py") if module else d / "grade.py"
        extra = []
        dataset = config.get("dataset") or {}
        for key in ("answers", "sample_submission"):
            name = dataset.get(key)
            if isinstance(name, str) and not name.lower().endswith(".csv"):
                extra.append(Problem("not_csv", f"config.yaml dataset.{key} is {Path(name).name}, not a CSV"))
        rows.append(_classify(reader, d.name, code, entry_problem=lambda t, fn=fn: _func_problem(t, fn, 2),
                              extra=extra, missing_what=f"{module.replace('.', '/')}.py (config.yaml grader.grade_fn)"))
    return BenchmarkCoverage("mlebench", root, rows)


def _cover_mledojo(root: Path) -> BenchmarkCoverage:
    reader = _CheckoutReader(root)
    comps = root / "mledojo" / "competitions"
    rows = []
    for d in sorted(p for p in comps.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
        if not ((d / "utils").is_dir() or (d / "info").is_dir()):
            continue
        code = d / "utils" / "metric.py"
        rows.append(_classify(reader, d.name, code, entry_problem=_mledojo_problem,
                              missing_what=f"mledojo/competitions/{d.name}/utils/metric.py"))
    return BenchmarkCoverage("mledojo", root, rows)


def _dsbench_names(data_json: Path) -> list[str]:
    """Competition names in DSBench's ``data.json`` (one JSON object a line, or one JSON list)."""
    text = data_json.read_text(encoding="utf-8", errors="replace")
    try:
        records = json.loads(text)
        records = records if isinstance(records, list) else [records]
    except json.JSONDecodeError:
        records = []
        for line in text.splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return [str(r["name"]) for r in records if isinstance(r, dict) and r.get("name")]


def _cover_dsbench(root: Path) -> BenchmarkCoverage:
    reader = _CheckoutReader(root)
    dm = root / "data_modeling"
    evaluation = dm / "evaluation"
    names = set(_dsbench_names(dm / "data.json")) if (dm / "data.json").is_file() else set()
    if evaluation.is_dir():
        names |= {p.name[: -len("_eval.py")] for p in evaluation.glob("*_eval.py")}
    rows = [_classify(reader, n, evaluation / f"{n}_eval.py", entry_problem=_dsbench_problem,
                      missing_what=f"data_modeling/evaluation/{n}_eval.py") for n in sorted(names)]
    return BenchmarkCoverage("dsbench", root, rows)


_COVER = {"mlebench": _cover_mlebench, "mledojo": _cover_mledojo, "dsbench": _cover_dsbench}


def benchmark_coverage(path: Path | str) -> list[BenchmarkCoverage]:
    """The coverage of every benchmark in the checkout at ``path`` (see the module docstring).

    Args:
        path: an MLE-bench, MLE-Dojo or DSBench checkout (or its ``mlebench``, ``mledojo`` or
            ``data_modeling`` folder).

    Returns:
        One :class:`BenchmarkCoverage` per benchmark found there (usually one).

    Raises:
        CoverageError: the path is missing, not a folder, or none of the three checkouts.
    """
    return [_COVER[b](root) for b, root in detect_benchmarks(path)]

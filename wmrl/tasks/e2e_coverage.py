"""End-to-end coverage of a benchmark's registry: every competition built as a folder in the benchmark's real
layout with synthetic answers, loaded by wmrl's loader, and graded by wmrl and by the benchmark's own code.

(Over 500 lines: the format search's two stages share the runs of the benchmark's code, the reading of its
errors and the refusal's bookkeeping kept here; the second stage's column schemas and every synthetic value
kind are in :mod:`wmrl.tasks.e2e_schema`.)

For each competition of a checkout (the registries :func:`wmrl.tasks.coverage.benchmark_coverage` reads:
MLE-bench's ``mlebench/competitions/``, MLE-Dojo's ``mledojo/competitions/``, DSBench's evaluation scripts),
:func:`run_competition`

1. reads the submission's target column from the competition's own code (DSBench's ``--value`` default,
   MLE-Dojo's ``value`` default of its ``CompetitionMetrics``, MLE-bench's column subscripts in ``grade.py``);
2. tries synthetic answer kinds (:data:`KINDS`: one target of binary labels, values, class labels or text;
   several target or class columns named in the code; free text, label lists, run-length-encoded masks;
   several rows per id) until the benchmark's own code scores the answers as a submission: the code is the
   judge of the format, as the real data is not at hand; where none is scored, a second stage
   (:func:`_schema_search`) builds the columns the code reads from each side (an answers-only image size or
   flag, a submission-only column, a target the answers name otherwise, ids joining a group and a class) with
   class probabilities, word label sets, object-detection prediction strings and box centres besides, scoring
   a gold submission (the answers' values under the submission's columns); a refusal keeps the most telling failure
   (:class:`Nearest`), and answers that are not a table are refused as the loader refuses them;
3. writes the folder where the benchmark's prepare step leaves it (public ``train.csv``, ``test.csv`` and a
   constant ``sample_submission.csv``; the answers in the private place; DSBench's baseline and GT results as the
   code scores the sample and the answers, the perturbed submission standing in for answers scored infinite),
   the metadata staying in the checkout;
4. loads it with :func:`wmrl.tasks.loader.load_task` and grades the sample and the perturbed submission with
   :func:`wmrl.tasks.grading.grade_submission` and with the benchmark's code
   (:func:`wmrl.tasks.benchcode.run_metric_code`), rounded as the benchmark rounds.

A row is ``loaded`` (the loader returned a task), ``graded_exactly`` (both gradings equal within 1e-9) and
otherwise ``reason``: the one line that refused it; ``note`` says what the run put in place of the checkout's
files. The leaderboards are the checkout's real ones, except where one is a Git LFS pointer (MLE-bench's, in a
checkout cloned without its LFS files): then a synthetic board in the benchmark's format stands in
(:func:`synthetic_board`) and the row's note says so. The load-time checks that compare a synthetic
submission's score with a real board are not run.
"""
from __future__ import annotations

import ast
import os
import re
import shutil
from dataclasses import asdict, dataclass, replace
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from wmrl.tasks.benchcode import MetricCodeError, recognise_metric, run_metric_code
from wmrl.tasks.checks import one_line
from wmrl.tasks.e2e_schema import (N_ROWS, Schema, code_roles, kinds_for, learn, next_id_style, one_target_values,
                                   schema_frames, seeds, several_target_values)
from wmrl.tasks.grading import grade_submission
from wmrl.tasks.layouts.mlebench import answers_problem
from wmrl.tasks.leaderboard import lfs_pointer
from wmrl.tasks.loader import load_error, load_task

#: Test rows of a synthetic competition.
N_TEST = N_ROWS
#: Largest difference between wmrl's grade and the benchmark's code for "graded exactly".
ATOL = 1e-9
#: The synthetic answer kinds tried, in order: one target (binary labels with probabilities, values, class
#: labels, text labels); one 0/1 column per class of a list the code holds (multi-label probabilities); several
#: value columns (the code's other column names: several targets); one target as free text, as label lists,
#: as run-length-encoded masks, as an ordering of the row's own tokens (the sample: the tokens reversed); values
#: under ids repeated (several rows per id); class labels under ids ``t_<row>_<name>``, one row per name of the
#: code's class list (a row per image and component). ``binlabels``: binary labels, with labels as the sample
#: and the submission; ``multibinary``: one 0/1 target per column named in the code, scored with probabilities.
KINDS = ("binary", "binlabels", "continuous", "labels", "text", "multilabel", "multitarget", "multibinary",
         "sentences", "labelsets", "rle", "order", "rows", "rowclass")
#: Metrics (as :func:`wmrl.tasks.benchcode.recognise_metric` names them) that compare labels: a kind whose sample
#: submission holds probabilities is not tried for them.
LABEL_METRICS = ("accuracy", "macro_f1", "qwk")
#: Most (id column, target column) pairs tried (:func:`column_pairs`).
MAX_PAIRS = 4
#: Most columns a synthetic several-target answer has.
MAX_COLUMNS = 8
#: Entries of a synthetic leaderboard (written where the checkout's board is a Git LFS pointer).
BOARD_SIZE = 50


@dataclass
class Row:
    """One competition's outcome (see the module docstring)."""

    benchmark: str
    id: str
    kind: str = ""
    loaded: bool = False
    graded_exactly: bool = False
    reason: str = ""
    note: str = ""

    def as_dict(self) -> dict:
        """The row as a JSON-ready mapping."""
        return asdict(self)


def competitions(checkout: Path) -> list[tuple[str, str, Path]]:
    """``(benchmark, competition id, grading code)`` of every competition with grading code in ``checkout``
    (a checkout root or its package folder), sorted by id."""
    checkout = Path(checkout)
    out: list[tuple[str, str, Path]] = []
    for pkg, bench, rel in (("mlebench", "mlebench", "grade.py"), ("mledojo", "mledojo", "utils/metric.py")):
        comp = next((c for c in (checkout / pkg / "competitions", checkout / "competitions") if c.is_dir()), None)
        if comp is not None and (comp.parent.name == pkg):
            out += [(bench, d.name, d / rel) for d in sorted(comp.iterdir()) if (d / rel).is_file()]
    ev = next((c for c in (checkout / "data_modeling" / "evaluation", checkout / "evaluation") if c.is_dir()), None)
    if ev is not None:
        out += [("dsbench", p.name[: -len("_eval.py")], p) for p in sorted(ev.glob("*_eval.py"))]
    return out


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_ .-]{0,60}$")


def code_columns(code: Path) -> tuple[list[str], list[str]]:
    """``(names, longest list)`` read off the competition's code and, beside MLE-bench's ``grade.py`` and
    MLE-Dojo's ``metric.py``, its sibling modules (``classes.py``):
    the string subscripts, ``*_col``, ``by``, ``on`` and ``subset`` keyword values, the keys given to
    ``sort_values``, ``set_index``, ``groupby``, ``drop_duplicates`` and ``pivot``, and ``in df.columns`` tests, in
    order of appearance; and the longest list, tuple or set of names (a class list)."""
    names: list[str] = []
    longest: list[str] = []
    siblings = [] if code.name.endswith("_eval.py") else sorted(p for p in code.parent.glob("*.py") if p != code)
    files = [code, *siblings]  # a DSBench script's folder holds every other competition's script
    for f in files:
        try:
            tree = ast.parse(f.read_text(encoding="utf-8", errors="replace"))
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            found: list[object] = []
            if isinstance(node, ast.Subscript):
                sl = node.slice
                found = [e.value for e in (sl.elts if isinstance(sl, (ast.List, ast.Tuple)) else [sl])
                         if isinstance(e, ast.Constant)]
            elif isinstance(node, ast.keyword) and node.arg and (node.arg.endswith(("col", "column"))
                                                                  or node.arg in ("by", "on", "subset")):
                v = node.value
                found = [e.value for e in (v.elts if isinstance(v, (ast.List, ast.Tuple)) else [v])
                         if isinstance(e, ast.Constant)]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                    "sort_values", "set_index", "groupby", "drop_duplicates", "pivot"):
                found = [a.value for a in node.args if isinstance(a, ast.Constant)]
            elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) \
                    and "columns" in ast.unparse(node.comparators[0]):
                found = [node.left.value]
            elif isinstance(node, (ast.List, ast.Tuple, ast.Set)) and len(node.elts) >= 2 and all(
                    isinstance(e, ast.Constant) and isinstance(e.value, str) and _NAME.match(e.value)
                    for e in node.elts):
                vals = [e.value for e in node.elts]  # type: ignore[attr-defined]
                if len(vals) > len(longest):
                    longest = vals
            names += [v for v in found if isinstance(v, str) and _NAME.match(v) and v not in names]
    return names, longest


def target_column(bench: str, code: Path) -> tuple[str, str]:
    """``(id column, target column)`` the competition's code reads (``("id", "target")`` where it says none): the
    id is a string assigned to ``id_col`` or the first id-like column name; the target DSBench's ``--value``
    default, MLE-Dojo's ``value`` default, else the first other column name."""
    src = code.read_text(encoding="utf-8", errors="replace")
    names = code_columns(code)[0]
    said = re.search(r"\bid_col(?:umn)?\s*(?::\s*str\s*)?=\s*['\"]([^'\"]+)", src)
    ids = [said.group(1)] if said else [n for n in names if re.search(r"id$|^id|_id|Id|ID$", n)]
    id_col = ids[0] if ids else "id"
    if bench == "dsbench":
        m = re.search(r"--value['\"]\s*,[^)]*default\s*=\s*['\"]([^'\"]+)", src)
        return id_col, m.group(1) if m else "target"
    if bench == "mledojo":
        m = re.search(r"value\s*:\s*str\s*=\s*['\"]([^'\"]+)|value\s*=\s*['\"]([^'\"]+)", src)
        return id_col, (m.group(1) or m.group(2)) if m else "target"
    rest = [n for n in names if n not in ids]
    return id_col, (rest[0] if rest else "target")


def code_keys(code: Path) -> list[str]:
    """The column names the code sorts, indexes, groups or joins by (``sort_values``, ``set_index``, ``groupby``,
    ``merge`` arguments; ``by=``, ``on=`` and ``keys=`` values), in order of appearance: where the code names no id
    column, its key is the submission's id."""
    try:
        tree = ast.parse(code.read_text(encoding="utf-8", errors="replace"))
    except (SyntaxError, ValueError, OSError):
        return []
    keys: list[str] = []
    for node in ast.walk(tree):
        found: list[object] = []
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "sort_values", "set_index", "groupby", "merge"):
            for v in [*node.args, *(k.value for k in node.keywords if k.arg in ("by", "on", "keys"))]:
                found += [e.value for e in (v.elts if isinstance(v, (ast.List, ast.Tuple)) else [v])
                          if isinstance(e, ast.Constant)]
        keys += [v for v in found if isinstance(v, str) and _NAME.match(v) and v not in keys]
    return keys


def column_pairs(bench: str, code: Path) -> list[tuple[str, str]]:
    """The ``(id column, target column)`` pairs tried, at most :data:`MAX_PAIRS`: :func:`target_column`'s first,
    then each key the code sorts or joins by as the id, then each other column the code reads by name as the
    target (DSBench's scripts often keep a copied ``--value`` default and read the real column by name)."""
    id_col, target = target_column(bench, code)
    keys = code_keys(code)
    pairs = [(id_col, target)]
    pairs += [(k, target) for k in keys if k not in (id_col, target)]
    pairs += [(id_col, n) for n in code_columns(code)[0] if n not in (id_col, target) and n not in keys]
    out: list[tuple[str, str]] = []
    for p in pairs:
        if p not in out:
            out.append(p)
    return out[:MAX_PAIRS]


def _frames(kind: str, id_col: str, target: str, names: list[str], longest: list[str], rng: np.random.Generator,
            numeric_ids: bool = False) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame] | None:
    """``(answers, sample submission, perturbed submission)`` of one synthetic kind (:data:`KINDS`), or None
    where the code names no columns for it. The ids are ``t<row>`` (``1000 + row`` with ``numeric_ids``)."""
    ids = pd.Series([1000 + i if numeric_ids else f"t{i}" for i in range(N_TEST)])
    if kind in ("multilabel", "multitarget", "multibinary"):
        cols = [n for n in (longest if kind == "multilabel" else names) if n != id_col]
        cols = cols if kind == "multilabel" else cols[:MAX_COLUMNS]
        if len(cols) < 2:
            return None
        y, s, p = several_target_values("multitarget" if kind == "multitarget" else "multibinary", tuple(cols),
                                        N_TEST, rng)
        return tuple(pd.concat([ids.rename(id_col), d], axis=1) for d in (y, s, p))
    if kind == "rows":
        ids = pd.Series([1000 + i // 3 if numeric_ids else f"t{i // 3}" for i in range(N_TEST)])
    if kind == "rowclass":
        if len(longest) < 2:
            return None
        ids = pd.Series([f"t_{i // len(longest)}_{longest[i % len(longest)]}" for i in range(N_TEST)])
        kind = "labels"
    y, sample, pert = one_target_values(kind, rng)
    s = y.map(lambda t: " ".join(reversed(t.split()))) if sample is None else pd.Series([sample] * N_TEST)
    frame = [pd.DataFrame({id_col: ids, target: v}) for v in (y, s, pert)]
    return frame[0], frame[1], frame[2]


def _code_scores(bench: str, code: Path, answers: Path, subs: list[Path]) -> list[float] | str:
    """The code's score of each submission, or the first failure's one line (whole: an error listing a long
    class list names every class; :class:`Nearest` cuts it for the row)."""
    out = []
    for s in subs:
        try:
            out.append(run_metric_code(bench, code, answers, s).score)
        except MetricCodeError as e:
            return " ".join(str(e).split())
    return out


def _write_public(public: Path, answers: pd.DataFrame, sample: pd.DataFrame, rng: np.random.Generator) -> None:
    """train.csv (a feature and the answers' value columns, resampled), test.csv (each id once, a feature) and
    sample_submission.csv in ``public``."""
    public.mkdir(parents=True, exist_ok=True)
    id_col = answers.columns[0]
    train = answers.iloc[rng.integers(0, len(answers), 2 * N_TEST)].reset_index(drop=True)
    train[id_col] = [f"tr{i}" for i in range(len(train))]
    train.insert(1, "feature", rng.normal(size=len(train)))
    train.to_csv(public / "train.csv", index=False)
    ids = answers[id_col].drop_duplicates()
    pd.DataFrame({id_col: ids, "feature": rng.normal(size=len(ids))}).to_csv(public / "test.csv", index=False)
    sample.to_csv(public / "sample_submission.csv", index=False)


def _mlebench_config(meta: Path) -> dict:
    """The competition's ``config.yaml`` in MLE-bench's package folder ``meta`` (``{}`` where unreadable)."""
    try:
        cfg = yaml.safe_load((meta / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return cfg if isinstance(cfg, dict) else {}


def build(bench: str, cid: str, code: Path, out: Path, answers: pd.DataFrame, sample: pd.DataFrame,
          rng: np.random.Generator, scores: tuple[float, float] | None = None) -> Path:
    """Write competition ``cid`` under ``out`` in ``bench``'s layout; returns the folder the loader reads."""
    if bench == "mlebench":
        root = out / "mle-bench-data" / cid
        _write_public(root / "prepared" / "public", answers, sample, rng)
        (root / "prepared" / "private").mkdir(parents=True, exist_ok=True)
        dataset = _mlebench_config(code.parent).get("dataset")
        name = Path(str((dataset if isinstance(dataset, dict) else {}).get("answers", "test.csv"))).name
        answers.to_csv(root / "prepared" / "private" / name, index=False)
        return root
    if bench == "mledojo":
        root = out / "mle-dojo-data" / cid
        _write_public(root / "data" / "public", answers, sample, rng)
        (root / "data" / "private").mkdir(parents=True, exist_ok=True)
        answers.to_csv(root / "data" / "private" / "test_answer.csv", index=False)
        return root
    home = out / "dsbench" / "data_modeling"
    resplit = home / "data" / "data_resplit" / cid
    _write_public(resplit, answers, sample, rng)
    (home / "data" / "answers" / cid).mkdir(parents=True, exist_ok=True)
    answers.to_csv(home / "data" / "answers" / cid / "test_answer.csv", index=False)
    (home / "evaluation").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(code, home / "evaluation" / code.name)
    base, gt = scores if scores is not None else (0.0, 1.0)
    for kind, v in (("baseline", base), ("GT", gt)):
        d = home / "save_performance" / kind / cid
        d.mkdir(parents=True, exist_ok=True)
        (d / "result.txt").write_text(repr(float(v)))
    return resplit


_QUOTED = re.compile(r"""['"`]([A-Za-z_][A-Za-z0-9_ .-]{0,60})['"`]""")
_LISTED = re.compile(r"columns?(?: found in \w+| in \w+)?: ([A-Za-z_][A-Za-z0-9_]*(?:, [A-Za-z_][A-Za-z0-9_]*)*)")
#: A value of the synthetic frames quoted back in an error (an id, a text label, a word): not a column name.
_SYNTHETIC_VALUE = re.compile(r"^(t\d+|tr\d+|t_\d+_.*|w\d+|c\d+x\d+|alpha|beta|gamma|delta|omega|sigma|kappa|theta)$")
#: Python's words for a missing attribute (``'DataFrame' object has no attribute 'applymap'``) and for a type
#: (``got <class 'float'>``): no column names.
_NO_ATTRIBUTE = re.compile(r"""(['"][\w.]+['"] object|module ['"][\w.]+['"]) has no attribute ['"]\w+['"]|"""
                           r"""<class ['"][\w.]+['"]>""")
_BEFORE = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*) column\b")
_NOT_NAMES = {"a", "an", "the", "each", "every", "one", "this", "that", "target", "required", "missing", "no", "ID",
              "id", "answers", "submission", "prediction", "predictions", "any", "its", "first", "second"}
#: Most synthetic formats one competition tries.
MAX_TRIES = 100
_SEVERAL = ("multilabel", "multitarget", "multibinary")


def error_columns(line: str) -> list[str]:
    """Column names the benchmark's code names in its error ``line`` (``KeyError: 'time'``, ``must have a
    `PredictionString` column``, ``missing required columns: prediction``), in order; the code's own path before
    ``failed:`` is not read, nor a name with a space, a value of the synthetic frames quoted back, the type and
    attribute of an ``AttributeError`` or a type's name (``<class 'float'>``)."""
    line = _NO_ATTRIBUTE.sub("", line.split(" failed: ", 1)[-1])
    before = [n for n in _BEFORE.findall(line) if n not in _NOT_NAMES]
    found = _QUOTED.findall(line) + [n for m in _LISTED.findall(line) for n in m.split(", ")] + before
    found += [n.lower() for n in before if n.lower() != n]  # "Type column not found" of a column named "type"
    return [n for i, n in enumerate(found) if n not in found[:i] and not n.endswith((".py", ".csv"))
            and " " not in n and not _SYNTHETIC_VALUE.match(n)]


#: Errors of an API the installed pandas, NumPy or scikit-learn removed (``DataFrame.applymap``, ``np.float``,
#: ``int()`` of a one-element array, ``squared=False``): the code cannot run here, whatever the format.
REMOVED_API = re.compile(r"'(DataFrame|Series)' object has no attribute '(applymap|append|iteritems|lookup|mad|ix|"
                         r"as_matrix|get_value|set_value|swapaxes)'|module 'numpy' has no attribute|"
                         r"only 0-dimensional arrays can be converted|unexpected keyword argument 'squared'")


class Nearest:
    """The most telling failure of a format search, for the refusal: an error of a removed library API
    (:data:`REMOVED_API`), then a format the code scored but not finitely, then an error about values (every
    column it names was in the frame it scored) over one about a missing column, then the frame holding more of
    the columns the code names (``known``), then the later one. ``see`` takes each failure; ``why`` is the row's
    one line."""

    def __init__(self, known: set[str]) -> None:
        self.known, self.rank, self.line = known, (False, False, False, -1), ""

    def see(self, kind: str, columns: set[str], line: str, scored: bool = False) -> None:
        """Weigh the failure ``line`` of ``kind``'s frame with ``columns`` (``scored``: the code scored it)."""
        rank = (bool(REMOVED_API.search(line)), scored, scored or all(n in columns for n in error_columns(line)),
                len(self.known & columns))
        if rank >= self.rank:
            self.rank, self.line = rank, f"{kind}: {line[:300]}"

    def why(self) -> str:
        """The refusal's one line."""
        if self.rank[0]:
            return (f"its grading code calls an API removed from the installed libraries (pandas {pd.__version__}, "
                    f"NumPy {np.__version__}, scikit-learn {version('scikit-learn')}): {self.line}")
        return (f"its grading code scores none of the synthetic formats (nearest: {self.line})" if self.line else
                "no synthetic answer kind was scored by the benchmark's code")


def _finite(bench: str, code: Path, answers: Path, got: list[float], perturbed: pd.DataFrame, trial: Path,
            kind: str, nearest: Nearest) -> tuple[float, float] | None:
    """``(best, sample's score)`` of a format whose gold submission and sample the code scored ``got``: the gold's
    score, or, where that is infinite (a log of a zero error: a perfect submission has no finite score), the
    perturbed submission's; None (and ``nearest`` told) where the sample's or both are not finite."""
    best = got[0]
    if np.isinf(best) and np.isfinite(got[1]):
        perturbed.to_csv(trial / "perturbed.csv", index=False)
        again = _code_scores(bench, code, answers, [trial / "perturbed.csv"])
        best = again[0] if not isinstance(again, str) else best
    if np.isfinite(best) and np.isfinite(got[1]):
        return best, got[1]
    nearest.see(kind, set(perturbed.columns), f"the code scored the answers' own values {got[0]!r} and the sample "
                                              f"{got[1]!r}", scored=True)
    return None


#: Most formats the second stage (:func:`_schema_search`) tries.
MAX_SCHEMA_TRIES = 150


def _schema_search(bench: str, code: Path, trial: Path, rng: np.random.Generator, nearest: Nearest
                   ) -> tuple | str | None:
    """The second stage of the search (:mod:`wmrl.tasks.e2e_schema`): from each seed schema the code's columns
    give (:func:`~wmrl.tasks.e2e_schema.seeds`), each value kind the targets take
    (:func:`~wmrl.tasks.e2e_schema.kinds_for`), the code scoring the gold submission and the sample against the
    answers; an error about the ids moves the id style (:func:`~wmrl.tasks.e2e_schema.next_id_style`), else a
    column an error names joins the schema (:func:`~wmrl.tasks.e2e_schema.learn`), both kept for the later kinds.
    A format whose answers score as the constant sample does is passed over (the code does not read the values
    written).
    Returns ``_choose``'s found tuple, a missing module's line, or None after :data:`MAX_SCHEMA_TRIES`."""
    roles = code_roles(code)
    nearest.known |= set(roles.answers) | set(roles.submission)
    id_col, target = target_column(bench, code)
    tried = 0
    for schema in seeds(roles, id_col, target):
        done: set[str] = set()
        while tried < MAX_SCHEMA_TRIES:
            kinds = [k for k in kinds_for(schema) if k not in done]
            if not kinds:
                break
            kind = kinds[0]
            done.add(kind)
            while tried < MAX_SCHEMA_TRIES:
                frames = schema_frames(schema, kind, roles.classes, rng)
                if frames is None:
                    break
                tried += 1
                paths = [trial / f"{n}.csv" for n in ("answers", "gold", "sample")]
                for f, path in zip(frames, paths):
                    f.to_csv(path, index=False)
                got = _code_scores(bench, code, paths[0], paths[1:])
                columns = set(frames[0].columns) | set(frames[1].columns)
                if not isinstance(got, str):
                    pair = _finite(bench, code, paths[0], got, frames[3], trial, kind, nearest)
                    if pair is not None and pair[0] == pair[1]:  # the code does not read the values written
                        nearest.see(kind, columns, f"the code scored the answers' own values as the constant "
                                                   f"sample ({pair[0]!r})", scored=True)
                        pair = None
                    if pair is not None:
                        return kind, schema.id, (frames[0], frames[2], frames[3]), pair
                    break
                if "needs a module" in got:
                    return got
                nearest.see(kind, columns, got)
                named = error_columns(got)
                style = next_id_style(schema.ids, got, named, roles.classes)
                grown: Schema | None = replace(schema, ids=style) if style is not None else \
                    learn(schema, named, got, roles)
                if grown is None:
                    break
                schema = grown
    return None


def _choose(bench: str, code: Path, trial: Path, rng: np.random.Generator) -> tuple[tuple | None, str]:
    """``((kind, id column, (answers, sample, perturbed), (answers' score, sample's score)), "")`` of the first
    synthetic format the benchmark's code scores, or ``(None, why)``.

    Tried in order: each kind of :data:`KINDS`, each with every pair of :func:`column_pairs` (the several-column
    kinds once), at most :data:`MAX_TRIES`. A column the code names in an error (:func:`error_columns`) is tried
    after those, in the order the errors came: as a second column of the answers beside the target (0/1 values: a
    group or a flag the metric reads), then as the target and as the id (the id first where its name says id or
    the code sorts by it); it joins the column names of the several-column kinds, and a list of columns in an
    error is tried as several targets and as the multi-label kind's classes. An error converting a synthetic id
    (``t0``) to a number makes every later id one (:func:`_frames`). Binary labels scored with probabilities are
    passed over where the code scores the perturbed probabilities as it scores the constant sample (it compares
    labels: accuracy). Where the code scores the constant sample NaN (a correlation), the sample holds the
    perturbed submission's values shuffled."""
    names, longest = code_columns(code)
    try:
        label_metric = recognise_metric(code) in LABEL_METRICS
    except (OSError, SyntaxError, ValueError):
        label_metric = False
    kinds = [k for k in KINDS if not (label_metric and k == "binary")]
    pairs, keys = column_pairs(bench, code), code_keys(code)
    Item = tuple[tuple[str, str], str, tuple[str, ...], list[str]]
    queue: list[Item] = [(p, k, (), names) for k in kinds for p in pairs if k not in _SEVERAL or p == pairs[0]]
    nearest, tried, numeric_ids = Nearest(set(names)), 0, False
    while queue and tried < MAX_TRIES:
        item = queue.pop(0)
        (id_col, target), kind, extras, cols = item
        frames = _frames(kind, id_col, target, cols, longest if cols is names else cols, rng, numeric_ids)
        if frames is None or any(e in frames[0].columns for e in extras):
            continue
        if extras:
            flags = pd.DataFrame({e: rng.integers(0, 2, len(frames[0])) for e in extras})
            frames = (pd.concat([frames[0], flags], axis=1), frames[1], frames[2])
        tried += 1
        a, sp = trial / "answers.csv", trial / "sample.csv"
        frames[0].to_csv(a, index=False)
        frames[1].to_csv(sp, index=False)
        got = _code_scores(bench, code, a, [a])
        if not isinstance(got, str) and not np.isnan(got[0]):
            sample_score = _code_scores(bench, code, a, [sp])
            if not isinstance(sample_score, str) and not np.isfinite(sample_score[0]):
                # a constant sample the code cannot score (a correlation): the perturbed values shuffled instead
                values = [c for c in frames[1].columns if c != id_col]
                shuffled = frames[2][values].iloc[rng.permutation(len(frames[2]))].reset_index(drop=True)
                frames = (frames[0], pd.concat([frames[0][[id_col]], shuffled], axis=1), frames[2])
                frames[1].to_csv(sp, index=False)
                sample_score = _code_scores(bench, code, a, [sp])
            got = sample_score if isinstance(sample_score, str) else got + sample_score
        if isinstance(got, str):
            nearest.see(kind, set(frames[0].columns), got)
            if "needs a module" in got:
                return None, got
            if not numeric_ids and re.search(r"""(convert|numeric|float|int|parse).*["']t[\d_]""", got):
                numeric_ids = True  # the code wants numbers as ids (it converts the synthetic 't0')
                queue.insert(0, item)
                continue
            named = error_columns(got)
            new = [n for n in named if n not in names and n not in (id_col, target, *extras)]
            names += new
            ahead: list[Item] = [((id_col, target), kind, (*extras, n), cols) for n in new]
            for n in new:
                as_id, as_target = (n, target), (id_col, n)
                by_id = [(as_id, k, extras, cols) for k in kinds]  # the several-column kinds under this id too
                by_target = [(as_target, k, extras, cols) for k in kinds if k not in _SEVERAL]
                ahead += by_id + by_target if n in keys or re.search(r"id$|^id|_id|Id|ID$", n) else by_target + by_id
            if new and len(named) >= 2:  # the columns the error lists, as several targets
                ahead += [((id_col, target), k, extras, [n for n in named if n != id_col]) for k in _SEVERAL]
            queue += ahead
            continue
        if kind == "binary" and all(np.isfinite(got)):
            frames[2].to_csv(trial / "perturbed.csv", index=False)
            if _code_scores(bench, code, a, [trial / "perturbed.csv"]) == got[1:]:
                continue  # probabilities score as the constant sample does: the code compares labels
        pair = _finite(bench, code, a, got, frames[2], trial, kind, nearest) if len(got) == 2 else None
        if pair is not None:
            return (kind, id_col, frames, pair), ""
    found = _schema_search(bench, code, trial, rng, nearest)
    if isinstance(found, str):
        return None, found
    return (found, "") if found is not None else (None, nearest.why())


def run_competition(bench: str, cid: str, code: Path, checkout: Path, out: Path, seed: int = 0) -> Row:
    """Build, load and grade one competition (module docstring); never raises for the competition's fault.

    The synthetic format is the first :func:`_choose` finds that the benchmark's code scores."""
    row = Row(bench, cid)
    rng = np.random.default_rng(seed)
    trial = out / ".trial" / f"{bench}-{cid}"
    trial.mkdir(parents=True, exist_ok=True)
    problem = answers_problem(cid, _mlebench_config(code.parent)) if bench == "mlebench" else ""
    chosen, why = (None, problem) if problem else _choose(bench, code, trial, rng)
    if chosen is None:
        row.reason = why
        return row
    kind, id_col, (answers, sample, pert), (gt, base) = chosen
    row.kind = kind
    folder = build(bench, cid, code, out, answers, sample, rng, (base, gt))
    search, row.note = synthetic_board(bench, cid, checkout, out, gt, base)
    try:
        task = load_task(folder, search=[search])
    except Exception as e:  # noqa: BLE001 - the loader's refusal is the row's reason
        row.reason = load_error(folder, e)
        return row
    row.loaded = True
    sub = trial / "perturbed_loaded.csv"
    pert.rename(columns={id_col: task.id_column}).to_csv(sub, index=False)
    for path in (Path(task.sample_submission_path), sub):
        try:
            mine = grade_submission(task, path).score
            theirs = run_metric_code(bench, code, Path(task.answers_path), path).score
        except Exception as e:  # noqa: BLE001 - a grading refusal is the row's reason
            row.reason = f"{path.name}: {one_line(e)}"
            return row
        if task.score_decimals is not None:
            theirs = round(theirs, task.score_decimals)
        if not abs(mine - theirs) <= ATOL:
            row.reason = f"{path.name}: wmrl graded {mine!r}, the benchmark's code {theirs!r}"
            return row
    row.graded_exactly = True
    return row


def synthetic_board(bench: str, cid: str, checkout: Path, out: Path, gt: float, base: float) -> tuple[Path, str]:
    """``(checkout to load with, note)``: ``checkout`` itself and no note, unless MLE-bench's ``leaderboard.csv``
    of ``cid`` there is a Git LFS pointer (a checkout cloned without its LFS files, which the loader refuses).
    Then the checkout's package is copied once under ``out/checkouts`` and the copy's board of ``cid`` is
    replaced by a synthetic one in Kaggle's export format as MLE-bench ships it (``scoreNullable, teamId,
    teamName, submissionDate, score``, best first, no rank): :data:`BOARD_SIZE` scores evenly from ``gt`` (the
    answers' own score, the best) to ``base`` (the sample submission's); the note says so. The checkout itself
    is never written."""
    board = Path(checkout) / "mlebench" / "competitions" / cid / "leaderboard.csv"
    if bench != "mlebench" or not lfs_pointer(board):
        return Path(checkout), ""
    copy = Path(out) / "checkouts" / Path(checkout).resolve().name
    if not (copy / "mlebench").is_dir():  # copied aside, then renamed: a stopped or parallel run leaves no half
        part = copy / f"mlebench.partial-{os.getpid()}"
        shutil.rmtree(part, ignore_errors=True)
        shutil.copytree(Path(checkout) / "mlebench", part)
        try:
            part.rename(copy / "mlebench")
        except OSError:  # another process of the run was first
            shutil.rmtree(part, ignore_errors=True)
    scores = np.linspace(gt, base, BOARD_SIZE)
    pd.DataFrame({"scoreNullable": scores, "teamId": range(1000, 1000 + BOARD_SIZE),
                  "teamName": [f"team {i + 1}" for i in range(BOARD_SIZE)],
                  "submissionDate": "2024-01-01 00:00:00", "score": scores}
                 ).to_csv(copy / "mlebench" / "competitions" / cid / "leaderboard.csv", index=False)
    return copy, ("the checkout's leaderboard.csv is a Git LFS pointer; loaded beside a synthetic board in its "
                  "format (the answers' score to the sample's)")


def run_coverage(checkout: Path, out: Path, ids: list[str] | None = None, seed: int = 0) -> list[Row]:
    """:func:`run_competition` for every competition of ``checkout`` (or those in ``ids``), in id order."""
    rows = []
    for bench, cid, code in competitions(Path(checkout)):
        if ids is None or cid in ids:
            rows.append(run_competition(bench, cid, code, Path(checkout), Path(out), seed))
    return rows


def summary(rows: list[Row]) -> dict[str, dict[str, int]]:
    """Per benchmark: competitions, loaded, graded exactly, refused."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        s = out.setdefault(r.benchmark, {"competitions": 0, "loaded": 0, "graded_exactly": 0, "refused": 0})
        s["competitions"] += 1
        s["loaded"] += r.loaded
        s["graded_exactly"] += r.graded_exactly
        s["refused"] += not r.graded_exactly
    return out

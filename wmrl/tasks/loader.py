"""Load tasks from folders in three layouts with one code path.

Layouts (detected from the files present):

* **wmrl** (``task.yaml`` in the folder)::

      task.yaml  description.md  leaderboard.csv (rank,score; or the files task.yaml lists)
      public/{train.csv,test.csv,sample_submission.csv}
      private/answers.csv                        (id column + target; never copied to a sandbox)

* **MLE-bench**, a prepared competition folder (``config.yaml`` and ``prepared/``)::

      config.yaml  description.md  leaderboard.csv (Kaggle export: a 'score' column, best-first)
      prepared/public/{train.csv,test.csv,sample_submission.csv}
      prepared/private/test.csv                  (answers; the path in config.yaml's dataset.answers)

  The metric comes from ``grader.name`` (``accuracy``, ``auc-roc``, ``log-loss``, ``rmse``, ...).

* **MLE-Dojo**, a prepared competition folder (``data/public`` and ``data/private``)::

      data/public/{train.csv,test.csv,sample_submission.csv}   data/private/test_answer.csv
      public_leaderboard.csv  private_leaderboard.csv          (in the folder, info/ or data/)
      description.md|txt                                       (in the folder, info/ or data/public)

For the two foreign layouts whatever the files do not say is inferred: the id column is the first
column of the sample submission; the target its second column (or, with one column per class, a
multiclass probability task); the task type from the answers (numeric with many values ->
regression); classes from the training targets and the answers. An optional ``wmrl.yaml`` in the
folder (same keys as ``task.yaml``) overrides any of it.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from wmrl.tasks.metrics import METRICS, metric_info
from wmrl.tasks.spec import Split, Task

#: Default execution wall-clock limit (seconds) for foreign tasks that do not give one.
DEFAULT_TIME_LIMIT_S = 600.0

#: MLE-bench / MLE-Dojo grader names -> wmrl metric names.
GRADER_ALIASES: dict[str, str] = {
    "accuracy": "accuracy", "acc": "accuracy", "categorization_accuracy": "accuracy",
    "auc": "roc_auc", "auc_roc": "roc_auc", "roc_auc": "roc_auc", "roc_auc_score": "roc_auc",
    "auc_roc_ovr": "roc_auc_ovr", "roc_auc_ovr": "roc_auc_ovr", "multiclass_auc": "roc_auc_ovr",
    "log_loss": "log_loss", "logloss": "log_loss", "multi_class_log_loss": "log_loss",
    "multiclass_log_loss": "log_loss", "binary_log_loss": "log_loss", "cross_entropy": "log_loss",
    "macro_f1": "macro_f1", "f1_macro": "macro_f1", "mean_f1": "macro_f1",
    "rmse": "rmse", "root_mean_squared_error": "rmse",
    "mae": "mae", "mean_absolute_error": "mae",
    "r2": "r2", "r2_score": "r2", "r_squared": "r2",
}


class TaskFormatError(ValueError):
    """A task folder that cannot be loaded; the message names the folder, the file and the fix."""


class SuiteNotBuilt(FileNotFoundError):
    """The default task suite directory is missing or empty."""


def detect_layout(path: Path) -> str | None:
    """``"wmrl"``, ``"mlebench"``, ``"mledojo"`` or ``None`` for a folder that is not a task."""
    path = Path(path)
    if (path / "task.yaml").is_file():
        return "wmrl"
    if (path / "config.yaml").is_file() and (path / "prepared").is_dir():
        return "mlebench"
    if (path / "data" / "public").is_dir() and (path / "data" / "private").is_dir():
        return "mledojo"
    return None


def _yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise TaskFormatError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise TaskFormatError(f"{path} must hold a mapping of keys to values")
    return data


def _count_rows(csv_path: Path) -> int:
    """Data rows of a CSV (lines minus the header; quoted newlines are rare in these tables)."""
    if not csv_path.is_file():
        return 0
    with open(csv_path, "rb") as fh:
        n = sum(1 for _ in fh)
    return max(0, n - 1)


def _header(csv_path: Path) -> list[str]:
    if not csv_path.is_file():
        return []
    return [str(c) for c in pd.read_csv(csv_path, nrows=0).columns]


def _first_existing(*paths: Path) -> Path | None:
    for p in paths:
        if p.is_file():
            return p
    return None


def _sort_classes(labels) -> tuple[str, ...]:
    labels = {str(v).strip() for v in labels if not pd.isna(v)}
    try:
        return tuple(sorted(labels, key=float))
    except ValueError:
        return tuple(sorted(labels))


def _metric_name(raw: str) -> str:
    key = str(raw).strip().lower().replace("-", "_").replace(" ", "_")
    if key in METRICS:
        return key
    if key in GRADER_ALIASES:
        return GRADER_ALIASES[key]
    raise TaskFormatError(f"unknown metric or grader {raw!r}; known: {', '.join(sorted(METRICS))} "
                          f"(aliases: {', '.join(sorted(GRADER_ALIASES))}); set 'metric' in wmrl.yaml")


def _make_task(meta: dict[str, Any], *, root: Path, public_dir: Path, answers_path: Path,
               leaderboards: tuple[Path, ...], description: str, layout: str) -> Task:
    """Build a :class:`Task` from a complete metadata mapping; checks types and values."""
    for key in ("id", "type", "metric", "target", "id_column"):
        if meta.get(key) in (None, ""):
            raise TaskFormatError(f"task folder {root}: missing required key {key!r}")
    task_type = str(meta["type"])
    if task_type not in ("binary", "multiclass", "regression"):
        raise TaskFormatError(f"task folder {root}: type must be binary, multiclass or regression, not {task_type!r}")
    metric = _metric_name(meta["metric"])
    info = metric_info(metric)
    if task_type not in info.task_types:
        raise TaskFormatError(f"task folder {root}: metric {metric!r} does not apply to {task_type} tasks")
    classes = tuple(str(c) for c in (meta.get("classes") or ()))
    if task_type == "binary" and len(classes) != 2:
        raise TaskFormatError(f"task folder {root}: a binary task needs exactly 2 classes, got {list(classes)}")
    if task_type == "multiclass" and len(classes) < 3:
        raise TaskFormatError(f"task folder {root}: a multiclass task needs at least 3 classes, got {list(classes)}")
    split: Split = meta.get("split", "train")
    if split not in ("train", "heldout"):
        raise TaskFormatError(f"task folder {root}: split must be 'train' or 'heldout', not {split!r}")
    n_train = int(meta.get("n_train") or _count_rows(public_dir / "train.csv"))
    n_test = int(meta.get("n_test") or _count_rows(public_dir / "test.csv"))
    n_features = meta.get("n_features")
    if n_features is None:
        n_features = len([c for c in _header(public_dir / "train.csv") if c not in (meta["target"], meta["id_column"])])

    def opt_float(key: str) -> float | None:
        v = meta.get(key)
        return None if v is None else float(v)

    return Task(
        id=str(meta["id"]),
        type=task_type,  # type: ignore[arg-type]
        metric=metric,
        lower_is_better=bool(meta.get("lower_is_better", info.lower_is_better)),
        target=str(meta["target"]),
        id_column=str(meta["id_column"]),
        root=root,
        public_dir=public_dir,
        answers_path=answers_path,
        leaderboard_paths=leaderboards,
        time_limit_s=float(meta.get("time_limit_s", DEFAULT_TIME_LIMIT_S)),
        split=split,
        description=description,
        layout=layout,  # type: ignore[arg-type]
        failure_reward=float(meta.get("failure_reward", 0.0)),
        n_rows=n_train + n_test,
        n_features=int(n_features),
        source=str(meta.get("source", "")),
        license=str(meta.get("license", "")),
        classes=classes,
        baseline_score=opt_float("baseline_score"),
        gold_score=opt_float("gold_score"),
        n_train=n_train,
        n_test=n_test,
        title=str(meta.get("title", meta.get("name", meta["id"]))),
    )


def _load_wmrl(root: Path) -> Task:
    meta = _yaml(root / "task.yaml")
    public_dir = root / meta.get("public_dir", "public")
    answers = root / meta.get("answers", "private/answers.csv")
    boards = meta.get("leaderboards")
    if boards is None:
        boards = [n for n in ("leaderboard.csv", "public_leaderboard.csv", "private_leaderboard.csv")
                  if (root / n).is_file()]
    leaderboards = tuple(root / b for b in boards if (root / b).is_file())
    desc_path = root / meta.get("description_file", "description.md")
    description = desc_path.read_text(encoding="utf-8") if desc_path.is_file() else ""
    meta.setdefault("id", root.name)
    return _make_task(meta, root=root, public_dir=public_dir, answers_path=answers,
                      leaderboards=leaderboards, description=description, layout="wmrl")


def _infer_meta(meta: dict[str, Any], public_dir: Path, answers_path: Path) -> dict[str, Any]:
    """Fill id column, target, type, classes and metric from the files (see the module docstring)."""
    sample = _first_existing(public_dir / "sample_submission.csv", public_dir / "sampleSubmission.csv",
                             *sorted(public_dir.glob("*sample*ubmission*.csv")))
    if sample is None and not all(k in meta for k in ("id_column", "target")):
        raise TaskFormatError(f"{public_dir}: no sample_submission.csv to infer the submission format from")
    cols = _header(sample) if sample else [meta["id_column"], meta["target"]]
    meta.setdefault("id_column", cols[0])
    answers_cols = _header(answers_path)
    if not answers_cols:
        raise TaskFormatError(f"answers file {answers_path} is missing or empty")
    if len(cols) > 2 and "target" not in meta:  # one probability column per class
        meta.setdefault("type", "multiclass" if len(cols) > 3 else "binary")
        meta.setdefault("classes", cols[1:])
        rest = [c for c in answers_cols if c != meta["id_column"] and c not in cols[1:]]
        meta["target"] = rest[0] if len(rest) == 1 else "target"
        meta.setdefault("metric", "log_loss")
        return meta
    meta.setdefault("target", cols[1] if len(cols) > 1 else answers_cols[-1])
    target = meta["target"]
    if "type" not in meta or ("classes" not in meta and meta["type"] != "regression"):
        ans = pd.read_csv(answers_path, usecols=lambda c: c == target)
        if target not in ans.columns:
            raise TaskFormatError(f"answers file {answers_path} has no target column {target!r}")
        values = ans[target].dropna()
        train_path = public_dir / "train.csv"
        if train_path.is_file() and target in _header(train_path):
            values = pd.concat([values, pd.read_csv(train_path, usecols=[target])[target].dropna()])
        numeric = pd.api.types.is_numeric_dtype(values)
        n_unique = values.nunique()
        is_reg = numeric and (n_unique > 20 or not (values == values.round()).all())
        if "type" not in meta:
            meta["type"] = "regression" if is_reg else ("binary" if n_unique == 2 else "multiclass")
        if meta["type"] != "regression":
            meta.setdefault("classes", list(_sort_classes(values.unique())))
    if "metric" not in meta:
        if meta["type"] == "regression":
            meta["metric"] = "rmse"
        else:
            sample_vals = pd.read_csv(sample, nrows=50)[cols[1]] if sample else pd.Series(dtype=object)
            probabilistic = (meta["type"] == "binary" and pd.api.types.is_float_dtype(sample_vals)
                             and sample_vals.between(0, 1).all())
            meta["metric"] = "roc_auc" if probabilistic else "accuracy"
    return meta


def _foreign_description(*candidates: Path) -> str:
    p = _first_existing(*candidates)
    return p.read_text(encoding="utf-8", errors="replace") if p else ""


def _load_mlebench(root: Path) -> Task:
    config = _yaml(root / "config.yaml")
    hints = _yaml(root / "wmrl.yaml") if (root / "wmrl.yaml").is_file() else {}
    public_dir = root / "prepared" / "public"
    answers_name = Path(str((config.get("dataset") or {}).get("answers", "test.csv"))).name
    answers = _first_existing(root / "prepared" / "private" / answers_name,
                              root / "prepared" / "private" / "test.csv",
                              *sorted((root / "prepared" / "private").glob("*.csv")))
    if answers is None:
        raise TaskFormatError(f"MLE-bench folder {root}: no answers CSV under prepared/private/")
    meta: dict[str, Any] = {"id": config.get("id", root.name), "title": config.get("name", root.name)}
    grader = (config.get("grader") or {}).get("name")
    if grader and str(grader).lower() not in ("auto", "custom"):
        meta["metric"] = grader
    meta.update(hints)
    meta = _infer_meta(meta, public_dir, answers)
    leaderboards = tuple(p for p in (root / "leaderboard.csv",) if p.is_file())
    description = _foreign_description(root / Path(str(config.get("description", "description.md"))).name,
                                       root / "description.md", public_dir / "description.md")
    return _make_task(meta, root=root, public_dir=public_dir, answers_path=answers,
                      leaderboards=leaderboards, description=description, layout="mlebench")


def _load_mledojo(root: Path) -> Task:
    hints = {}
    for name in ("wmrl.yaml", "config.yaml", "info/config.yaml"):
        if (root / name).is_file():
            hints.update(_yaml(root / name))
    public_dir = root / "data" / "public"
    answers = _first_existing(root / "data" / "private" / "test_answer.csv",
                              *sorted((root / "data" / "private").glob("*.csv")))
    if answers is None:
        raise TaskFormatError(f"MLE-Dojo folder {root}: no data/private/test_answer.csv")
    meta: dict[str, Any] = {"id": root.name}
    if "metric" not in hints and isinstance(hints.get("grader"), dict) and hints["grader"].get("name"):
        meta["metric"] = hints["grader"]["name"]
    meta.update({k: v for k, v in hints.items() if k != "grader"})
    meta = _infer_meta(meta, public_dir, answers)
    leaderboards = []
    for name in ("public_leaderboard.csv", "private_leaderboard.csv"):
        p = _first_existing(root / name, root / "info" / name, root / "data" / name, root / "data" / "private" / name)
        if p:
            leaderboards.append(p)
    description = _foreign_description(root / "description.md", root / "description.txt",
                                       root / "info" / "description.txt", root / "info" / "description.md",
                                       public_dir / "description.txt", public_dir / "description.md")
    return _make_task(meta, root=root, public_dir=public_dir, answers_path=answers,
                      leaderboards=tuple(leaderboards), description=description, layout="mledojo")


def load_task(path: Path | str) -> Task:
    """Load one task folder of any supported layout (wmrl, prepared MLE-bench, prepared MLE-Dojo).

    A folder without any leaderboard loads fine, but its :attr:`~wmrl.tasks.spec.Task.has_leaderboard`
    is False and grading gives ``reward = NaN`` (only the raw score); refuse such a task for training
    or evaluation.

    Raises:
        TaskFormatError: the folder is not a task in any layout, or its metadata is inconsistent;
            the message names the folder and what is missing.
    """
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise TaskFormatError(f"task folder {root} does not exist")
    layout = detect_layout(root)
    if layout == "wmrl":
        return _load_wmrl(root)
    if layout == "mlebench":
        return _load_mlebench(root)
    if layout == "mledojo":
        return _load_mledojo(root)
    raise TaskFormatError(f"{root} is not a task folder: expected task.yaml (wmrl), config.yaml + prepared/ "
                          "(MLE-bench) or data/public + data/private (MLE-Dojo)")


class TaskSuite:
    """All task folders directly under ``root`` (any layout), in id order.

    Implements the ``TaskSource`` protocol of :mod:`wmrl.interfaces`. Tasks are loaded once, lazily.

    A task folder without any leaderboard is still listed (its submissions can be scored, which the
    leaderboard rebuild needs), but grading it gives ``reward = NaN``: a trainer or evaluator should
    skip or refuse tasks whose :attr:`~wmrl.tasks.spec.Task.has_leaderboard` is False.
    """

    def __init__(self, root: Path | str):
        self.root = Path(root).expanduser()
        self._tasks: dict[str, Task] | None = None

    def _load(self) -> dict[str, Task]:
        if self._tasks is None:
            if self.root.exists() and not self.root.is_dir():
                raise SuiteNotBuilt(f"task directory {self.root} is not a folder (it is a file); give the folder "
                                    "the suite was built into (wmrl tasks build --out DIR)")
            if not self.root.is_dir():
                raise SuiteNotBuilt(f"task directory {self.root} does not exist; build the suite with "
                                    f"'wmrl tasks build --out {self.root}'")
            tasks = [load_task(d) for d in sorted(self.root.iterdir()) if d.is_dir() and detect_layout(d)]
            by_id: dict[str, Task] = {}
            for t in tasks:
                if t.id in by_id:
                    raise TaskFormatError(f"two task folders share the id {t.id!r}: {by_id[t.id].root} and {t.root}")
                by_id[t.id] = t
            self._tasks = dict(sorted(by_id.items()))
        return self._tasks

    def tasks(self, split: Split | None = None) -> list[Task]:
        """All tasks, or those of one split (``train`` / ``heldout``), sorted by id."""
        if split not in (None, "train", "heldout"):
            raise ValueError(f"split must be None, 'train' or 'heldout', not {split!r}")
        return [t for t in self._load().values() if split is None or t.split == split]

    def get(self, task_id: str) -> Task:
        """One task by id; ``KeyError`` naming the known ids when missing."""
        tasks = self._load()
        if task_id not in tasks:
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
    """The built-in suite at :func:`wmrl.paths.default_tasks_dir`.

    Raises:
        SuiteNotBuilt: the directory is missing or holds no task; the message says to run ``wmrl tasks build``.
    """
    from wmrl.paths import default_tasks_dir

    root = default_tasks_dir()
    suite = TaskSuite(root)
    if not root.is_dir() or len(suite) == 0:
        raise SuiteNotBuilt(f"no task suite at {root}: run 'wmrl tasks build' (or set WMRL_TASKS_DIR / WMRL_HOME "
                            "to where it was built)")
    return suite

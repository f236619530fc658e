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
regression); classes from the training targets and the answers. An optional hints file (same keys as
``task.yaml``; where it is read: :func:`wmrl.tasks.spec.hints_file`) overrides any of it.

Why one long file (about 890 lines): one loader per benchmark layout plus discovery, sharing the
Task construction and the metric resolution.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from wmrl.paths import default_task_roots
from wmrl.tasks.benchcode import declared_higher_is_better, recognise_metric
from wmrl.tasks.checks import load_problems
from wmrl.tasks.grading import score_submission
from wmrl.tasks.leaderboard import read_leaderboard
from wmrl.tasks.metrics import CODE_METRICS, METRICS, metric_info
from wmrl.tasks.spec import SAMPLE_SUBMISSION_NAMES, Split, Task, hints_file

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
    "qwk": "qwk", "quadratic_weighted_kappa": "qwk", "quadratic_kappa": "qwk",
    "rmsle": "rmsle", "root_mean_squared_log_error": "rmsle", "root_mean_squared_logarithmic_error": "rmsle",
}


class TaskFormatError(ValueError):
    """A task folder that cannot be loaded; the message names the folder, the file and the fix."""


class SuiteNotBuilt(FileNotFoundError):
    """The default task suite directory is missing or empty."""


def detect_layout(path: Path) -> str | None:
    """``"wmrl"``, ``"mlebench"``, ``"mledojo"`` or ``None`` for a folder that is not a task of these
    layouts (a DSBench task is ``data_modeling/data/data_resplit/<id>``: :func:`detect_dsbench_task`)."""
    path = Path(path)
    if (path / "task.yaml").is_file():
        return "wmrl"
    if (path / "prepared" / "public").is_dir() and (path / "prepared" / "private").is_dir():
        return "mlebench"
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


def _metric_name(raw: str, where: str) -> str:
    """The wmrl metric of a metric or grader name; ``where`` names the task's hints file in the error
    (``"the hints file <path>"``)."""
    key = str(raw).strip().lower().replace("-", "_").replace(" ", "_")
    if key in METRICS:
        return key
    if key in GRADER_ALIASES:
        return GRADER_ALIASES[key]
    raise TaskFormatError(f"unknown metric or grader {raw!r}; known: {', '.join(sorted(METRICS))} "
                          f"(aliases: {', '.join(sorted(GRADER_ALIASES))}); set 'metric' in {where}")


def _make_task(meta: dict[str, Any], *, root: Path, public_dir: Path, answers_path: Path,
               leaderboards: tuple[Path, ...], description: str, layout: str,
               metric_code: Path | None = None, reward_kind: str = "percentile") -> Task:
    """Build a :class:`Task` from a complete metadata mapping; checks types and values."""
    for key in ("id", "type", "metric", "target", "id_column"):
        if meta.get(key) in (None, ""):
            raise TaskFormatError(f"task folder {root}: missing required key {key!r}")
    task_type = str(meta["type"])
    if task_type not in ("binary", "multiclass", "regression"):
        raise TaskFormatError(f"task folder {root}: type must be binary, multiclass or regression, not {task_type!r}")
    hints = hints_file(layout, root)
    metric = _metric_name(meta["metric"], f"the hints file {hints}")
    info = metric_info(metric)
    if metric in CODE_METRICS and metric_code is None:
        raise TaskFormatError(f"task folder {root}: metric {metric!r} is computed by a benchmark's own grading code, "
                              f"but the task has none; name a metric wmrl computes in the hints file {hints}")
    if metric in CODE_METRICS and "lower_is_better" not in meta:
        raise TaskFormatError(f"task folder {root}: its metric is computed only by the benchmark's own code, and "
                              "neither the code, a leaderboard nor a baseline and gold score says whether lower is "
                              f"better; set 'lower_is_better' in the hints file {hints}")
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
        reward_kind=str(meta.get("reward_kind", reward_kind)),  # type: ignore[arg-type]
        awards_medals=bool(meta.get("awards_medals", True)),
        medals=_choice(root, meta, "medals", ("awards_medals", "always"), "awards_medals"),  # type: ignore[arg-type]
        score_decimals=None if meta.get("score_decimals") is None else int(meta["score_decimals"]),
        row_match=_choice(root, meta, "row_match", ("id", "position"), "id"),  # type: ignore[arg-type]
        metric_code=metric_code,
        metric_source=str(meta.get("metric_source", "task.yaml metric" if layout == "wmrl" else "")),
    )


def _sample_submission(public_dir: Path) -> Path | None:
    """The sample submission of a public folder (:data:`~wmrl.tasks.spec.SAMPLE_SUBMISSION_NAMES`, then any
    ``*sample*ubmission*.csv``), or None."""
    return _first_existing(*(public_dir / n for n in SAMPLE_SUBMISSION_NAMES),
                           *sorted(public_dir.glob("*sample*ubmission*.csv")))


def _choice(root: Path, meta: dict[str, Any], key: str, allowed: tuple[str, ...], default: str) -> str:
    v = str(meta.get(key, default))
    if v not in allowed:
        raise TaskFormatError(f"task folder {root}: {key} must be one of {', '.join(allowed)}, not {v!r}")
    return v


#: Placeholder metric while a task's metric is known to come from its benchmark's code only; replaced by
#: ``code_proba``, ``code_label`` or ``code_value`` once the submission format is read (:func:`_code_metric`).
_BY_CODE = "by-code"


def _code_metric(meta: dict[str, Any], public_dir: Path, code: Path, layout: str,
                 leaderboards: Sequence[Path] = ()) -> dict[str, Any]:
    """For a task whose metric only its benchmark's code computes: the ``code_*`` metric of the submission's
    prediction kind (one column per class: probabilities; a regression: values; otherwise the sample
    submission's values: fractions in [0, 1] are probabilities, anything else labels), and the metric's
    direction: the hints, else what the code declares (MLE-Dojo's ``higher_is_better``), else the
    leaderboard's order (MLE-bench's rule: first < last means lower is better), else gold against baseline
    (DSBench's rule)."""
    cols = [meta["id_column"], meta["target"]]
    sample = _sample_submission(public_dir)
    if sample is not None:
        cols = _header(sample)
    if meta["type"] == "regression":
        kind = "value"
    elif len(cols) > 2:
        kind = "proba"
    else:
        kind = "label"
        if sample is not None and len(cols) == 2:
            v = pd.read_csv(sample, usecols=[cols[1]], nrows=1000)[cols[1]]
            if pd.api.types.is_float_dtype(v) and v.between(0, 1).all() and not (v == v.round()).all():
                kind = "proba"
    meta["metric"] = f"code_{kind}"
    if "lower_is_better" not in meta:
        hib = declared_higher_is_better(code) if layout == "mledojo" else None
        if hib is not None:
            meta["lower_is_better"] = not hib
        elif leaderboards:
            b = read_leaderboard(Path(leaderboards[-1]))
            if len(b) >= 2 and b[0] != b[-1]:
                meta["lower_is_better"] = bool(b[0] < b[-1])
        elif meta.get("baseline_score") is not None and meta.get("gold_score") is not None \
                and meta["baseline_score"] != meta["gold_score"]:
            meta["lower_is_better"] = bool(float(meta["gold_score"]) < float(meta["baseline_score"]))
    return meta


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
    sample = _sample_submission(public_dir)
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
    return meta


def _foreign_description(*candidates: Path) -> str:
    p = _first_existing(*candidates)
    return p.read_text(encoding="utf-8", errors="replace") if p else ""


#: Folders never searched for tasks (version control, caches, the raw downloads of MLE-Dojo).
_PRUNE = {".git", "__pycache__", "node_modules", ".venv", "raw", ".ipynb_checkpoints", ".mypy_cache",
          ".pytest_cache", ".tox"}
#: How deep discovery descends below each root.
MAX_DEPTH = 8
#: Benchmark data folders that lie inside a hidden folder by the benchmark's own default, searched although
#: discovery enters no other hidden folder below a root: MLE-bench's ``<user cache>/mle-bench/data``
#: (``appdirs.user_cache_dir()``, ``~/.cache`` on Linux), where ``mlebench prepare`` writes without ``--data-dir``.
HIDDEN_DATA_DIRS: tuple[tuple[str, ...], ...] = (("mle-bench", "data"),)
#: How many subfolders of a skipped hidden folder are looked at to tell whether it holds task folders.
_HIDDEN_PROBE = 200


def mlebench_default_data_dir() -> Path:
    """MLE-bench's default data folder: ``$XDG_CACHE_HOME/mle-bench/data``, else ``~/.cache/mle-bench/data``
    (``mlebench.registry.DEFAULT_DATA_DIR``, ``appdirs.user_cache_dir()`` on Linux), read from the environment,
    never by importing ``mlebench``."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "mle-bench" / "data"


def _task_folders_in(hidden: Path) -> list[Path]:
    """The task folders (any layout) that a hidden folder is, or holds one level down (the first
    :data:`_HIDDEN_PROBE` subfolders looked at); empty when it holds none or cannot be read."""
    if detect_layout(hidden) is not None or is_dsbench_home(hidden):
        return [hidden]
    try:
        subs = [c for _, c in zip(range(_HIDDEN_PROBE), (c for c in hidden.iterdir() if c.is_dir()))]
    except OSError:
        return []
    return [c for c in subs if detect_layout(c) is not None or is_dsbench_home(c)]


def _installed_package_dir(name: str) -> Path | None:
    """The folder of an installed package (``mlebench``, ``mledojo``) without importing it, or None."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _package_competition_dir(package: str, task_id: str, search: Sequence[Path]) -> Path | None:
    """``<R>/<package>/competitions/<id>`` for R in ``search`` (roots and the data folder's ancestors),
    else the installed package's ``competitions/<id>``; None when there is none."""
    seen: set[Path] = set()
    for r in search:
        for base in (r / package / "competitions", r / "competitions") if r.name != package else (r / "competitions",):
            d = base / task_id
            if d not in seen and d.is_dir():
                return d
            seen.add(d)
    inst = _installed_package_dir(package)
    if inst is not None and (inst / "competitions" / task_id).is_dir():
        return inst / "competitions" / task_id
    return None


def _search_dirs(root: Path, extra: Sequence[Path]) -> list[Path]:
    return [*[Path(e) for e in extra], *list(root.parents)[:MAX_DEPTH]]


def resolve_metric(task_id: str, claims: Sequence[tuple[str, str]], *, hints: Path | None = None) -> tuple[str, str]:
    """The one metric that every source names, and where it came from.

    Args:
        task_id: for messages.
        claims: ``(source, raw name)`` pairs, e.g. ``("config.yaml grader.name", "auc-roc")``,
            ``("utils/metric.py", "roc_auc")``, ``("wmrl.yaml metric", "r2")``.
        hints: the task's hints file (:func:`wmrl.tasks.spec.hints_file`), named in the errors as the
            place to set or fix ``metric``.

    Returns:
        ``(metric, source)``: the wmrl metric name and the sources that named it.

    Raises:
        TaskFormatError: no source names a metric (wmrl does not guess), a name is unknown, or two
            sources disagree (the message names the task, the field and both sources).
    """
    where = f"the hints file {hints}" if hints is not None else \
        "the task's hints file (wmrl.yaml beside its data; DSBench: data_modeling/data/wmrl/<id>.yaml)"
    names: list[tuple[str, str]] = []
    for src, raw in claims:
        try:
            names.append((src, _metric_name(raw, where)))
        except TaskFormatError as e:
            raise TaskFormatError(f"task {task_id!r}: field 'metric' ({src}): {e}") from None
    if not names:
        raise TaskFormatError(f"task {task_id!r}: no metric found (no grader name in its config, no metric code "
                              f"wmrl can read); refused rather than guessed: set 'metric' in {where}")
    distinct = {n for _, n in names}
    if len(distinct) > 1:
        said = "; ".join(f"{src} says {n}" for src, n in names)
        raise TaskFormatError(f"task {task_id!r}: conflicting field 'metric': {said}; make them agree (fix or "
                              f"remove 'metric' in {where})")
    return names[0][1], " + ".join(src for src, _ in names)


def _code_claim(task_id: str, code: Path | None, label: str) -> list[tuple[str, str]]:
    """``[(label, metric)]`` when the metric code is recognised; TaskFormatError when it exists but is not."""
    if code is None:
        return []
    try:
        name = recognise_metric(code)
    except (OSError, SyntaxError) as e:
        raise TaskFormatError(f"task {task_id!r}: its metric code {code} cannot be read ({e})") from None
    return [(label, name)] if name else []


def _load_mlebench(root: Path, extra: Sequence[Path] = ()) -> Task:
    """A prepared MLE-bench competition: data in ``<data-dir>/<id>/prepared/{public,private}``, metadata
    (``config.yaml``, ``description.md``, ``leaderboard.csv``, ``grade.py``) in the folder itself or in the
    package's ``mlebench/competitions/<id>/`` (found under the roots, the folder's ancestors or the installed
    ``mlebench``)."""
    meta_dir = root if (root / "config.yaml").is_file() else _package_competition_dir(
        "mlebench", root.name, _search_dirs(root, extra))
    if meta_dir is None:
        raise TaskFormatError(f"MLE-bench data folder {root}: no config.yaml for competition {root.name!r} "
                              "(looked in the folder, in mlebench/competitions/ under the task roots and their "
                              "parents, and in the installed mlebench package); add the mle-bench checkout as a "
                              "task root")
    config = _yaml(meta_dir / "config.yaml")
    hints_path = hints_file("mlebench", root)
    hints = _yaml(hints_path) if hints_path.is_file() else {}
    public_dir = root / "prepared" / "public"
    answers_name = Path(str((config.get("dataset") or {}).get("answers", "test.csv"))).name
    answers = _first_existing(root / "prepared" / "private" / answers_name,
                              root / "prepared" / "private" / "test.csv",
                              *sorted((root / "prepared" / "private").glob("*.csv")))
    if answers is None:
        raise TaskFormatError(f"MLE-bench folder {root}: no answers CSV under prepared/private/")
    task_id = str(config.get("id", root.name))
    meta: dict[str, Any] = {"id": task_id, "title": config.get("name", root.name)}
    claims: list[tuple[str, str]] = []
    grader = (config.get("grader") or {}).get("name")
    code = meta_dir / "grade.py" if (meta_dir / "grade.py").is_file() else None
    if grader and str(grader).lower() not in ("auto", "custom"):
        try:
            _metric_name(grader, f"the hints file {hints_path}")
            claims.append(("config.yaml grader.name", str(grader)))
        except TaskFormatError:
            if code is None and "metric" not in hints:  # the hints file's metric stands in for the unknown grader
                raise TaskFormatError(f"task {task_id!r}: field 'metric': config.yaml grader.name {grader!r} is not a "
                                      "metric wmrl computes, and the competition has no grade.py to score with; "
                                      "refused rather than guessed (set 'metric' in the hints file "
                                      f"{hints_path})") from None
    claims += _code_claim(task_id, code, "grade.py") if not claims else []
    if "metric" in hints:
        claims.append(("wmrl.yaml metric", str(hints.pop("metric"))))
    by_code = not claims and code is not None
    meta["metric"], meta["metric_source"] = (_BY_CODE, "grade.py") if by_code else \
        resolve_metric(task_id, claims, hints=hints_path)
    meta.update(hints)
    meta.setdefault("medals", "always")  # MLE-bench's grading code never reads awards_medals
    meta.setdefault("score_decimals", 5)  # MLE-bench's Grader.__call__ rounds every score to 5 decimals
    meta = _infer_meta(meta, public_dir, answers)
    leaderboards = tuple(p for p in (meta_dir / "leaderboard.csv",) if p.is_file())
    if by_code and code is not None:
        meta = _code_metric(meta, public_dir, code, "mlebench", leaderboards)
    description = _foreign_description(meta_dir / Path(str(config.get("description", "description.md"))).name,
                                       meta_dir / "description.md", public_dir / "description.md")
    meta.setdefault("awards_medals", bool(config.get("awards_medals", True)))
    return _make_task(meta, root=root, public_dir=public_dir, answers_path=answers, leaderboards=leaderboards,
                      description=description, layout="mlebench", metric_code=code)


def _load_mledojo(root: Path, extra: Sequence[Path] = ()) -> Task:
    """A prepared MLE-Dojo competition ``<data-dir>/<id>/data/{public,private}``: answers
    ``data/private/test_answer.csv``, both leaderboards in ``data/private/`` (where ``prepare/mle.py`` copies
    them) or the package's ``info/``; the metric from the package's ``utils/metric.py``."""
    hints_path = hints_file("mledojo", root)
    hints: dict[str, Any] = _yaml(hints_path) if hints_path.is_file() else {}
    public_dir = root / "data" / "public"
    answers = _first_existing(root / "data" / "private" / "test_answer.csv",
                              *sorted(p for p in (root / "data" / "private").glob("*.csv")
                                      if "leaderboard" not in p.name))
    if answers is None:
        raise TaskFormatError(f"MLE-Dojo folder {root}: no data/private/test_answer.csv")
    task_id = str(hints.get("id", root.name))
    pkg = root if (root / "utils" / "metric.py").is_file() or (root / "info").is_dir() else \
        _package_competition_dir("mledojo", root.name, _search_dirs(root, extra))
    code = pkg / "utils" / "metric.py" if pkg is not None and (pkg / "utils" / "metric.py").is_file() else None
    claims = _code_claim(task_id, code, "utils/metric.py")
    if "metric" in hints:
        claims.append(("wmrl.yaml metric", str(hints.pop("metric"))))
    by_code = not claims and code is not None
    meta: dict[str, Any] = {"id": task_id}
    meta["metric"], meta["metric_source"] = (_BY_CODE, "utils/metric.py") if by_code else \
        resolve_metric(task_id, claims, hints=hints_path)
    meta.update({k: v for k, v in hints.items() if k != "id"})
    meta = _infer_meta(meta, public_dir, answers)
    leaderboards = []
    for name in ("public_leaderboard.csv", "private_leaderboard.csv"):
        p = _first_existing(root / "data" / "private" / name, root / name, root / "data" / name,
                            *((pkg / "info" / name,) if pkg is not None else ()))
        if p:
            leaderboards.append(p)
    if by_code and code is not None:
        meta = _code_metric(meta, public_dir, code, "mledojo", leaderboards)
    description = _foreign_description(public_dir / "description.txt", public_dir / "description.md",
                                       root / "description.md", root / "description.txt",
                                       *((pkg / "info" / "description.txt",) if pkg is not None else ()))
    return _make_task(meta, root=root, public_dir=public_dir, answers_path=answers,
                      leaderboards=tuple(leaderboards), description=description, layout="mledojo", metric_code=code)


def _read_result(path: Path) -> float | None:
    if not path.is_file():
        return None
    try:
        return float(path.read_text().strip())
    except ValueError:
        raise TaskFormatError(f"{path} holds {path.read_text()[:40]!r}, not a number") from None


def _dsbench_home(resplit_dir: Path) -> Path:
    """The ``data_modeling`` folder of a DSBench task folder ``data_modeling/data/data_resplit/<id>``."""
    return resplit_dir.parent.parent.parent


def is_dsbench_home(path: Path) -> bool:
    """True for DSBench's ``data_modeling`` folder (``data/data_resplit/`` and ``data/answers/``)."""
    return (path / "data" / "data_resplit").is_dir() and (path / "data" / "answers").is_dir()


def _load_dsbench(resplit_dir: Path) -> Task:
    """One DSBench data-modeling task ``data_modeling/data/data_resplit/<id>/`` (public files), with
    ``data/answers/<id>/test_answer.csv``, ``data/task/<id>.txt``, ``evaluation/<id>_eval.py`` and the
    baseline and GT scores in ``save_performance/{baseline,GT}/<id>/result.txt``. Reward: RPG."""
    home = _dsbench_home(resplit_dir)
    task_id = resplit_dir.name
    answers = home / "data" / "answers" / task_id / "test_answer.csv"
    if not answers.is_file():
        raise TaskFormatError(f"DSBench task {task_id!r}: no answers at {answers}")
    hints_path = hints_file("dsbench", resplit_dir)
    hints = _yaml(hints_path) if hints_path.is_file() else {}
    code_file = home / "evaluation" / f"{task_id}_eval.py"
    code = code_file if code_file.is_file() else None
    claims = _code_claim(task_id, code, f"evaluation/{task_id}_eval.py")
    if "metric" in hints:
        claims.append((f"wmrl/{task_id}.yaml metric", str(hints.pop("metric"))))
    by_code = not claims and code is not None
    meta: dict[str, Any] = {"id": task_id, "row_match": "position"}  # DSBench's scripts match rows by position
    meta["metric"], meta["metric_source"] = (_BY_CODE, f"evaluation/{task_id}_eval.py") if by_code else \
        resolve_metric(task_id, claims, hints=hints_path)
    perf = home / "save_performance"
    baseline = _read_result(perf / "baseline" / task_id / "result.txt")
    gold = _read_result(perf / "GT" / task_id / "result.txt")
    if baseline is None:
        raise TaskFormatError(f"DSBench task {task_id!r}: no baseline score at "
                              f"{perf / 'baseline' / task_id / 'result.txt'}"
                              " (unzip DSBench's save_performance.zip into data_modeling/), so no RPG can be computed")
    meta["baseline_score"] = baseline
    if gold is not None:
        meta["gold_score"] = gold
    meta.update(hints)
    meta = _infer_meta(meta, resplit_dir, answers)
    if by_code and code is not None:
        meta = _code_metric(meta, resplit_dir, code, "dsbench")
    description = _foreign_description(home / "data" / "task" / f"{task_id}.txt")
    task = _make_task(meta, root=resplit_dir, public_dir=resplit_dir, answers_path=answers, leaderboards=(),
                      description=description, layout="dsbench", metric_code=code, reward_kind="rpg")
    if gold is None:  # DSBench's GT score is the answers graded as a submission
        gold_value = score_submission(task, pd.read_csv(answers, dtype={task.id_column: str}))
        task = dataclasses.replace(task, gold_score=float(gold_value))
    return task


def detect_dsbench_task(path: Path) -> bool:
    """True for ``data_modeling/data/data_resplit/<id>`` inside a DSBench ``data_modeling`` folder."""
    return path.parent.name == "data_resplit" and is_dsbench_home(_dsbench_home(path))


def load_task(path: Path | str, *, search: Sequence[Path | str] = ()) -> Task:
    """Load one task folder of any supported layout (wmrl, MLE-bench, MLE-Dojo, DSBench).

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
    layout = detect_layout(root)
    if layout == "wmrl":
        return _load_wmrl(root)
    if layout == "mlebench":
        return _load_mlebench(root, extra)
    if layout == "mledojo":
        return _load_mledojo(root, extra)
    if detect_dsbench_task(root):
        return _load_dsbench(root)
    raise TaskFormatError(f"{root} is not a task folder: expected task.yaml (wmrl), prepared/public + "
                          "prepared/private (MLE-bench), data/public + data/private (MLE-Dojo) or "
                          "data_modeling/data/data_resplit/<id> (DSBench)")


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
        """One paragraph: tasks found per adapter, skipped folders grouped by reason, each refused task and why."""
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
        return "\n".join(lines)


def split_roots(roots: Path | str | Sequence[Path | str] | None) -> list[Path]:
    """Task roots from one path, a list, or a string of paths joined by ``os.pathsep`` (``:``)."""
    if roots is None:
        return []
    if isinstance(roots, (str, Path)):
        roots = [p for p in str(roots).split(os.pathsep) if p.strip()]
    return [Path(r).expanduser() for r in roots]


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
    candidates: list[tuple[str, Path]] = []
    meta_ids: dict[str, dict[str, Path]] = {"mlebench": {}, "mledojo": {}}
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
            if d.name in ("mlebench", "mledojo") and (d / "competitions").is_dir():
                packages.append(d.parent)
                for c in sorted((d / "competitions").iterdir()):
                    if c.is_dir() and not c.name.startswith(("_", ".")):
                        meta_ids[d.name][c.name] = c
                continue
            layout = detect_layout(d)
            if layout is not None:
                candidates.append((layout, d))
                continue
            if is_dsbench_home(d):
                for resplit in sorted((d / "data" / "data_resplit").iterdir()):
                    if resplit.is_dir():
                        candidates.append(("dsbench", resplit))
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
    search = [*packages, *[r.resolve() for r in paths]]
    by_id: dict[str, Task] = {}
    candidates = list(dict.fromkeys(candidates))  # a folder under two roots is one candidate
    loaded_names = {(layout, d.name) for layout, d in candidates}
    for _layout, d in candidates:
        try:
            t = load_task(d, search=search)
        except (TaskFormatError, ValueError, OSError) as e:
            disc.refused.append((d.name, d, str(e)))
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
    default_data = mlebench_default_data_dir()
    for bench, ids in meta_ids.items():
        for cid, c in ids.items():
            if (bench, cid) not in loaded_names:
                disc.skipped.append((c, _no_data_reason(bench, cid, hidden_tasks, default_data)))
    disc.tasks = dict(sorted(by_id.items()))
    return disc


def _no_data_reason(bench: str, cid: str, hidden_tasks: dict[str, Path], default_data: Path) -> str:
    """Why a competition of a benchmark package was skipped: its prepared data lies in a skipped hidden folder,
    in MLE-bench's default data folder outside the roots, or was not found (then: how to prepare it)."""
    if cid in hidden_tasks:
        h = hidden_tasks[cid]
        return (f"{bench} package metadata whose prepared data lies in the hidden folder {h}, which discovery skips "
                f"(it enters no hidden folder below a root); give {h} as a root")
    if bench == "mlebench" and (default_data / cid / "prepared").is_dir():
        return (f"mlebench package metadata whose prepared data lies in MLE-bench's default data folder "
                f"{default_data}, which is not under the task roots; add {default_data} as a root")
    if bench == "mlebench":
        return (f"mlebench package metadata without prepared data under the task roots (run mlebench prepare -c "
                f"<id>, which writes to {default_data} unless given --data-dir, and give that folder as a root)")
    return ("mledojo package metadata without prepared data under the task roots (run prepare/mle.py "
            "--competitions <id> --data-dir DIR and give DIR as a root)")


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
        """One task by id; ``KeyError`` naming the known ids (or why the task was refused) when missing."""
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

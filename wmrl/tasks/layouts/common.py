"""What the layout readers share: YAML and CSV reading, the metric's resolution, the inference of what a
benchmark's files do not say (see :mod:`wmrl.tasks.loader`), and the construction of the :class:`Task`.

Benchmark layouts other than wmrl's own say little about a task; whatever the files do not say is inferred:
the id column is the first column of the sample submission; the target its second column (or, with one
column per class, a multiclass probability task); the task type from the answers (numeric with many values
-> regression); classes from the training targets and the answers. An optional hints file (same keys as
``task.yaml``; where it is read: :func:`wmrl.tasks.spec.hints_file`) overrides any of it. A leaderboard whose
entries all hold one score ranks nothing and is left out (with a warning) where the task has another.

(Over 500 lines: every layout reader builds its task through these steps, in this order; split, each part would
import the others.)
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from wmrl.tasks.layouts.base import TaskFormatError
from wmrl.tasks.metrics import CODE_METRICS, METRICS, metric_info
from wmrl.tasks.spec import SAMPLE_SUBMISSION_NAMES, Split, Task, hints_file
from wmrl.tasks.benchcode import recognise_metric
import importlib.util
from wmrl.tasks.leaderboard import LeaderboardError, lfs_pointer, lfs_pointer_problem, read_leaderboard
from wmrl.tasks.benchcode import declared_higher_is_better

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

#: How deep discovery descends below each root, and how many of a task folder's ancestors are searched for
#: its benchmark package's metadata.
MAX_DEPTH = 8


def read_yaml(path: Path) -> dict[str, Any]:
    """The mapping a YAML file holds (empty file: ``{}``); TaskFormatError when it is not valid YAML or not a
    mapping."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise TaskFormatError(f"{path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise TaskFormatError(f"{path} must hold a mapping of keys to values")
    return data


def count_rows(csv_path: Path) -> int:
    """Data rows of a CSV (lines minus the header; quoted newlines are rare in these tables)."""
    if not csv_path.is_file():
        return 0
    with open(csv_path, "rb") as fh:
        n = sum(1 for _ in fh)
    return max(0, n - 1)


def csv_header(csv_path: Path) -> list[str]:
    """The column names of a CSV (``[]`` when the file does not exist)."""
    if not csv_path.is_file():
        return []
    return [str(c) for c in pd.read_csv(csv_path, nrows=0).columns]


def first_existing(*paths: Path) -> Path | None:
    """The first of ``paths`` that is a file, or None."""
    for p in paths:
        if p.is_file():
            return p
    return None


def sort_classes(labels) -> tuple[str, ...]:
    """Distinct non-missing labels as stripped strings, in numeric order when all are numbers, else text order."""
    labels = {str(v).strip() for v in labels if not pd.isna(v)}
    try:
        return tuple(sorted(labels, key=float))
    except ValueError:
        return tuple(sorted(labels))


def metric_name(raw: str, where: str) -> str:
    """The wmrl metric of a metric or grader name; ``where`` names the task's hints file in the error
    (``"the hints file <path>"``)."""
    key = str(raw).strip().lower().replace("-", "_").replace(" ", "_")
    if key in METRICS:
        return key
    if key in GRADER_ALIASES:
        return GRADER_ALIASES[key]
    raise TaskFormatError(f"unknown metric or grader {raw!r}; known: {', '.join(sorted(METRICS))} "
                          f"(aliases: {', '.join(sorted(GRADER_ALIASES))}); set 'metric' in {where}")



def make_task(meta: dict[str, Any], *, root: Path, public_dir: Path, answers_path: Path,
              leaderboards: tuple[Path, ...], description: str, layout: str,
              metric_code: Path | None = None, reward_kind: str = "percentile") -> Task:
    """Build a :class:`Task` from a complete metadata mapping; checks types and values."""
    for path in (*leaderboards, answers_path, sample_submission(public_dir)):
        if path is not None and lfs_pointer(path):
            raise TaskFormatError(f"task folder {root}: {lfs_pointer_problem(path)}")
    for key in ("id", "type", "metric", "target", "id_column"):
        if meta.get(key) in (None, ""):
            raise TaskFormatError(f"task folder {root}: missing required key {key!r}")
    leaderboards = _ranking_boards(meta, root, leaderboards)
    task_type = str(meta["type"])
    if task_type not in ("binary", "multiclass", "regression"):
        raise TaskFormatError(f"task folder {root}: type must be binary, multiclass or regression, not {task_type!r}")
    hints = hints_file(layout, root)
    metric = metric_name(meta["metric"], f"the hints file {hints}")
    info = metric_info(metric)
    outputs = tuple(str(c) for c in meta.get("outputs") or ())
    if outputs and metric_code is None:
        raise TaskFormatError(f"task folder {root}: its submission is not one id column and one target "
                              f"({meta.get('frame') or 'outputs ' + ', '.join(outputs)}), which only the benchmark's "
                              "own grading code can grade, and the task has none")
    if outputs:
        metric = "code_table"
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
    if task_type == "multiclass" and len(classes) < 3 and not outputs:
        raise TaskFormatError(f"task folder {root}: a multiclass task needs at least 3 classes, got {list(classes)}")
    split: Split = meta.get("split", "train")
    if split not in ("train", "heldout"):
        raise TaskFormatError(f"task folder {root}: split must be 'train' or 'heldout', not {split!r}")
    n_train = int(meta.get("n_train") or count_rows(public_dir / "train.csv"))
    n_test = int(meta.get("n_test") or count_rows(public_dir / "test.csv"))
    n_features = meta.get("n_features")
    if n_features is None:
        n_features = len([c for c in csv_header(public_dir / "train.csv")
                          if c not in (meta["target"], meta["id_column"])])

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
        layout=layout,
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
        warnings=tuple(str(w) for w in meta.get("warnings") or ()),
        outputs=outputs,
    )


def _ranking_boards(meta: dict[str, Any], root: Path, leaderboards: tuple[Path, ...]) -> tuple[Path, ...]:
    """``leaderboards`` without those whose entries all hold one score (a board that ranks nothing: every
    submission would be first or last on it), each dropped with a line in ``meta["warnings"]``; a board that
    cannot be read is kept (the load checks name its problem).

    Raises:
        TaskFormatError: every board of the task is such a board."""
    flat = []
    for path in leaderboards:
        try:
            board = read_leaderboard(path)
        except LeaderboardError:
            continue
        if board.size > 1 and np.unique(board).size == 1:
            flat.append((path, board))
    if not flat:
        return leaderboards
    said = "; ".join(f"{p.name} holds {b.size} entries all scored {b[0]:g}" for p, b in flat)
    if len(flat) == len(leaderboards):
        raise TaskFormatError(f"task folder {root}: {said}: a board that ranks nothing gives no reward; give the "
                              "competition's real leaderboard")
    meta.setdefault("warnings", []).append(f"task {meta.get('id')!r}: {said}, which ranks nothing: rewarded by its "
                                           "other leaderboard only")
    return tuple(p for p in leaderboards if p not in [q for q, _ in flat])


def sample_submission(public_dir: Path) -> Path | None:
    """The sample submission of a public folder (:data:`~wmrl.tasks.spec.SAMPLE_SUBMISSION_NAMES`, then any
    ``*sample*ubmission*.csv``), or None."""
    return first_existing(*(public_dir / n for n in SAMPLE_SUBMISSION_NAMES),
                          *sorted(public_dir.glob("*sample*ubmission*.csv")))


def _choice(root: Path, meta: dict[str, Any], key: str, allowed: tuple[str, ...], default: str) -> str:
    v = str(meta.get(key, default))
    if v not in allowed:
        raise TaskFormatError(f"task folder {root}: {key} must be one of {', '.join(allowed)}, not {v!r}")
    return v


#: Placeholder metric while a task's metric is known to come from its benchmark's code only; replaced by
#: ``code_proba``, ``code_label`` or ``code_value`` once the submission format is read (:func:`code_metric`).
BY_CODE = "by-code"


def code_metric(meta: dict[str, Any], public_dir: Path, code: Path, layout: str,
                leaderboards: Sequence[Path] = ()) -> dict[str, Any]:
    """For a task whose metric only its benchmark's code computes: the ``code_*`` metric of the submission's
    prediction kind (the sample submission's table where ``meta`` has ``outputs``; one column per class:
    probabilities; a regression: values; otherwise the sample submission's values: fractions in [0, 1] are
    probabilities, anything else labels), and the metric's direction: the hints, else the direction of a metric
    wmrl recognised in the code, else what the code declares (MLE-Dojo's ``higher_is_better``), else the
    leaderboard's order (MLE-bench's rule: first < last means lower is better), else gold against baseline
    (DSBench's rule)."""

    cols = [meta["id_column"], meta["target"]]
    sample = sample_submission(public_dir)
    if sample is not None:
        cols = csv_header(sample)
    if meta.get("outputs"):
        kind = "table"
    elif meta["type"] == "regression":
        kind = "value"
    elif len(cols) > 2:
        kind = "proba"
    else:
        kind = "label"
        if sample is not None and len(cols) == 2:
            v = pd.read_csv(sample, usecols=[cols[1]], nrows=1000)[cols[1]]
            if pd.api.types.is_float_dtype(v) and v.between(0, 1).all() and not (v == v.round()).all():
                kind = "proba"
    named = str(meta.get("metric"))
    meta["metric"] = f"code_{kind}"
    if "lower_is_better" not in meta and named in METRICS and named not in CODE_METRICS:
        meta["lower_is_better"] = metric_info(named).lower_is_better  # the metric wmrl recognised in the code
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


def metric_type(metric: object, n_unique: int) -> str | None:
    """The task type the benchmark's metric fixes: ``regression`` for a regression metric (RMSE, MAE, R2,
    RMSLE), whatever the target's cardinality; ``binary``/``multiclass`` for a classification metric (the
    number of distinct values choosing between them where the metric allows both); None when the metric
    says nothing (a metric only the benchmark's code computes, or none yet)."""
    try:
        types = metric_info(str(metric)).task_types
    except ValueError:
        return None
    if metric in CODE_METRICS:
        return None
    if types == ("regression",):
        return "regression"
    if "regression" in types:
        return None
    if len(types) == 1:
        return types[0]
    return "binary" if n_unique == 2 else "multiclass"


def infer_meta(meta: dict[str, Any], public_dir: Path, answers_path: Path, hints: Path | None = None) -> dict[str, Any]:
    """Fill id column, target, type, classes and metric from the files (see the module docstring). The type
    comes from the metric where it fixes one (:func:`metric_type`), else from the answers, with a line in
    ``meta["warnings"]`` naming ``hints`` (the task's hints file) when a numeric target's type was guessed."""
    sample = sample_submission(public_dir)
    if sample is None and not all(k in meta for k in ("id_column", "target")):
        raise TaskFormatError(f"{public_dir}: no sample_submission.csv to infer the submission format from")
    cols = csv_header(sample) if sample else [meta["id_column"], meta["target"]]
    meta.setdefault("id_column", cols[0])
    answers_cols = csv_header(answers_path)
    if not answers_cols:
        raise TaskFormatError(f"answers file {answers_path} is missing or empty")
    if "outputs" in meta or ("target" not in meta and sample is not None):
        why = "the hints file names its outputs" if meta.get("outputs") else \
            table_frame(cols, answers_cols, sample, answers_path) if sample is not None else ""
        if why:
            return _table_meta(meta, cols, why, sample, answers_path)
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
        if train_path.is_file() and target in csv_header(train_path):
            values = pd.concat([values, pd.read_csv(train_path, usecols=[target])[target].dropna()])
        numeric = pd.api.types.is_numeric_dtype(values)
        n_unique = values.nunique()
        is_reg = numeric and (n_unique > 20 or not (values == values.round()).all())
        if "type" not in meta:
            meta["type"] = metric_type(meta.get("metric"), n_unique)
            if meta["type"] is None:
                meta["type"] = "regression" if is_reg else ("binary" if n_unique == 2 else "multiclass")
                if numeric:
                    integral = "integer " if (values == values.round()).all() else ""
                    meta.setdefault("warnings", []).append(
                        f"task {meta.get('id')!r}: type {meta['type']} inferred from the answers ({n_unique} distinct "
                        f"{integral}values): its metric comes from the benchmark's code alone; if that is wrong, set "
                        f"'type' in {'the hints file ' + str(hints) if hints else 'its hints file'}")
        if meta["type"] != "regression":
            meta.setdefault("classes", list(sort_classes(values.unique())))
    return meta


#: Most distinct values a text target may have, as a share of its rows, to be read as class labels.
TEXT_UNIQUE_SHARE = 0.5


def table_frame(cols: list[str], answers_cols: list[str], sample: Path, answers_path: Path) -> str:
    """Why a submission with the columns ``cols`` (the sample submission's header) is not one id column and one
    target that wmrl's metrics can read, or ``""`` when it is: several rows per id in the sample submission;
    several value columns that are neither one probability column per class (the answers' one other column
    holding their names) nor one-hot answers (several targets); a column the answers do not hold (named unlike
    the answers'); a text target with more distinct values than :data:`TEXT_UNIQUE_SHARE` of its rows, at least
    20 (free text, encoded masks, label lists)."""
    ids = pd.read_csv(sample, usecols=[cols[0]], dtype=str)[cols[0]]
    if ids.duplicated().any():
        return f"its sample submission holds several rows per {cols[0]!r}"
    values = cols[1:]
    if not values:
        return ""
    if cols[0] not in answers_cols:
        return f"the answers have no column {cols[0]!r} (the sample submission's first column)"
    if len(values) > 1:
        if not all(c in answers_cols for c in values):
            rest = [c for c in answers_cols if c != cols[0] and c not in values]
            if len(rest) == 1:  # one probability column per class, the answers' labels in their one other column
                labels = pd.read_csv(answers_path, usecols=rest, dtype=str)[rest[0]].dropna()
                if set(labels) <= set(values):
                    return ""
            return f"its {len(values)} value columns are not in the answers"
        block = pd.read_csv(answers_path, usecols=values)
        numeric = block.apply(pd.to_numeric, errors="coerce")
        one_hot = not numeric.isna().any().any() and bool(((numeric >= 0) & (numeric <= 1)).all().all()) and \
            bool(np.allclose(numeric.sum(axis=1), 1.0))
        shown = ", ".join(values[:4]) + (", ..." if len(values) > 4 else "")
        return "" if one_hot else f"it holds {len(values)} target columns ({shown})"
    if values[0] not in answers_cols:
        return (f"its column {values[0]!r} is not in the answers (columns {answers_cols[:4]}): the benchmark's code "
                "reads it under its own name")
    y = pd.read_csv(answers_path, usecols=[values[0]])[values[0]].dropna()
    if not pd.api.types.is_numeric_dtype(y) and y.nunique() >= 20 and y.nunique() > TEXT_UNIQUE_SHARE * len(y):
        return f"its target {values[0]!r} is text ({y.nunique()} distinct values in {len(y)} rows), not class labels"
    return ""


def _table_meta(meta: dict[str, Any], cols: list[str], why: str, sample: Path | None,
                answers_path: Path) -> dict[str, Any]:
    """``meta`` of a task whose submission is the sample submission's table (:func:`table_frame` says ``why``):
    outputs, the first output as the target, regression when every output is numeric in the sample submission
    and the answers, else multiclass without classes; the metric becomes ``code_table`` (:func:`code_metric`)."""
    outputs = [str(c) for c in (meta.get("outputs") or cols[1:])]
    meta["outputs"] = outputs
    meta.setdefault("target", outputs[0])
    meta["frame"] = why
    if "type" not in meta:
        frames = [pd.read_csv(p, usecols=lambda c: c in outputs, nrows=1000) for p in (sample, answers_path) if p]
        numeric = all(pd.api.types.is_numeric_dtype(f[c]) for f in frames for c in f.columns)
        meta["type"] = "regression" if numeric else "multiclass"
    return meta


def foreign_description(*candidates: Path) -> str:
    """The text of the first of ``candidates`` that exists (undecodable bytes replaced), else ``""``."""
    p = first_existing(*candidates)
    return p.read_text(encoding="utf-8", errors="replace") if p else ""



def installed_package_dir(name: str) -> Path | None:
    """The folder of an installed package (``mlebench``, ``mledojo``) without importing it, or None."""

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def package_competition_dir(package: str, task_id: str, search: Sequence[Path]) -> Path | None:
    """``<R>/<package>/competitions/<id>`` for R in ``search`` (roots and the data folder's ancestors),
    else the installed package's ``competitions/<id>``; None when there is none."""
    seen: set[Path] = set()
    for r in search:
        for base in (r / package / "competitions", r / "competitions") if r.name != package else (r / "competitions",):
            d = base / task_id
            if d not in seen and d.is_dir():
                return d
            seen.add(d)
    inst = installed_package_dir(package)
    if inst is not None and (inst / "competitions" / task_id).is_dir():
        return inst / "competitions" / task_id
    return None


def search_dirs(root: Path, extra: Sequence[Path]) -> list[Path]:
    """Where a task folder's benchmark package metadata is looked for: ``extra``, then up to :data:`MAX_DEPTH` of
    the folder's ancestors (nearest first)."""
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
            names.append((src, metric_name(raw, where)))
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


def code_claim(task_id: str, code: Path | None, label: str) -> list[tuple[str, str]]:
    """``[(label, metric)]`` when the metric code is recognised; TaskFormatError when it exists but is not."""

    if code is None:
        return []
    try:
        name = recognise_metric(code)
    except (OSError, SyntaxError) as e:
        raise TaskFormatError(f"task {task_id!r}: its metric code {code} cannot be read ({e})") from None
    return [(label, name)] if name else []


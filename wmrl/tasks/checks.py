"""Checks of a task before it is trained on: no answers in ``public/``, a metric that agrees with its
leaderboards.

A task that leaks its answers into ``public/`` rewards reading them, and a policy will learn exactly
that; a metric whose direction disagrees with its leaderboard's order (``metric: r2`` on an RMSE
board, best-first ascending) turns a bad score into a gold medal. Both are refused by name with the
reason (:func:`require_sound_tasks`, called by the trainer and by ``wmrl eval``'s task resolution).

What counts as answers in ``public/``:

- a byte-identical copy of the answers file, anywhere under ``public/``;
- a CSV with the id column in which some column equals the private target on at least
  :data:`AGREEMENT` of the test ids it lists, when it lists at least :data:`MIN_COVERAGE` of them
  (or all, for small test sets), and the column is not constant there (``sample_submission.csv``'s
  constant placeholder is not an answer);
- a CSV with as many rows as the test set in which some column, in row order, equals the target in
  the answers' order on :data:`AGREEMENT` of the rows (not constant).

Regression targets match within a relative 1e-4; labels match as normalised strings.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from wmrl.tasks import leaderboard as lb
from wmrl.tasks.metrics import metric_info
from wmrl.tasks.spec import Task

#: Share of matching values from which a public column counts as the answers.
AGREEMENT = 0.95
#: Share of the test ids a public file must list (with values) for the id-aligned check.
MIN_COVERAGE = 0.1
#: Public files larger than this are only compared byte for byte, bytes.
MAX_READ_BYTES = 1024**3

#: The range of each metric's values: (lowest, highest) possible score.
METRIC_RANGES: dict[str, tuple[float, float]] = {
    "accuracy": (0.0, 1.0), "macro_f1": (0.0, 1.0), "roc_auc": (0.0, 1.0), "roc_auc_ovr": (0.0, 1.0),
    "log_loss": (0.0, math.inf), "rmse": (0.0, math.inf), "mae": (0.0, math.inf), "r2": (-math.inf, 1.0),
}


@dataclass(frozen=True)
class TaskProblem:
    """One reason a task cannot be trained on.

    Attributes:
        task_id: the task. kind: ``answers_in_public``, ``answers_unreadable``, ``metric_direction`` or
            ``score_range``.
        message: one line: what is wrong, where, and how to fix it.
    """

    task_id: str
    kind: str
    message: str


class UnsoundTask(ValueError):
    """Tasks failed :func:`check_task`; the message names each one and why."""


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _matches(values: pd.Series, truth: pd.Series, regression: bool) -> np.ndarray:
    """Element-wise: does the public value equal the private target (bool array)."""
    if regression:
        a = pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64)
        b = truth.to_numpy(dtype=np.float64)
        with np.errstate(invalid="ignore"):
            return np.isclose(a, b, rtol=1e-4, atol=1e-9) & np.isfinite(a)
    from wmrl.tasks.grading import _normalise_labels

    return (_normalise_labels(values.astype(str), ()).to_numpy() == truth.astype(str).to_numpy())


def _leaks_in(df: pd.DataFrame, rel: str, task: Task, answers: pd.DataFrame) -> list[str]:
    from wmrl.tasks.grading import normalise_ids

    out: list[str] = []
    regression = task.type == "regression"
    target = answers[task.target]
    n_test = len(answers)
    if task.id_column in df.columns and n_test:
        ids = normalise_ids(df[task.id_column])
        pos = pd.Series(np.arange(len(df)), index=ids)
        pos = pos[~pos.index.duplicated()]
        found = answers[task.id_column].isin(pos.index).to_numpy()
        n_found = int(found.sum())
        if n_found >= min(n_test, max(10, math.ceil(MIN_COVERAGE * n_test))):
            rows = pos.loc[answers[task.id_column][found]].to_numpy()
            for col in df.columns:
                if col == task.id_column:
                    continue
                vals = df[col].iloc[rows].reset_index(drop=True)
                if vals.nunique(dropna=True) < 2:
                    continue
                agree = float(_matches(vals, target[found].reset_index(drop=True), regression).mean())
                if agree >= AGREEMENT:
                    out.append(f"public/{rel} holds the answers: its column {col!r} equals the private target "
                               f"{task.target!r} on {agree:.0%} of the {n_found} test ids it lists")
    if len(df) == n_test and n_test:
        for col in df.columns:
            if col == task.id_column:
                continue
            vals = df[col].reset_index(drop=True)
            if vals.nunique(dropna=True) < 2:
                continue
            agree = float(_matches(vals, target.reset_index(drop=True), regression).mean())
            if agree >= AGREEMENT and not any(f"column {col!r}" in o and rel in o for o in out):
                out.append(f"public/{rel} holds the answers: its column {col!r}, in row order, equals the private "
                           f"target {task.target!r} on {agree:.0%} of the {n_test} test rows")
    return out


def answers_in_public(task: Task) -> list[str]:
    """Messages for every place under ``public/`` that holds the task's answers (see the module
    docstring); empty when there is none.

    Raises:
        FileNotFoundError, ValueError: the answers themselves cannot be read.
    """
    from wmrl.tasks.grading import read_answers

    answers = read_answers(task)
    answers_hash = _sha256(Path(task.answers_path))
    public = Path(task.public_dir)
    out: list[str] = []
    for path in sorted(p for p in public.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = str(path.relative_to(public))
        size = path.stat().st_size
        if size == Path(task.answers_path).stat().st_size and _sha256(path) == answers_hash:
            out.append(f"public/{rel} is a copy of the answers file {Path(task.answers_path).name}")
            continue
        if not rel.lower().endswith((".csv", ".csv.gz", ".csv.zip", ".csv.bz2", ".csv.xz")) or size > MAX_READ_BYTES:
            continue
        try:
            df = pd.read_csv(path, dtype=str, keep_default_na=False)
        except Exception:  # noqa: BLE001 - an unreadable public file holds no readable answers
            continue
        df.columns = [str(c).strip() for c in df.columns]
        out += _leaks_in(df, rel, task, answers)
    return out


def metric_problems(task: Task) -> list[TaskProblem]:
    """The task's metric against its leaderboards: the declared direction and every board's order must
    agree with the metric's own direction, and the boards' scores must lie in the metric's range."""
    out: list[TaskProblem] = []
    try:
        info = metric_info(task.metric)
    except ValueError as e:
        return [TaskProblem(task.id, "metric_direction", str(e))]
    word = {True: "lower is better", False: "higher is better"}
    if task.lower_is_better != info.lower_is_better:
        out.append(TaskProblem(task.id, "metric_direction",
                               f"task {task.id!r} says {word[task.lower_is_better]}, but its metric {task.metric} is "
                               f"{word[info.lower_is_better]}: fix lower_is_better or the metric in its task file"))
    lo, hi = METRIC_RANGES.get(task.metric, (-math.inf, math.inf))
    for path in task.leaderboard_paths:
        try:
            board = lb.read_leaderboard(path)
        except Exception as e:  # noqa: BLE001 - reported as the problem it is
            out.append(TaskProblem(task.id, "score_range", f"leaderboard {Path(path).name} is unreadable: {e}"))
            continue
        if board.size >= 2 and board[0] != board[-1]:
            order = lb.infer_lower_is_better(board, info.lower_is_better)
            if order != info.lower_is_better:
                out.append(TaskProblem(
                    task.id, "metric_direction",
                    f"leaderboard {Path(path).name} of task {task.id!r} is ordered best-first as if "
                    f"{word[order]} (first {board[0]:.4g}, last {board[-1]:.4g}), but its metric {task.metric} is "
                    f"{word[info.lower_is_better]}: the metric does not match the board (e.g. r2 on an RMSE "
                    f"board), so bad scores would earn medals; set the board's metric in the task file"))
        outside = board[(board < lo) | (board > hi)]
        if outside.size:
            out.append(TaskProblem(
                task.id, "score_range",
                f"leaderboard {Path(path).name} of task {task.id!r} holds {outside.size} score(s) outside the range "
                f"[{lo:g}, {hi:g}] of its metric {task.metric} (e.g. {outside[0]:.4g}): the metric does not match "
                f"the board; set the board's metric in the task file"))
    return out


def check_task(task: Task) -> list[TaskProblem]:
    """Every reason ``task`` cannot be trained on (empty: sound): answers that cannot be read, answers
    in ``public/`` (:func:`answers_in_public`) and metric/leaderboard disagreements
    (:func:`metric_problems`)."""
    try:
        problems = [TaskProblem(task.id, "answers_in_public", m) for m in answers_in_public(task)]
    except (OSError, ValueError) as e:
        problems = [TaskProblem(task.id, "answers_unreadable", f"its answers cannot be read ({e}), so no "
                                "submission can be graded; rebuild the task")]
    return problems + metric_problems(task)


def require_sound_tasks(tasks: list[Task], key: str = "tasks") -> None:
    """Refuse tasks that fail :func:`check_task`.

    Raises:
        UnsoundTask: naming ``key`` (where the tasks came from), each task and its first problem.
    """
    bad: list[TaskProblem] = []
    for t in tasks:
        problems = check_task(t)
        if problems:
            bad.append(problems[0])
    if bad:
        lines = "; ".join(f"{p.task_id}: {p.message}" for p in bad)
        raise UnsoundTask(f"{key}: task(s) refused before training: {lines}")


#: Relative tolerance between wmrl's metric and the benchmark's metric code on the same submission.
CODE_RTOL = 1e-6


def probe_submission(task: Task, seed: int = 0) -> pd.DataFrame:
    """A valid, imperfect submission made from the answers (trusted process only), for cross-checks:
    regression values plus noise of half the targets' spread; labels with a quarter replaced; probabilities
    mixing the true class with uniform noise. Seeded; never shown to a solution program."""
    from wmrl.tasks.grading import read_answers
    from wmrl.tasks.metrics import prediction_kind, submission_columns

    ans = read_answers(task)
    rng = np.random.default_rng(seed)
    y = ans[task.target]
    kind = prediction_kind(task.type, task.metric)
    cols = submission_columns(task.type, task.metric, task.id_column, task.target, task.classes)
    out = pd.DataFrame({task.id_column: ans[task.id_column]})
    if kind == "value":
        v = y.to_numpy(dtype=np.float64)
        out[task.target] = v + rng.normal(scale=0.5 * (float(np.std(v)) or 1.0), size=len(v))
    elif kind == "label":
        lab = y.to_numpy(dtype=object).copy()
        swap = rng.random(len(lab)) < 0.25
        lab[swap] = rng.choice(np.asarray(task.classes, dtype=object), size=int(swap.sum()))
        out[task.target] = lab
    else:
        onehot = np.stack([(y.astype(str) == str(c)).to_numpy(dtype=np.float64) for c in task.classes], axis=1)
        p = 0.5 * onehot + 0.5 * rng.random(onehot.shape)
        p = p / p.sum(axis=1, keepdims=True)
        if task.type == "binary":
            out[task.target] = p[:, 1]
        else:
            for i, c in enumerate(task.classes):
                out[str(c)] = p[:, i]
    return out[cols]


def _cache_path(task: Task) -> Path | None:
    try:
        from wmrl.paths import wmrl_home

        h = hashlib.sha256()
        for p in (task.metric_code, task.answers_path):
            h.update(_sha256(Path(p)).encode())
        h.update(f"{task.metric}|{task.type}|{task.classes}|{task.target}|{task.id_column}|v1".encode())
        d = wmrl_home() / "cache" / "metric-checks"
        d.mkdir(parents=True, exist_ok=True)
        return d / f"{h.hexdigest()[:32]}.json"
    except OSError:
        return None


def code_problems(task: Task) -> list[TaskProblem]:
    """Cross-check wmrl's metric against the benchmark's own metric code (run in a child process, see
    :func:`wmrl.tasks.benchcode.run_metric_code`) on :func:`probe_submission`: the two scores must agree
    within :data:`CODE_RTOL`, and the direction the code declares must be the metric's. Results are
    cached per code file, answers file and metric under ``$WMRL_HOME/cache/metric-checks``."""
    import json
    import tempfile

    from wmrl.tasks.benchcode import MetricCodeError, run_metric_code
    from wmrl.tasks.grading import score_submission

    if task.metric_code is None:
        return []
    cache = _cache_path(task)
    if cache is not None and cache.is_file():
        try:
            return [TaskProblem(**p) for p in json.loads(cache.read_text())]
        except (ValueError, TypeError):
            pass
    out: list[TaskProblem] = []
    sub = probe_submission(task)
    mine = score_submission(task, sub)
    with tempfile.TemporaryDirectory(prefix="wmrl-probe-") as td:
        path = Path(td) / "submission.csv"
        sub.to_csv(path, index=False)
        try:
            theirs = run_metric_code(task.layout, task.metric_code, task.answers_path, path)
        except MetricCodeError as e:
            out.append(TaskProblem(task.id, "metric_code", f"task {task.id!r}: its metric code could not score a valid "
                                   f"submission ({e}); fix the code or the task's metric"))
            theirs = None
    if theirs is not None:
        if not math.isclose(theirs.score, mine, rel_tol=CODE_RTOL, abs_tol=1e-9):
            out.append(TaskProblem(task.id, "metric_code", f"task {task.id!r}: field 'metric': {task.metric} gives "
                                   f"{mine:.6g} on a probe submission but the benchmark's metric code "
                                   f"{Path(task.metric_code).name} gives {theirs.score:.6g}; set the metric the code "
                                   "computes"))
        if theirs.higher_is_better is not None and theirs.higher_is_better == task.lower_is_better:
            out.append(TaskProblem(task.id, "metric_direction", f"task {task.id!r}: field 'lower_is_better': the metric "
                                   f"code declares higher_is_better={theirs.higher_is_better}, but {task.metric} is "
                                   f"{'lower' if task.lower_is_better else 'higher'} is better"))
    if cache is not None:
        try:
            cache.write_text(json.dumps([p.__dict__ for p in out]))
        except OSError:
            pass
    return out


def reward_problems(task: Task) -> list[TaskProblem]:
    """The task's reward can be computed and its sample submission grades inside it: for a percentile
    task the sample submission must not beat a board's best entry; for an RPG task the baseline and gold
    scores must differ, lie in the metric's range, and gold must be better than baseline in the metric's
    direction (DSBench decides the direction by ``gt > baseline``)."""
    from wmrl.tasks.grading import score_submission
    from wmrl.tasks.spec import InvalidSubmission

    out: list[TaskProblem] = []
    lo, hi = METRIC_RANGES.get(task.metric, (-math.inf, math.inf))
    if task.reward_kind == "rpg":
        b, g = task.baseline_score, task.gold_score
        if b is None or g is None or b == g:
            return [TaskProblem(task.id, "reward", f"task {task.id!r}: RPG needs distinct baseline and gold scores "
                                f"(baseline {b}, gold {g}); add the benchmark's baseline and GT results")]
        for name, v in (("baseline_score", b), ("gold_score", g)):
            if not lo <= v <= hi:
                out.append(TaskProblem(task.id, "score_range", f"task {task.id!r}: field '{name}' {v:.6g} lies outside "
                                       f"the range [{lo:g}, {hi:g}] of its metric {task.metric}"))
        if (g < b) != task.lower_is_better:
            out.append(TaskProblem(task.id, "metric_direction", f"task {task.id!r}: field 'metric': the gold (GT) score "
                                   f"{g:.6g} is {'below' if g < b else 'above'} the baseline {b:.6g}, but {task.metric} "
                                   f"is {'lower' if task.lower_is_better else 'higher'} is better"))
        return out
    if not task.has_leaderboard or not Path(task.sample_submission_path).is_file():
        return out
    try:
        value = score_submission(task, task.sample_submission_path, name="sample_submission.csv")
    except InvalidSubmission as e:
        return [TaskProblem(task.id, "sample_submission", f"task {task.id!r}: its sample_submission.csv does not grade "
                            f"({e}); the submission format wmrl derived disagrees with the task")]
    for path in task.leaderboard_paths:
        board = lb.read_leaderboard(path)
        if lb.position(value, board, task.lower_is_better) == 1 and board.size > 1 and value != board[0]:
            out.append(TaskProblem(task.id, "sample_submission", f"task {task.id!r}: its constant sample submission "
                                   f"scores {value:.6g} {task.metric}, better than the best entry {board[0]:.6g} of "
                                   f"{Path(path).name}: the metric does not match the board; set the board's metric"))
    return out


def load_problems(task: Task) -> list[TaskProblem]:
    """The checks run when a benchmark task is loaded (:func:`wmrl.tasks.loader.discover`): metric versus
    leaderboards (:func:`metric_problems`), the reward and the sample submission (:func:`reward_problems`),
    and the benchmark's metric code (:func:`code_problems`). Empty: the task is consistent."""
    try:
        out = metric_problems(task)
        if out:
            return out
        out = reward_problems(task)
        if out:
            return out
        return code_problems(task)
    except (OSError, ValueError) as e:
        return [TaskProblem(task.id, "answers_unreadable", f"task {task.id!r} cannot be checked: {e}")]

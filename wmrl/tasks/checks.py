"""Checks of a task before it is trained on: no answers in ``public/``, a metric that agrees with its
leaderboards.

A task that leaks its answers into ``public/`` rewards reading them, and a policy will learn exactly
that; a metric whose direction disagrees with its leaderboard's order (``metric: r2`` on an RMSE
board, best-first ascending) turns a bad score into a gold medal. Both are refused by name with the
reason (:func:`require_sound_tasks`, called by the trainer and by ``wmrl eval``'s task resolution).

What counts as answers in ``public/`` is decided by value, in every table a program can read there, whatever
its name, form, column names or row order: :mod:`wmrl.tasks.leaks` (thresholds and what is read).
"""
from __future__ import annotations

import dataclasses
import math
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path


from wmrl.tasks import leaderboard as lb
from wmrl.tasks.benchcode import MetricCodeError, run_metric_code
from wmrl.tasks.grading import MetricCodeUnavailable, cap_message, fast_path, read_answers, score_submission
from wmrl.tasks.leaks import public_leaks
from wmrl.tasks.metrics import CODE_METRICS, metric_info
from wmrl.tasks.probes import probe_submissions
from wmrl.tasks.spec import InvalidSubmission, Task
from wmrl.tasks.validation import validation_view

#: The range of each metric's values: (lowest, highest) possible score.
METRIC_RANGES: dict[str, tuple[float, float]] = {
    "accuracy": (0.0, 1.0), "macro_f1": (0.0, 1.0), "roc_auc": (0.0, 1.0), "roc_auc_ovr": (0.0, 1.0),
    "log_loss": (0.0, math.inf), "rmse": (0.0, math.inf), "mae": (0.0, math.inf), "r2": (-math.inf, 1.0),
    "qwk": (-1.0, 1.0), "rmsle": (0.0, math.inf),
}


@dataclass(frozen=True)
class TaskProblem:
    """One reason a task cannot be trained on.

    Attributes:
        task_id: the task. kind: ``answers_in_public``, ``answers_unreadable``, ``metric_direction``,
            ``score_range`` or ``validation_view``.
        message: one line: what is wrong, where, and how to fix it.
    """

    task_id: str
    kind: str
    message: str


class UnsoundTask(ValueError):
    """Tasks failed :func:`check_task`; the message names each one and why."""


def answers_in_public(task: Task) -> list[str]:
    """One message per file under ``public/`` that holds the task's answers, each naming the file
    (:func:`wmrl.tasks.leaks.public_leaks`; for a validation view also its validation answers); empty when
    there is none.

    Raises:
        FileNotFoundError, ValueError: the answers themselves cannot be read.
    """
    return public_leaks(task)


def _board_metric_fix(task: Task) -> str:
    """How to fix a metric that does not match its board: where the metric came from, and the hints file the
    loader reads (:attr:`~wmrl.tasks.spec.Task.hints_file`)."""
    hints = Path(task.hints_file)
    sources = [src for src in task.metric_source.split(" + ") if src]
    if task.layout == "wmrl" or not sources or all(hints.name in src for src in sources):
        return f"set the board's metric in {hints}"
    return (f"the metric comes from {task.metric_source}: correct it or the board (a 'metric' in the hints file "
            f"{hints} must agree with the benchmark's)")


def metric_problems(task: Task) -> list[TaskProblem]:
    """The task's metric against its leaderboards: the declared direction and every board's order must
    agree with the metric's own direction, and the boards' scores must lie in the metric's range."""
    out: list[TaskProblem] = []
    try:
        info = metric_info(task.metric)
    except ValueError as e:
        return [TaskProblem(task.id, "metric_direction", str(e))]
    if task.metric in CODE_METRICS:  # the direction is the benchmark's, read off its code or board by the loader
        info = dataclasses.replace(info, lower_is_better=task.lower_is_better)
    word = {True: "lower is better", False: "higher is better"}
    if task.lower_is_better != info.lower_is_better:
        out.append(TaskProblem(task.id, "metric_direction",
                               f"task {task.id!r} says {word[task.lower_is_better]}, but its metric {task.metric} is "
                               f"{word[info.lower_is_better]}: fix lower_is_better or the metric in {task.hints_file}"))
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
                    f"board), so bad scores would earn medals; {_board_metric_fix(task)}"))
        outside = board[(board < lo) | (board > hi)]
        if outside.size:
            out.append(TaskProblem(
                task.id, "score_range",
                f"leaderboard {Path(path).name} of task {task.id!r} holds {outside.size} score(s) outside the range "
                f"[{lo:g}, {hi:g}] of its metric {task.metric} (e.g. {outside[0]:.4g}): the metric does not match "
                f"the board; {_board_metric_fix(task)}"))
    return out


def view_problems(task: Task, fraction: float) -> list[TaskProblem]:
    """What stops ``task`` from running multi-turn episodes: its validation view at held-out ``fraction``
    (:func:`wmrl.tasks.validation.validation_view`, seed 0, built once and cached) cannot be built, or a file of
    the view's ``public/`` holds answers (the view is then refused; the message names the file)."""
    try:
        validation_view(task, fraction)
    except (OSError, ValueError) as e:
        return [TaskProblem(task.id, "validation_view", str(e))]
    return []


def check_task(task: Task, view_fraction: float | None = None) -> list[TaskProblem]:
    """Every reason ``task`` cannot be trained on (empty: sound): answers that cannot be read, answers
    in ``public/`` (:func:`answers_in_public`) and metric/leaderboard disagreements
    (:func:`metric_problems`); with ``view_fraction`` (multi-turn episodes) also its validation view's
    (:func:`view_problems`)."""
    try:
        problems = [TaskProblem(task.id, "answers_in_public", m) for m in answers_in_public(task)]
    except (OSError, ValueError) as e:
        problems = [TaskProblem(task.id, "answers_unreadable", f"its answers cannot be read ({e}), so no "
                                "submission can be graded; rebuild the task")]
    problems += metric_problems(task)
    if view_fraction is not None and not problems:
        problems += view_problems(task, view_fraction)
    return problems


#: How a training config runs one turn per episode: the fix named after a validation-view problem by default.
ONE_TURN_CONFIG = "episode.max_turns: 1"


def require_sound_tasks(tasks: list[Task], key: str = "tasks", view_fraction: float | None = None,
                        one_turn: str = ONE_TURN_CONFIG) -> None:
    """Refuse tasks that fail :func:`check_task` (with ``view_fraction``: their validation views too, as
    multi-turn episodes use them).

    Args:
        one_turn: how the caller's user runs one turn per episode, named after a validation-view problem (the
            config key for training, ``--override max_turns=1`` for a protocol's evaluation).

    Raises:
        UnsoundTask: naming ``key`` (where the tasks came from), each task and its first problem.
    """
    bad: list[TaskProblem] = []
    for t in tasks:
        problems = check_task(t, view_fraction)
        if problems:
            bad.append(problems[0])
    if bad:
        fix = f"; episodes of one turn need no validation view ({one_turn})"
        lines = "; ".join(f"{p.task_id}: {p.message}{fix if p.kind == 'validation_view' else ''}" for p in bad)
        raise UnsoundTask(f"{key}: task(s) refused before training: {lines}")


def code_problems(task: Task) -> list[TaskProblem]:
    """What stops the benchmark's own grading code from grading ``task``: it cannot run here (a module it
    imports is missing; the message names it), it cannot score the task's valid probe submissions
    (:mod:`wmrl.tasks.probes`), or it declares a direction (MLE-Dojo's ``higher_is_better``) that is not the
    task's. Whether wmrl's metric may stand in for the code is decided by
    :func:`wmrl.tasks.grading.fast_path` (not a problem either way)."""
    if task.metric_code is None:
        return []
    out: list[TaskProblem] = []
    name = Path(task.metric_code).name
    with tempfile.TemporaryDirectory(prefix="wmrl-probe-") as td:
        path = Path(td) / "submission.csv"
        if task.outputs:  # the sample submission's table: no probe of wmrl's makes one
            shutil.copyfile(task.sample_submission_path, path)
        else:
            probe_submissions(task, read_answers(task))["good"].to_csv(path, index=False)
        try:
            theirs = run_metric_code(task.layout, task.metric_code, task.answers_path, path)
        except MetricCodeError as e:
            if "needs a module" in str(e):
                return [TaskProblem(task.id, "metric_code", f"task {task.id!r}: its grading code {name} cannot run "
                                    f"here: {one_line(e)}")]
            return [TaskProblem(task.id, "metric_code", f"task {task.id!r}: its grading code {name} could not score "
                                f"a valid submission ({one_line(e)}); fix the code or install what it needs")]
    if theirs.higher_is_better is not None and theirs.higher_is_better == task.lower_is_better:
        out.append(TaskProblem(task.id, "metric_direction", f"task {task.id!r}: field 'lower_is_better': its grading "
                               f"code declares higher_is_better={theirs.higher_is_better}, but the task says "
                               f"{'lower' if task.lower_is_better else 'higher'} is better"))
    try:
        fast_path(task)
    except MetricCodeUnavailable as e:
        out.append(TaskProblem(task.id, "metric_code", f"task {task.id!r}: {e}"))
    return out


def reward_problems(task: Task) -> list[TaskProblem]:
    """The task's reward can be computed and its sample submission grades inside it: for a percentile
    task the sample submission must not beat a board's best entry; for an RPG task the baseline and gold
    scores must differ, lie in the metric's range, and gold must be better than baseline in the metric's
    direction (DSBench decides the direction by ``gt > baseline``)."""
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
            out.append(TaskProblem(task.id, "metric_direction",
                                   f"task {task.id!r}: field 'metric': the gold (GT) score "
                                   f"{g:.6g} is {'below' if g < b else 'above'} the baseline {b:.6g}, but "
                                   f"{task.metric} is {'lower' if task.lower_is_better else 'higher'} is better"))
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
    leaderboards (:func:`metric_problems`), the benchmark's metric code (:func:`code_problems`: a code that
    cannot run is named before anything that would fail because of it), then the reward and the sample
    submission (:func:`reward_problems`). Empty: the task is consistent. Never raises for a problem of the
    task: whatever fails becomes that task's one problem, naming the cause."""
    try:
        out = metric_problems(task)
        if out:
            return out
        out = code_problems(task)
        if out:
            return out
        return reward_problems(task)
    except MetricCodeUnavailable as e:
        return [TaskProblem(task.id, "metric_code", f"task {task.id!r}: {one_line(e)}")]
    except (OSError, ValueError) as e:
        return [TaskProblem(task.id, "answers_unreadable", f"task {task.id!r} cannot be checked: {one_line(e)}")]
    except Exception as e:  # noqa: BLE001 - a broken competition is refused by name, never a crash of the root
        return [TaskProblem(task.id, "check_failed", f"task {task.id!r} cannot be checked: {one_line(e)}")]


def one_line(e: BaseException) -> str:
    """An exception as one line of at most 400 characters: its message (with the exception's type when the
    message alone would not say what failed), its lines joined."""
    text = " ".join(str(e).split())
    if not isinstance(e, (OSError, ValueError, RuntimeError)) or not text:
        text = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return cap_message(text)

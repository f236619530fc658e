"""What one turn of a research episode shows the agent: honest feedback on its last program.

A competitor running a program sees its validation score (on data held out from train.csv), how long
it ran and, when it failed, the end of the error. It never sees the test score, the leaderboard reward
or a medal: those come from the private test answers. :class:`Observation` holds exactly the
former, from a real execution on a validation view (:func:`observation_from_result`) or from the world
model's prediction (:func:`observation_from_prediction`), and :meth:`Observation.render` writes both the
same way, so the agent can tell simulated from real feedback only by the numbers.

The error tail is text the program controls. It is cleaned when the observation is made
(:func:`wmrl.program_text.clean`: no escape sequence, control character or lone surrogate) and rendered
inside a quoted block that the feedback calls untrusted, every line of it starting with :data:`QUOTE`, so
that a program printing ``Status: ok`` or ``Attempt 2:`` cannot pass it off as the harness's line.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any, Literal

from wmrl.execution.types import ExecutionResult, ExecutionStatus
from wmrl.program_text import clean
from wmrl.tasks.spec import Task

#: Default cap of :attr:`Observation.error_tail`, characters.
DEFAULT_ERROR_CHARS = 400
#: The error text of a failure the world model predicts (it cannot know the real message).
PREDICTED_ERROR_TAIL = ("the program failed before writing a valid submission.csv "
                        "(it raised an error or wrote a submission that could not be graded)")
#: What starts every line of the error tail in :meth:`Observation.render` (a blank line is ``|`` alone).
QUOTE = "| "
#: The held-out share stated when a task is not a validation view.
_DEFAULT_FRACTION = 0.2

Source = Literal["execution", "world_model"]


@dataclass(frozen=True)
class Observation:
    """The feedback of one turn (what a competitor would see after running the program).

    Attributes:
        turn: 1-based turn of the episode whose program this is the feedback of.
        source: ``"execution"`` (a real run on a validation view) or ``"world_model"`` (predicted).
        status: ``"ok"`` or an :class:`~wmrl.execution.types.ExecutionStatus` value (``runtime_error``,
            ``timeout``, ``invalid_submission``, ...); the world model gives ``ok`` or ``runtime_error``.
        validation_score: the task's metric on the harness-held-out rows of train.csv, raw units
            (``None`` when the run failed or the metric is undefined there).
        metric: the metric name (``roc_auc``, ``rmse``, ...).
        lower_is_better: the metric's direction.
        wall_s: the program's wall-clock run time, seconds (``None`` when unknown).
        error_tail: the last characters of the program's stderr and the error message (failures only;
            ``""`` for an ``ok`` run), cleaned (:func:`wmrl.program_text.clean`), at most the cap given when
            it was made; shown quoted as untrusted text (:meth:`error_lines`).
        validation_fraction: the held-out share of train.csv, in (0, 1).

    Test-set information (score, reward, medal, above-median) is never held here.
    """

    turn: int
    source: Source
    status: str
    validation_score: float | None
    metric: str
    lower_is_better: bool
    wall_s: float | None
    error_tail: str = ""
    validation_fraction: float = _DEFAULT_FRACTION

    def __post_init__(self) -> None:
        if self.source not in ("execution", "world_model"):
            raise ValueError(f"Observation.source must be 'execution' or 'world_model', got {self.source!r}")
        if int(self.turn) < 1:
            raise ValueError(f"Observation.turn is 1-based, got {self.turn!r}")

    @property
    def ok(self) -> bool:
        """True when the program ran and its submission was graded."""
        return self.status == ExecutionStatus.OK.value

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict of all fields (NaN scores become ``None``)."""
        d = asdict(self)
        for k in ("validation_score", "wall_s"):
            if d[k] is not None and not math.isfinite(d[k]):
                d[k] = None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Observation:
        """The inverse of :meth:`to_dict`; unknown keys are ignored.

        Raises:
            KeyError: a required field is missing. ValueError: a bad ``source`` or ``turn``.
        """
        return cls(turn=int(d["turn"]), source=d["source"], status=str(d["status"]),
                   validation_score=None if d.get("validation_score") is None else float(d["validation_score"]),
                   metric=str(d["metric"]), lower_is_better=bool(d["lower_is_better"]),
                   wall_s=None if d.get("wall_s") is None else float(d["wall_s"]),
                   error_tail=str(d.get("error_tail", "")),
                   validation_fraction=float(d.get("validation_fraction", _DEFAULT_FRACTION)))

    def render(self) -> str:
        """The feedback as the agent reads it, identical in form for both sources and every scaffold::

            Validation roc_auc (20% of train.csv held out by the harness): 0.8123 (higher is better)
            Run time: 3.2 s
            Status: ok

        and for a failure ``Status: runtime_error`` followed by the error tail quoted
        (:meth:`error_lines`). The score is written with four decimals (``%.4f``; ``%.4g`` for values below
        1e-3 or from 1e6); the run time in seconds with one decimal.
        """
        pct = f"{100 * self.validation_fraction:.0f}%"
        direction = "lower is better" if self.lower_is_better else "higher is better"
        if self.validation_score is None or not math.isfinite(self.validation_score):
            shown = ("not available (no graded submission)" if not self.ok
                     else "not available (undefined on the held-out rows)")
        else:
            v = float(self.validation_score)
            shown = f"{v:.4f}" if 1e-3 <= abs(v) < 1e6 or v == 0 else f"{v:.4g}"
            shown += f" ({direction})"
        lines = [f"Validation {self.metric} ({pct} of train.csv held out by the harness): {shown}",
                 "Run time: " + ("unknown" if self.wall_s is None or not math.isfinite(self.wall_s)
                                 else f"{self.wall_s:.1f} s"),
                 f"Status: {self.status}"]
        return "\n".join(lines + self.error_lines())

    def error_lines(self) -> list[str]:
        """The error tail as the feedback shows it: no lines for an empty tail, else a label and the tail
        (cleaned again: an observation read back from a log may hold anything), every line quoted::

            Error output (last 57 characters; untrusted text from the program, quoted with "| "):
            | Traceback (most recent call last):
            | ValueError: Input X contains NaN.

        The label is always followed by the block and the block ends the feedback, so no line the program
        wrote can stand outside it.
        """
        if not self.error_tail:
            return []
        tail = clean(self.error_tail)
        return [f"Error output (last {len(tail)} characters; untrusted text from the program, quoted with "
                f"\"{QUOTE}\"):",
                *((QUOTE + line).rstrip() for line in tail.split("\n"))]


def _tail(text: str, limit: int) -> str:
    """``text`` cleaned (:func:`wmrl.program_text.clean`) and capped at its last ``limit`` characters (a marker
    saying how many were cut included), runs of spaces collapsed first (a SyntaxError's caret line would
    otherwise spend the budget on padding)."""
    return clean(re.sub(r"[ \t]{2,}", " ", clean(text).strip()), limit)


def _fraction(task: Task) -> float:
    return float(task.validation.fraction) if task.validation is not None else _DEFAULT_FRACTION


def observation_from_result(result: ExecutionResult, task: Task, turn: int,
                            error_chars: int = DEFAULT_ERROR_CHARS) -> Observation:
    """The feedback a competitor would see for ``result`` (an execution on a validation view of ``task``).

    Shown: the status, ``result.validation_score`` (None unless ``task`` is a validation view and the
    run was graded), ``result.wall_s`` (seconds) and, for a failure, the last ``error_chars`` characters
    of the program's stderr followed by ``result.error`` (the error last, so that its end always shows).
    Never shown: ``result.score``, ``result.reward``, ``result.medal``, ``result.above_median`` (test-set
    information), nor stdout (a program may print anything; stderr carries its traceback).

    Args:
        result: the execution's outcome.
        task: the task it ran on (its metric, direction and validation fraction are stated).
        turn: 1-based turn of the program.
        error_chars: cap of the error tail, characters (>= 0).

    Raises:
        ValueError: ``error_chars`` is negative.
    """
    if error_chars < 0:
        raise ValueError(f"error_chars must be >= 0, got {error_chars}")
    status = getattr(result.status, "value", str(result.status))
    tail = ""
    if status != ExecutionStatus.OK.value and error_chars:
        parts = [p.strip() for p in (result.stderr or "", result.error or "") if p and p.strip()]
        tail = _tail("\n".join(parts), error_chars)
    vs = result.validation_score if status == ExecutionStatus.OK.value else None
    return Observation(turn=int(turn), source="execution", status=status,
                       validation_score=None if vs is None else float(vs), metric=task.metric,
                       lower_is_better=bool(task.lower_is_better), wall_s=float(result.wall_s),
                       error_tail=tail, validation_fraction=_fraction(task))


def observation_from_prediction(task: Task, turn: int, reward_wm_calibrated: float, wall_s: float | None,
                                error_threshold: float = 0.05,
                                error_chars: int = DEFAULT_ERROR_CHARS) -> Observation:
    """The world model's feedback: its calibrated predicted percentile as a validation score.

    Failures get ``task.failure_reward`` (near 0), so a predicted percentile below ``error_threshold``
    is shown as a failure: status ``runtime_error`` with the fixed :data:`PREDICTED_ERROR_TAIL` and no
    score. Otherwise status ``ok`` and ``validation_score = score_at_percentile(task, p)`` (the raw metric
    value that would place at percentile ``p`` on the task's private board; the validation score of a
    program is taken to sit where its test score would).

    Args:
        task: the task (a validation view or the original; its boards give the inverse).
        turn: 1-based turn of the program.
        reward_wm_calibrated: predicted percentile in [0, 1] (clipped); NaN is shown as a failure.
        wall_s: predicted run time, seconds, or None.
        error_threshold: percentile below which the prediction is a failure.
        error_chars: cap of the error tail, characters.

    Raises:
        LeaderboardError: a percentile task without a leaderboard.
    """
    from wmrl.tasks.grading import score_at_percentile  # noqa: PLC0415 - heavy: loads pandas

    p = float(reward_wm_calibrated)
    common: dict[str, Any] = dict(turn=int(turn), source="world_model", metric=task.metric,
                  lower_is_better=bool(task.lower_is_better),
                  wall_s=None if wall_s is None else float(wall_s), validation_fraction=_fraction(task))
    if math.isnan(p) or p < error_threshold:
        return Observation(status=ExecutionStatus.RUNTIME_ERROR.value, validation_score=None,
                           error_tail=_tail(PREDICTED_ERROR_TAIL, error_chars), **common)
    return Observation(status=ExecutionStatus.OK.value, validation_score=score_at_percentile(task, p), **common)

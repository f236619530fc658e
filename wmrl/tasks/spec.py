"""The task record every part of wmrl shares (seed; the tasks package owns and extends it).

A task is a Kaggle-like competition folder in one of four layouts (wmrl's own, MLE-bench, MLE-Dojo,
DSBench data modeling; see :mod:`wmrl.tasks.loader`). Solution programs run with the working directory laid out as::

    ./input/train.csv  ./input/test.csv  ./input/sample_submission.csv   (read-only, public only)
    ./submission.csv                                                      (written by the program)

The answers live only under ``private/`` and are read by the trusted grader, never by a program.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

TaskType = Literal["binary", "multiclass", "regression"]
Split = Literal["train", "heldout"]
#: A task layout's name: one of the registry :data:`wmrl.tasks.layouts.LAYOUTS` (``wmrl``, ``mlebench``,
#: ``mledojo``, ``dsbench`` or a registered one).
Layout = str
#: How a task's reward is computed: ``percentile`` (MLE-Dojo position score averaged over the boards,
#: which is MLE-bench's percentile on a single board) or ``rpg`` (DSBench relative performance gap).
RewardKind = Literal["percentile", "rpg"]

#: File names of a sample submission, in the order they are looked for: wmrl, MLE-bench and MLE-Dojo write the
#: first, some Kaggle competitions the second, DSBench the third.
SAMPLE_SUBMISSION_NAMES = ("sample_submission.csv", "sampleSubmission.csv", "sample_solution.csv")


def hints_file(layout: str, folder: Path | str) -> Path:
    """The file whose keys the loader reads on top of what a task folder's files say (the *hints file*).

    Args:
        layout: ``wmrl``, ``mlebench``, ``mledojo`` or ``dsbench``.
        folder: the task folder the loader reads (MLE-bench and MLE-Dojo: ``<data-dir>/<id>``; DSBench:
            ``data_modeling/data/data_resplit/<id>``; wmrl: ``<id>``).

    Returns:
        wmrl: ``<id>/task.yaml`` itself; MLE-bench and MLE-Dojo: ``<data-dir>/<id>/wmrl.yaml`` (beside
        ``prepared/`` or ``data/``, not in the benchmark package's ``competitions/<id>/``); DSBench:
        ``data_modeling/data/wmrl/<id>.yaml`` (DSBench's task folders hold only its data files).
    """
    folder = Path(folder)
    if layout == "wmrl":
        return folder / "task.yaml"
    if layout == "dsbench":
        return folder.parent.parent / "wmrl" / f"{folder.name}.yaml"
    return folder / "wmrl.yaml"


class InvalidSubmission(ValueError):
    """A submission that cannot be graded; the message says what is wrong and how to fix it."""


class UnreadableSubmission(InvalidSubmission):
    """An :class:`InvalidSubmission` raised because parsing or aligning the submission failed unexpectedly (an
    ``OverflowError``, ``KeyError``, ...), not by one of the grader's named checks: the executor confirms that
    the grader works on the task's reference submission before it blames the submission."""


@dataclass(frozen=True)
class ValidationSplit:
    """A harness-made validation split of a task (:func:`wmrl.tasks.validation.validation_view`).

    A *view task* carries one: its ``public/train.csv`` is the task's train.csv minus ``n_validation``
    held-out rows, and its ``public/test.csv`` holds those rows' features mixed with the real test rows
    under fresh ids, so one execution yields both a validation score (what a competitor sees) and the
    usual test grade (:func:`wmrl.tasks.grading.grade_submission` splits the submission).

    Attributes:
        fraction: the held-out share of train.csv's rows, in (0, 1).
        seed: the seed of the split and of the id shuffle.
        idmap_path: private CSV ``view_id,part,original_id`` (``part`` is ``val`` or ``test``).
        val_answers_path: private CSV of the held-out rows' targets under their view ids.
        n_validation: number of held-out rows.
    """

    fraction: float
    seed: int
    idmap_path: Path
    val_answers_path: Path
    n_validation: int


@dataclass(frozen=True)
class Task:
    """One competition, loaded from a task folder.

    Attributes:
        id: unique task id, e.g. ``"modeldata-credit_data"``.
        type: ``binary``, ``multiclass`` or ``regression``.
        metric: metric name understood by :mod:`wmrl.tasks.metrics` (``roc_auc``, ``rmse``, ...).
        lower_is_better: metric direction.
        target: name of the target column in ``train.csv`` and in the answers.
        id_column: name of the row-id column shared by test, answers and submission.
        root: the task folder.
        public_dir: folder with ``train.csv``, ``test.csv``, ``sample_submission.csv``.
        answers_path: CSV with ``id_column`` and the true target for the test rows (private).
        leaderboard_paths: ``rank,score`` CSVs sorted best-first (one or two boards).
        time_limit_s: wall-clock limit for one execution of a solution, seconds.
        split: ``train`` (used for RL) or ``heldout`` (only for evaluation).
        description: competition-page text (Markdown).
        layout: the folder layout the task was read from.
        failure_reward: reward given when the program fails (timeout, crash, bad submission).
        n_rows, n_features: size of ``train.csv`` + ``test.csv`` rows and of the feature columns.
        source, license: where the data comes from and under which licence.
        classes: class labels in order (classification); for binary tasks ``classes[1]`` is the
            positive class whose probability a probability-metric submission holds.
        baseline_score, gold_score: raw metric values of a trivial baseline and of the best known
            solution, for the DSBench relative performance gap (``None`` when not given).
        n_train, n_test: rows of ``train.csv`` and ``test.csv``.
        title: a short human title of the competition.
        reward_kind: ``percentile`` (leaderboard position score, the default) or ``rpg`` (DSBench relative
            performance gap ``max(0, (p - b) / (g - b))``, for tasks without a leaderboard).
        awards_medals: False when the benchmark says the competition awards no medals (MLE-bench's
            ``awards_medals: false``).
        medals: ``awards_medals`` (grading gives ``medal = None`` when ``awards_medals`` is False; wmrl's own
            rule and the option) or ``always`` (medals on every competition, as MLE-bench's grading code
            does: it never reads ``awards_medals``; the default for MLE-bench folders).
        score_decimals: the raw score is rounded to this many decimals before it is placed on a board
            (MLE-bench's ``Grader.__call__`` rounds to 5); ``None``: no rounding.
        row_match: how submission rows meet the answers: ``id`` (by the id column) or ``position`` (row i of
            the submission against row i of the answers, as DSBench's evaluation scripts do; the ids must
            still be the test ids).
        metric_code: the benchmark's own metric code (MLE-Dojo ``utils/metric.py``, MLE-bench ``grade.py``,
            DSBench ``evaluation/<id>_eval.py``), run only in a child process with time and memory limits
            (:mod:`wmrl.tasks.benchcode`); ``None`` for wmrl's own tasks.
        metric_source: where the metric name came from (file and field), for messages and ``wmrl tasks list``.
        warnings: what the loader inferred that the benchmark's files do not state and that may be wrong
            (one line each, naming the hints-file key that settles it); ``wmrl tasks list`` and the trainer
            print them.
        outputs: the submission's value columns when it is not one id column and one target, and only the
            benchmark's own code grades it (metric ``code_table``): several target columns, columns named unlike
            the answers', several rows per id, text or encoded outputs; the submission then holds exactly the
            sample submission's columns and rows (its ids, each as often as there). Empty for every other task.
        adapter: the adapter that read the task (``wmrl``, ``mlebench``, ``mledojo``, ``dsbench``).
        validation: set on a *validation view* of a task (:func:`wmrl.tasks.validation.validation_view`):
            ``public_dir`` then points at the view (train.csv minus a held-out split; test.csv = held-out
            rows + real test rows under fresh ids), and grading also returns a validation score.
            ``None`` (the default) for an ordinary task.
    """

    id: str
    type: TaskType
    metric: str
    lower_is_better: bool
    target: str
    id_column: str
    root: Path
    public_dir: Path
    answers_path: Path
    leaderboard_paths: tuple[Path, ...]
    time_limit_s: float
    split: Split
    description: str
    layout: Layout = "wmrl"
    failure_reward: float = 0.0
    n_rows: int = 0
    n_features: int = 0
    source: str = ""
    license: str = ""
    classes: tuple[str, ...] = field(default_factory=tuple)
    baseline_score: float | None = None
    gold_score: float | None = None
    n_train: int = 0
    n_test: int = 0
    title: str = ""
    reward_kind: RewardKind = "percentile"
    awards_medals: bool = True
    medals: Literal["awards_medals", "always"] = "awards_medals"
    score_decimals: int | None = None
    row_match: Literal["id", "position"] = "id"
    metric_code: Path | None = None
    metric_source: str = ""
    validation: ValidationSplit | None = None
    warnings: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()

    @property
    def adapter(self) -> str:
        """The adapter (layout reader) that loaded the task: ``wmrl``, ``mlebench``, ``mledojo`` or ``dsbench``."""
        return self.layout

    @property
    def hints_file(self) -> Path:
        """Where the loader reads this task's hints (:func:`hints_file` of its layout and folder)."""
        return hints_file(self.layout, self.root)

    @property
    def has_reward(self) -> bool:
        """True when grading yields a reward: a leaderboard (percentile) or a baseline and a gold score (RPG)."""
        if self.reward_kind == "rpg":
            return (self.baseline_score is not None and self.gold_score is not None
                    and self.baseline_score != self.gold_score)
        return self.has_leaderboard

    @property
    def has_leaderboard(self) -> bool:
        """True when the task has at least one leaderboard, so that grading yields a reward.

        Without one, :func:`wmrl.tasks.grading.grade_submission` still returns the raw score but the
        reward is NaN; a trainer or evaluator should refuse such a task.
        """
        return len(self.leaderboard_paths) > 0

    @property
    def train_path(self) -> Path:
        """``public/train.csv`` (features and target)."""
        return self.public_dir / "train.csv"

    @property
    def test_path(self) -> Path:
        """``public/test.csv`` (features only)."""
        return self.public_dir / "test.csv"

    @property
    def sample_submission_path(self) -> Path:
        """The sample submission in ``public/`` (the submission format): the first of
        :data:`SAMPLE_SUBMISSION_NAMES` that exists (``sample_submission.csv`` when none does)."""
        for name in SAMPLE_SUBMISSION_NAMES:
            if (self.public_dir / name).is_file():
                return self.public_dir / name
        return self.public_dir / SAMPLE_SUBMISSION_NAMES[0]

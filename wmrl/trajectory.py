"""The trajectory record: one sampled solution from the policy, through routing, execution or the world
model, into the execution log and back into world-model training.

One dataclass for every writer (the trainer's anchors, the warm-up corpus, the evaluation) and every
reader (the world model's training examples, the corpus loaders, the refit). It travels with its
:class:`~wmrl.execution.types.ExecutionRequest` and is stored as JSON in the execution log's ``meta``
column, with its schema name and version, so that a log alone is enough to fit a world model later.

Schema ``wmrl.trajectory`` version 1 (the JSON keys are the field names, plus ``schema`` and
``version``). Records written before the schema existed (version 0: a plain dict with the same keys and
no ``schema``) are read by :meth:`Trajectory.from_dict` too.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

SCHEMA = "wmrl.trajectory"
VERSION = 1

Stream = Literal["anchor", "verify", "warmup", "eval"]


@dataclass(frozen=True)
class Trajectory:
    """One trajectory and where it came from.

    Attributes:
        stream: ``anchor`` (a training group executed for real), ``verify`` (a world-model group's favourite
            executed for real, ``wmrl.routing.verify_favourites``), ``warmup`` (the world model's warm-up corpus) or
            ``eval`` (an evaluation).
        run: the run (or corpus) name; groups of different runs never merge.
        step: the training step (-1 for the warm-up corpus; the evaluated step for ``eval``).
        group_id: the group within the step (one group = G samples of one prompt).
        sample: the sample's index within the step's batch.
        task_id: the task.
        prompt: the text the policy was conditioned on.
        completion: the policy's completion (what the world model scores).
        scaffold: the scaffold's name (how the completion became a program).
        split: ``train``/``heldout`` for ``eval`` trajectories, else None.
        completion_tokens: completion length in tokens (None when not recorded).
        well_formed: whether the scaffold parsed the completion (None when it does not say).
        gen_seconds_per_sample: wall seconds of sampling per sample of its batch (None when not recorded).
    """

    stream: Stream
    run: str
    step: int
    group_id: int
    sample: int
    task_id: str
    prompt: str
    completion: str
    scaffold: str = ""
    split: str | None = None
    completion_tokens: int | None = None
    well_formed: bool | None = None
    gen_seconds_per_sample: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON record (field names plus ``schema`` and ``version``)."""
        return {"schema": SCHEMA, "version": VERSION, **asdict(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Trajectory | None:
        """Read a record of any version; None when it holds no trajectory (no prompt or completion).

        Raises:
            ValueError: a record of another schema, or of a version newer than this code reads.
        """
        if not d or "prompt" not in d or "completion" not in d:
            return None
        schema, version = d.get("schema", SCHEMA), int(d.get("version", 0))
        if schema != SCHEMA or version > VERSION:
            raise ValueError(f"not a readable trajectory record: schema {schema!r} version {version} "
                             f"(this wmrl reads {SCHEMA!r} up to version {VERSION}; upgrade wmrl)")
        names = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        if version == 0 and "valid" in d:  # the warm-up corpus called it "valid"
            kw["well_formed"] = d["valid"]
        kw.setdefault("stream", "warmup" if int(d.get("step", -1)) < 0 else "anchor")
        kw.setdefault("run", "")
        kw.setdefault("step", -1)
        kw.setdefault("group_id", -1)
        kw.setdefault("sample", -1)
        kw.setdefault("task_id", "")
        extra = {k: v for k, v in d.items() if k not in names and k not in ("schema", "version", "valid")}
        kw["extra"] = {**kw.get("extra", {}), **extra}
        return cls(**kw)

    @property
    def group_key(self) -> tuple[str, int, str, int]:
        """``(run, step, task_id, group_id)``: the samples of one group share it."""
        return (self.run, self.step, self.task_id, self.group_id)


def trajectory_of(record: Any) -> Trajectory | None:
    """The trajectory of an execution-log record (a dict from ``ExecutionLog.records`` or
    ``models.corpus.result_record``, or an object with ``trajectory``/``meta`` attributes): its
    ``trajectory`` when set, else one read from its ``meta``; None when it holds none.

    Raises:
        ValueError: see :meth:`Trajectory.from_dict`.
    """
    get = record.get if isinstance(record, dict) else (lambda k, d=None: getattr(record, k, d))
    traj = get("trajectory")
    return traj if isinstance(traj, Trajectory) else Trajectory.from_dict(get("meta"))

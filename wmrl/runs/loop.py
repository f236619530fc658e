"""The run loop every trainer shares: steps, evaluations and checkpoints on one schedule.

A trainer (the text track's :class:`wmrl.training.trainer.Trainer`, the embodied track's
:class:`wmrl.embodied.trainer.EmbodiedTrainer`) is a :class:`SteppedTrainer`: it knows how to run its next step,
evaluate its policy and write an atomic checkpoint; :func:`run_steps` decides when. The order within one step::

    train_step()                      step t, its records logged
    evaluate(in_step=True)            when eval_every divides t and t < total (the final one comes after the loop)
    save_checkpoint()                 when checkpoint_every divides t, at the last step, at stop_after_step, or
                                      when the trainer asks to stop; ledger.json rewritten with it
    on_step(record)                   the caller's progress display

A run killed between two checkpoints resumes from the newest one that loads (:func:`load_newest` over
:meth:`wmrl.runs.rundir.RunDir.resume_candidates`), and its logs are cut back to it, so the same schedule replays the
steps in between.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from wmrl.runs.ledger import Ledger
from wmrl.runs.rundir import RunDir, RunDirError, now_iso, read_jsonl, write_json_atomic

log = logging.getLogger(__name__)


class Resumable(Protocol):
    """What :func:`load_newest` restores: a trainer of either track."""

    rd: RunDir

    def load_checkpoint(self, path: Path) -> None:
        """Restore everything the checkpoint folder ``path`` holds.

        Raises:
            Exception: whatever reading a damaged file raises (the caller falls back to an earlier checkpoint).
        """
        ...


def load_newest(trainer: Resumable, candidates: Sequence[Path], notes: Sequence[str] = ()) -> Path:
    """Load the first of ``candidates`` (complete checkpoints, newest first:
    :meth:`wmrl.runs.rundir.RunDir.resume_candidates`) that loads; a damaged one is passed over and the resume says
    why in ``train.log``. ``notes``: why checkpoints were passed over before loading (named in the refusal).

    Returns:
        the checkpoint folder loaded.

    Raises:
        RunDirError: none loads (one line naming each and why).
    """
    tried = list(notes)
    for i, ck in enumerate(candidates):
        try:
            trainer.load_checkpoint(ck)
        except Exception as e:  # noqa: BLE001 - a damaged file in a checkpoint: try the one before
            why = " ".join(f"{type(e).__name__}: {e}".split())[:200]
            tried.append(f"{ck.name} does not load ({why})")
            log.warning("%s: checkpoint %s does not load (%s)", trainer.rd.root, ck.name, why)
            continue
        if i > 0:
            msg = f"resumed from {ck.name} because {'; '.join(tried[len(notes):])}"
            log.warning("%s: %s", trainer.rd.root, msg)
            trainer.rd.log_line(f"{now_iso()} {msg}")
        return ck
    raise RunDirError(f"{trainer.rd.root} has no checkpoint that loads ({'; '.join(tried)}); continuing would "
                      "repeat its steps: start a new run in another run_dir")


class SteppedTrainer(Protocol):
    """What :func:`run_steps` drives."""

    step: int
    rd: RunDir
    ledger: Ledger

    def train_step(self) -> dict[str, Any]:
        """Run step ``step + 1``, log it and return its metrics record (``step`` is then advanced)."""
        ...

    def evaluate(self, *, in_step: bool) -> dict[str, Any]:
        """Evaluate the current policy (appends ``eval.jsonl``); ``in_step``: inside a step's timing."""
        ...

    def save_checkpoint(self) -> Any:
        """Write the checkpoint of the current step atomically."""
        ...


@dataclass(frozen=True)
class Schedule:
    """When :func:`run_steps` evaluates and checkpoints.

    Attributes:
        total_steps: train until ``trainer.step`` reaches this.
        eval_every: evaluate every N steps (0 = only at the start and the end), never at the last step (the
            caller's final evaluation, :func:`evaluated_at`, covers it).
        eval_at_start: evaluate the policy before the first step (step 0), unless ``eval.jsonl`` has it already.
        checkpoint_every: checkpoint every N steps (and always at the last step).
        stop_after_step: stop after this step's checkpoint, as if killed (tests, benchmarks); None = never.
    """

    total_steps: int
    eval_every: int = 0
    eval_at_start: bool = False
    checkpoint_every: int = 1
    stop_after_step: int | None = None


def evaluated_at(rd: RunDir, step: int) -> bool:
    """Whether ``eval.jsonl`` holds a training-time evaluation of ``step`` (not one of ``wmrl eval``'s checkpoints)."""
    return any(r.get("step") == step and r.get("checkpoint") is None for r in read_jsonl(rd.eval))


def run_steps(trainer: SteppedTrainer, schedule: Schedule, *, on_step: Callable[[dict[str, Any]], None] | None = None,
              stop_requested: Callable[[], str | None] | None = None,
              on_stop: Callable[[str], None] | None = None) -> None:
    """Train ``trainer`` from its current step to ``schedule.total_steps`` (module docstring for the order).

    Args:
        trainer: the trainer, at step 0 or restored from a checkpoint.
        schedule: when to evaluate and checkpoint.
        on_step: called with each step's record after its checkpoint (progress display).
        stop_requested: called after each step; a message means "stop now": the step is checkpointed and
            ``on_stop(message)`` is called (it usually raises), else the loop ends.
        on_stop: see ``stop_requested``.
    """
    s = schedule
    if s.eval_at_start and trainer.step == 0 and not evaluated_at(trainer.rd, 0):
        trainer.evaluate(in_step=False)
    while trainer.step < s.total_steps:
        rec = trainer.train_step()
        t = trainer.step
        if s.eval_every and t % s.eval_every == 0 and t < s.total_steps:
            trainer.evaluate(in_step=True)
        stop = stop_requested() if stop_requested is not None else None
        if t % s.checkpoint_every == 0 or t == s.total_steps or t == s.stop_after_step or stop:
            with trainer.ledger.stage("checkpoint"):
                trainer.save_checkpoint()
            write_json_atomic(trainer.rd.ledger, trainer.ledger.to_json())
        if stop:
            if on_stop is not None:
                on_stop(stop)
            return
        if on_step is not None:
            on_step(rec)
        if s.stop_after_step is not None and t >= s.stop_after_step:
            return

"""One run lifecycle for every track: start, resume, the owner lock, the saved config and its hash, the cleanup of a
start that failed, the trackers and the summary (docs/run-directory.md).

A track (the text track's :class:`wmrl.training.run.TextTrack`, the embodied track's
:class:`wmrl.embodied.trainer.EmbodiedTrack`) supplies only what differs, as a :class:`Track`: the checks of its
config, its saved config read back, how to build its trainer, how to run its steps and what its summary says.
:func:`run_track` does the rest, in this order::

    check the config, probe the trackers                 nothing touched yet
    start:  claim the folder (a new one appears with its lock held); refused when it holds a run
    resume: take the folder's lock; config.yaml present and as the run saved it (or the edit accepted); the saved
            config read back and compared (only the track's resume-mutable keys may differ); refused when the run
            did work but no checkpoint is complete; a completed run's summary returned as it is
    save config.yaml and its hash (start), build the trainer; resume: summary.json and fidelity.json removed (both
            are rewritten when the run ends) and the config saved again; provenance.json
    the newest complete checkpoint that loads (resume), or the step-0 checkpoint (start, or a resume with nothing
            done yet); ledger.json
    open the trackers; the track's steps; at the end the track's finish and summary content, written here
            (ledger.json, summary.json, the trackers, train.log)
    close the trackers with one status: finished; stopped (stop_after_step reached, an interrupt, a
            :class:`RunStopped`); failed (anything else)

A start that fails before its step-0 checkpoint exists leaves the folder as it found it
(:meth:`wmrl.runs.owner.RunDirOwner.undo_start`): the folder it made is removed, or what it added to one that existed.
Nothing here imports a track.
"""
from __future__ import annotations

import datetime as _dt
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from wmrl.execution.log import ExecutionLog
from wmrl.runs.config import ConfigError, save_config
from wmrl.runs.ledger import Ledger
from wmrl.runs.loop import load_newest
from wmrl.runs.owner import RunDirOwner
from wmrl.runs.provenance import record_training_start
from wmrl.runs.rundir import RunDir, RunDirError, now_iso, read_jsonl, write_json_atomic
from wmrl.runs.tracking import TrackerSet, TrackingConfig, open_trackers, probe_trackers

log = logging.getLogger(__name__)


#: The config keys every track's resume may change (a key ending in ``.`` names its section): how far the run goes,
#: its evaluations, checkpoints, threads and trackers; none of them changes the steps done. A track adds its own
#: (:attr:`Track.resume_mutable`).
RESUME_MUTABLE = ("optim.steps", "threads", "eval.", "checkpoint_every", "keep_checkpoints", "trackers", "tracking.")


class RunStopped(RunDirError):
    """A run stopped on purpose at a checkpoint (the text track's exploitation alarm): resumable; its trackers close
    as ``stopped``."""


class RunConfig(Protocol):
    """What the lifecycle reads of a track's config (a :class:`~wmrl.runs.config.ConfigSection`)."""

    #: The run directory; None: ``runs/<track prefix><name or method>-<UTC time>``, set by :func:`run_track`.
    run_dir: str | None

    @property
    def name(self) -> str | None:
        """The run's name (None: the method's)."""
        ...

    @property
    def method(self) -> str:
        """The registered recipe the run trains with."""
        ...

    @property
    def trackers(self) -> Sequence[str]:
        """The experiment trackers (:mod:`wmrl.runs.tracking`)."""
        ...

    @property
    def tracking(self) -> TrackingConfig:
        """The trackers' options."""
        ...

    def model_dump(self) -> dict[str, Any]:
        """The config as nested dicts (what ``config.yaml`` holds and the trackers receive)."""
        ...


class RunTrainer(Protocol):
    """What the lifecycle drives of a track's trainer (besides what the track's own hooks do with it)."""

    step: int
    rd: RunDir
    ledger: Ledger
    #: The experiment trackers, opened by :func:`run_track` once the trainer is at its first step.
    trackers: TrackerSet

    def save_checkpoint(self) -> Any:
        """Write the checkpoint of the current step atomically."""
        ...

    def load_checkpoint(self, path: Path) -> None:
        """Restore the checkpoint folder ``path`` and cut the logs back to its step (raises on a damaged file)."""
        ...


C = TypeVar("C", bound=RunConfig)
T = TypeVar("T", bound=RunTrainer)


class Track(Protocol[C, T]):
    """What a track supplies to :func:`run_track`: what differs between the text and the embodied track.

    Attributes:
        resume_command: the command that continues a run, followed by the run directory in messages
            (``wmrl train --resume``).
        run_dir_prefix: the start of a default run directory's name (``embodied-``; ``""``).
        resume_mutable: the config keys a resume may change (``optim.steps``; a key ending in ``.`` names a
            section); ``run_dir`` always may.
    """

    resume_command: str
    run_dir_prefix: str
    resume_mutable: tuple[str, ...]

    def check(self, cfg: C) -> None:
        """Refuse a config this track cannot run, before the run directory is touched (raises ConfigError, ...)."""
        ...

    def saved_config(self, rd: RunDir, cfg: C) -> C:
        """The config the run in ``rd`` saved, read back for a resume of it with ``cfg`` (which the track may give
        the saved run's behaviour of keys added since; raises ConfigError for a file that does not read back)."""
        ...

    def total_steps(self, cfg: C) -> int:
        """The steps a completed run of ``cfg`` has done."""
        ...

    def build(self, cfg: C, rd: RunDir, *, from_checkpoint: bool) -> T:
        """The trainer of ``cfg`` in ``rd`` at step 0; ``from_checkpoint``: a checkpoint will be loaded into it."""
        ...

    def train(self, trainer: T, stop_after_step: int | None) -> None:
        """Run the steps from the trainer's current step (:func:`wmrl.runs.loop.run_steps` with the track's schedule
        and display); may raise :class:`RunStopped`."""
        ...

    def finish(self, trainer: T) -> None:
        """The end of a completed run before its summary: the final evaluation, the track's end-of-run files."""
        ...

    def summary(self, trainer: T, ledger: dict[str, Any], *, completed: bool) -> dict[str, Any]:
        """The summary's content (``status``: ``completed``, else ``stopped``); ``ledger``: the ledger.json
        document written with it."""
        ...

    def close(self, trainer: T) -> None:
        """Release what the track's build opened (executors, ...), however the run ended."""
        ...


@dataclass(frozen=True)
class RunRequest(Generic[C]):
    """One start or resume (:func:`run_track`).

    Attributes:
        config: the resolved config (its ``run_dir`` None: a default one, set in it).
        resume: continue the run in ``config.run_dir`` from its newest complete checkpoint.
        accept_edited_config: resume although ``config.yaml`` was edited since the run saved it (noted in
            ``train.log``).
        stop_after_step: stop (as if killed) after this step's checkpoint, without the final evaluation and the
            summary; for tests and benchmarks. None: never.
    """

    config: C
    resume: bool = False
    accept_edited_config: bool = False
    stop_after_step: int | None = None


def default_run_dir(prefix: str, name: str) -> str:
    """``runs/<prefix><name>-<UTC time to the second>``: a run directory that no earlier run has."""
    return str(Path("runs") / f"{prefix}{name}-{_dt.datetime.now(_dt.UTC).strftime('%Y%m%d-%H%M%S')}")


def check_resumable(rd: RunDir, accept_edited_config: bool) -> str:
    """Refuse a resume of ``rd`` that cannot go on; returns why ``config.yaml`` differs from the saved one when the
    edit is accepted, else ``""``.

    Raises:
        RunDirError: the folder does not exist or has no ``config.yaml``; ``config.yaml`` was edited since the run
            saved it (:meth:`~wmrl.runs.rundir.RunDir.config_edited`) and ``accept_edited_config`` is False.
    """
    if not rd.config.is_file():
        raise RunDirError(f"{rd.root} does not exist: nothing to resume (pass the run directory of a run)"
                          if not rd.root.exists() else
                          f"{rd.root} has no config.yaml: not a run directory (nothing to resume)")
    edited = rd.config_edited()
    if edited and not accept_edited_config:
        raise RunDirError(f"{edited}: resuming with it would change the run's past; restore it, or resume "
                          "with --accept-edited-config to use the edited file")
    return edited


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            out.update(_flat(v, key))
        else:
            out[key] = v
    return out


def frozen_changes(saved: dict[str, Any], new: dict[str, Any], mutable: Sequence[str]) -> list[str]:
    """The dotted keys whose value differs between two configs (nested dicts), except ``run_dir`` and the keys of
    ``mutable`` (a key ending in ``.`` names every key under it), sorted."""
    a, b = _flat(saved), _flat(new)
    return [k for k in sorted(set(a) | set(b))
            if k != "run_dir" and a.get(k) != b.get(k)
            and not any(k == m or (m.endswith(".") and k.startswith(m)) for m in mutable)]


def has_progress(rd: RunDir) -> bool:
    """Whether the run directory holds any work: a checkpoint folder, a metrics record, an execution."""
    if rd.checkpoints.is_dir() and any(rd.checkpoints.glob("step_*")):
        return True
    if read_jsonl(rd.metrics):
        return True
    if rd.executions.is_file():
        with ExecutionLog(rd.executions) as lg:
            return lg.count() > 0
    return False


def run_track(track: Track[C, T], request: RunRequest[C]) -> dict[str, Any]:
    """Start or resume one run of ``track`` (module docstring for the order) and return its summary: the
    ``summary.json`` document of a completed run, or the track's stopped summary (``status: stopped``, not written).

    Raises:
        RunDirError: a start in a folder that holds a run, or a run_dir that names a file; another live trainer
            holds the run directory (its lock ``.owner.lock``, held for the whole run); a resume that
            :func:`check_resumable` refuses, of a saved config that does not read back, or with no complete checkpoint
            although the run did work; :class:`RunStopped` from the track's steps.
        ConfigError: the track's checks; a tracker whose package is missing or whose server is out of reach (before
            the folder is touched); a resume whose config differs from the saved one in a key the track freezes.
        Exception: whatever the track's build and steps raise (a start that fails before its step-0 checkpoint
            leaves the folder as it found it).
    """
    cfg = request.config
    track.check(cfg)
    probe_trackers(cfg.trackers, cfg.tracking)
    if cfg.run_dir is None:
        cfg.run_dir = default_run_dir(track.run_dir_prefix, cfg.name or cfg.method)
    rd = RunDir(cfg.run_dir)
    owner = RunDirOwner(rd.root, resume=track.resume_command)  # held for the whole run: one trainer per run directory
    if not request.resume:
        owner.claim()  # a new folder appears with its lock held: no other trainer ever sees it unlocked
    elif rd.root.is_dir():
        owner.acquire()  # a resume of a missing folder holds nothing and is refused below
    try:
        return _run_owned(track, request, rd, owner)
    finally:
        owner.release()


def _save_config(cfg: RunConfig, rd: RunDir) -> None:
    save_config(cfg, rd.config)
    rd.save_config_hash()


def _resume_checks(track: Track[C, T], request: RunRequest[C], rd: RunDir, latest: Path | None,
                   passed_over: list[str]) -> dict[str, Any] | None:
    """The refusals of a resume under the lock; returns the summary of a run that completed its steps already."""
    cfg = request.config
    edited = check_resumable(rd, request.accept_edited_config)
    if edited:
        log.warning("%s; resuming with the edited file as asked", edited)
        rd.log_line(f"{now_iso()} {edited}; resumed with it (--accept-edited-config)")
    try:
        saved = track.saved_config(rd, cfg)
    except ConfigError as e:
        raise RunDirError(f"{rd.config} cannot be read back: {e}") from None
    changed = frozen_changes(saved.model_dump(), cfg.model_dump(), track.resume_mutable)
    if changed:
        allowed = ", ".join(m + "*" if m.endswith(".") else m for m in track.resume_mutable)
        raise ConfigError(f"resume: the config differs from the run's saved config.yaml in {', '.join(changed)}, "
                          f"which would change the run's past; {f'only {allowed} may' if allowed else 'no key may'} "
                          f"change. To train with another {changed[0]}, start a new run (another run_dir)")
    if latest is None and has_progress(rd):
        raise RunDirError(f"{rd.root} has no complete checkpoint to resume from ({'; '.join(passed_over)}); "
                          "continuing would repeat its steps: start a new run in another run_dir")
    if latest is not None and rd.summary.is_file():
        done: dict[str, Any] = json.loads(rd.summary.read_text())
        if done.get("status") == "completed" and done.get("steps", 0) >= track.total_steps(cfg):
            log.info("run %s already completed %s steps", rd.root, done.get("steps"))
            return done
    return None


def _run_owned(track: Track[C, T], request: RunRequest[C], rd: RunDir, owner: RunDirOwner) -> dict[str, Any]:
    """:func:`run_track` with ``owner`` held."""
    cfg, resume = request.config, request.resume
    candidates, passed_over = rd.resume_candidates() if rd.root.exists() else ([], [])
    latest = candidates[0] if candidates else None
    if resume:
        done = _resume_checks(track, request, rd, latest, passed_over)
        if done is not None:
            return done
    elif candidates or passed_over or any(p.is_file() for p in (rd.config, rd.metrics, rd.summary)):
        raise RunDirError(f"{rd.root} already holds a run; continue it with `{track.resume_command} {rd.root}` "
                          f"or choose another run_dir")
    owner.note_entries()  # what a failed start must not remove: nothing of a folder it did not make
    try:
        rd.create()
        owner.acquire()
        if not resume:
            _save_config(cfg, rd)
        rd.log_line(f"{now_iso()} {'resume' if resume else 'start'} method={cfg.method} run_dir={rd.root}")
        if resume and passed_over:
            msg = (f"resuming from {latest.name}, the newest complete checkpoint, because "
                   f"{'; '.join(passed_over)}") if latest is not None else (
                   "no checkpoint and nothing done yet: starting the run from step 0")
            log.warning("%s: %s", rd.root, msg)
            rd.log_line(f"{now_iso()} {msg}")
        trainer = track.build(cfg, rd, from_checkpoint=latest is not None)
        if resume:
            # Only now that the trainer is built does a resume touch the run: a resume that fails before (a bad
            # edited config, a missing model) leaves a finished run as it was.
            for done_file in (rd.summary, rd.fidelity):  # both are rewritten when the resumed run ends
                done_file.unlink(missing_ok=True)
            _save_config(cfg, rd)
        record_training_start(rd.root, resume)  # the code that trains it from here
    except BaseException:
        if not resume:
            owner.undo_start()  # the folder this call made, or what it added to one that existed
        raise
    status = "failed"  # the trackers' closing status, unless the run gets further
    try:
        if latest is not None:
            load_newest(trainer, candidates, passed_over)
        else:
            try:
                rd.truncate_logs(0, {w: 0 for w in RunDir.JSONL})
                trainer.save_checkpoint()  # step 0: the set-up (warm-up, world-model fit, its ledger) survives a kill
            except BaseException:
                if not resume:  # a start that never reached its first checkpoint leaves nothing behind
                    owner.undo_start()
                raise
        write_json_atomic(rd.ledger, trainer.ledger.to_json())
        trainer.trackers = open_trackers(cfg.trackers, cfg.tracking, rd.root, config=cfg.model_dump(),
                                         start_step=trainer.step,
                                         on_error=lambda msg: rd.log_line(f"{now_iso()} WARNING {msg}"))
        track.train(trainer, request.stop_after_step)
        completed = request.stop_after_step is None or trainer.step < request.stop_after_step
        if completed:
            track.finish(trainer)
        ledger = trainer.ledger.to_json()
        summary = track.summary(trainer, ledger, completed=completed)
        if completed:
            write_json_atomic(rd.ledger, ledger)
            write_json_atomic(rd.summary, summary)
            trainer.trackers.log_summary(trainer.step, summary)
            rd.log_line(f"{now_iso()} finished: {trainer.step} steps, wall {trainer.ledger.wall_s():.1f}s")
        status = "finished" if completed else "stopped"
    except (RunStopped, KeyboardInterrupt):
        status = "stopped"  # at a checkpoint, or interrupted: resumable
        raise
    finally:
        trainer.trackers.close(status)
        track.close(trainer)
    return summary

"""Starting and resuming a text training run (docs/run-directory.md): :func:`run_training` and
:func:`resume_training`, the calls users make, run the text track's :class:`TextTrack` through the run lifecycle every
track shares (:func:`wmrl.runs.lifecycle.run_track`: the owner lock, the saved config, resume, the trackers, the
summary's files). What is the text track's own: its config checks, its parts and trainer, the step loop with its
progress bar, the end of a run (final evaluation, asynchronous anchors still in flight, the fidelity card) and the
summary's content."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from wmrl.core.recipe import get_recipe, ran_as_note
from wmrl.training.components import Components, RunSummary, anchor_fraction, environment_factory, now_iso
from wmrl.training.config import TrainConfig, load_config, validate
from wmrl.training.console import _fmt, _step_line, _weight_text
from wmrl.runs.ledger import Ledger
from wmrl.runs.config import dotted_value, migrate_keys
from wmrl.runs.lifecycle import RESUME_MUTABLE as TRACK_RESUME_MUTABLE
from wmrl.runs.lifecycle import RunRequest, check_resumable, run_track
from wmrl.runs.owner import TEXT_RESUME
from wmrl.runs.loop import Schedule, evaluated_at, run_steps
from wmrl.runs.rundir import RunDir, read_jsonl, seed_everything, write_json_atomic
from wmrl.training.trainer import Trainer
from wmrl.training.config import load_yaml
from wmrl.training.alarm import ExploitationStop
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
    TimeRemainingColumn
from wmrl.console import make_console
from wmrl.training.parts import build_components
from wmrl.models.backbone import hf_progress_bars

log = logging.getLogger(__name__)
#: Bootstrap resamples of the fidelity card written when a run ends (``fidelity.json``; the steps log point values).
FIDELITY_BOOT = 1000

#: The config keys a text run's resume may change (a key ending in ``.`` names its section): those of every track
#: (:data:`wmrl.runs.lifecycle.RESUME_MUTABLE`), the progress bar, the executor and the exploitation alarm; none of
#: them changes the steps done.
RESUME_MUTABLE = (*TRACK_RESUME_MUTABLE, "progress", "executor.", "wmrl.alarm.")

#: Config keys added after runs were saved without them, with the value that reproduces what such a run did: its
#: config.yaml lacks the key, and a resume continues with this value rather than the key's default (unless the
#: resume sets the key, which a frozen key refuses). ``wmrl.asynchronous.steps_without_anchors``: before it, a step
#: of the asynchronous stream without anchors updated on its world-model groups. ``wmrl.alarm.response``: before it,
#: no run tested its anchors for exploitation.
KEYS_ADDED_SINCE = {"wmrl.asynchronous.steps_without_anchors": "update", "wmrl.alarm.response": "none"}


def keys_added_since(path: str | Path) -> dict[str, str]:
    """The entries of :data:`KEYS_ADDED_SINCE` that the saved config at ``path`` does not hold (dotted key: value),
    under their name or an old one (:func:`wmrl.runs.config.migrate_keys`).

    Call it on a config that :func:`~wmrl.training.config.load_config` reads (its errors are the clear ones).
    """

    data = migrate_keys(TrainConfig, load_yaml(Path(path).read_text()))
    out = {}
    for key, value in KEYS_ADDED_SINCE.items():
        node: Any = data
        for part in key.split("."):
            node = node.get(part, KeyError) if isinstance(node, dict) else KeyError
        if node is KeyError:
            out[key] = value
    return out


@dataclass
class TextTrack:
    """The text track in the run lifecycle (:class:`wmrl.runs.lifecycle.Track`).

    Attributes:
        components: parts to use instead of building them from the config (tests, benchmarks; not closed here).
        progress: override ``config.progress``.
        resume_command, run_dir_prefix, resume_mutable: the :class:`~wmrl.runs.lifecycle.Track`'s
            (``wmrl train --resume``; default run directories ``runs/<name or method>-<time>``; the keys of
            :data:`RESUME_MUTABLE`).
    """

    components: Components | None = None
    progress: bool | None = None
    resume_command: str = TEXT_RESUME
    run_dir_prefix: str = ""
    resume_mutable: tuple[str, ...] = RESUME_MUTABLE

    def check(self, cfg: TrainConfig) -> None:
        """An invalid config (also one built in Python: finite numbers within their ranges), or an environment the
        text trainer cannot build, is refused before the run folder is touched (ConfigError)."""
        validate(cfg)
        environment_factory(cfg.environment)

    def saved_config(self, rd: RunDir, cfg: TrainConfig) -> TrainConfig:
        """The run's saved config; a key added since it was saved (:data:`KEYS_ADDED_SINCE`) takes, in both, the
        value the run's steps so far were made with, unless ``cfg`` sets it."""
        saved = load_config(rd.config)
        for key, value in keys_added_since(rd.config).items():
            section, name = key.rsplit(".", 1)
            setattr(dotted_value(saved, section), name, value)
            sec = dotted_value(cfg, section)
            if name not in sec.model_fields_set and getattr(sec, name) != value:
                setattr(sec, name, value)
                if cfg.wmrl.asynchronous.staleness:  # only the asynchronous stream reads steps_without_anchors
                    msg = f"{rd.config} predates {key}: resuming with {key}={value}, the behaviour of its steps so far"
                    log.warning("%s", msg)
                    rd.log_line(f"{now_iso()} {msg}")
        return saved

    def total_steps(self, cfg: TrainConfig) -> int:
        """``optim.steps``."""
        return cfg.optim.steps

    def build(self, cfg: TrainConfig, rd: RunDir, *, from_checkpoint: bool) -> Trainer:
        """The :class:`Trainer` on the given parts, or on parts built from the config (its ``setup`` phase)."""
        import torch  # noqa: PLC0415 - heavy

        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        seed_everything(cfg.seed)
        ledger = Ledger(method=cfg.method, anchor_fraction_configured=anchor_fraction(cfg))
        components = self.components
        if components is None:
            with ledger.phase("setup"):
                components = build_components(cfg, rd, ledger, resume=from_checkpoint)
        return Trainer(cfg, rd, components, ledger)

    def train(self, trainer: Trainer, stop_after_step: int | None) -> None:
        """The steps with the progress bar (:func:`_loop`); a resumed run first counts its asynchronous anchors lost
        with the stopped process."""
        if trainer.step:
            _count_lost_anchors(trainer, "resume")
        _loop(trainer, trainer.cfg.progress if self.progress is None else self.progress, stop_after_step)

    def finish(self, trainer: Trainer) -> None:
        """The final evaluation (``eval.at_end``), the asynchronous anchors still in flight, a note when the run
        was not the method its name says, and ``fidelity.json``."""
        cfg, rd = trainer.cfg, trainer.rd
        if cfg.eval.at_end and (trainer.c.heldout_tasks or cfg.eval.train_tasks) and not evaluated_at(rd, trainer.step):
            trainer.evaluate(in_step=False)
        _count_lost_anchors(trainer, "end")
        note = ran_as_note(get_recipe(cfg.method), [m.get("calibrator_mode") for m in read_jsonl(rd.metrics)], None)
        if note:  # the run is not the method its name says: one line now, and the bench's ran_as column
            log.warning("%s: the %s run ended with %s", rd.root, cfg.method, note)
            rd.log_line(f"{now_iso()} WARNING {cfg.method} ran with {note}")
        card = trainer.fidelity.card(n_boot=FIDELITY_BOOT, seed=cfg.seed)  # None: no anchor scored by a world model
        if card is not None:
            write_json_atomic(rd.fidelity, card.to_dict())

    def summary(self, trainer: Trainer, ledger: dict[str, Any], *, completed: bool) -> dict[str, Any]:
        """:class:`RunSummary` as a dict: the final and initial evaluations, the last quarter's anchor reward."""
        rd = trainer.rd
        metrics = read_jsonl(rd.metrics)
        last = metrics[-1] if metrics else {}
        stopped = RunSummary(run_dir=rd.root, method=trainer.method, status="stopped", steps=trainer.step,
                             wall_s=ledger["totals"]["wall_s"], ledger=ledger, final_eval={}, last_metrics=last,
                             anchor_fraction=None, reward_true_mean_last=None, started_at=trainer.started_at)
        if not completed:
            return stopped.to_dict()
        last_q = metrics[-max(1, len(metrics) // 4):] if metrics else []
        rt = [m["reward_true_mean"] for m in last_q if m.get("reward_true_mean") is not None]
        final_eval: dict[str, Any] = {}
        initial_eval: dict[str, Any] = {}
        for r in read_jsonl(rd.eval):
            if r.get("checkpoint") is None:
                final_eval[r["split"]] = r
                if r.get("step") == 0:
                    initial_eval.setdefault(r["split"], r)
        return replace(stopped, status="completed", final_eval=final_eval,
                       anchor_fraction=ledger["groups"]["anchor_fraction"],
                       reward_true_mean_last=float(np.mean(rt)) if rt else None, finished_at=now_iso(),
                       initial_eval=initial_eval).to_dict()

    def close(self, trainer: Trainer) -> None:
        """Close the parts this run built (not the ones it was given)."""
        if self.components is None and trainer.c.close is not None:
            trainer.c.close()


def run_training(config: TrainConfig, *, resume: bool = False,
                 components: Components | None = None,
                 stop_after_step: int | None = None,
                 progress: bool | None = None,
                 accept_edited_config: bool = False) -> RunSummary:
    """Train (or resume) one run and return its summary (the main API; ``wmrl train`` calls it).

    Args:
        config: the resolved config; ``config.run_dir`` None means ``runs/<name or method>-<timestamp>``.
        resume: continue the run in ``config.run_dir`` from its newest complete checkpoint (the one
            ``checkpoints/latest`` names, else the newest that is complete and loads, saying so); the
            config must match the saved one except the fields of :data:`RESUME_MUTABLE`. Logs and
            ``executions.sqlite`` are cut back to that step.
        components: parts to use instead of building them from the config (tests, benchmarks).
        stop_after_step: stop (as if killed) after this step's checkpoint, without the final evaluation and
            ``summary.json`` (the summary returned says ``stopped``); for tests and benchmarks.
        progress: override ``config.progress``.
        accept_edited_config: resume although ``config.yaml`` was edited since the run saved it.

    Returns:
        :class:`RunSummary` (also written to ``summary.json`` when the run completes).

    Raises:
        RunDirError: the run directory holds another run (without ``resume``); nothing to resume; no
            complete checkpoint although the run has done work; an edited ``config.yaml``; another
            live trainer holds the run directory (its lock file ``.owner.lock``, held for the whole run; a new
            run directory is made with it held); a run_dir that names a file.
        ConfigError, FileNotFoundError: an invalid config (checked here too), a config that differs
            from the saved one in a frozen field, or from the parts. A start (not a resume) that fails
            before its step-0 checkpoint removes the run directory it made.
        TrackerUnavailable (a ConfigError): a tracker of ``config.trackers`` whose package is not installed,
            refused before the run directory is touched (the message names the ``pip install``).
        TrackerOpenError (a ConfigError): an MLflow ``tracking_uri`` out of reach (refused before the run
            directory is touched), or a tracker's library refusing its options when the trackers open (after the
            step-0 checkpoint: the run folder stays resumable with ``--resume`` once the option is fixed).
        ExploitationStop (a RunDirError): the exploitation alarm stopped the run at a checkpoint
            (``wmrl.alarm.response: stop``).
    """
    track = TextTrack(components=components, progress=progress)
    request = RunRequest(config, resume=resume, accept_edited_config=accept_edited_config,
                         stop_after_step=stop_after_step)
    with hf_progress_bars(config.progress if progress is None else progress):
        return RunSummary.from_dict(run_track(track, request))


def _loop(trainer: Trainer, show: bool, stop_after_step: int | None) -> None:
    cfg = trainer.cfg
    total = cfg.optim.steps

    console = make_console(stderr=True)
    live = show and console.is_terminal
    prog = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                    TextColumn("{task.fields[info]}"), console=console, disable=not live)
    with prog:
        task = prog.add_task(f"{cfg.method} train", total=total, completed=trainer.step, info="")

        def on_step(rec: dict[str, Any]) -> None:
            held = trainer._last_eval.get("heldout", {}).get("mean_percentile")
            info = (f"reward_true {_fmt(rec.get('reward_true_mean'))} "
                    f"reward_wm_calibrated {_fmt(rec.get('reward_wm_calibrated_mean'))} "
                    f"{_weight_text(rec)} held-out {_fmt(held)}")
            prog.update(task, completed=trainer.step, info=info)
            if show and not live:
                console.print(_step_line(rec), highlight=False)

        def on_stop(message: str) -> None:
            raise ExploitationStop(message)

        run_steps(trainer, Schedule(total_steps=total, eval_every=cfg.eval.every_k, eval_at_start=cfg.eval.at_start,
                                    checkpoint_every=cfg.checkpoint_every, stop_after_step=stop_after_step),
                  on_step=on_step, stop_requested=lambda: trainer.exploit.stop_message, on_stop=on_stop)


def _count_lost_anchors(trainer: Trainer, when: str) -> None:
    """Asynchronous anchors submitted and never consumed, counted in the ledger (``anchors_lost``) and train.log:
    at the ``end`` those still in flight (the executor's close cancels them); at a ``resume`` those in flight at
    the checkpoint's step (its metrics line), which ran in the killed process and are not re-submitted."""
    if not trainer.anchors.k:
        return
    if when == "end":
        fl = trainer.anchors.in_flight_groups()
        groups, execs = len(fl), sum(n for _, _, n in fl)
    else:
        recs = read_jsonl(trainer.rd.metrics)
        last: dict[str, Any] = next((r for r in reversed(recs) if r.get("step") == trainer.step), {})
        groups, execs = int(last.get("anchor_groups_in_flight") or 0), int(last.get("anchors_in_flight") or 0)
        if execs and not groups:  # a metrics line written before anchor_groups_in_flight existed
            groups = -1
    if not execs:
        return
    what = f"{groups} anchor groups ({execs} executions)" if groups >= 0 else f"{execs} anchor executions"
    msg = (f"{what} still in flight at the end of step {trainer.step} were not consumed" if when == "end" else
           f"{what} in flight at step {trainer.step} were lost with the stopped process (not re-submitted)")
    log.warning("%s: %s", trainer.rd.root, msg)
    trainer.rd.log_line(f"{now_iso()} asynchronous anchors: {msg}; ledger.json anchors_lost")
    trainer.ledger.add_lost_anchors(when, trainer.step, max(groups, 0), execs)


def resume_training(run_dir: str | Path, overrides: list[str] | None = None,
                    accept_edited_config: bool = False, **kw: Any) -> RunSummary:
    """Continue the run in ``run_dir`` from its latest checkpoint (``wmrl train --resume RUN_DIR``).

    The config is read back from ``run_dir/config.yaml``; ``overrides`` may change only fields that do
    not alter the trajectory so far (``optim.steps``, ``eval.*``, ``executor.*``, ``progress``, ``threads``,
    ``checkpoint_every``, ``keep_checkpoints``, the ``wmrl.alarm.*`` keys, ``trackers`` and ``tracking.*``: a
    tracker added on resume receives the steps from the checkpoint's on).

    ``config.yaml`` must be the file the run saved (its SHA-256 is kept in ``config.yaml.sha256``);
    an edited one is refused unless ``accept_edited_config`` (CLI ``--accept-edited-config``).

    Raises:
        RunDirError: no config.yaml in ``run_dir``, an edited one, or no checkpoint to continue from.
        ConfigError: an override of a frozen field.
    """
    rd = RunDir(run_dir)
    check_resumable(rd, accept_edited_config)  # a clear refusal before the config is read
    # an unknown or removed key is refused here; a frozen key that changes is refused by run_training
    cfg = load_config(rd.config, overrides)
    cfg.run_dir = str(rd.root)
    return run_training(cfg, resume=True, accept_edited_config=accept_edited_config, **kw)

"""Starting and resuming a training run: the run directory, the parts, the step loop with its progress bar,
checkpoints, the final evaluation and the summary (docs/run-directory.md)."""

from __future__ import annotations

import datetime as _dt
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from wmrl.core.recipe import get_recipe, ran_as_note
from wmrl.training.components import Components, RunDirError, RunSummary, anchor_fraction, environment_factory, \
    now_iso
from wmrl.training.config import ConfigError, TrainConfig, config_to_dict, load_config, save_config, validate
from wmrl.training.console import _fmt, _step_line, _weight_text
from wmrl.runs.ledger import Ledger
from wmrl.runs.owner import RunDirOwner
from wmrl.runs.provenance import record_training_start
from wmrl.runs.loop import Schedule, evaluated_at, load_newest, run_steps
from wmrl.runs.rundir import RunDir, read_jsonl, seed_everything, write_json_atomic
from wmrl.runs.tracking import open_trackers, probe_trackers
from wmrl.training.trainer import Trainer
from wmrl.training.config import load_yaml
from wmrl.training.alarm import ExploitationStop
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
    TimeRemainingColumn
from wmrl.console import make_console
from wmrl.execution.log import ExecutionLog
from wmrl.training.parts import build_components
from wmrl.models.backbone import hf_progress_bars

log = logging.getLogger(__name__)
#: Bootstrap resamples of the fidelity card written when a run ends (``fidelity.json``; the steps log point values).
FIDELITY_BOOT = 1000


def _default_run_dir(cfg: TrainConfig) -> str:
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%d-%H%M%S")
    return str(Path("runs") / f"{cfg.name or cfg.method}-{stamp}")


def run_training(config: TrainConfig, *, resume: bool = False,
                 components: Components | None = None,
                 stop_after_step: int | None = None,
                 progress: bool | None = None,
                 accept_edited_config: bool = False) -> RunSummary:
    """Train (or resume) one run and return its summary (the main API; ``wmrl train`` calls it).

    Args:
        config: the resolved config; ``config.run_dir`` None means ``runs/<method>-<timestamp>``.
        resume: continue the run in ``config.run_dir`` from its newest complete checkpoint (the one
            ``checkpoints/latest`` names, else the newest that is complete and loads, saying so); the
            config must match the saved one except the fields of :data:`RESUME_MUTABLE`. Logs and
            ``executions.sqlite`` are cut back to that step.
        components: parts to use instead of building them from the config (tests, benchmarks).
        stop_after_step: stop (as if killed) after this step's checkpoint; for tests and benchmarks.
        progress: override ``config.progress``.
        accept_edited_config: resume although ``config.yaml`` was edited since the run saved it.

    Returns:
        :class:`RunSummary` (also written to ``summary.json``).

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
    """
    cfg = validate(config)  # also a config built in Python: finite numbers within their ranges
    environment_factory(cfg.environment)  # an environment the text trainer cannot build is refused before the folder
    # a tracker's missing package, or an MLflow server out of reach, is refused before the run directory is touched
    probe_trackers(cfg.trackers, cfg.tracking)
    if cfg.run_dir is None:
        cfg.run_dir = _default_run_dir(cfg)
    rd = RunDir(cfg.run_dir)
    owner = RunDirOwner(rd.root)  # held for the whole run: one trainer per run directory
    if not resume:
        owner.claim()  # a new folder appears with its lock held: no other trainer ever sees it unlocked
    elif rd.root.is_dir():
        owner.acquire()
    try:
        with hf_progress_bars(cfg.progress if progress is None else progress):
            return _run_owned(cfg, rd, owner, resume=resume, components=components, stop_after_step=stop_after_step,
                              progress=progress, accept_edited_config=accept_edited_config)
    finally:
        owner.release()


def _run_owned(cfg: TrainConfig, rd: RunDir, owner: RunDirOwner, *, resume: bool, components: Components | None,
               stop_after_step: int | None, progress: bool | None, accept_edited_config: bool) -> RunSummary:
    """:func:`run_training` with ``owner`` held (a resume of a missing folder holds nothing and is refused)."""
    import torch  # noqa: PLC0415 - heavy

    candidates, passed_over = rd.resume_candidates() if rd.root.exists() else ([], [])
    latest = candidates[0] if candidates else None
    if resume:
        if not rd.config.is_file():
            raise RunDirError(f"{rd.root} has no config.yaml: nothing to resume (start it with --config)")
        edited = rd.config_edited()
        if edited and not accept_edited_config:
            raise RunDirError(f"{edited}: resuming with it would change the run's past; restore it, or resume "
                              f"with --accept-edited-config (accept_edited_config=True) to use the edited file")
        if edited:
            log.warning("%s; resuming with the edited file as asked", edited)
            rd.log_line(f"{now_iso()} {edited}; resumed with it (--accept-edited-config)")
        try:
            saved = load_config(rd.config)
        except ConfigError as e:
            raise RunDirError(f"{rd.config} cannot be read back: {e}") from None
        # the run's steps so far were made with the value of before the key
        for key, value in keys_added_since(rd.config).items():
            section, name = key.split(".")
            setattr(getattr(saved, section), name, value)
            sec = getattr(cfg, section)
            if name not in sec.model_fields_set and getattr(sec, name) != value:
                setattr(sec, name, value)
                if cfg.wmrl.anchor_staleness:  # only the asynchronous stream reads steps_without_anchors
                    msg = f"{rd.config} predates {key}: resuming with {key}={value}, the behaviour of its steps so far"
                    log.warning("%s", msg)
                    rd.log_line(f"{now_iso()} {msg}")
        changed = frozen_changes(saved, cfg)
        if changed:
            allowed = ", ".join(m + "*" if m.endswith(".") else m for m in RESUME_MUTABLE)
            raise ConfigError(f"resume: the config differs from the run's saved config.yaml in {', '.join(changed)}, "
                              f"which would change the run's past; only {allowed} may change. To train with "
                              f"another {changed[0]}, start a new run (another run_dir)")
        if latest is None and _has_progress(rd):
            raise RunDirError(f"{rd.root} has no complete checkpoint to resume from ({'; '.join(passed_over)}); "
                              "continuing would repeat its steps: start a new run in another run_dir")
        if rd.summary.is_file() and latest is not None:
            done = json.loads(rd.summary.read_text())
            if done.get("status") == "completed" and done.get("steps", 0) >= cfg.optim.steps:
                log.info("run %s already completed %s steps", rd.root, done.get("steps"))
                return _summary_from_file(rd, done)
    else:
        if rd.root.exists() and (candidates or passed_over or rd.metrics.is_file() or rd.config.is_file()):
            raise RunDirError(f"{rd.root} already holds a run; continue it with `wmrl train --resume {rd.root}` "
                              f"or choose another run_dir")
    owner.note_entries()  # what a failed start must not remove: nothing of a folder it did not make
    fresh_start = latest is None
    try:
        rd.create()
        owner.acquire()
        if not resume:
            save_config(cfg, rd.config)
            rd.save_config_hash()
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        seed_everything(cfg.seed)
        ledger = Ledger(method=cfg.method, anchor_fraction_configured=anchor_fraction(cfg))
        rd.log_line(f"{now_iso()} {'resume' if resume else 'start'} method={cfg.method} run_dir={rd.root}")
        if resume and passed_over:
            msg = (f"resuming from {latest.name}, the newest complete checkpoint, because "
                   f"{'; '.join(passed_over)}") if latest is not None else (
                   "no checkpoint and nothing done yet: starting the run from step 0")
            log.warning("%s: %s", rd.root, msg)
            rd.log_line(f"{now_iso()} {msg}")

        own_components = components is None
        if components is None:
            with ledger.phase("setup"):
                components = build_components(cfg, rd, ledger, resume=resume and latest is not None)
        trainer = Trainer(cfg, rd, components, ledger)
        if resume:
            # Only now that the parts are built does a resume touch the run: a resume that fails before
            # (a bad edited config, a missing model) leaves a finished run as it was.
            for done_file in (rd.summary, rd.fidelity):  # both are rewritten when the resumed run ends
                if done_file.is_file():
                    done_file.unlink()
            save_config(cfg, rd.config)
            rd.save_config_hash()
        record_training_start(rd.root, resume)  # the code that trains it from here (after the parts, as above)
    except BaseException:
        if fresh_start and not resume:
            owner.undo_start()
        raise
    status = "failed"  # the trackers' closing status, unless the run gets further
    try:
        if latest is not None:
            load_newest(trainer, candidates, passed_over)
            _count_lost_anchors(trainer, "resume")
        else:
            try:
                rd.truncate_logs(0, {w: 0 for w in RunDir.JSONL})
                # step-0 checkpoint: warm-up and world-model fit (and their ledger) survive a kill
                trainer.save_checkpoint()
            except BaseException:
                if not resume:  # a start that never reached its first checkpoint leaves nothing behind
                    owner.undo_start()
                raise
        write_json_atomic(rd.ledger, ledger.to_json())
        trainer.trackers = open_trackers(cfg.trackers, cfg.tracking, rd.root, config=config_to_dict(cfg),
                                         start_step=trainer.step,
                                         on_error=lambda msg: rd.log_line(f"{now_iso()} WARNING {msg}"))
        show = cfg.progress if progress is None else progress
        _loop(trainer, show, stop_after_step)
        if stop_after_step is not None and trainer.step < cfg.optim.steps:
            status = "stopped"
            return _partial_summary(trainer)
        if cfg.eval.at_end and (trainer.c.heldout_tasks or cfg.eval.train_tasks):
            if not evaluated_at(rd, trainer.step):
                trainer.evaluate(in_step=False)
        summary = _finish(trainer)
        status = "finished"
    except (ExploitationStop, KeyboardInterrupt):
        status = "stopped"  # at a checkpoint (the alarm) or interrupted: resumable
        raise
    finally:
        trainer.trackers.close(status)
        if own_components and components.close is not None:
            components.close()
    return summary


def _has_progress(rd: RunDir) -> bool:
    """Whether the run directory holds any work: a checkpoint folder, a metrics record, an execution."""
    if rd.checkpoints.is_dir() and any(rd.checkpoints.glob("step_*")):
        return True
    if read_jsonl(rd.metrics):
        return True
    if rd.executions.is_file():
        with ExecutionLog(rd.executions) as lg:
            return lg.count() > 0
    return False


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            out.update(_flat(v, key))
        else:
            out[key] = v
    return out


def frozen_changes(saved: TrainConfig, new: TrainConfig) -> list[str]:
    """Keys whose value differs between the saved config of a run and ``new``, except those a resume
    may change (:data:`RESUME_MUTABLE`) and ``run_dir``."""
    a, b = _flat(config_to_dict(saved)), _flat(config_to_dict(new))
    return [k for k in sorted(set(a) | set(b))
            if k != "run_dir" and a.get(k) != b.get(k)
            and not any(k == m or (m.endswith(".") and k.startswith(m)) for m in RESUME_MUTABLE)]


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


def _partial_summary(trainer: Trainer) -> RunSummary:
    return RunSummary(run_dir=trainer.rd.root, method=trainer.method, status="stopped", steps=trainer.step,
                      wall_s=trainer.ledger.wall_s(), ledger=trainer.ledger.to_json(), final_eval={},
                      last_metrics=(read_jsonl(trainer.rd.metrics) or [{}])[-1], anchor_fraction=None,
                      reward_true_mean_last=None, started_at=trainer.started_at)


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


def _finish(trainer: Trainer) -> RunSummary:
    rd, L = trainer.rd, trainer.ledger
    _count_lost_anchors(trainer, "end")
    metrics = read_jsonl(rd.metrics)
    note = ran_as_note(get_recipe(trainer.cfg.method), [m.get("calibrator_mode") for m in metrics], None)
    if note:  # the run is not the method its name says: one line now, and the bench's ran_as column
        log.warning("%s: the %s run ended with %s", rd.root, trainer.cfg.method, note)
        rd.log_line(f"{now_iso()} WARNING {trainer.cfg.method} ran with {note}")
    last_q = metrics[-max(1, len(metrics) // 4):] if metrics else []
    rt = [m["reward_true_mean"] for m in last_q if m.get("reward_true_mean") is not None]
    led = L.to_json()
    evals = read_jsonl(rd.eval)
    final_eval: dict[str, Any] = {}
    initial_eval: dict[str, Any] = {}
    for r in evals:
        if r.get("checkpoint") is None:
            final_eval[r["split"]] = r
            if r.get("step") == 0:
                initial_eval.setdefault(r["split"], r)
    summary = RunSummary(
        run_dir=rd.root, method=trainer.method, status="completed", steps=trainer.step, wall_s=L.wall_s(),
        ledger=led, final_eval=final_eval, last_metrics=metrics[-1] if metrics else {},
        anchor_fraction=led["groups"]["anchor_fraction"], reward_true_mean_last=float(np.mean(rt)) if rt else None,
        started_at=trainer.started_at, finished_at=now_iso(), initial_eval=initial_eval)
    card = trainer.fidelity.card(n_boot=FIDELITY_BOOT, seed=trainer.cfg.seed)  # None: no anchor scored by a world model
    if card is not None:
        write_json_atomic(rd.fidelity, card.to_dict())
    write_json_atomic(rd.ledger, led)
    write_json_atomic(rd.summary, summary.to_dict())
    trainer.trackers.log_summary(trainer.step, summary.to_dict())
    rd.log_line(f"{now_iso()} finished: {trainer.step} steps, wall {L.wall_s():.1f}s")
    return summary


def _summary_from_file(rd: RunDir, d: dict[str, Any]) -> RunSummary:
    return RunSummary(run_dir=rd.root, method=d["method"], status=d["status"], steps=d["steps"], wall_s=d["wall_s"],
                      ledger=d["ledger"], final_eval=d.get("final_eval", {}), last_metrics=d.get("last_metrics", {}),
                      anchor_fraction=d.get("anchor_fraction"), reward_true_mean_last=d.get("reward_true_mean_last"),
                      started_at=d.get("started_at", ""), finished_at=d.get("finished_at", ""),
                      initial_eval=d.get("initial_eval", {}))


RESUME_MUTABLE = ("optim.steps", "progress", "threads", "eval.", "executor.", "checkpoint_every",
                  "keep_checkpoints", "trackers", "tracking.", "wmrl.exploit_alarm", "wmrl.exploit_alarm_threshold",
                  "wmrl.exploit_alarm_drift", "wmrl.exploit_alarm_max_anchor_fraction")

#: Config keys added after runs were saved without them, with the value that reproduces what such a run did: its
#: config.yaml lacks the key, and a resume continues with this value rather than the key's default (unless the
#: resume sets the key, which a frozen key refuses). ``wmrl.steps_without_anchors``: before it, a step of the
#: asynchronous stream without anchors updated on its world-model groups. ``wmrl.exploit_alarm``: before it, no
#: run tested its anchors for exploitation.
KEYS_ADDED_SINCE = {"wmrl.steps_without_anchors": "update", "wmrl.exploit_alarm": "none"}


def keys_added_since(path: str | Path) -> dict[str, str]:
    """The entries of :data:`KEYS_ADDED_SINCE` that the saved config at ``path`` does not hold (dotted key: value).

    Call it on a config that :func:`~wmrl.training.config.load_config` reads (its errors are the clear ones).
    """

    data = load_yaml(Path(path).read_text())
    out = {}
    for key, value in KEYS_ADDED_SINCE.items():
        node: Any = data
        for part in key.split("."):
            node = node.get(part, KeyError) if isinstance(node, dict) else KeyError
        if node is KeyError:
            out[key] = value
    return out


def resume_training(run_dir: str | Path, overrides: list[str] | None = None,
                    accept_edited_config: bool = False, **kw: Any) -> RunSummary:
    """Continue the run in ``run_dir`` from its latest checkpoint (``wmrl train --resume RUN_DIR``).

    The config is read back from ``run_dir/config.yaml``; ``overrides`` may change only fields that do
    not alter the trajectory so far (``optim.steps``, ``eval.*``, ``executor.*``, ``progress``, ``threads``,
    ``checkpoint_every``, ``keep_checkpoints``, the ``wmrl.exploit_alarm*`` keys, ``trackers`` and ``tracking.*``: a
    tracker added on resume receives the steps from the checkpoint's on).

    ``config.yaml`` must be the file the run saved (its SHA-256 is kept in ``config.yaml.sha256``);
    an edited one is refused unless ``accept_edited_config`` (CLI ``--accept-edited-config``).

    Raises:
        RunDirError: no config.yaml in ``run_dir``, an edited one, or no checkpoint to continue from.
        ConfigError: an override of a frozen field.
    """
    rd = RunDir(run_dir)
    if not rd.config.is_file():
        raise RunDirError(f"{rd.root} does not exist: nothing to resume (pass the run directory of a run)"
                          if not rd.root.exists() else
                          f"{rd.root} has no config.yaml: not a run directory (nothing to resume)")
    edited = rd.config_edited()
    if edited and not accept_edited_config:
        raise RunDirError(f"{edited}: resuming with it would change the run's past; restore it, or resume "
                          f"with --accept-edited-config to use the edited file")
    # an unknown or removed key is refused here; a frozen key that changes is refused by run_training
    cfg = load_config(rd.config, overrides)
    cfg.run_dir = str(rd.root)
    return run_training(cfg, resume=True, accept_edited_config=accept_edited_config, **kw)

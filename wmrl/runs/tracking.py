"""Experiment trackers: one metrics stream from every trainer, fanned out to thin adapters.

A run writes its metrics to ``metrics.jsonl`` / ``eval.jsonl`` (the record of truth, docs/run-directory.md); the
same records go, with the same names, to the trackers the config lists (``trackers: [tensorboard, wandb]``):

============  ===========================================  ====================================================
tracker       writes                                       on resume from the checkpoint of step k
============  ===========================================  ====================================================
tensorboard   ``RUN_DIR/tb/`` event files (the default)    ``purge_step=k+1``: events after step k are dropped
wandb         ``RUN_DIR/wandb/offline-run-*`` (offline)    the same run id, a new offline segment from step k+1
trackio       ``RUN_DIR/trackio/<project>.db`` (SQLite)    the same run; its rows after step k are deleted
mlflow        ``RUN_DIR/mlruns`` (file store) or a URI     the same run id; metric values after step k are
                                                           deleted (file store)
============  ===========================================  ====================================================

The trainers call one :class:`TrackerSet` (:func:`open_trackers`): ``log_config`` (the resolved config, when each
process of the run opens them), ``log_metrics(step, record)`` (each metrics.jsonl record: its finite numbers;
booleans and text left out), ``log_eval(step, split, record)`` (each eval.jsonl record, names
``eval_<split>.<key>``), ``log_summary`` (summary.json's numbers at the end) and ``close``. An adapter implements
:class:`Tracker`. Names keep the dots of metrics.jsonl (``wall_s.generate``); TensorBoard writes them with slashes
(``wall_s/generate``), as it did.

Nothing reaches the network: W&B runs with ``mode="offline"``, trackio with its local SQLite store only, MLflow
with a store inside the run directory unless ``tracking.mlflow.tracking_uri`` names another; W&B's error
reporting, MLflow's usage telemetry and gradio's analytics are turned off (``WANDB_ERROR_REPORTING``,
``MLFLOW_DISABLE_TELEMETRY``, ``GRADIO_ANALYTICS_ENABLED``, unless already set). A tracker that fails while the
run trains is dropped with a warning in ``train.log``; the run and its jsonl files go on. A tracker whose package
is missing is refused before the run starts (:func:`check_trackers`, :class:`TrackerUnavailable` naming the
``pip install``), so is a remote MLflow server out of reach (:func:`probe_trackers`, with MLflow's HTTP retries
bounded: :data:`MLFLOW_HTTP_DEFAULTS`); a tracker library's error while opening is one line
(:class:`TrackerOpenError`), and names a tracker would refuse are refused when the config loads.

This file is about 670 lines: the config sections, the checks, the protocol, the four adapters and the fan-out
belong together (each adapter is short; what it does on resume is the table above). docs/tracking.md is the user's page.
"""
from __future__ import annotations

import contextlib
import difflib
import io
import json
import logging
import math
import os
import sqlite3
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from importlib.util import find_spec
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol, get_args

import yaml
from pydantic import AfterValidator, BeforeValidator, Field

from wmrl.runs.config import ConfigError, ConfigSection, OptStr, id_list
from wmrl.runs.rundir import json_safe, write_json_atomic

log = logging.getLogger(__name__)

TrackerName = Literal["tensorboard", "wandb", "trackio", "mlflow"]
#: Every tracker name, in the order of the table above.
TRACKER_NAMES: tuple[str, ...] = get_args(TrackerName)

#: name -> (module to import, the pip requirement that provides it, the wmrl extra that installs it)
_PACKAGES = {
    "tensorboard": ("tensorboard", "tensorboard>=2.18", None),
    "wandb": ("wandb", "wandb==0.31.0", "trackers"),
    "trackio": ("trackio", "trackio==0.43.0", "trackers"),
    "mlflow": ("mlflow", "mlflow-skinny==3.18.0", "trackers"),
}

#: What the resumable trackers keep between processes of one run (run ids), in the run directory.
STATE_FILE = "trackers.json"


class TrackerUnavailable(ConfigError):
    """A tracker the config lists cannot be used here (its package is missing, or a setting sends it off the
    machine); the message says what to install or change."""


def _known_trackers(names: list[str]) -> list[str]:
    """The list itself, refusing a name given twice."""
    seen = [n for i, n in enumerate(names) if n in names[:i]]
    if seen:
        raise ValueError(f"trackers: {seen[0]!r} is listed twice; list each tracker once")
    return names


def _tracker_name(v: Any) -> Any:
    """A clear error for an unknown name (with a did-you-mean), before pydantic's generic one."""
    if isinstance(v, str) and v not in TRACKER_NAMES:
        close = difflib.get_close_matches(v, TRACKER_NAMES, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"trackers: {v!r} is not a tracker{hint}; choose from {', '.join(TRACKER_NAMES)}")
    return v


#: The config's ``trackers`` list: YAML ``[tensorboard, wandb]`` or ``--set trackers=tensorboard,wandb``.
Trackers = Annotated[list[Annotated[TrackerName, BeforeValidator(_tracker_name)]], BeforeValidator(id_list),
                     AfterValidator(_known_trackers)]

#: Characters W&B refuses in a project name (``wandb.init`` raises a UsageError for them).
_WANDB_BAD_PROJECT_CHARS = "/\\,#?%:"


def _name(field: str) -> Callable[[str], str]:
    """A validator refusing an empty or blank ``field`` (a name every tracker needs)."""

    def check(v: str) -> str:
        if not v.strip():
            raise ValueError(f"{field} is empty; give a name (e.g. wmrl), or leave the key out for the default")
        return v

    return check


def _wandb_project(v: str) -> str:
    """W&B's project rule: non-empty, at most 128 characters, none of ``/ \\ , # ? % :``."""
    _name("tracking.wandb.project")(v)
    bad = sorted({c for c in v if c in _WANDB_BAD_PROJECT_CHARS})
    if bad:
        raise ValueError(f"tracking.wandb.project {v!r} contains {' '.join(bad)}, which W&B does not allow in a "
                         f"project name (none of {' '.join(_WANDB_BAD_PROJECT_CHARS)}); use e.g. "
                         f"{''.join('-' if c in _WANDB_BAD_PROJECT_CHARS else c for c in v)!r}")
    if len(v) > 128:
        raise ValueError(f"tracking.wandb.project is {len(v)} characters long; W&B allows at most 128")
    return v


def default_trackers() -> list[TrackerName]:
    """The default of ``trackers``: TensorBoard only (what every run wrote before the other trackers)."""
    return ["tensorboard"]


TRACKERS_HELP = (
    "Experiment trackers that receive the metrics.jsonl / eval.jsonl records, the resolved config and the final "
    "summary, all writing inside the run directory: 'tensorboard' (tb/), 'wandb' (W&B offline, wandb/; upload "
    "later with `wandb sync`), 'trackio' (local SQLite, trackio/; view with `trackio show`), 'mlflow' (file store "
    "mlruns/, or tracking.mlflow.tracking_uri). [] = none. wandb, trackio and mlflow need "
    "`pip install 'wmrl[trackers]'`. Options per tracker: the tracking section (docs/tracking.md).")


class WandbOptions(ConfigSection):
    """Weights & Biases, always offline (``mode="offline"``); ``wandb sync RUN_DIR/wandb/offline-run-*`` uploads."""

    project: Annotated[str, AfterValidator(_wandb_project)] = Field("wmrl", description=(
        "W&B project the run is synced to (non-empty, at most 128 characters, none of / \\ , # ? % :)."))
    entity: OptStr = Field(None, description="W&B entity (user or team); null = the default of `wandb sync`.")
    run_name: OptStr = Field(None, description="Display name; null = the run directory's folder name.")
    group: OptStr = Field(None, description="W&B group (e.g. one per bench); null = none.")
    tags: Annotated[list[str], BeforeValidator(id_list)] = Field(default_factory=list, description=(
        "W&B tags of the run (YAML list, or comma-separated with --set)."))


class TrackioOptions(ConfigSection):
    """trackio's local store: ``RUN_DIR/trackio/<project>.db`` (never a Space or a server)."""

    project: Annotated[str, AfterValidator(_name("tracking.trackio.project"))] = Field(
        "wmrl", description="trackio project (the SQLite file's name; non-empty).")
    run_name: OptStr = Field(None, description="Run name; null = the run directory's folder name.")
    group: OptStr = Field(None, description="trackio group; null = none.")


class MlflowOptions(ConfigSection):
    """MLflow tracking (mlflow-skinny is enough)."""

    experiment: Annotated[str, AfterValidator(_name("tracking.mlflow.experiment"))] = Field(
        "wmrl", description="MLflow experiment name (created when missing; non-empty).")
    run_name: OptStr = Field(None, description="Run name; null = the run directory's folder name.")
    tracking_uri: OptStr = Field(None, description=(
        "Tracking URI; null = a file store in RUN_DIR/mlruns (docs/tracking.md says how to view it). A sqlite:/// "
        "URI needs SQLAlchemy and Alembic (`pip install mlflow`); an http(s) URI reaches that server."))


class TrackingConfig(ConfigSection):
    """Options of the trackers listed in ``trackers`` (a tracker that is not listed ignores its options)."""

    wandb: WandbOptions = Field(default_factory=WandbOptions)
    trackio: TrackioOptions = Field(default_factory=TrackioOptions)
    mlflow: MlflowOptions = Field(default_factory=MlflowOptions)


class TrackerOpenError(ConfigError):
    """A tracker's library refused to open with the run's options (a bad name, an unreachable tracking server);
    the message names the tracker, the option and the library's reason, in one line."""


#: MLflow's HTTP client retries for minutes by default (7 retries with back-off, a 120 s timeout each); a run
#: sets these bounds, unless the environment already sets them, so an unreachable server fails in seconds.
MLFLOW_HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                        "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}

#: The options each tracker reads while opening (named in a :class:`TrackerOpenError`).
_OPEN_OPTIONS = {"wandb": "tracking.wandb (project, entity, group, tags, run_name)",
                 "trackio": "tracking.trackio (project, group, run_name)",
                 "mlflow": "tracking.mlflow (experiment, tracking_uri, run_name)",
                 "tensorboard": "the run directory's tb/ folder"}


def _open_error(name: str, e: BaseException) -> TrackerOpenError:
    """One line: the tracker, the options it read, the library's exception."""
    why = " ".join(str(e).split())[:400] or type(e).__name__
    return TrackerOpenError(f"trackers: {name!r} could not be opened ({type(e).__name__}: {why}); check "
                            f"{_OPEN_OPTIONS[name]}, or remove {name!r} from trackers")


def probe_trackers(names: Sequence[str], options: TrackingConfig) -> None:
    """Check, before a run builds anything expensive, what can fail when its trackers open without writing
    anything: an MLflow ``tracking_uri`` other than a file store is reached (the experiment is looked up), with
    MLflow's HTTP retries bounded (:data:`MLFLOW_HTTP_DEFAULTS`).

    Raises:
        TrackerUnavailable: a package is missing (:func:`check_trackers`).
        TrackerOpenError: the MLflow server cannot be reached or refuses the experiment name.
    """
    check_trackers(names)
    uri = options.mlflow.tracking_uri
    if "mlflow" in names and uri and not uri.startswith("file:"):
        _mlflow_env(uri)
        try:
            from mlflow.tracking import MlflowClient  # noqa: PLC0415 - heavy/optional dependency

            MlflowClient(tracking_uri=uri).get_experiment_by_name(options.mlflow.experiment)
        except Exception as e:  # noqa: BLE001 - any library error becomes one clear line
            raise _open_error("mlflow", e) from None


def _mlflow_env(uri: str) -> None:
    """MLflow's environment defaults for ``uri`` (each only when unset): no telemetry, bounded HTTP retries, and
    the file store's opt-in."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    for k, v in MLFLOW_HTTP_DEFAULTS.items():
        os.environ.setdefault(k, v)
    if uri.startswith("file:"):
        # the file store works, but MLflow 3 asks for an explicit opt-in ("maintenance mode")
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")


# --------------------------------------------------------------------------------------------------- checks
def check_trackers(names: Sequence[str]) -> None:
    """Refuse, before a run starts, a tracker whose package is not installed (checked without importing it).

    Raises:
        TrackerUnavailable: the first missing one, with the ``pip install`` that fixes it.
    """
    for name in names:
        module, requirement, extra = _PACKAGES[name]
        if find_spec(module) is None:
            fix = f"pip install 'wmrl[{extra}]' (or pip install '{requirement}')" if extra else \
                f"pip install '{requirement}' (a dependency of wmrl: reinstall wmrl)"
            raise TrackerUnavailable(f"trackers: {name!r} needs the {module} package, which is not installed: "
                                     f"{fix}, or remove {name!r} from trackers")


# --------------------------------------------------------------------------------------------------- records
def scalars(record: dict[str, Any], prefix: str = "", skip: tuple[str, ...] = ("step", "time")) -> dict[str, float]:
    """The finite numbers of a (nested) record as ``{prefix + dotted name: float}``: nested dicts flattened with
    dots; booleans, text, lists, nulls and NaN/inf left out, and the top-level keys named in ``skip``."""

    def flat(d: dict[str, Any], pre: str, top: bool) -> Iterator[tuple[str, float]]:
        for k, v in d.items():
            if top and k in skip:
                continue
            if isinstance(v, dict):
                yield from flat(v, f"{pre}{k}.", False)
            elif isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)):
                yield f"{pre}{k}", float(v)

    return dict(flat(record, prefix, True))


def summary_scalars(summary: dict[str, Any]) -> dict[str, float]:
    """The numbers of a summary.json document for :meth:`Tracker.log_summary` (the full ledger and the last
    metrics record left out: ``ledger_totals`` and the metrics stream hold them)."""
    return scalars({k: v for k, v in summary.items() if k not in ("ledger", "last_metrics")})


class Tracker(Protocol):
    """One experiment tracker behind :class:`TrackerSet`. Metric names are metrics.jsonl's (dotted); values are
    finite floats; ``step`` is the training step (0 = before training)."""

    name: str

    def log_config(self, config: dict[str, Any]) -> None:
        """Record the run's resolved config (nested dicts, as config.yaml)."""
        ...

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        """Record scalars at ``step``."""
        ...

    def log_summary(self, step: int, summary: dict[str, float]) -> None:
        """Record the run's summary (final evaluation, totals) once, at its last step."""
        ...

    def close(self, status: str) -> None:
        """Flush and close; ``status`` is ``finished``, ``stopped`` (resumable) or ``failed``."""
        ...


# --------------------------------------------------------------------------------------------------- adapters
class TensorBoardTracker:
    """``torch.utils.tensorboard.SummaryWriter`` on ``RUN_DIR/tb``; names with slashes for dots. On resume at step
    k the writer's ``purge_step=k+1`` makes TensorBoard drop the events of later steps written before."""

    name = "tensorboard"

    def __init__(self, root: Path, start_step: int):
        from torch.utils.tensorboard import SummaryWriter  # noqa: PLC0415 - heavy/optional dependency

        self.writer = SummaryWriter(log_dir=str(root / "tb"), purge_step=start_step + 1 if start_step > 0 else None)

    def log_config(self, config: dict[str, Any]) -> None:
        text = yaml.safe_dump(json_safe(config), sort_keys=False)
        self.writer.add_text("config", "".join("    " + line for line in text.splitlines(keepends=True)))

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        for k, v in metrics.items():
            self.writer.add_scalar(k.replace(".", "/"), v, step)

    def log_summary(self, step: int, summary: dict[str, float]) -> None:
        for k, v in summary.items():
            self.writer.add_scalar("summary/" + k.replace(".", "/"), v, step)

    def close(self, status: str) -> None:
        self.writer.close()


class WandbTracker:
    """Weights & Biases in offline mode under ``RUN_DIR/wandb``: config at ``wandb.init``, history rows with
    ``step=``, the summary in ``run.summary``. The run id is kept in ``trackers.json``; a resumed run logs into a
    new offline segment of the same id (``resume="allow"``) from step k+1 on. ``wandb sync`` uploads the segments
    in order; W&B keeps the first row it receives for a step, so the steps after k that the stopped process had
    logged keep those values (a run is deterministic given its seed: only timings differ)."""

    name = "wandb"

    def __init__(self, root: Path, opts: WandbOptions, run_name: str, config: dict[str, Any], state: dict[str, Any]):
        # wandb's error reporting (OpenTelemetry to W&B's servers) looks up their address even offline
        os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
        import wandb  # noqa: PLC0415 - heavy/optional dependency

        saved = state.get("wandb") or {}
        run_id = saved.get("id") or uuid.uuid4().hex[:16]
        settings = wandb.Settings(silent=True, console="off", x_disable_stats=True, save_code=False)
        self.run = wandb.init(mode="offline", dir=str(root), project=opts.project, entity=opts.entity,
                              group=opts.group, tags=list(opts.tags) or None, name=run_name, id=run_id,
                              resume="allow" if saved else None, config=json_safe(config), settings=settings)
        state["wandb"] = {"id": run_id, "project": opts.project}

    def log_config(self, config: dict[str, Any]) -> None:
        self.run.config.update(json_safe(config), allow_val_change=True)

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def log_summary(self, step: int, summary: dict[str, float]) -> None:
        self.run.summary.update(summary)

    def close(self, status: str) -> None:
        self.run.finish(exit_code=0 if status != "failed" else 1)


_TRACKIO_ENV = ("TRACKIO_SPACE_ID", "TRACKIO_SERVER_URL")


def _trackio_at(path: Path) -> None:
    """Make trackio store under ``path``. trackio reads ``TRACKIO_DIR`` once, when it is first imported, into
    module constants; a process that already imported it (another run) has them moved to ``path``."""
    prev = os.environ.get("TRACKIO_DIR")
    os.environ["TRACKIO_DIR"] = str(path)
    try:
        import trackio.utils as tu  # noqa: PLC0415 - heavy/optional dependency
    finally:
        if prev is None:
            os.environ.pop("TRACKIO_DIR", None)
        else:
            os.environ["TRACKIO_DIR"] = prev
    old = Path(tu.TRACKIO_DIR)
    if old == path:
        return
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not (mod_name == "trackio" or mod_name.startswith("trackio.")):
            continue
        for attr, val in list(vars(mod).items()):
            if isinstance(val, Path) and (val == old or old in val.parents):
                setattr(mod, attr, path / val.relative_to(old))


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """trackio prints to stdout (where the run's console output goes): into the log at debug level instead."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        yield
    if buf.getvalue().strip():
        log.debug("trackio: %s", buf.getvalue().strip())


class TrackioTracker:
    """trackio's local SQLite store ``RUN_DIR/trackio/<project>.db`` (table ``metrics``: run, step, JSON of the
    metrics; ``configs``: the config). The summary is one row at the last step, names ``summary.<key>`` (trackio has
    no summary of its own). On resume the same run continues (``resume="allow"``) after its rows of steps after k
    are deleted, so no step appears twice."""

    name = "trackio"

    def __init__(self, root: Path, opts: TrackioOptions, run_name: str, config: dict[str, Any], start_step: int,
                 state: dict[str, Any]):
        for var in _TRACKIO_ENV:
            if os.environ.get(var):
                raise TrackerUnavailable(f"trackers: 'trackio' writes only to its local store in the run directory, "
                                         f"but ${var} is set, which would send the run to a Space or server: unset "
                                         f"it, or remove 'trackio' from trackers")
        os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
        os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
        _trackio_at(root / "trackio")
        import trackio  # noqa: PLC0415 - heavy/optional dependency
        from trackio.sqlite_storage import SQLiteStorage  # noqa: PLC0415 - heavy/optional dependency

        saved = state.get("trackio") or {}
        if saved:
            db = SQLiteStorage.get_project_db_path(opts.project)
            if db.is_file():
                with contextlib.closing(sqlite3.connect(db)) as conn, conn:
                    conn.execute("DELETE FROM metrics WHERE run_name = ? AND step > ?", (run_name, start_step))
        with _quiet():
            self.run = trackio.init(project=opts.project, name=run_name, group=opts.group, config=json_safe(config),
                                    resume="allow" if saved else "never", embed=False, auto_log_cpu=False,
                                    auto_log_gpu=False)
        state["trackio"] = {"project": opts.project, "run": run_name}

    def log_config(self, config: dict[str, Any]) -> None:
        pass  # given to trackio.init (its configs table holds one config per run)

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def log_summary(self, step: int, summary: dict[str, float]) -> None:
        self.run.log({f"summary.{k}": v for k, v in summary.items()}, step=step)

    def close(self, status: str) -> None:
        from trackio import context_vars  # noqa: PLC0415 - heavy/optional dependency

        with _quiet():
            try:
                self.run.finish()
            finally:
                if context_vars.current_run.get() is self.run:  # else trackio's atexit finishes it again
                    context_vars.current_run.set(None)


def _mlflow_name(key: str) -> str:
    """MLflow metric and param names allow letters, digits, ``_ - . / :`` and spaces; anything else becomes ``_``."""
    return "".join(c if c.isalnum() or c in "_-./: " else "_" for c in key)


class MlflowTracker:
    """MLflow through ``MlflowClient`` on ``tracking.mlflow.tracking_uri`` (default: the file store
    ``RUN_DIR/mlruns``): the config as params (dotted keys) and the artifact ``config.yaml``, metrics with their
    step, the summary as metrics ``summary.<key>`` at the last step and the artifact ``summary.json``. The run id is
    kept in ``trackers.json``; on resume the same run is set running again, and with the file store the metric
    values of steps after k are deleted first (MLflow has no API for that; another store keeps them, said in the
    log). A param whose value changed on resume (``optim.steps``) keeps its first value; config.yaml is rewritten."""

    name = "mlflow"

    def __init__(self, root: Path, opts: MlflowOptions, run_name: str, start_step: int, state: dict[str, Any]):
        uri = opts.tracking_uri or (root / "mlruns").resolve().as_uri()
        _mlflow_env(uri)
        from mlflow.tracking import MlflowClient  # noqa: PLC0415 - heavy/optional dependency

        self.client = MlflowClient(tracking_uri=uri)
        saved = state.get("mlflow") or {}
        if saved and saved.get("tracking_uri") == uri:
            self.run_id = saved["run_id"]
            self._purge_after(start_step)
            self.client.update_run(self.run_id, status="RUNNING")
            self.resumed = True
        else:
            exp = self.client.get_experiment_by_name(opts.experiment)
            exp_id = exp.experiment_id if exp is not None else self.client.create_experiment(opts.experiment)
            run = self.client.create_run(exp_id, run_name=run_name, tags={"wmrl.run_dir": str(root.resolve())})
            self.run_id = run.info.run_id
            self.resumed = False
        state["mlflow"] = {"run_id": self.run_id, "tracking_uri": uri, "experiment": opts.experiment}

    def _purge_after(self, step: int) -> None:
        """Delete the metric values of steps after ``step`` (file store: one file per metric, lines
        ``timestamp value step``)."""
        art = self.client.get_run(self.run_id).info.artifact_uri
        if not art.startswith("file:"):
            log.warning("mlflow: run %s is not in a file store; its metric values after step %d (logged before the "
                        "resume) stay in its history next to the new ones", self.run_id, step)
            return
        from urllib.parse import unquote, urlparse  # noqa: PLC0415 - only on resume

        metrics_dir = Path(unquote(urlparse(art).path)).parent / "metrics"
        for f in [p for p in metrics_dir.rglob("*") if p.is_file()] if metrics_dir.is_dir() else []:
            lines = f.read_text().splitlines(keepends=True)
            keep = [ln for ln in lines if len(ln.split()) < 3 or int(ln.split()[2]) <= step]
            if not keep:
                f.unlink()  # a metric first logged after ``step``: gone (MLflow refuses an empty file)
            elif len(keep) != len(lines):
                tmp = f.with_name(f.name + ".tmp")
                tmp.write_text("".join(keep))
                os.replace(tmp, f)

    def log_config(self, config: dict[str, Any]) -> None:
        from mlflow.entities import Param  # noqa: PLC0415 - heavy/optional dependency

        flat = _flat_config(config)
        have = self.client.get_run(self.run_id).data.params if self.resumed else {}
        params = [Param(_mlflow_name(k), v) for k, v in flat.items() if _mlflow_name(k) not in have]
        for i in range(0, len(params), 100):  # MLflow's limit per batch
            self.client.log_batch(self.run_id, params=params[i:i + 100])
        self.client.log_dict(self.run_id, json_safe(config), "config.yaml")

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric  # noqa: PLC0415 - heavy/optional dependency

        ts = int(time.time() * 1000)
        rows = [Metric(_mlflow_name(k), v, ts, step) for k, v in metrics.items()]
        for i in range(0, len(rows), 1000):  # MLflow's limit per batch
            self.client.log_batch(self.run_id, metrics=rows[i:i + 1000])

    def log_summary(self, step: int, summary: dict[str, float]) -> None:
        self.log_metrics(step, {f"summary.{k}": v for k, v in summary.items()})
        self.client.log_dict(self.run_id, summary, "summary.json")

    def close(self, status: str) -> None:
        self.client.set_terminated(self.run_id, {"finished": "FINISHED", "stopped": "KILLED"}.get(status, "FAILED"))


def _flat_config(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config -> ``{dotted key: text}`` (lists as YAML flow text), for MLflow params."""
    out: dict[str, str] = {}
    for k, v in config.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat_config(v, key + "."))
        else:
            out[key] = yaml.safe_dump(json_safe(v), default_flow_style=True).strip().removesuffix("...").strip()[:6000]
    return out


# --------------------------------------------------------------------------------------------------- the fan-out
class TrackerSet:
    """The fan-out every trainer calls: each call goes to every open tracker. A tracker that raises is closed
    and dropped with a warning (``on_error``, e.g. a train.log line): the run's jsonl files stay the record.

    Args:
        trackers: the open trackers (none: every call does nothing).
        on_error: called with one line when a tracker is dropped.
    """

    def __init__(self, trackers: list[Tracker] | None = None, on_error: Callable[[str], None] | None = None):
        self.trackers = list(trackers or [])
        self.on_error = on_error

    @property
    def names(self) -> list[str]:
        """Names of the trackers still open."""
        return [t.name for t in self.trackers]

    def _each(self, what: str, call: Callable[[Tracker], None]) -> None:
        for t in list(self.trackers):
            try:
                call(t)
            except Exception as e:  # noqa: BLE001 - a tracker's failure must not stop training: drop it, say so
                self.trackers.remove(t)
                msg = (f"tracker {t.name} failed in {what} ({type(e).__name__}: {' '.join(str(e).split())[:300]}); "
                       "it is dropped for the rest of the run (metrics.jsonl and eval.jsonl go on)")
                log.warning("%s", msg)
                if self.on_error is not None:
                    self.on_error(msg)
                with contextlib.suppress(Exception):
                    t.close("failed")

    def log_config(self, config: dict[str, Any]) -> None:
        """The resolved config (nested dicts) to every tracker."""
        self._each("log_config", lambda t: t.log_config(config))

    def log_metrics(self, step: int, record: dict[str, Any]) -> None:
        """A metrics.jsonl record: its finite numbers (:func:`scalars`) at ``step``."""
        m = scalars(record)
        if m:
            self._each("log_metrics", lambda t: t.log_metrics(step, m))

    def log_eval(self, step: int, split: str, record: dict[str, Any]) -> None:
        """An eval.jsonl record of ``split``: its numbers named ``eval_<split>.<key>`` at ``step``."""
        m = scalars(record, prefix=f"eval_{split}.")
        if m:
            self._each("log_eval", lambda t: t.log_metrics(step, m))

    def log_summary(self, step: int, summary: dict[str, Any]) -> None:
        """A summary.json document (:func:`summary_scalars`) at the run's last step."""
        s = summary_scalars(summary)
        self._each("log_summary", lambda t: t.log_summary(step, s))

    def close(self, status: str = "finished") -> None:
        """Close every tracker (``finished``, ``stopped`` or ``failed``); errors are logged, not raised."""
        for t in self.trackers:
            try:
                t.close(status)
            except Exception as e:  # noqa: BLE001 - closing one must not keep the others open
                log.warning("tracker %s did not close cleanly: %s", t.name, e)
        self.trackers = []


def open_trackers(names: Sequence[str], options: TrackingConfig, root: str | Path, *, config: dict[str, Any],
                  start_step: int = 0, on_error: Callable[[str], None] | None = None) -> TrackerSet:
    """Open the trackers ``names`` for the run in ``root`` and give them the resolved ``config``.

    Args:
        names: tracker names (the config's ``trackers``).
        options: the config's ``tracking`` section.
        root: the run directory (every tracker writes inside it, unless ``tracking.mlflow.tracking_uri`` says
            otherwise).
        config: the resolved config (nested dicts).
        start_step: the step the run continues from: 0 for a new run, k when resumed from the checkpoint of step
            k (what each tracker then does: the module's table).
        on_error: where a dropped tracker is reported (:class:`TrackerSet`).

    Returns:
        The :class:`TrackerSet`; the trackers' run ids are saved in ``root/trackers.json`` for a later resume.

    Raises:
        TrackerUnavailable: a package is missing (:func:`check_trackers`) or trackio is pointed off the machine.
        TrackerOpenError: a tracker's library raised while opening (a bad option, an unreachable MLflow server):
            one line naming the tracker and its options; the trackers opened before it are closed as failed.
    """
    check_trackers(names)
    root = Path(root)
    state_path = root / STATE_FILE
    state: dict[str, Any] = json.loads(state_path.read_text()) if state_path.is_file() else {}
    opened: list[Tracker] = []
    try:
        for name in names:
            try:
                t = _open_one(name, options, root, config, start_step, state)
            except ConfigError:
                raise
            except Exception as e:  # noqa: BLE001 - any library error becomes one clear line
                raise _open_error(name, e) from None
            opened.append(t)
            if state:
                write_json_atomic(state_path, state)
    except BaseException:
        TrackerSet(opened).close("failed")
        raise
    ts = TrackerSet(opened, on_error)
    ts.log_config(config)
    return ts


def _open_one(name: str, options: TrackingConfig, root: Path, config: dict[str, Any], start_step: int,
              state: dict[str, Any]) -> Tracker:
    """The adapter of tracker ``name`` (:func:`open_trackers`)."""
    t: Tracker
    if name == "tensorboard":
        t = TensorBoardTracker(root, start_step)
    elif name == "wandb":
        o = options.wandb
        t = WandbTracker(root, o, o.run_name or root.resolve().name, config, state)
    elif name == "trackio":
        o2 = options.trackio
        t = TrackioTracker(root, o2, o2.run_name or root.resolve().name, config, start_step, state)
    else:
        o3 = options.mlflow
        t = MlflowTracker(root, o3, o3.run_name or root.resolve().name, start_step, state)
    return t

"""Tracker options: a bad name is refused when the config loads; a tracker library that refuses its options while
opening gives one line naming the tracker; an unreachable MLflow server fails in seconds, before the run directory
is made (a closed port on 127.0.0.1: no network needed)."""
from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from wmrl.runs.tracking import MLFLOW_HTTP_DEFAULTS, TrackerOpenError, TrackingConfig, WandbOptions, open_trackers
from wmrl.training.config import ConfigError, load_config

TINY = Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml"


@pytest.mark.parametrize(("override", "says"), [
    ("tracking.mlflow.experiment=", "tracking.mlflow.experiment is empty"),
    ("tracking.trackio.project=  ", "tracking.trackio.project is empty"),
    ("tracking.wandb.project=", "tracking.wandb.project is empty"),
    ("tracking.wandb.project=a/b?c", "contains / ?, which W&B does not allow"),
    ("tracking.wandb.project=x:y", "contains :"),
])
def test_a_bad_tracker_name_is_refused_when_the_config_loads(override, says):
    with pytest.raises(ConfigError, match="tracking") as e:
        load_config(TINY, [override])
    assert says in str(e.value)


def test_a_good_name_passes():
    cfg = load_config(TINY, ["tracking.wandb.project=my-proj_1.2", "tracking.mlflow.experiment=ablations a"])
    assert cfg.tracking.wandb.project == "my-proj_1.2" and cfg.tracking.mlflow.experiment == "ablations a"


def test_a_library_error_while_opening_is_one_line_naming_the_tracker(tmp_path):
    pytest.importorskip("wandb")
    opts = TrackingConfig()
    opts.wandb = WandbOptions.model_construct(**{**WandbOptions().model_dump(), "project": "a/b"})  # unvalidated
    with pytest.raises(TrackerOpenError) as e:
        open_trackers(["tensorboard", "wandb"], opts, tmp_path, config={"seed": 0})
    msg = str(e.value)
    assert "\n" not in msg and "'wandb' could not be opened" in msg and "tracking.wandb" in msg
    assert isinstance(e.value, ConfigError)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: nothing listens there


def test_an_unreachable_mlflow_server_fails_fast_before_the_run_directory(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from typer.testing import CliRunner

    from wmrl.cli import app

    for k in MLFLOW_HTTP_DEFAULTS:
        monkeypatch.delenv(k, raising=False)
    t0 = time.monotonic()
    res = CliRunner().invoke(app, ["train", "--config", str(TINY), "--set", f"run_dir={tmp_path / 'r'}",
                                   "--set", "trackers=mlflow", "--set",
                                   f"tracking.mlflow.tracking_uri=http://127.0.0.1:{_closed_port()}"])
    took = time.monotonic() - t0
    assert res.exit_code != 0 and "Traceback" not in res.output, res.output
    out = " ".join(res.output.split())
    assert "'mlflow' could not be opened" in out and "tracking.mlflow" in out
    assert not (tmp_path / "r").exists()
    assert took < 60, f"took {took:.0f} s"
    assert all(os.environ.get(k) == v for k, v in MLFLOW_HTTP_DEFAULTS.items())

"""The training commands: help, config show, clear errors for bad configs."""
from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from wmrl.cli import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_train_help_lists_options():
    r = runner.invoke(app, ["train", "--help"])
    assert r.exit_code == 0
    for opt in ("--config", "--set", "--resume"):
        assert opt in r.output


def test_config_show_prints_every_field_with_help():
    r = runner.invoke(app, ["config", "show", "--config", str(ROOT / "configs" / "quickstart.yaml")])
    assert r.exit_code == 0, r.output
    for key in ("wmrl.routing.anchor_fraction", "world_model.refresh_every_k", "optim.clip_high", "executor.kind",
                "eval.every_k", "tasks.train"):
        assert key in r.output
    r = runner.invoke(app, ["config", "show", "--yaml", "--set", "method=grpo"])
    assert r.exit_code == 0 and "method: grpo" in r.output


def test_bad_config_exits_with_a_message(tmp_path):
    r = runner.invoke(app, ["train", "--config", str(ROOT / "configs" / "tiny.yaml"), "--set",
                            "wmrl.routing.router=avg"])
    assert r.exit_code == 2
    assert "wmrl.routing.router" in r.output and "registered: fraction, stratified" in r.output
    r = runner.invoke(app, ["train", "--resume", str(tmp_path)])
    out = " ".join(r.output.split())  # rich wraps long lines
    assert r.exit_code == 2 and "nothing to resume" in out and "has no config.yaml" in out
    r = runner.invoke(app, ["train", "--resume", str(tmp_path / "missing")])
    assert r.exit_code == 2 and "does not exist" in " ".join(r.output.split()) and not (tmp_path / "missing").exists()
    r = runner.invoke(app, ["eval", str(tmp_path / "missing")])
    assert r.exit_code == 2 and "does not exist" in " ".join(r.output.split()), r.output
    r = runner.invoke(app, ["ledger", str(tmp_path)])
    assert r.exit_code == 2

"""An embodied resume takes ``--set`` as the text track's does: the keys every track's resume may change
(:data:`wmrl.runs.lifecycle.RESUME_MUTABLE`: ``optim.steps``, ``eval.*``, ...) go through, a key that would change the
steps done is refused in one line naming it (under its new name also when given under an old one)."""
from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from wmrl.cli import app
from wmrl.runs.rundir import read_jsonl

pytest.importorskip("metaworld")

from wmrl.embodied import trainer as T
from wmrl.embodied.config import load_config


def _stopped_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tiny-preset run of 3 steps stopped (as if killed) after step 2, a checkpoint at every step."""
    monkeypatch.setenv("WMRL_HOME", str(tmp_path / "home"))
    run = tmp_path / "run"
    cfg = load_config(preset="tiny", overrides=[f"run_dir={run}", "eval.at_start=false", "optim.steps=3",
                                                "checkpoint_every=1"])
    T.run_embodied(cfg, stop_after_step=2, progress=False)
    return run


def test_an_embodied_resume_takes_the_keys_a_resume_may_change(tmp_path, monkeypatch) -> None:
    run = _stopped_run(tmp_path, monkeypatch)
    r = CliRunner().invoke(app, ["embodied", "train", "--resume", str(run), "--no-progress",
                                 "--set", "optim.steps=4", "--set", "eval.samples_per_state=2"])
    assert r.exit_code == 0, r.output
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == [1, 2, 3, 4]
    saved = load_config(run / "config.yaml")  # saved again with the resume's values
    assert saved.optim.steps == 4 and saved.eval.samples_per_state == 2


@pytest.mark.parametrize("override", ["wmrl.routing.anchor_fraction=0.3", "wmrl.anchor_fraction=0.3"])
def test_an_embodied_resume_refuses_a_key_that_changes_the_steps_done(tmp_path, monkeypatch, override) -> None:
    run = _stopped_run(tmp_path, monkeypatch)
    r = CliRunner().invoke(app, ["embodied", "train", "--resume", str(run), "--no-progress", "--set", override])
    assert r.exit_code == 2, r.output
    msg = " ".join(r.output.split())
    assert "differs from the run's saved config.yaml in wmrl.routing.anchor_fraction" in msg, msg
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == [1, 2]  # the run is as it was
    with pytest.raises(T.ConfigError, match="unknown config key 'optim.stepz'"):
        T.run_embodied(resume_dir=run, overrides=["optim.stepz=4"], progress=False)

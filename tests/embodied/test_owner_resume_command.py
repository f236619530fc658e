"""The owner lock's refusal names the track's own resume command (a live trainer holds the folder: a second embodied
start is told `wmrl embodied train --resume`, a second text start `wmrl train --resume`), in one line; and an embodied
start that fails before its first step leaves a folder that existed as it found it, as the text track does."""
from __future__ import annotations

import pytest

from wmrl.embodied import trainer as T
from wmrl.embodied.config import load_config as embodied_config
from wmrl.runs.owner import RunDirOwner
from wmrl.runs.rundir import RunDirError
from wmrl.training.config import load_config as text_config
from wmrl.training.run import run_training


def _refusal(call) -> str:
    with pytest.raises(RunDirError) as e:
        call()
    assert "\n" not in str(e.value)
    return str(e.value)


def test_a_second_embodied_start_is_told_the_embodied_resume_command(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("WMRL_HOME", str(tmp_path / "home"))
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("method: wmrl\n")
    cfg = embodied_config(preset="tiny", overrides=[f"run_dir={run}", "trackers=[]"])
    with RunDirOwner(run):  # the live trainer
        for call in (lambda: T.run_embodied(cfg), lambda: T.run_embodied(resume_dir=run)):
            msg = _refusal(call)
            assert "in use by another trainer" in msg and f"`wmrl embodied train --resume {run}`" in msg, msg


def test_a_second_text_start_is_told_the_text_resume_command(tmp_path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    cfg = text_config(None, [f"run_dir={run}", "progress=false", "trackers=[]"])
    with RunDirOwner(run):
        msg = _refusal(lambda: run_training(cfg))
    assert f"`wmrl train --resume {run}`" in msg and "embodied" not in msg, msg


def test_a_failed_embodied_start_leaves_an_existing_folder_as_it_found_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("WMRL_HOME", str(tmp_path / "home"))
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("mine")

    def no_artefacts(*_a, **_k):
        raise OSError("disk full")

    monkeypatch.setattr(T, "build_artefacts", no_artefacts)
    cfg = embodied_config(preset="tiny", overrides=[f"run_dir={run}", "trackers=[]"])
    with pytest.raises(OSError, match="disk full"):
        T.run_embodied(cfg, progress=False)
    assert sorted(p.name for p in run.iterdir()) == ["notes.txt"]

"""Both tracks resume through the run kit's one lifecycle (:func:`wmrl.runs.lifecycle.run_track`) and loader
(:func:`wmrl.runs.loop.load_newest`): an embodied run whose newest checkpoint does not load (a damaged file its
manifest cannot catch: a checkpoint written without one) resumes from the one before, says so in ``train.log``, and
replays the lost step, so ``metrics.jsonl`` holds each step once; one with steps done but no complete checkpoint is
refused, as the text track's is."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from wmrl.runs.rundir import MANIFEST, RunDirError

pytest.importorskip("metaworld")

from wmrl.embodied import trainer as T
from wmrl.embodied.config import load_config


def _stopped_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, steps: int) -> Path:
    """A tiny-preset run of ``steps`` steps stopped (as if killed) after step 2, a checkpoint at every step."""
    monkeypatch.setenv("WMRL_HOME", str(tmp_path / "home"))
    run = tmp_path / "run"
    cfg = load_config(preset="tiny", overrides=[f"run_dir={run}", "eval.at_start=false", f"optim.steps={steps}",
                                                "checkpoint_every=1", "keep_checkpoints=2"])
    T.run_embodied(cfg, stop_after_step=2, progress=False)
    return run


def test_an_embodied_resume_passes_over_a_checkpoint_that_does_not_load(tmp_path, monkeypatch) -> None:
    run = _stopped_run(tmp_path, monkeypatch, steps=2)
    newest = run / "checkpoints" / "step_000002"
    (newest / MANIFEST).unlink()
    rng = newest / "rng.pt"
    rng.write_bytes(rng.read_bytes()[:100])
    T.run_embodied(resume_dir=run, progress=False)
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
    log = (run / "train.log").read_text()
    assert "resumed from step_000001 because step_000002 does not load" in log


def test_an_embodied_resume_with_progress_but_no_complete_checkpoint_is_refused(tmp_path, monkeypatch) -> None:
    """Starting again from step 0 would repeat the steps the logs hold: the resume is refused in one line naming
    what was passed over, and the folder is left as it was."""
    run = _stopped_run(tmp_path, monkeypatch, steps=3)
    for ck in (run / "checkpoints").glob("step_*"):
        (ck / "trainer_state.json").unlink()
    before = (run / "metrics.jsonl").read_text()
    with pytest.raises(RunDirError) as e:
        T.run_embodied(resume_dir=run, progress=False)
    msg = str(e.value)
    assert "\n" not in msg and "has no complete checkpoint to resume from" in msg, msg
    assert "checkpoints/latest names step_000002: trainer_state.json is missing" in msg, msg
    assert "continuing would repeat its steps: start a new run in another run_dir" in msg, msg
    assert (run / "metrics.jsonl").read_text() == before

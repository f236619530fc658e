"""Both tracks take the run directory's owner lock: a second embodied run started (fresh or as a resume) on the folder
of a live one is refused in one line naming the embodied resume command, and the live run finishes unharmed. Old
checkpoints of both tracks load their engine state through the one migration
(:func:`wmrl.runs.checkpoint.engine_state`)."""
from __future__ import annotations

import json
import threading

import pytest

from wmrl.runs.checkpoint import engine_state
from wmrl.runs.rundir import RunDirError


def test_a_second_embodied_run_on_a_live_runs_folder_is_refused(tmp_path, monkeypatch) -> None:
    pytest.importorskip("metaworld")
    from wmrl.embodied import trainer as T
    from wmrl.embodied.config import load_config

    monkeypatch.setenv("WMRL_HOME", str(tmp_path / "home"))
    run = tmp_path / "run"
    cfg = load_config(preset="tiny", overrides=[f"run_dir={run}", "eval.at_start=false", "optim.steps=1"])
    inside, go_on = threading.Event(), threading.Event()
    real = T.EmbodiedTrainer.train_step

    def held(self):  # the first run stops inside its first step until the second one was refused
        inside.set()
        assert go_on.wait(600)
        return real(self)

    monkeypatch.setattr(T.EmbodiedTrainer, "train_step", held)
    out: dict = {}
    first = threading.Thread(target=lambda: out.setdefault("summary", T.run_embodied(cfg)))
    first.start()
    try:
        assert inside.wait(600), "the first run never reached its first step"
        for second in (lambda: T.run_embodied(cfg), lambda: T.run_embodied(resume_dir=run)):
            with pytest.raises(RunDirError, match="in use by another trainer") as e:
                second()
            assert "\n" not in str(e.value) and f"`wmrl embodied train --resume {run}`" in str(e.value)
    finally:
        go_on.set()
        first.join(600)
    assert out["summary"]["steps"] == 1
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [1]


@pytest.mark.parametrize("saved", [
    {"recipe": {"c": 1}, "router": {"r": 2}},  # both tracks today
    {"recipe_state": {"c": 1}, "router": {"r": 2}},  # the embodied track before one envelope
    {"calibrator": {"x": 1}, "window": {"w": 3}, "router": {"r": 2}},  # the text track before the recipe object
])
def test_every_saved_shape_of_the_engine_state_loads(saved) -> None:
    st = engine_state(saved)
    assert st["router"] == {"r": 2}
    assert st["recipe"] == ({"calibrator": {"x": 1}, "window": {"w": 3}} if "window" in saved else {"c": 1})


def test_a_checkpoint_without_an_engine_state_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="no engine state"):
        engine_state({"step": 3})

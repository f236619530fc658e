"""The embodied config names its environment (``environment``, default ``metaworld``), checked against the
environment registry like the text track's: an unknown name is refused in one line naming the registered ones, and an
environment of the text track is refused in one line before a run folder exists."""
from __future__ import annotations

import pytest

from wmrl.embodied.config import load_config
from wmrl.runs.config import ConfigError


def test_the_default_environment_is_metaworld() -> None:
    assert load_config(preset="tiny").environment == "metaworld"


def test_an_unknown_environment_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError) as e:
        load_config(preset="tiny", overrides=["environment=metaword"])
    assert "\n" not in str(e.value) and "metaworld" in str(e.value)


def test_a_text_environment_is_refused_before_the_run_folder_exists(tmp_path) -> None:
    from wmrl.embodied.trainer import run_embodied

    run = tmp_path / "run"
    cfg = load_config(preset="tiny", overrides=[f"run_dir={run}", "environment=kaggle"])
    with pytest.raises(ConfigError) as e:
        run_embodied(cfg, progress=False)
    assert "\n" not in str(e.value) and "`wmrl train`" in str(e.value)
    assert not run.exists()

"""`wmrl train` names every task under its roots that was refused (one line each, with the reason), and stops
with a clear error when a task named in the config was refused or no gradable train task is left."""
from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from wmrl.cli import app
from wmrl.tasks.fixtures import build_benchmark_fixtures
from wmrl.training.config import ConfigError, TrainConfig
from wmrl.training.parts import resolve_tasks

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dojo(tmp_path_factory) -> Path:
    """The two MLE-Dojo fixtures; dojo-houseprices loses its metric code, so the loader refuses it."""
    out = tmp_path_factory.mktemp("dojo")
    build_benchmark_fixtures(out, ("mledojo",))
    (out / "mle-dojo" / "mledojo" / "competitions" / "dojo-houseprices" / "utils" / "metric.py").unlink()
    return out / "mle-dojo"


def _cfg(root: Path, train=None, heldout=None) -> TrainConfig:
    cfg = TrainConfig()
    cfg.tasks.root = str(root)
    cfg.tasks.train = train
    cfg.tasks.heldout = heldout
    return cfg


def test_refused_tasks_under_the_roots_are_named_one_line_each(dojo, caplog):
    lines: list[str] = []
    train, heldout = resolve_tasks(_cfg(dojo, heldout=[]), warn=lines.append)
    assert [t.id for t in train] == ["dojo-titanicp"] and heldout == []
    assert len(lines) == 1
    assert lines[0].startswith("tasks.root: task dojo-houseprices refused and left out: task 'dojo-houseprices': "
                               "no metric found")
    with caplog.at_level(logging.WARNING, logger="wmrl.training.parts"):  # the default: a logged warning
        resolve_tasks(_cfg(dojo, heldout=[]))
    assert [r.getMessage() for r in caplog.records] == lines
    lines.clear()  # every task named explicitly: the others under the roots are not used, so no warning
    resolve_tasks(_cfg(dojo, train=["dojo-titanicp"], heldout=[]), warn=lines.append)
    assert lines == []


def test_a_refused_task_named_in_the_config_is_an_error_with_its_reason(dojo, tmp_path):
    with pytest.raises(ConfigError) as e:
        resolve_tasks(_cfg(dojo, train=["dojo-titanicp"], heldout=["dojo-houseprices"]))
    assert str(e.value).startswith("tasks.heldout: task 'dojo-houseprices' was refused: task 'dojo-houseprices': "
                                   "no metric found")
    held = tmp_path / "held.txt"
    held.write_text("dojo-houseprices\n")
    cfg = _cfg(dojo)
    cfg.tasks.heldout_split = f"list:{held}"
    with pytest.raises(ConfigError, match=r"names task\(s\) that were refused \(cannot be graded\): dojo-houseprices "
                                          r"\(task 'dojo-houseprices': no metric found"):
        resolve_tasks(cfg, warn=lambda line: None)


def test_no_gradable_train_task_left_is_an_error_naming_the_refusals(dojo, tmp_path):
    only = tmp_path / "only-refused"
    shutil.copytree(dojo / "mledojo", only / "mledojo")
    (only / "data" / "prepared").mkdir(parents=True)
    shutil.copytree(dojo / "data" / "prepared" / "dojo-houseprices", only / "data" / "prepared" / "dojo-houseprices")
    with pytest.raises(ConfigError) as e:
        resolve_tasks(_cfg(only, heldout=[]), warn=lambda line: None)
    msg = str(e.value)
    assert msg.startswith("no gradable train task under tasks.root: 1 task(s) under the roots were refused")
    assert "refused dojo-houseprices: task 'dojo-houseprices': no metric found" in msg
    assert "`wmrl tasks check`" in msg
    # the command: exit 2 with the message, and the run directory it would have made is removed
    run = tmp_path / "run"
    r = CliRunner().invoke(app, ["train", "--config", str(ROOT / "configs" / "tiny.yaml"), "--set",
                                 f"tasks.root={only}", "--set", "tasks.train=null", "--set", "tasks.heldout=[]",
                                 "--set", f"run_dir={run}", "--no-progress"])
    out = " ".join(r.output.split())
    assert r.exit_code == 2, r.output
    assert "error: no gradable train task under tasks.root: 1 task(s) under the roots were refused" in out
    assert not run.exists()


def test_a_method_without_recall_never_corrects_a_program_by_its_own_execution():
    from wmrl.training.config import TrainConfig
    from wmrl.training.parts import world_model_settings

    def settings(method: str, k: int) -> dict:
        return world_model_settings(TrainConfig.model_validate(
            {"method": method, "world_model": {"residual_neighbours": k, "adapter": False}}))

    assert settings("wmrl", 8)["neighbours_own_program"] is True
    assert settings("wmrl-no-recall", 8)["neighbours_own_program"] is False
    assert settings("wmrl-no-recall", 8)["residual_neighbours"] == 8 and settings("wmrl", 8)["lora"] is None
    assert "residual_neighbours" not in settings("wmrl", 0) and "neighbours_own_program" not in settings("wmrl", 0)


def test_a_saved_world_model_with_other_settings_is_refused_not_silently_used():
    """world_model.path: the loaded model predicts with its own program features and neighbours, so a config
    asking for others is refused with both values; equal settings (or a kind without them) pass."""
    from wmrl.training.config import ConfigError, TrainConfig
    from wmrl.training.parts import check_saved_settings

    def cfg(method: str = "wmrl", **wm) -> TrainConfig:
        return TrainConfig.model_validate({"method": method, "world_model": {"adapter": False, **wm}})

    plain = {"kind": "regression", "program_features": 0, "residual_neighbours": 0, "neighbours_own_program": True}
    with_nb = {**plain, "residual_neighbours": 8}
    check_saved_settings(plain, cfg(), "/m")
    check_saved_settings(with_nb, cfg(residual_neighbours=8), "/m")
    check_saved_settings({"kind": "generative", "ladder": "percentile"}, cfg(), "/m")
    with pytest.raises(ConfigError, match=r"world_model.residual_neighbours: the folder's model has 8, this config "
                                          r"asks for 0"):
        check_saved_settings(with_nb, cfg(), "/m")
    with pytest.raises(ConfigError, match=r"world_model.program_features: the folder's model has 0, .* 1024"):
        check_saved_settings(plain, cfg(program_features=1024), "/m")
    # a model whose neighbours use a program's own executions, under a method without recall
    with pytest.raises(ConfigError, match=r"neighbours_own_program .*has True, this config asks for False"):
        check_saved_settings(with_nb, cfg("wmrl-no-recall", residual_neighbours=8), "/m")


def test_a_served_world_model_refuses_settings_only_a_built_one_has():
    from wmrl.training.config import TrainConfig

    for key in ("program_features", "residual_neighbours"):
        with pytest.raises(ValueError, match="leave world_model.program_features and world_model.residual_neighbours"):
            TrainConfig.model_validate({"world_model": {"url": "http://x:1", key: 8}})

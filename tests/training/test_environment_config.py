"""The config chooses the text trainer's environment (``environment:``, checked against the registry like ``method``);
an environment the text trainer cannot build, or a sandbox-only option with another environment, is refused in one
line before the run folder exists; ``plugins`` imports a module that registers its own names first."""
from __future__ import annotations

import pytest

from wmrl.core.recipe import RECIPES
from wmrl.training.config import ConfigError, load_config
from wmrl.training.run import run_training


def test_the_environment_is_checked_against_the_registry() -> None:
    assert load_config(None).environment == "kaggle"
    with pytest.raises(ConfigError, match=r"^environment: unknown environment 'kagle' \(did you mean 'kaggle'\?\)"):
        load_config(None, ["environment=kagle"])


def test_an_environment_of_another_track_is_refused_before_the_run_folder(tmp_path) -> None:
    cfg = load_config(None, ["environment=metaworld", f"run_dir={tmp_path / 'run'}", "progress=false"])
    with pytest.raises(ConfigError, match="environment") as e:
        run_training(cfg)
    assert "\n" not in str(e.value) and not (tmp_path / "run").exists()


def test_multi_turn_episodes_need_the_sandbox_environment() -> None:
    with pytest.raises(ConfigError,
                       match="episode.max_turns > 1 and wmrl.routing.verify_favourites run programs in the "
                                          "sandbox, so they need environment 'kaggle'"):
        load_config(None, ["environment=metaworld", "episode.max_turns=2"])


def test_a_plugin_registers_its_names_before_they_are_checked(tmp_path, monkeypatch) -> None:
    (tmp_path / "my_recipes.py").write_text(
        "from wmrl.core.recipe import Recipe, register_recipe\n"
        "register_recipe(Recipe('wmrl-plugin-test', 'a test recipe', 'fraction', debiasing='isotonic', "
        "fusion='equal'))\n")
    monkeypatch.chdir(tmp_path)
    try:
        cfg = load_config(None, ["plugins=[my_recipes.py]", "method=wmrl-plugin-test"])
        assert cfg.plugins == ["my_recipes.py"] and cfg.method == "wmrl-plugin-test"
        assert load_config(None, ["plugins=my_recipes.py", "method=wmrl-plugin-test"]).method == "wmrl-plugin-test"
    finally:
        RECIPES.unregister("wmrl-plugin-test")
        monkeypatch.delitem(__import__("sys").modules, "my_recipes", raising=False)
    with pytest.raises(ConfigError, match=r"^plugins: plugin file 'missing.py' not found"):
        load_config(None, ["plugins=missing.py"])

"""A config file names its plugin files relative to its own folder, whatever the current directory; the resolved
config keeps the absolute path, so a resumed run finds the file again."""
from __future__ import annotations

import sys

from wmrl.core.recipe import RECIPES
from wmrl.training.config import load_config, save_config


def test_a_config_files_plugin_path_is_read_from_its_folder(tmp_path, monkeypatch) -> None:
    folder = tmp_path / "experiment"
    folder.mkdir()
    (folder / "beside_recipes.py").write_text(
        "from wmrl.core.recipe import Recipe, register_recipe\n"
        "register_recipe(Recipe('wmrl-beside-test', 'a test recipe', 'fraction', debiasing='isotonic', "
        "fusion='equal'))\n")
    (folder / "run.yaml").write_text("plugins: [beside_recipes.py]\nmethod: wmrl-beside-test\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    try:
        cfg = load_config(folder / "run.yaml")
        assert cfg.method == "wmrl-beside-test"
        assert cfg.plugins == [str((folder / "beside_recipes.py").resolve())]
        save_config(cfg, tmp_path / "saved.yaml")
        monkeypatch.chdir(tmp_path)
        assert load_config(tmp_path / "saved.yaml").plugins == cfg.plugins  # absolute: unchanged on reload
        # a module name stays a module name
        (folder / "mod.yaml").write_text("plugins: [json]\n")
        assert load_config(folder / "mod.yaml").plugins == ["json"]
    finally:
        RECIPES.unregister("wmrl-beside-test")
        sys.modules.pop("beside_recipes", None)

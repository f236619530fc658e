"""The recipe's config section both tracks share (:class:`wmrl.step.config.RecipeConfig`): its sub-sections map onto
the engine and :class:`~wmrl.core.recipe.RecipeSettings`; the keys it had before its sub-sections
(``wmrl.anchor_fraction``, ...) are read as their new names in files, presets, saved runs and ``--set``, to the same
values; the embodied track's own defaults and what of the section it does not run."""
from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

import pytest
import yaml

from wmrl.bench import presets as bench
from wmrl.bench.plan import PlannedRun, check_existing
from wmrl.core.recipe import RecipeSettings
from wmrl.embodied import config as emb
from wmrl.runs.config import dotted_value
from wmrl.step.config import RENAMED_KEYS, RecipeConfig
from wmrl.step.engine import StepEngine
from wmrl.training.config import ConfigError, config_from_dict, config_to_dict, load_config, save_config
from wmrl.training.run import keys_added_since

ROOT = Path(__file__).resolve().parents[2]
#: every config.yaml of a run committed under studies/ (saved before the section had sub-sections)
COMMITTED_RUNS = sorted(glob.glob(str(ROOT / "studies" / "**" / "config.yaml"), recursive=True))


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def test_committed_runs_are_saved_with_the_old_keys():
    """Enough committed runs hold the flat keys of before the sub-sections for the next test to exercise the
    migration (runs saved since hold the new keys)."""
    old = [p for p in COMMITTED_RUNS if "anchor_fraction" in yaml.safe_load(Path(p).read_text())["wmrl"]]
    assert len(old) >= 20


@pytest.mark.parametrize("path", COMMITTED_RUNS, ids=lambda p: str(Path(p).relative_to(ROOT / "studies")))
def test_a_committed_run_loads_to_the_values_it_saved(path):
    raw = _flat(yaml.safe_load(Path(path).read_text()))
    cfg = load_config(path)
    now = _flat(config_to_dict(cfg))
    for key, value in raw.items():  # keys added since it was saved take their defaults
        assert now[RENAMED_KEYS.get(key, key)] == value, key


def test_an_old_key_in_set_is_its_new_key():
    old = load_config(None, ["wmrl.anchor_fraction=0.2", "wmrl.calibrator_min_anchors=4", "wmrl.exploit_alarm=stop",
                             "wmrl.anchor_staleness=2"])
    new = load_config(None, ["wmrl.routing.anchor_fraction=0.2", "wmrl.calibration.min_anchors=4",
                             "wmrl.alarm.response=stop", "wmrl.asynchronous.staleness=2"])
    assert old == new and new.wmrl.routing.anchor_fraction == 0.2 and new.wmrl.alarm.response == "stop"


def test_a_key_given_under_both_names_is_refused_in_one_line(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("wmrl:\n  anchor_fraction: 0.2\n  routing:\n    anchor_fraction: 0.3\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(e.value) == ("wmrl.anchor_fraction is the old name of wmrl.routing.anchor_fraction and both are given; "
                            "keep wmrl.routing.anchor_fraction")
    # an override of the new name replaces a file's value of the old one
    p.write_text("wmrl:\n  anchor_fraction: 0.2\n")
    assert load_config(p, ["wmrl.routing.anchor_fraction=0.3"]).wmrl.routing.anchor_fraction == 0.3


def test_a_typo_of_an_old_name_is_pointed_to_the_new_one():
    with pytest.raises(ConfigError, match=r"'wmrl.anchor_fration'. Did you mean 'wmrl.routing.anchor_fraction'\?"):
        load_config(None, ["wmrl.anchor_fration=0.2"])


@pytest.mark.parametrize("name", bench.list_presets())
def test_a_preset_in_old_keys_resolves_as_the_shipped_one(name, tmp_path):
    """Each shipped preset (new keys) against the same preset with its ``wmrl`` section written flat (old keys)."""
    shipped = bench.load_preset(name)
    text = Path(shipped.path).read_text()
    data = yaml.safe_load(text)
    section = data["config"]["wmrl"]
    inverse = {new.removeprefix("wmrl."): old.removeprefix("wmrl.") for old, new in RENAMED_KEYS.items()}
    data["config"]["wmrl"] = {inverse[f"{sub}.{k}"]: v for sub, values in section.items() for k, v in values.items()}
    old_path = tmp_path / f"{name}.yaml"
    old_path.write_text(yaml.safe_dump(data))
    old = bench.load_preset(old_path)
    for method in shipped.methods:
        a = bench.method_config(shipped, method, seed=0, run_dir=tmp_path / "r")
        b = bench.method_config(old, method, seed=0, run_dir=tmp_path / "r")
        assert a == b, (name, method)


def test_a_bench_folder_saved_with_the_old_keys_matches_its_plan(tmp_path):
    """A bench resumed on a folder whose runs saved the old keys is not refused as 'other settings'."""
    preset = bench.load_preset("cpu-small")
    run_dir = tmp_path / "wmrl" / "seed0"
    cfg = bench.method_config(preset, "wmrl", seed=0, run_dir=run_dir)
    run_dir.mkdir(parents=True)
    flat = config_to_dict(cfg)
    flat["wmrl"] = {old.removeprefix("wmrl."): dotted_value(cfg, new) for old, new in RENAMED_KEYS.items()}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(flat))
    check_existing(PlannedRun(method="wmrl", seed=0, run_dir=run_dir, config=cfg))


def test_a_run_saved_before_the_alarm_resumes_without_it(tmp_path):
    """``keys_added_since`` reads a saved run's old keys as their new names: a flat section that has
    ``steps_without_anchors`` but no ``exploit_alarm`` needs only the alarm's value of its time."""
    path = tmp_path / "config.yaml"
    cfg = load_config(None)
    save_config(cfg, path)
    data = yaml.safe_load(path.read_text())
    data["wmrl"] = {"anchor_fraction": 0.1, "steps_without_anchors": "skip"}
    path.write_text(yaml.safe_dump(data))
    assert keys_added_since(path) == {"wmrl.alarm.response": "none"}


def test_the_section_maps_onto_the_engine_and_the_recipe_settings():
    cfg = config_from_dict({"method": "wmrl", "wmrl": {
        "routing": {"anchor_fraction": 0.3, "router": "stratified", "min_anchor_every": 2},
        "calibration": {"window": 64, "min_anchors": 5, "fallback": "affine"},
        "fusion": {"min_pairs": 3, "alpha_floor": 0.1, "alpha_ceiling": 0.8},
        "asynchronous": {"staleness": 2, "over_bound_anchors": "drop"}}, "optim": {"normalize_std": False}})
    assert cfg.wmrl.recipe_settings(normalize_std=False, adv_eps=1e-4) == RecipeSettings(
        normalize_std=False, adv_eps=1e-4, calibrator_window=64, calibrator_min_anchors=5,
        calibrator_fallback="affine", window_pairs=64, alpha_floor=0.1, alpha_ceiling=0.8, fusion_min_pairs=3)
    engine = StepEngine.from_config(cfg.method, cfg.wmrl, seed=1)
    assert (engine.router.fraction, engine.anchors.k, engine.anchors.at_bound) == (0.3, 2, "drop")
    assert RecipeConfig().recipe_settings() == RecipeSettings()  # the section's defaults are the settings' defaults


def test_the_embodied_track_sets_its_defaults_in_one_place():
    cfg = emb.load_config(None, ["wmrl.routing.router=stratified"])
    assert cfg.wmrl.routing.anchor_fraction == emb.EMBODIED_RECIPE_DEFAULTS["routing"]["anchor_fraction"] == 0.25
    assert cfg.wmrl.routing.router == "stratified" and cfg.wmrl.alarm.response == "none"
    assert emb.load_config(None, ["wmrl.anchor_fraction=0.4"]).wmrl.routing.min_anchor_every == 4
    # the embodied track's advantage normalisation is in its optim section, as the text track's
    assert emb.load_config(None, ["wmrl.normalize_std=false"]).optim.normalize_std is False
    for override in ("wmrl.asynchronous.staleness=2", "wmrl.alarm.response=warn",
                     "wmrl.routing.verify_favourites=true"):
        with pytest.raises(ConfigError, match="the embodied trainer does not run it"):
            emb.load_config(None, [override])

"""Config loading, overrides, validation and the saved resolved config."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from wmrl.training.config import (ConfigError, TrainConfig, apply_overrides, config_from_dict, describe_fields,
                                  dump_config, load_config, save_config)

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_and_round_trip(tmp_path):
    cfg = load_config(None, ["method=wmrl-ppi", "optim.steps=3", "wmrl.routing.router=stratified",
                             "tasks.train=[a, b]"])
    assert cfg.method == "wmrl-ppi" and cfg.optim.steps == 3 and cfg.wmrl.routing.router == "stratified"
    assert cfg.tasks.train == ["a", "b"]
    save_config(cfg, tmp_path / "config.yaml")
    again = load_config(tmp_path / "config.yaml")
    assert again == cfg


@pytest.mark.parametrize("override, words", [
    (["optim.stepz=3"], ["optim.stepz", "steps"]),
    (["wmrl.routing.router=fractoin"], ["wmrl.routing.router", "registered: fraction, stratified",
                                        "did you mean 'fraction'"]),
    (["method=foo"], ["method", "grpo", "wm", "wmrl", "wmrl-no-debias", "anchor-only"]),
    (["wmrl.fusion=ppi"], ["wmrl.fusion", "was removed", "method=wmrl-ppi"]),
    (["optim.lr=fast"], ["optim.lr", "number"]),
    (["wmrl.routing.anchor_fraction=1.5"], ["wmrl.routing.anchor_fraction", "maximum"]),
    (["rollout.group_size=0"], ["rollout.group_size", "set rollout.group_size >= 2"]),
    (["rollout.group_size=2.5"], ["rollout.group_size", "integer"]),
    (["eval.at_end=maybe"], ["eval.at_end", "true or false"]),
    (["model=tiny"], ["model", "section"]),
    (["steps"], ["key=value"]),
])
def test_bad_overrides_name_the_key(override, words):
    with pytest.raises(ConfigError) as e:
        load_config(None, override)
    for w in words:
        assert w in str(e.value)


def test_unknown_yaml_key_and_section(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("method: wmrl\nwmrl:\n  anchor_fration: 0.2\n")
    with pytest.raises(ConfigError, match=r"wmrl\.anchor_fration.*anchor_fraction"):
        load_config(p)
    p.write_text("optimiser:\n  lr: 1\n")
    with pytest.raises(ConfigError, match="optimiser"):
        load_config(p)
    p.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(p)


def test_cross_field_checks():
    with pytest.raises(ConfigError, match="alpha_floor"):
        config_from_dict({"wmrl": {"alpha_floor": 0.9, "alpha_ceiling": 0.5}})
    with pytest.raises(ConfigError, match="needs anchors"):
        config_from_dict({"method": "wmrl", "wmrl": {"anchor_fraction": 0.0, "min_anchor_every": 0}})
    # a pure world model needs none
    assert config_from_dict({"method": "wm", "wmrl": {"anchor_fraction": 0.0}}).method == "wm"


def test_string_fields_keep_raw_text_and_null():
    cfg = load_config(None, ["model.name=1e3", "run_dir=null", "scaffold.name=grammar"])
    assert cfg.model.name == "1e3" and cfg.run_dir is None and cfg.scaffold.name == "grammar"


def test_every_field_has_help():
    rows = describe_fields()
    assert len(rows) > 40
    missing = [k for k, _t, _v, h in rows if not h.strip()]
    assert not missing, missing


def test_shipped_configs_load():
    for name in ("quickstart.yaml", "tiny.yaml"):
        cfg = load_config(ROOT / "configs" / name)
        assert isinstance(cfg, TrainConfig)
        yaml.safe_load(dump_config(cfg))


def test_apply_overrides_creates_sections():
    d = apply_overrides({}, ["eval.every_k=2", "executor.kind=ray"])
    assert d == {"eval": {"every_k": 2}, "executor": {"kind": "ray"}}


def test_a_key_given_twice_in_a_yaml_file_is_refused(tmp_path):
    p = tmp_path / "dup.yaml"
    p.write_text("method: grpo\nmodel:\n  name: tiny\n  name: smollm2-135m\n")
    with pytest.raises(ConfigError, match=r"key 'name' is given twice in one mapping \(line 4\)"):
        load_config(p)
    p.write_text("method: grpo\nmodel:\n  name: tiny\noptim:\n  name: x\n")  # the same key in two mappings is fine
    with pytest.raises(ConfigError, match="optim.name"):  # (and then an unknown key, named)
        load_config(p)

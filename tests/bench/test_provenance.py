"""Every bench run records the code, command and preset that trained it; a table refuses to mix code versions
unless told, and says which runs came from which; a run that did not do what its method's name says is named so."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

import wmrl.bench.run as bench_run
from wmrl.bench.convergence import write_bench_outputs
from wmrl.bench.presets import BenchError, load_preset
from wmrl.core.recipe import get_recipe, ran_as_note
from wmrl.training.config import save_config
from tests.support.fake_run import write_fake_run


@pytest.fixture()
def preset(tmp_path):
    p = tmp_path / "mini.yaml"
    p.write_text(yaml.safe_dump({"preset": "mini", "description": "d", "backbone_note": "b", "seeds": 1,
                                 "methods": ["grpo", "wmrl"], "config": {"model": {"name": "tiny"},
                                                                         "optim": {"steps": 3}}}))
    return load_preset(p)


def _train(cfg, resume):
    rd = Path(cfg.run_dir)
    write_fake_run(rd, cfg.method, steps=cfg.optim.steps, seed=cfg.seed)
    save_config(cfg, rd / "config.yaml")


def test_runs_record_their_code_and_a_table_refuses_two_commits(preset, tmp_path, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setattr(bench_run, "code_version", lambda: {"wmrl": "0", "commit": "a" * 40, "dirty": False})
    bench_run.run_bench(preset, out, methods=["grpo"], train_fn=_train, command="wmrl bench --methods grpo",
                        log=lambda m: None)
    prov = json.loads((out / "grpo" / "seed0" / "provenance.json").read_text())["invocations"]
    assert [(p["code_version"]["commit"], p["command"], p["preset"]) for p in prov] == [
        ("a" * 40, "wmrl bench --methods grpo", "mini")]
    assert len(prov[0]["preset_sha256"]) == 64
    monkeypatch.setattr(bench_run, "code_version", lambda: {"wmrl": "0", "commit": "b" * 40, "dirty": True})
    with pytest.raises(BenchError, match="2 code versions.*--mixed-commits"):
        bench_run.run_bench(preset, out, methods=["wmrl"], train_fn=_train, command="wmrl bench --methods wmrl",
                            log=lambda m: None)
    paths = write_bench_outputs(out, log=lambda m: None, mixed_commits=True)
    res = pd.read_csv(out / "results.csv").set_index("method")
    assert res.loc["grpo", "commit"] == "a" * 40 and res.loc["wmrl", "commit"] == "b" * 40
    assert bool(res.loc["wmrl", "dirty"]) and not bool(res.loc["grpo", "dirty"])
    md = paths["markdown"].read_text()
    assert f"{'a' * 40}: grpo seed 0" in md and f"{'b' * 40} with uncommitted changes: wmrl seed 0" in md
    meta = json.loads((out / "bench.json").read_text())
    assert meta["commands"] == ["wmrl bench --methods grpo", "wmrl bench --methods wmrl"]
    assert len(meta["code_versions"]) == 2


def test_a_run_whose_calibrator_never_left_identity_is_named_so():
    wmrl, raw = get_recipe("wmrl"), get_recipe("wmrl-raw")
    assert ran_as_note(wmrl, ["identity"] * 16, 24).startswith("no debiasing")
    assert ran_as_note(wmrl, ["identity"] * 5 + ["isotonic"] * 11, 24) == ""
    assert ran_as_note(raw, ["identity"] * 16, 24) == ""  # the raw mixture never debiases by design
    assert ran_as_note(wmrl, [None] * 16, 0) == "no anchors executed"


def test_the_committed_cpu_lm_wmrl_arm_is_named_for_what_ran():
    """The committed cpu-lm wmrl arm is the WMRL method: its calibrator left the identity map in every seed (the
    preset's calibrator_min_anchors), so the table names no other recipe for it."""
    from wmrl.report.bench_results import collect

    root = Path(__file__).resolve().parents[2] / "studies" / "benchmark" / "cpu-lm"
    res = collect(root).set_index(["method", "seed"])
    assert len(res.loc["wmrl"]) == 3 and set(res.loc["wmrl", "ran_as"]) == {""}
    assert (res.loc["wmrl", "calibrator_fitted_steps"] > 0).all()
    assert set(res.loc["wmrl-raw", "ran_as"]) == {""}

"""The example environment of ``examples/lint_env.py`` trains with the text trainer from its config alone: the config
names the file under ``plugins`` (which registers ``lint``) and ``environment: lint``; every registered recipe runs
two steps on the fake parts, and the anchors' true rewards are the example's reviews, never a sandbox execution."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tests.support.fakes import FakeExecutor, FakePolicy, FakeScaffold, FakeWorldModel, fake_task

from wmrl.core.recipe import get_recipe, recipe_names
from wmrl.runs.rundir import RunDir, read_jsonl
from wmrl.training.components import Components
from wmrl.training.config import load_config
from wmrl.training.run import run_training

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "lint_env.py"


def test_the_example_config_names_the_environment_and_its_file(monkeypatch) -> None:
    monkeypatch.chdir(ROOT)  # plugins are read from the current directory, as `wmrl train` there reads them
    cfg = load_config(ROOT / "examples" / "lint_env.yaml")
    assert cfg.environment == "lint" and cfg.plugins == [str(EXAMPLE.resolve())]


@pytest.mark.parametrize("method", recipe_names())
def test_every_recipe_trains_the_example_environment_for_two_steps(method: str, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("WMRL_HOME", str(tmp_path / "home"))
    executor = FakeExecutor()
    comps = Components(train_tasks=[fake_task(i) for i in range(3)], heldout_tasks=[], scaffold=FakeScaffold(),
                       policy=FakePolicy(0), executor=executor,
                       world_model=FakeWorldModel() if get_recipe(method).uses_world_model else None)
    cfg = load_config(None, [f"plugins=[{EXAMPLE}]", "environment=lint", f"method={method}",
                             f"run_dir={tmp_path / 'run'}", "optim.steps=2", "rollout.tasks_per_step=3",
                             "rollout.group_size=4", "optim.lr=0.05", "wmrl.routing.anchor_fraction=0.5",
                             "wmrl.routing.min_anchor_every=1", "wmrl.calibration.min_anchors=2",
                             "wmrl.fusion.min_pairs=2",
                             "progress=false", "eval.every_k=0", "eval.at_end=false", "trackers=[]"])
    run_training(cfg, components=comps)
    rd = RunDir(cfg.run_dir)
    assert [m["step"] for m in read_jsonl(rd.metrics)] == [1, 2]
    review = sys.modules["lint_env"].review
    anchors = [s for s in read_jsonl(rd.samples) if s["stream"] == "anchor"]
    assert bool(anchors) == (get_recipe(method).anchors != "none")
    for s in anchors:  # the example's review of the program the fake scaffold renders, not the fake executor's
        assert s["reward_true"] == pytest.approx(review(f"# {s['task_id']}\n{s['completion']}").reward)
    assert executor.n == 0  # nothing ran in the sandbox
    assert np.isfinite([m["reward_used_mean"] for m in read_jsonl(rd.metrics)]).all()
    assert "environment: lint\n" in rd.config.read_text()  # the resolved config keeps the environment


@pytest.mark.slow
def test_the_documented_command_trains_the_example(tmp_path, small_suite) -> None:
    """``wmrl train --config examples/lint_env.yaml``, as the example's docstring gives it, from another folder:
    the tiny model and the two small built-in tasks (the session's suite), two steps; the anchors' rewards are the
    example's reviews."""
    env = {**os.environ, "WMRL_HOME": str(tmp_path / "home")}
    r = subprocess.run([sys.executable, "-m", "wmrl.cli", "train", "--config", str(ROOT / "examples" / "lint_env.yaml"),
                        "--set", f"run_dir={tmp_path / 'run'}", "--set", f"tasks.root={small_suite}"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rd = RunDir(tmp_path / "run")
    assert [m["step"] for m in read_jsonl(rd.metrics)] == [1, 2]
    anchors = [s for s in read_jsonl(rd.samples) if s["stream"] == "anchor"]
    assert anchors and all(0.0 <= s["reward_true"] <= 1.0 for s in anchors)
    ledger = json.loads((tmp_path / "run" / "ledger.json").read_text())["executions"]
    assert ledger["anchor"]["count"] == len(anchors)  # reviewed by the example's reviewer thread, not the sandbox:
    assert ledger["anchor"]["sandbox_cpu_s"] < 0.5 < ledger["warmup"]["sandbox_cpu_s"]  # only the warm-up ran programs
    assert "environment: lint\n" in rd.config.read_text()

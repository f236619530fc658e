"""A short `wmrl train` on a mixed folder: MLE-Dojo-layout train tasks, DSBench-layout held-out tasks.
The held-out evaluation reports RPG for the DSBench tasks, the train-task evaluation the percentile."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wmrl.runs.rundir import RunDir, read_jsonl

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_train_on_mledojo_evaluate_on_dsbench_reports_rpg(tmp_path):
    from wmrl.tasks.fixtures import build_benchmark_fixtures

    mixed = tmp_path / "mixed"
    build_benchmark_fixtures(mixed, ("mledojo", "dsbench"))
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "wmrl.cli", "train", "--config", str(ROOT / "configs" / "tiny.yaml"),
           "--set", f"tasks.root={mixed}", "--set", "tasks.train=null", "--set", "tasks.heldout=null",
           "--set", "tasks.heldout_split=benchmark:dsbench", "--set", "method=grpo", "--set", "optim.steps=1",
           "--set", f"run_dir={run}", "--no-progress"]
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "WMRL_HOME": str(tmp_path / "home")},
                       timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    rec = json.loads((run / "tasks.json").read_text())
    assert rec["heldout_split"] == "benchmark:dsbench"
    kinds = {t["id"]: (t["split"], t["adapter"], t["reward_kind"]) for t in rec["tasks"]}
    assert kinds == {"dojo-titanicp": ("train", "mledojo", "percentile"),
                     "dojo-houseprices": ("train", "mledojo", "percentile"),
                     "dsb-concrete": ("heldout", "dsbench", "rpg"), "dsb-diabetes": ("heldout", "dsbench", "rpg")}
    ev = read_jsonl(RunDir(run).eval)
    held = [e for e in ev if e["split"] == "heldout"][-1]
    train = [e for e in ev if e["split"] == "train"][-1]
    assert set(held["per_task"]) == {"dsb-concrete", "dsb-diabetes"}
    assert all(v["reward_kind"] == "rpg" and "mean_rpg" in v for v in held["per_task"].values())
    assert held["mean_rpg"] is not None and held["mean_percentile"] is None
    assert all(v["reward_kind"] == "percentile" and "mean_percentile" in v for v in train["per_task"].values())
    assert train["mean_percentile"] is not None and train["mean_rpg"] is None
    # DSBench's RPG: for the DSBench tasks (baseline and GT scores) it is their reward, averaged over tasks; the
    # MLE-Dojo tasks have neither score, so their RPG is n/a with the reason, in the record and in both summaries
    assert held["n_infra_errors"] == 0 and held["rpg_n_tasks"] == 2 and held["rpg_missing"] == {}
    assert held["mean_rpg_tasks"] == pytest.approx(held["mean_rpg"])
    assert train["mean_rpg_tasks"] is None
    assert train["rpg_missing"] == {"dojo-houseprices": "no baseline and no gold score",
                                    "dojo-titanicp": "no baseline and no gold score"}
    out = " ".join(r.stdout.split())
    assert f"heldout (step 1): RPG (DSBench) │ {held['mean_rpg_tasks']:.3f} │" in out, out[-3000:]
    assert "train (step 1): RPG (DSBench) │ n/a (no task has both a baseline and a gold score (dojo-houseprices: " \
           "no baseline and no gold score; dojo-titanicp: no baseline and no gold score))" in out, out[-3000:]
    from typer.testing import CliRunner

    from wmrl.cli import app

    e = CliRunner().invoke(app, ["eval", str(run)], env={"WMRL_HOME": str(tmp_path / "home")})
    assert e.exit_code == 0, e.output
    recs = read_jsonl(run / "eval_cli.jsonl")
    assert [x["split"] for x in recs] == ["heldout", "train"]
    text = " ".join(e.output.split())
    assert f"│ {recs[0]['mean_rpg_tasks']:.3f} │" in text
    assert ("RPG (train): n/a: no task has both a baseline and a gold score (dojo-houseprices: no baseline and no "
            "gold score; dojo-titanicp: no baseline and no gold score)") in text

"""`wmrl report` on a run directory written by the real trainer (tiny model, two steps, wmrl)."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import re

import pytest
from typer.testing import CliRunner

from wmrl.cli import app
from wmrl.report.runs import load_run

pytestmark = pytest.mark.slow

#: A small held-out task (442 rows, from scikit-learn) next to the two small train tasks.
HELDOUT_TASK = "sklearn-diabetes"


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    from wmrl.tasks.build import build_suite
    from wmrl.tasks.datasets import SMALL_TASKS
    from wmrl.training.config import config_from_dict
    from wmrl.training.trainer import run_training

    root = tmp_path_factory.mktemp("report-real")
    ids = [*SMALL_TASKS, HELDOUT_TASK]
    build_suite(root / "tasks", ids)
    cfg = config_from_dict({
        "method": "wmrl", "seed": 0, "run_dir": str(root / "run"), "progress": False,
        "model": {"name": "tiny"}, "scaffold": {"name": "grammar"},
        "tasks": {"root": str(root / "tasks"), "train": ids[:2], "heldout": ids[2:]},
        "rollout": {"tasks_per_step": 2, "group_size": 2, "max_new_tokens": 64},
        "wmrl": {"anchor_fraction": 0.5},
        "world_model": {"warmup_samples_per_task": 2, "fit_epochs": 1},
        "optim": {"steps": 2},
        "eval": {"samples_per_task": 2, "train_tasks": False},
    })
    run_training(cfg)
    return root / "run"


def test_report_from_real_run(real_run, tmp_path):
    run = load_run(real_run)
    assert run.finished and run.method == "wmrl"
    assert list(run.metrics["step"]) == [1, 2]
    out = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["report", str(real_run), "--out", str(out)])
    assert res.exit_code == 0, res.output
    page = out.read_text()
    assert "method <b>wmrl</b>" in page and "full config" in page
    assert len(re.findall(r"data:image/png;base64,", page)) >= 4
    assert "<h2>Compute ledger</h2>" in page


def test_report_cli_rejects_non_run_dir(tmp_path):
    res = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert res.exit_code == 2
    assert "not a wmrl run directory" in res.output

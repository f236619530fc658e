"""Every run records the code and command that trained it (``provenance.json``), whoever started it: a start and
each resume append one entry, so a bench table can name the commit of a run trained with ``wmrl train``."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.fakes import FakeExecutor, FakePolicy, FakeScaffold, FakeWorldModel, fake_task

from wmrl.report.bench_results import run_provenance
from wmrl.runs.provenance import PROVENANCE, code_version, read_invocations, record_invocation
from wmrl.training.components import Components
from wmrl.training.config import load_config
from wmrl.training.run import resume_training, run_training


def _comps() -> Components:
    return Components(train_tasks=[fake_task(i) for i in range(2)], heldout_tasks=[fake_task(9, "heldout")],
                      scaffold=FakeScaffold(), policy=FakePolicy(0), executor=FakeExecutor(0),
                      world_model=FakeWorldModel())


def test_a_start_and_a_resume_each_record_the_code_and_command(tmp_path):
    cfg = load_config(None, ["method=wmrl", f"run_dir={tmp_path / 'run'}", "optim.steps=2", "rollout.tasks_per_step=2",
                             "rollout.group_size=2", "progress=false", "eval.at_end=false"])
    run_training(cfg, components=_comps(), stop_after_step=1)
    first = read_invocations(tmp_path / "run")
    assert len(first) == 1 and first[0]["resumed"] is False
    assert first[0]["command"] == " ".join(sys.argv) and first[0]["started_at"].endswith("+00:00")
    assert first[0]["code_version"] == code_version()
    resume_training(tmp_path / "run", components=_comps())
    both = read_invocations(tmp_path / "run")
    assert [e["resumed"] for e in both] == [False, True]
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False,
                          cwd=str(Path(__file__).parent)).stdout.strip()
    if head and code_version()["commit"]:  # a git checkout of wmrl: the table names its commit
        assert run_provenance(tmp_path / "run")["commit"] == head


def test_an_unreadable_record_counts_as_not_recorded_and_is_replaced(tmp_path):
    (tmp_path / PROVENANCE).write_text('{"invocations": [')
    assert read_invocations(tmp_path) == [] and run_provenance(tmp_path) == {"commit": None, "dirty": None}
    record_invocation(tmp_path, {"code_version": {"commit": "c" * 40, "dirty": False}})
    assert run_provenance(tmp_path) == {"commit": "c" * 40, "dirty": False}

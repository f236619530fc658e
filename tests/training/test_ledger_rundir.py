"""Compute ledger and run-directory durability."""
from __future__ import annotations

import json

import pytest

from wmrl.execution.types import ExecutionResult, ExecutionStatus
from wmrl.runs.ledger import Ledger, format_ledger
from wmrl.runs.rundir import RunDir, read_jsonl, to_json_line, truncate_jsonl


def _res(status="ok", cpu=1.0, wall=2.0):
    return ExecutionResult("r", "t", ExecutionStatus(status), 0.5 if status == "ok" else None,
                           0.5 if status == "ok" else None, wall, cpu, 0, "", "", "h")


# ----------------------------------------------------------------------------------------------- ledger

def test_ledger_stages_executions_and_totals():
    L = Ledger(method="wmrl", anchor_fraction_configured=0.1)
    with L.phase("warmup"):
        L.add_executions("warmup", [_res(), _res("runtime_error", cpu=0.5)])
    L.begin_step()
    with L.stage("generate"):
        sum(i * i for i in range(200_000))  # burn a little CPU
    L.add_stage("execute", 3.0, 0.01)
    L.add_executions("anchor", [_res(), _res("infra_error", cpu=0.0, wall=0.1)])
    L.add_groups(4, 1)
    rec = L.end_step()
    assert rec["wall_s.execute"] == 3.0 and rec["cpu_s.generate"] > 0
    assert rec["exec_count"] == 2 and rec["exec_sandbox_cpu_s"] == 1.0
    assert rec["cum_exec_count"] == 2 and rec["cum_anchor_groups"] == 1 and rec["cum_groups"] == 4
    doc = L.to_json()
    assert doc["executions"]["warmup"] == {"count": 2, "ok": 1, "infra_errors": 0, "sandbox_cpu_s": 1.5, "wall_s": 4.0}
    assert doc["executions"]["anchor"]["infra_errors"] == 1
    t = doc["totals"]
    # training compute = trainer CPU + sandbox CPU of warm-up and anchors (eval apart)
    assert t["train_compute_cpu_s"] == pytest.approx(t["trainer_cpu_s"] + 2.5)
    assert doc["groups"]["anchor_fraction"] == 0.25
    assert "anchor" in format_ledger(doc)
    with pytest.raises(ValueError, match="unknown execution kind"):
        L.add_executions("other", [])


def test_ledger_carries_post_step_stages_and_resumes():
    L = Ledger(method="grpo")
    L.begin_step()
    L.end_step()
    L.add_stage("checkpoint", 0.5, 0.2)  # after the line was written -> next step's figures
    L.begin_step()
    rec = L.end_step()
    assert rec["wall_s.checkpoint"] == 0.5 and rec["step_wall_s"] >= 0.5
    L.add_executions("eval", [_res(cpu=4.0)])
    state = json.loads(json.dumps(L.state_dict()))
    L2 = Ledger()
    L2.load_state_dict(state)
    assert L2.steps == 2 and L2.executions["eval"].sandbox_cpu_s == 4.0
    assert L2.wall_s() >= state["wall_s_total"] and L2.totals()["eval_compute_cpu_s"] == pytest.approx(4.0)


# ----------------------------------------------------------------------------------------------- run dir

def test_jsonl_truncation_and_nan(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text("".join(to_json_line({"step": s, "x": float("nan")}) + "\n" for s in (1, 2, 3)) + '{"step": 4, "x')
    assert read_jsonl(p)[0]["x"] is None and len(read_jsonl(p)) == 3
    assert truncate_jsonl(p, 2) == 2
    assert [r["step"] for r in read_jsonl(p)] == [1, 2]
    p.write_text("".join(to_json_line({"step": 5}) + "\n" for _ in range(3)))
    truncate_jsonl(p, 5, max_lines=1)
    assert len(read_jsonl(p)) == 1


def test_checkpoint_is_atomic_and_pruned(tmp_path):
    rd = RunDir(tmp_path / "run")
    rd.create()
    for s in (1, 2, 3):
        with rd.write_checkpoint(s, keep=2) as d:
            (d / "trainer_state.json").write_text(json.dumps({"step": s}))
    assert rd.latest_checkpoint().name == "step_000003"
    assert sorted(p.name for p in rd.checkpoints.glob("step_*")) == ["step_000002", "step_000003"]
    # a crash while writing leaves the previous checkpoint as latest and no temp folder
    with pytest.raises(RuntimeError):
        with rd.write_checkpoint(4) as d:
            (d / "half").write_text("x")
            raise RuntimeError("killed")
    assert rd.latest_checkpoint().name == "step_000003"
    assert not list(rd.checkpoints.glob(".tmp-*"))
    with pytest.raises(FileNotFoundError, match="step_000002, step_000003"):
        rd.checkpoint(9)


def test_run_dir_line_counts(tmp_path):
    rd = RunDir(tmp_path)
    rd.append("metrics", {"step": 1})
    rd.append_many("samples", [{"step": 1}] * 3)
    assert rd.line_counts()["samples"] == 3 and rd.line_counts()["metrics"] == 1
    with pytest.raises(ValueError, match="unknown log"):
        rd.append("nope", {})

"""Compute ledger, run-directory durability and the per-step fusion glue."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from wmrl.execution.types import ExecutionResult, ExecutionStatus
from wmrl.training.fusion_step import fuse_step
from wmrl.training.ledger import Ledger, format_ledger
from wmrl.training.rundir import RunDir, read_jsonl, to_json_line, truncate_jsonl


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


# ----------------------------------------------------------------------------------------------- fusion

def _step(seed=0, m=4, g=4, anchors=(0,)):
    rng = np.random.default_rng(seed)
    gid = np.repeat(np.arange(m), g)
    anc = np.isin(gid, anchors)
    r = rng.random(m * g)
    rw = np.clip(r + 0.2 * rng.standard_normal(m * g), 0, 1)
    return gid, anc, np.ones(m * g, bool), np.where(anc, r, np.nan), rw, r


def test_ivw_weights_sum_to_one_and_split_alpha():
    gid, anc, val, rt, rw, _ = _step()
    fr = fuse_step(method="wmrl", group_ids=gid, is_anchor=anc, valid=val, r_true=rt, r_wm_cal=rw, min_pairs=2,
                   alpha_floor=0.0, alpha_ceiling=1.0)
    a = fr.stats["alpha"]
    assert fr.weights.sum() == pytest.approx(1.0)
    assert fr.weights[anc].sum() == pytest.approx(a) and fr.stats["fusion_mode"] == "ivw"
    assert fr.stats["var_wm"] >= fr.stats["var_anchor"]
    # anchors train on the true reward, the rest on the calibrated prediction
    assert np.allclose(fr.reward_used[anc], rt[anc]) and np.allclose(fr.reward_used[~anc], rw[~anc])


def test_denoise_off_and_baselines_use_equal_weights():
    gid, anc, val, rt, rw, r = _step()
    fr = fuse_step(method="wmrl", group_ids=gid, is_anchor=anc, valid=val, r_true=rt, r_wm_cal=rw, denoise=False)
    assert np.allclose(fr.weights, 1 / 16) and fr.stats["alpha"] == pytest.approx(0.25)
    fr = fuse_step(method="grpo", group_ids=gid, is_anchor=np.ones(16, bool), valid=val, r_true=r,
                   r_wm_cal=np.full(16, np.nan))
    assert np.allclose(fr.weights, 1 / 16) and fr.stats["alpha"] == 1.0
    with pytest.raises(ValueError, match="grpo"):
        fuse_step(method="grpo", group_ids=gid, is_anchor=anc, valid=val, r_true=rt, r_wm_cal=rw)
    with pytest.raises(ValueError, match="finite true reward"):
        fuse_step(method="wmrl", group_ids=gid, is_anchor=anc, valid=val, r_true=np.full(16, np.nan), r_wm_cal=rw)


def test_ppi_merged_rows_give_the_duplicated_batch_gradient():
    """One row per anchor with A_r - lambda*A_f equals the three-set PPI++ batch at ratio 1."""
    from wmrl.core.advantages import group_advantages
    from wmrl.core.fusion import ppi_samples
    from wmrl.core.losses import grpo_loss

    gid, anc, val, rt, rw, _ = _step(seed=3, anchors=(0, 1))
    fr = fuse_step(method="wmrl", group_ids=gid, is_anchor=anc, valid=val, r_true=rt, r_wm_cal=rw, fusion="ppi")
    lam = fr.stats["ppi_lambda"]
    assert 0 < lam <= 1
    B, T = 16, 3
    torch.manual_seed(0)
    base = torch.randn(B, T, dtype=torch.float64)
    mask = torch.ones(B, T, dtype=torch.bool)

    def grad_of(rows, adv, w):
        lp = base.clone().requires_grad_(True)
        sub = lp[rows]
        loss, _ = grpo_loss(sub, sub.detach(), torch.as_tensor(adv), mask[rows], sample_weights=torch.as_tensor(w),
                            aggregation="seq_mean")
        loss.backward()
        return lp.grad

    g_merged = grad_of(torch.arange(B), fr.advantages, fr.weights)
    ps = ppi_samples(rt[anc], rw[anc], rw[~anc], lam)
    a_idx, w_idx = np.flatnonzero(anc), np.flatnonzero(~anc)
    rows, advs, ws = [], [], []
    for s, idx in ((0, a_idx), (1, w_idx), (2, a_idx)):
        sel = ps.stream == s
        src = idx[ps.source_index[sel]]
        adv = group_advantages(torch.as_tensor(ps.rewards[sel]), torch.as_tensor(gid[src])).numpy()
        rows += src.tolist()
        advs += adv.tolist()
        ws += ps.weights[sel].tolist()
    g_dup = grad_of(torch.as_tensor(rows), np.asarray(advs), np.asarray(ws))
    assert torch.allclose(g_merged, g_dup, atol=1e-12)


def test_invalid_samples_get_no_weight():
    gid, anc, val, rt, rw, _ = _step()
    val[[0, 5]] = False
    rt[0] = np.nan
    fr = fuse_step(method="wmrl", group_ids=gid, is_anchor=anc, valid=val, r_true=rt, r_wm_cal=rw, min_pairs=2)
    assert fr.weights[0] == 0 and fr.weights[5] == 0 and fr.advantages[0] == 0
    assert fr.weights.sum() == pytest.approx(1.0)
    assert fr.stats["n_anchor_samples"] == 3 and fr.stats["n_wm_samples"] == 11

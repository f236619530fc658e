"""The training loop on small fakes of its parts: methods, run directory, ledger, exact resume."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tests.support.fakes import FakeExecutor, FakePolicy, FakeScaffold, FakeWorldModel, fake_task

from wmrl.training.config import load_config
from wmrl.runs.rundir import RunDir, read_jsonl
from wmrl.training.components import Components, RunDirError
from wmrl.training.run import resume_training, run_training

VOLATILE = ("time", "cum_wall_s", "cum_trainer_cpu_s", "cum_compute_cpu_s", "step_wall_s", "step_cpu_s")


def comps(method: str, infra_every: int = 0, seed: int = 0) -> Components:
    return Components(train_tasks=[fake_task(i) for i in range(3)], heldout_tasks=[fake_task(9, "heldout")],
                      scaffold=FakeScaffold(), policy=FakePolicy(seed), executor=FakeExecutor(infra_every),
                      world_model=None if method == "grpo" else FakeWorldModel())


def cfg_for(tmp_path, method: str, steps: int = 4, *extra: str):
    return load_config(None, [f"method={method}", f"run_dir={tmp_path / method}", f"optim.steps={steps}",
                              "rollout.tasks_per_step=4", "rollout.group_size=4", "optim.lr=0.05",
                              "wmrl.routing.anchor_fraction=0.25", "wmrl.calibration.min_anchors=4", "progress=false",
                              "eval.every_k=2", "eval.samples_per_task=2", *extra])


def _stable(rec):
    return {k: v for k, v in rec.items() if k not in VOLATILE and not k.startswith(("wall_s.", "cpu_s."))}


@pytest.mark.parametrize("method, extra", [("grpo", ()), ("wm", ()), ("wmrl", ()), ("wmrl-ppi", ()),
                                           ("wmrl-no-denoise", ()), ("wmrl-no-debias", ()), ("anchor-only", ())])
def test_methods_write_the_run_directory(tmp_path, method, extra):
    cfg = cfg_for(tmp_path, method, 4, *extra)
    s = run_training(cfg, components=comps(method))
    rd = RunDir(cfg.run_dir)
    assert s.status == "completed" and s.steps == 4
    m = read_jsonl(rd.metrics)
    assert [r["step"] for r in m] == [1, 2, 3, 4]
    for r in m:
        for k in ("reward_true_mean", "reward_wm_mean", "reward_wm_calibrated_mean", "alpha", "var_anchor", "var_wm",
                  "residual_var", "ppi_lambda", "n_anchor_groups", "n_wm_groups", "n_infra_errors", "loss", "kl",
                  "clip_frac", "wall_s.generate", "cpu_s.update", "cum_exec_count", "cum_exec_sandbox_cpu_s",
                  "cum_compute_cpu_s"):
            assert k in r, k
    n_anchor = sum(r["n_anchor_groups"] for r in m)
    if method == "grpo":
        assert n_anchor == 16 and all(r["alpha"] == 1.0 for r in m)
        assert all(r["reward_wm_mean"] is None for r in m)
    elif method == "wm":
        assert n_anchor == 0 and all(r["alpha"] == 0.0 for r in m)
        assert s.ledger["executions"]["anchor"]["count"] == 0
    else:
        assert n_anchor == 4  # 0.25 of 16 groups, exactly
        if method == "anchor-only":  # no world model: nothing scored, world-model samples out of the loss
            assert not rd.calibration.exists() or not read_jsonl(rd.calibration)
            assert all(r["reward_wm_mean"] is None and r["n_wm_samples"] == 0 for r in m)
        else:
            assert len(read_jsonl(rd.calibration)) == 4
    led = json.loads(rd.ledger.read_text())
    assert led["executions"]["anchor"]["count"] == n_anchor * 4
    assert led["groups"]["total"] == 16 and led["groups"]["anchor"] == n_anchor
    assert led["totals"]["train_compute_cpu_s"] > 0
    ev = read_jsonl(rd.eval)
    assert [(r["step"], r["split"]) for r in ev] == [(2, "heldout"), (2, "train"), (4, "heldout"), (4, "train")]
    assert s.final_eval["heldout"]["step"] == 4
    assert len(read_jsonl(rd.samples)) == 4 * 16
    assert (rd.root / "config.yaml").is_file() and json.loads(rd.summary.read_text())["steps"] == 4
    assert rd.latest_checkpoint().name == "step_000004"
    assert any(rd.tb.iterdir())


def test_wmrl_learns_to_raise_true_reward(tmp_path):
    """Sanity: the fake task rewards token '3'; WMRL training raises its probability."""
    cfg = cfg_for(tmp_path, "wmrl", 12, "eval.every_k=0", "eval.at_end=false", "optim.lr=0.2")
    c = comps("wmrl")
    p0 = torch.softmax(c.policy.theta.detach(), -1)[3].item()
    run_training(cfg, components=c)
    p1 = torch.softmax(c.policy.theta.detach(), -1)[3].item()
    assert p1 > p0 + 0.05


def test_infra_failures_are_dropped_and_counted(tmp_path):
    cfg = cfg_for(tmp_path, "grpo", 2, "eval.every_k=0", "eval.at_end=false")
    run_training(cfg, components=comps("grpo", infra_every=3))
    rd = RunDir(cfg.run_dir)
    m = read_jsonl(rd.metrics)
    n_inf = sum(r["n_infra_errors"] for r in m)
    assert n_inf == 32 // 3
    samples = read_jsonl(rd.samples)
    dropped = [s for s in samples if s["dropped"]]
    assert len(dropped) == n_inf
    assert all(s["weight"] == 0 and s["advantage"] == 0 and s["reward_true"] is None for s in dropped)
    assert json.loads(rd.ledger.read_text())["executions"]["anchor"]["infra_errors"] == n_inf


def test_resume_continues_exactly(tmp_path):
    """A run stopped after step 2 and resumed matches an uninterrupted run step for step."""
    full = cfg_for(tmp_path / "a", "wmrl", 5)
    ca = comps("wmrl")
    run_training(full, components=ca)

    part = cfg_for(tmp_path / "b", "wmrl", 5)
    run_training(part, components=comps("wmrl"), stop_after_step=2)
    rd = RunDir(part.run_dir)
    state2 = json.loads((rd.checkpoint(2) / "trainer_state.json").read_text())
    # a killed process leaves a torn line and records of a step in flight behind
    with open(rd.metrics, "a") as fh:
        fh.write(json.dumps({"step": 3, "loss": 1.0}) + "\n{\"step\": 3, \"lo")
    cb = comps("wmrl")
    s = resume_training(part.run_dir, components=cb)
    assert s.steps == 5
    ma, mb = read_jsonl(RunDir(full.run_dir).metrics), read_jsonl(rd.metrics)
    assert [r["step"] for r in mb] == [1, 2, 3, 4, 5]
    for ra, rb in zip(ma, mb):
        assert _stable(ra) == _stable(rb)
    assert torch.equal(ca.policy.theta.detach(), cb.policy.theta.detach())
    # the calibrator state saved at step 2 is what the resumed run started from
    assert state2["recipe"]["calibrator"]["last_step"] <= 2
    assert state2["step"] == 2 and state2["router"]["total_groups"] == 8
    assert [(r["step"], r["split"]) for r in read_jsonl(rd.eval)] == \
        [(r["step"], r["split"]) for r in read_jsonl(RunDir(full.run_dir).eval)]


def test_fresh_run_refuses_existing_run_dir(tmp_path):
    cfg = cfg_for(tmp_path, "grpo", 1, "eval.at_end=false", "eval.every_k=0")
    run_training(cfg, components=comps("grpo"))
    with pytest.raises(RunDirError, match="--resume"):
        run_training(cfg_for(tmp_path, "grpo", 1), components=comps("grpo"))


def test_resume_refuses_changes_to_the_past(tmp_path):
    cfg = cfg_for(tmp_path, "wmrl", 1, "eval.at_end=false", "eval.every_k=0")
    run_training(cfg, components=comps("wmrl"), stop_after_step=1)
    from wmrl.training.config import ConfigError

    with pytest.raises(ConfigError, match="wmrl.routing.anchor_fraction"):
        resume_training(cfg.run_dir, ["wmrl.routing.anchor_fraction=0.5"], components=comps("wmrl"))
    s = resume_training(cfg.run_dir, ["optim.steps=2"], components=comps("wmrl"))
    assert s.steps == 2


def test_anchor_fraction_long_run(tmp_path):
    cfg = cfg_for(tmp_path, "wmrl", 10, "wmrl.routing.anchor_fraction=0.1", "eval.every_k=0", "eval.at_end=false")
    s = run_training(cfg, components=comps("wmrl"))
    g = s.ledger["groups"]
    assert g["total"] == 40 and g["anchor"] == 4 and np.isclose(g["anchor_fraction"], 0.1)


def test_world_model_refresh_every_k(tmp_path):
    """refresh_every_k=2 refits the world model at steps 2 and 4; the refitted model goes into checkpoints."""
    c = comps("wmrl")
    calls = []

    def refit(step):
        calls.append(step)
        c.world_model.offset = float(step)
        return {"n_records": 10 * step}

    c.refit_world_model = refit
    cfg = cfg_for(tmp_path, "wmrl", 4, "world_model.refresh_every_k=2", "eval.every_k=0", "eval.at_end=false")
    run_training(cfg, components=c)
    assert calls == [2, 4]
    rd = RunDir(cfg.run_dir)
    m = read_jsonl(rd.metrics)
    assert [r.get("wm_refresh_records") for r in m] == [None, 20, None, 40]
    assert "wall_s.wm_refresh" in m[1]
    assert (rd.checkpoint(4) / "world_model" / "wm.txt").read_text() == "4.0"
    state = json.loads((rd.checkpoint(4) / "trainer_state.json").read_text())
    assert state["world_model_in_checkpoint"] is True


def test_refit_uses_an_external_warmup_corpus_plus_the_runs_anchors(tmp_path):
    """With world_model.warmup_corpus the warm-up is not in the run's execution log, so the refit must read
    it from the corpus: warm-up corpus + anchors so far (docs/training.md), not anchors alone."""
    from wmrl.execution.log import ExecutionLog
    from wmrl.execution.types import ExecutionRequest, ExecutionResult, ExecutionStatus
    from wmrl.training.parts import refit_world_model

    def log_rows(path, stream, n):
        log = ExecutionLog(path)
        for i in range(n):
            req = ExecutionRequest(task=fake_task(i % 2), program="print(1)", request_id=f"{stream}{i}",
                                   meta={"prompt": "p", "completion": f"c{i}", "group_id": i, "stream": stream})
            log.append(req, ExecutionResult(req.request_id, req.task.id, ExecutionStatus.OK, 0.5, 0.5, 1.0, 1.0, 0,
                                            "", "", "x"))
        log.close()

    corpus = tmp_path / "corpus.sqlite"
    log_rows(corpus, "warmup", 5)
    rd = RunDir(tmp_path / "run")
    rd.create()
    log_rows(rd.executions, "anchor", 3)

    class Recorder:
        def fit(self, records, **kw):
            self.streams = sorted(r["meta"]["stream"] for r in records)
            return {"n_train": len(records)}

    wm = Recorder()
    cfg = load_config(None, [f"world_model.warmup_corpus={corpus}"])
    assert refit_world_model(cfg, rd, wm)["n_records"] == 8
    assert wm.streams == ["anchor"] * 3 + ["warmup"] * 5
    cfg = load_config(None, [])  # warm-up collected in the run: only its own log
    assert refit_world_model(cfg, rd, wm)["n_records"] == 3


def test_wmrl_trains_world_model_samples_of_executed_programs_on_their_measured_reward(tmp_path):
    """Recall (wmrl.core.recall): a world-model sample whose program an earlier anchor executed trains on
    the anchor's measured reward; the step's own anchors and wmrl-no-recall recall nothing."""
    for method in ("wmrl", "wmrl-no-recall"):
        cfg = cfg_for(tmp_path, method, 8, "eval.every_k=0", "eval.at_end=false", "optim.lr=0.3",
                      "wmrl.routing.anchor_fraction=0.5")
        c = comps(method)
        c.executed_records = c.executor.executed_records
        run_training(cfg, components=c)
        rd = RunDir(cfg.run_dir)
        m, samples = read_jsonl(rd.metrics), read_jsonl(rd.samples)
        seen: dict[tuple[str, str], float] = {}
        n = 0
        for step in range(1, 9):
            rows = [s for s in samples if s["step"] == step]
            for s in rows:
                key = (s["task_id"], s["completion"])
                if s["stream"] == "wm" and key in seen and method == "wmrl":
                    assert s["reward_used"] == pytest.approx(seen[key]), s
                    n += 1
                elif s["stream"] == "wm":
                    assert s["reward_used"] == pytest.approx(s["reward_wm_calibrated"])
            seen.update({(s["task_id"], s["completion"]): s["reward_true"] for s in rows if s["stream"] == "anchor"})
        assert sum(r["n_recalled"] for r in m) == n
        assert (n > 0) == (method == "wmrl")

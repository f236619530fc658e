"""End to end: a tiny-model wmrl run whose anchors run in `wmrl serve sandbox` and whose world-model scores come from
`wmrl serve world-model` (both real subprocesses) trains exactly as the same run in one process."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.serve.servers import TOKEN, Server, fitted_world_model
from wmrl.runs.rundir import RunDir, read_jsonl
from wmrl.training.config import ConfigError, load_config
from wmrl.training.run import run_training

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny.yaml"

pytestmark = pytest.mark.slow

#: per-sample fields that must agree (timings and request ids may not)
SAMPLE_KEYS = ("step", "task_id", "group", "stream", "completion", "reward_true", "reward_wm", "reward_wm_calibrated",
               "reward_used", "advantage", "weight", "status", "dropped")
#: per-step metrics that must agree
METRIC_KEYS = ("reward_wm_mean", "reward_wm_calibrated_mean", "reward_true_mean", "reward_used_mean", "alpha",
               "n_anchor_groups", "n_wm_groups", "exec_count", "n_recalled", "n_infra_errors", "var_anchor", "var_wm",
               "residual_var", "weight_anchor", "weight_wm", "calibrator_n_anchors", "loss", "kl", "grad_norm",
               "fusion_mode")


def _train(run: Path, small_suite: Path, extra: list[str]) -> RunDir:
    cfg = load_config(TINY, [f"tasks.root={small_suite}", f"run_dir={run}", "optim.steps=2", "eval.at_end=false",
                             *extra])
    run_training(cfg)
    return RunDir(run)


def _common(rows: list[dict], keys: tuple[str, ...]) -> list[dict]:
    return [{k: r[k] for k in keys} for r in rows]  # a missing key is a KeyError: nothing is compared silently


def _policy_bytes(rd: RunDir) -> dict[str, bytes]:
    pol = rd.checkpoints / "step_000002" / "policy"
    return {p.name: p.read_bytes() for p in sorted(pol.iterdir()) if p.is_file()}


def test_served_sandbox_and_world_model_train_like_the_in_process_run(small_suite, tmp_path, monkeypatch):
    wm_dir = fitted_world_model(tmp_path / "wm", small_suite)
    local = _train(tmp_path / "local", small_suite, [f"world_model.path={wm_dir}"])

    monkeypatch.setenv("WMRL_SERVE_TOKEN", TOKEN)
    env = {"WMRL_SERVE_TOKEN": TOKEN}
    sandbox = Server("sandbox", ["--workers", "2", "--log", str(tmp_path / "served.sqlite"),
                                 "--tasks-root", str(small_suite)], env)
    world = Server("world-model", ["--model", str(wm_dir), "--backbone", "tiny", "--seed", "0", "--threads", "1",
                                   "--scaffold", "grammar", "--tasks-root", str(small_suite)], env)
    with sandbox, world:
        remote = _train(tmp_path / "remote", small_suite, ["executor.kind=remote", f"executor.url={sandbox.url}",
                                                           f"world_model.url={world.url}"])
        sb, wh = sandbox.health(), world.health()

    m_local, m_remote = read_jsonl(local.metrics), read_jsonl(remote.metrics)
    assert [r["step"] for r in m_remote] == [1, 2]
    assert _common(m_remote, METRIC_KEYS) == _common(m_local, METRIC_KEYS)
    s_local, s_remote = read_jsonl(local.root / "samples.jsonl"), read_jsonl(remote.root / "samples.jsonl")
    assert len(s_remote) == len(s_local) == 8
    assert _common(s_remote, SAMPLE_KEYS) == _common(s_local, SAMPLE_KEYS)
    assert _policy_bytes(remote) == _policy_bytes(local) != {}  # the same updates: the same weights, bit for bit
    anchors = sum(r["exec_count"] for r in m_remote)
    assert anchors >= 2
    # every anchor ran once in the service, which logged it; the run's own log holds the same outcomes
    assert sb["load"]["executed"] == anchors and sb["load"]["served"] == anchors
    assert wh["load"]["executed"] == 8 and wh["load"]["batches"] == 2  # one model call per step of 4 trajectories
    from wmrl.execution.log import ExecutionLog

    served = ExecutionLog(tmp_path / "served.sqlite").records()
    mine = ExecutionLog(remote.executions).records()
    assert len(served) == len(mine) == anchors
    assert sorted(r["reward"] for r in served) == sorted(r["reward"] for r in mine)
    assert all(r["trajectory"] is not None and r["trajectory"].stream == "anchor" for r in served)
    assert not (remote.root / "world_model").exists()  # nothing fitted or copied: the model is served
    assert json.loads(remote.ledger.read_text())["executions"]["warmup"]["count"] == 0


def test_served_parts_are_refused_clearly_when_unreachable(small_suite, tmp_path):
    port_url = "http://127.0.0.1:9"  # discard port: nothing listens
    cfg = load_config(TINY, [f"tasks.root={small_suite}", f"run_dir={tmp_path / 'r'}", "optim.steps=1",
                             "executor.kind=remote", f"executor.url={port_url}"])
    from wmrl.serve import client

    orig = client.ServiceClient.__init__

    def quick(self, *a, **kw):  # no long retries against a port that is closed for good
        kw.update(retries=1)
        orig(self, *a, **kw)

    wm_cfg = load_config(TINY, [f"tasks.root={small_suite}", f"run_dir={tmp_path / 'w'}", "optim.steps=1",
                                f"world_model.url={port_url}"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(client.ServiceClient, "__init__", quick)
        with pytest.raises(ConfigError, match="executor.url: .*no answer after 2 tries"):
            run_training(cfg)
        with pytest.raises(ConfigError, match="world_model.url: .*no answer after 2 tries"):
            run_training(wm_cfg)
    with pytest.raises(Exception, match="executor.kind=remote needs executor.url"):
        load_config(TINY, ["executor.kind=remote"])
    with pytest.raises(Exception, match="world_model.url serves a model fitted elsewhere"):
        load_config(TINY, ["world_model.url=http://x:1", "world_model.path=/somewhere"])

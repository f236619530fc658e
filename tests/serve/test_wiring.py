"""The factories build the served parts: the trainer's executor (``executor.kind: remote``), verl's parts from the
environment (``WMRL_EXECUTOR=remote``, ``WMRL_WORLD_MODEL_URL``), and TRL's driver on a RemoteExecutor and a
RemoteWorldModel (its anchors run in a sandbox service, its scores come from a world-model service)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.serve.servers import BINARY, TOKEN, ThreadServer
from tests.serve.test_world_model_service import CountingWorldModel, FakeTasks, PromptScaffold
from wmrl.serve.client import RemoteExecutor, RemoteWorldModel
from wmrl.serve.world_model_app import WorldModelService, create_world_model_app
from wmrl.training.config import load_config
from wmrl.training.parts import make_executor

pytestmark = pytest.mark.slow


def test_trainer_config_builds_a_remote_executor(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_TOKEN", "abc")
    cfg = load_config(None, ["executor.kind=remote", "executor.url=http://127.0.0.1:1", "executor.token_env=MY_TOKEN",
                             "executor.workers=3"])
    ex = make_executor(cfg, tmp_path / "executions.sqlite")
    try:
        assert isinstance(ex, RemoteExecutor) and ex.max_workers == 3 and ex.log.path == tmp_path / "executions.sqlite"
        assert ex.client._client.headers["authorization"] == "Bearer abc"
    finally:
        ex.close()


def test_verl_parts_from_the_environment_are_the_served_ones(small_suite, monkeypatch):
    from wmrl.integrations.verl import build_parts_from_env

    monkeypatch.setenv("WMRL_TASKS_ROOT", str(small_suite))
    monkeypatch.setenv("WMRL_EXECUTOR", "remote")
    monkeypatch.setenv("WMRL_EXECUTOR_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("WMRL_WORLD_MODEL_URL", "http://127.0.0.1:2")
    monkeypatch.setenv("WMRL_SERVE_TOKEN", TOKEN)
    monkeypatch.delenv("WMRL_WORLD_MODEL", raising=False)
    parts = build_parts_from_env()
    try:
        assert isinstance(parts["executor"], RemoteExecutor) and isinstance(parts["world_model"], RemoteWorldModel)
        assert parts["world_model"].client.url == "http://127.0.0.1:2"
    finally:
        parts["executor"].close()
    monkeypatch.delenv("WMRL_EXECUTOR_URL")
    with pytest.raises(ValueError, match="WMRL_EXECUTOR_URL"):
        build_parts_from_env()


def test_trl_driver_on_the_served_parts(small_suite, tmp_path):
    """WMRLDriver (what the TRL reward function and trainer call) with a RemoteExecutor on a sandbox service and a
    RemoteWorldModel on a world-model service: anchors executed by the service, scores from the served model."""
    from wmrl.core.recipe import RecipeSettings
    from wmrl.execution.log import ExecutionLog
    from wmrl.execution.pool import LocalExecutor
    from wmrl.integrations.driver import WMRLDriver
    from wmrl.serve.sandbox_app import SandboxService, create_sandbox_app
    from wmrl.tasks.loader import TaskSuite

    class Script:
        name = "script"

        def prompt(self, task):
            return f"solve {task.id}"

        def render(self, task, completion):
            return completion

    suite = TaskSuite(small_suite)
    task = suite.get("vcdextra-titanicp")
    exlog = ExecutionLog(tmp_path / "served.sqlite")
    wm = CountingWorldModel()
    wm_svc = WorldModelService(wm, FakeTasks(), PromptScaffold(), max_wait_s=0.0)
    with LocalExecutor(max_workers=2, log=exlog) as local:
        sb_svc = SandboxService(suite, local, exlog, max_concurrency=8, timeout_s=120)
        with ThreadServer(create_sandbox_app(sb_svc, token=TOKEN)) as sb, \
                ThreadServer(create_world_model_app(wm_svc, token=TOKEN)) as ws:
            ex, rwm = RemoteExecutor(sb.url, TOKEN, max_workers=4), RemoteWorldModel(ws.url, TOKEN)
            driver = WMRLDriver([task], Script(), rwm, ex, method="wmrl", anchor_fraction=1.0,
                                settings=RecipeSettings())
            comps = [BINARY + f"# {i}\n" for i in range(4)]
            rec = driver.step(1, [task.id] * 4, ["solve vcdextra-titanicp"] * 4, comps, [0, 0, 1, 1])
            ex.close()
            rwm.close()
    wm_svc.batcher.close()
    assert np.array_equal(rec.inputs.reward_wm, wm.predict(["solve vcdextra-titanicp"] * 4, comps))
    n_anchor = int(np.sum(rec.inputs.is_anchor))
    assert exlog.count() == n_anchor > 0 and all(rec.statuses[i] == "ok" for i in np.flatnonzero(rec.inputs.is_anchor))
    assert np.isfinite(rec.inputs.reward_true[rec.inputs.is_anchor]).all()


def test_world_model_service_loads_a_run_folder(small_suite, tmp_path):
    """``--model RUN_DIR``: the run's world_model/ on the backbone, seed and scaffold its config.yaml names; a bare
    world-model folder without a world_model.json is refused with a clear message."""
    import shutil

    import yaml

    from tests.serve.servers import fitted_world_model
    from wmrl.models.backbone import tiny_backbone
    from wmrl.serve.world_model_app import load_served_world_model
    from wmrl.world_model.factory import load_world_model

    wm_dir = fitted_world_model(tmp_path / "wm", small_suite, seed=1)
    run = tmp_path / "run"
    shutil.copytree(wm_dir, run / "world_model")
    (run / "config.yaml").write_text(yaml.safe_dump({"model": {"name": "tiny"}, "seed": 1,
                                                     "scaffold": {"name": "grammar"}}))
    served, info = load_served_world_model(run)
    assert (info["backbone"], info["seed"], info["scaffold"], info["kind"]) == ("tiny", 1, "grammar", "regression")
    model, tok = tiny_backbone(seed=1)
    direct = load_world_model(wm_dir, model, tok)
    prompts, comps = ["solve it"] * 3, ["model = Ridge(alpha=1)", "model = Ridge(alpha=9)", "x = ("]
    assert np.array_equal(served.predict(prompts, comps), direct.predict(prompts, comps))
    # a bare world-model folder records its backbone (tiny, seed 1): served without being told
    bare, info = load_served_world_model(wm_dir)
    assert (info["backbone"], info["seed"]) == ("tiny", 1)
    assert np.array_equal(bare.predict(prompts, comps), direct.predict(prompts, comps))
    with pytest.raises(ValueError, match="--backbone NAME"):
        load_served_world_model(wm_dir, backbone="smollm2-135m")  # hidden size 576, not tiny's 64
    with pytest.raises(FileNotFoundError, match="neither a world-model folder"):
        load_served_world_model(tmp_path)

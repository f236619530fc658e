"""Unit tests of the embodied track: collapse, labels, policy log-probs, recipe bridge, config errors,
Meta-World initial states."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from wmrl.embodied.config import load_config
from wmrl.embodied.policy import GaussianPolicy, PolicyConfig
from wmrl.embodied.progress import collapse, progress_labels
from wmrl.core.recipe import RecipeSettings, StepInputs
from wmrl.embodied.environment import anchor_rewards
from wmrl.runs.config import ConfigError
from wmrl.step.engine import StepEngine


def _recipe_step(engine: StepEngine, step: int, gid, is_anchor, r_true, r_hat):
    """The recipe stage of the step engine on one step's arrays (as the embodied trainer's step runs it)."""
    return engine.run_recipe(StepInputs(step=step, group_ids=gid, is_anchor=is_anchor, valid=np.ones(gid.size, bool),
                                        reward_true=np.asarray(r_true, float), reward_wm=np.asarray(r_hat, float)))


def test_collapse_modes() -> None:
    p = np.array([0.1, 0.2, 0.9, 0.3, 0.4])
    assert collapse(p, "peak") == pytest.approx(0.9)
    assert collapse(p, "final") == pytest.approx(0.4)
    # shaping, k=2: mean(last 2) - mean(first 2) = 0.35 - 0.15 = 0.2 -> (1 + 0.2) / 2
    assert collapse(p, "shaping", k=2) == pytest.approx(0.6)
    # k larger than the episode: whole-episode means cancel -> 0.5
    assert collapse(p, "shaping", k=50) == pytest.approx(0.5)
    # the peak rewards touching a good state and falling apart; shaping does not
    touch_and_fail = np.array([0.1, 0.95, 0.1, 0.1])
    steady = np.array([0.1, 0.4, 0.6, 0.7])
    assert collapse(touch_and_fail, "peak") > collapse(steady, "peak")
    assert collapse(touch_and_fail, "shaping", k=1) < collapse(steady, "shaping", k=1)
    with pytest.raises(ValueError, match="unknown collapse"):
        collapse(p, "mean")
    with pytest.raises(ValueError, match="non-empty"):
        collapse(np.zeros(0))
    with pytest.raises(ValueError, match="k must be"):
        collapse(p, k=0)


def test_progress_labels() -> None:
    np.testing.assert_allclose(progress_labels(5, True), [0, 0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose(progress_labels(3, False), [0, 0, 0])
    with pytest.raises(ValueError):
        progress_labels(0, True)


def test_policy_logprob_is_exact_gaussian() -> None:
    torch.manual_seed(0)
    pol = GaussianPolicy(["push the puck", "open the door"], PolicyConfig(hidden=8, layers=1, lang_dim=4, init_std=0.5))
    obs = torch.randn(6, 39)
    ins = torch.tensor([0, 1, 0, 1, 1, 0])
    a, lp = pol.act(obs.numpy(), ins.numpy(), torch.Generator().manual_seed(3))
    mu = pol.mean(obs, ins).detach()
    ref = torch.distributions.Normal(mu, pol.log_std.exp().detach()).log_prob(torch.as_tensor(a)).sum(-1)
    np.testing.assert_allclose(lp, ref.numpy(), rtol=1e-5, atol=1e-5)
    # deterministic without a generator; unknown words map to <unk>
    a2, _ = pol.act(obs.numpy(), ins.numpy(), None)
    np.testing.assert_allclose(a2, mu.numpy(), atol=1e-6)
    with pytest.raises(ValueError, match="not one the policy"):
        pol.index("fly away")


def test_anchor_rewards_hide_non_anchor_success() -> None:
    r = anchor_rewards(np.array([1.0, 0.0, 1.0, 1.0]), np.array([True, True, False, False]))
    assert r[:2].tolist() == [1.0, 0.0] and np.isnan(r[2:]).all()
    with pytest.raises(ValueError, match="same shape"):
        anchor_rewards(np.ones(3), np.ones(4, bool))


def _run_recipe(name: str, success_fn) -> object:
    gid = np.repeat(np.arange(4), 4)
    anc = gid < 2
    engine = StepEngine(name, RecipeSettings(calibrator_min_anchors=4, fusion_min_pairs=2))
    r_hat = np.linspace(0, 1, 16)
    out = None
    for step in (1, 2, 3):
        out = _recipe_step(engine, step, gid, anc, anchor_rewards(success_fn(anc, r_hat), anc), r_hat)
    return out


@pytest.mark.parametrize("name", ["wmrl", "wmrl-no-debias", "wmrl-no-denoise", "wmrl-ppi", "anchor-only"])
def test_recipe_ignores_success_off_anchors(name: str) -> None:
    """Whatever the success of world-model episodes, the recipe's output is the same: only the anchors'
    success (and the world-model scores) enter; changing the anchors' success changes it."""
    base = _run_recipe(name, lambda anc, r: np.where(anc, (r > 0.3).astype(float), 0.0))
    other_wm = _run_recipe(name, lambda anc, r: np.where(anc, (r > 0.3).astype(float), 1.0))
    other_anchor = _run_recipe(name, lambda anc, r: np.where(anc, (r < 0.3).astype(float), 0.0))
    np.testing.assert_array_equal(base.advantages, other_wm.advantages)
    np.testing.assert_array_equal(base.weights, other_wm.weights)
    assert not np.array_equal(base.advantages, other_anchor.advantages)


def test_recipe_grpo_and_wm_streams() -> None:
    gid = np.repeat(np.arange(2), 3)
    g = _recipe_step(StepEngine("grpo"), 1, gid, np.ones(6, bool), [1, 0, 0, 1, 1, 0.0], np.full(6, np.nan))
    assert g.stats["alpha"] == 1.0 and g.advantages[0] > 0 > g.advantages[1]
    w = _recipe_step(StepEngine("wm"), 1, gid, np.zeros(6, bool), np.full(6, np.nan), [0.9, 0.1, 0.5, 0.2, 0.3, 0.4])
    assert w.stats["alpha"] == 0.0 and w.advantages[0] > 0 > w.advantages[1]
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        StepEngine("nope")


def test_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown config key"):
        load_config(preset="tiny", overrides=["optim.stepz=3"])
    with pytest.raises(ConfigError, match="method"):
        load_config(preset="tiny", overrides=["method=ppo"])
    with pytest.raises(ConfigError, match="it is called method now"):
        load_config(preset="tiny", overrides=["recipe=grpo"])
    with pytest.raises(ConfigError, match="50"):
        load_config(preset="tiny", overrides=["suite.n_train_states=40", "suite.n_heldout_states=20"])
    with pytest.raises(ConfigError, match="epochs_per_step"):
        load_config(preset="tiny", overrides=["method=wmrl-ppi", "optim.epochs_per_step=2"])
    with pytest.raises(ConfigError, match="collapse"):
        load_config(preset="tiny", overrides=["world_model.collapse=mean"])
    with pytest.raises(ConfigError, match="preset"):
        load_config(preset="huge")
    cfg = load_config(preset="bench", overrides=["seed=3"])
    assert cfg.seed == 3 and cfg.suite.tasks[0] == "push-v3" and cfg.optim.steps == 30


def test_metaworld_initial_states_seeded_and_split() -> None:
    pytest.importorskip("metaworld")
    from wmrl.embodied.env import EnvPool, Suite

    suite = Suite(tasks=["reach-v3"], n_train_states=2, n_heldout_states=2, max_steps=5)
    p1, p2 = EnvPool(suite), EnvPool(suite)
    tr, ho = suite.states("train"), suite.states("heldout")
    assert [s.index for s in tr] == [0, 1] and [s.index for s in ho] == [2, 3]
    e1, e2 = p1.acquire("reach-v3"), p2.acquire("reach-v3")
    o_a, o_b = p1.reset_to(e1, tr[0]), p2.reset_to(e2, tr[0])
    np.testing.assert_array_equal(o_a, o_b)  # deterministic across instances
    goals = {tuple(np.round(p1.reset_to(e1, s)[36:39], 6)) for s in tr + ho}
    assert len(goals) == 4  # every state distinct (goal positions differ)
    with pytest.raises(ValueError, match="no instruction"):
        Suite(tasks=["bin-picking-v3"])
    with pytest.raises(ValueError, match="overlap"):
        Suite(tasks=["reach-v3"], heldout_tasks=["reach-v3"])
    assert math.isfinite(float(o_a.sum()))


def test_config_file(tmp_path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("method: grpo\noptim:\n  steps: 4\n  steps: 5\n")
    with pytest.raises(ConfigError, match="steps"):
        load_config(p, preset="tiny")
    p.write_text("method: grpo\noptim:\n  steps: 4\nsuite:\n  tasks: [push-v3, reach-v3]\n")
    cfg = load_config(p, ["seed=2"], preset="tiny")
    assert (cfg.method, cfg.optim.steps, cfg.seed, cfg.suite.tasks) == ("grpo", 4, 2, ["push-v3", "reach-v3"])
    assert cfg.suite.max_steps == 20  # the rest of the preset stays
    with pytest.raises(FileNotFoundError, match="missing.yaml' not found"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="key=value"):
        load_config(preset="tiny", overrides=["seed"])


@pytest.mark.parametrize("bad", [["--set", "suite.tasks=[no-such-task-v3]"],
                                 ["--set", "suite.tasks=[reach-v3]", "--set", "suite.heldout_tasks=[reach-v3]"]])
def test_a_bad_task_list_is_refused_before_the_run_folder_is_made(tmp_path, bad) -> None:
    from typer.testing import CliRunner

    from wmrl.cli import app

    run = tmp_path / "runs" / "bad"
    r = CliRunner().invoke(app, ["embodied", "train", "--preset", "tiny", "--no-progress",
                                 "--set", f"run_dir={run}", *bad])
    assert r.exit_code != 0 and ("no instruction" in r.output or "overlap" in r.output), r.output
    assert not run.exists() and not (tmp_path / "runs").exists()

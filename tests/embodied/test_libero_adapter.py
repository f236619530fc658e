"""The LIBERO adapter against a stand-in for LIBERO's API (LIBERO itself is not installed here): the calls
it makes (benchmark dict, get_task, get_task_init_states, OffScreenRenderEnv, set_init_state, step's 4-tuple
with done = success) and that wmrl's roll-out and policy run on it unchanged."""
from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import torch


class _Task:
    def __init__(self, i: int):
        self.name = f"task_{i}"
        self.language = ["put the bowl on the plate", "open the top drawer"][i]
        self.problem_folder, self.bddl_file = "libero_10", f"task_{i}.bddl"


class _Bench:
    n_tasks = 2

    def get_task(self, i: int) -> _Task:
        return _Task(i)

    def get_task_init_states(self, i: int) -> np.ndarray:
        return np.stack([np.full(3, 0.1 * j + i) for j in range(50)])  # 50 states: a start position each


class _Env:
    """A point that moves by 0.1 * action[:3]; success (done) when it is within 0.15 of the origin."""

    made: list[dict] = []

    def __init__(self, bddl_file_name: str, camera_heights: int, camera_widths: int):
        _Env.made.append({"bddl": bddl_file_name, "h": camera_heights, "w": camera_widths})
        self.pos = np.zeros(3)

    def seed(self, s: int) -> None:
        self.s = s

    def reset(self) -> dict:
        return self._obs()

    def set_init_state(self, st: np.ndarray) -> dict:
        self.pos = np.asarray(st, float).copy()
        return self._obs()

    def _obs(self) -> dict:
        return {"robot0_eef_pos": self.pos.copy(), "robot0_eef_quat": np.array([1.0, 0, 0, 0]),
                "robot0_gripper_qpos": np.zeros(2), "object-state": np.arange(5.0), "agentview_image": None}

    def step(self, a: np.ndarray):
        self.pos = self.pos + 0.1 * np.clip(a[:3], -1, 1)
        done = bool(np.linalg.norm(self.pos) < 0.15)
        return self._obs(), float(done), done, {}


@pytest.fixture
def fake_libero(monkeypatch):
    root = types.ModuleType("libero")
    sub = types.ModuleType("libero.libero")
    bench = types.ModuleType("libero.libero.benchmark")
    envs = types.ModuleType("libero.libero.envs")
    bench.get_benchmark_dict = lambda: {"libero_10": _Bench}
    sub.benchmark = bench
    sub.get_libero_path = lambda what: f"/libero/{what}"
    envs.OffScreenRenderEnv = _Env
    root.libero = sub
    for name, mod in (("libero", root), ("libero.libero", sub), ("libero.libero.benchmark", bench),
                      ("libero.libero.envs", envs)):
        monkeypatch.setitem(sys.modules, name, mod)
    _Env.made.clear()
    return _Env


def test_require_libero_says_how_to_install(monkeypatch) -> None:
    from wmrl.embodied.libero import require_libero

    monkeypatch.setitem(sys.modules, "libero", None)
    with pytest.raises(ImportError, match=r"wmrl\[libero\]"):
        require_libero()


def test_suite_splits_and_instructions(fake_libero) -> None:
    from wmrl.embodied.libero import LiberoSuite

    s = LiberoSuite(task_ids=[0], heldout_task_ids=[1], n_train_states=3, n_heldout_states=2)
    assert s.tasks == ["task_0"] and s.heldout_tasks == ["task_1"]
    assert s.instruction("task_1") == "open the top drawer"
    assert [x.index for x in s.states("train")] == [0, 1, 2] and [x.index for x in s.states("heldout")] == [3, 4]
    assert s.bddl_file("task_0") == "/libero/bddl_files/libero_10/task_0.bddl"
    with pytest.raises(ValueError, match="outside"):
        LiberoSuite(task_ids=[5])
    with pytest.raises(ValueError, match="unknown LIBERO suite"):
        LiberoSuite(benchmark_name="libero_100")
    with pytest.raises(ValueError, match="at most 50"):
        LiberoSuite(n_train_states=45, n_heldout_states=10)


def test_rollout_and_policy_run_on_libero(fake_libero) -> None:
    from wmrl.embodied.env import rollout
    from wmrl.embodied.libero import LiberoPool, LiberoSuite, flatten_obs
    from wmrl.embodied.policy import GaussianPolicy, PolicyConfig

    s = LiberoSuite(task_ids=[0, 1], n_train_states=2, n_heldout_states=0, max_steps=6, obs_dim=16)
    pool = LiberoPool(s)
    pol = GaussianPolicy(s.all_instructions(), PolicyConfig(hidden=8, layers=1, lang_dim=4, obs_dim=16, act_dim=7))

    def toward_origin(obs, instr, rng):  # a scripted "policy": move the point to the origin
        a = np.zeros((obs.shape[0], 7), np.float32)
        a[:, :3] = -np.clip(obs[:, :3] * 10, -1, 1)
        return a, np.zeros(obs.shape[0], np.float32)

    states = s.states("train")
    eb = rollout(pool, states, toward_origin, lambda t: pol.index(s.instruction(t)))
    assert eb.obs.shape == (4, 7, 16) and eb.actions.shape == (4, 6, 7)
    # state 0 of task 0 starts at the origin: success on the first step; task 1 states start at 1.0, 1.1: not
    assert eb.success.tolist() == [1.0, 1.0, 0.0, 0.0] and eb.length.tolist()[:2] == [1, 1]
    np.testing.assert_allclose(eb.obs[1, 0, :3], 0.1)  # set_init_state(init_states[1])
    assert fake_libero.made[0] == {"bddl": "/libero/bddl_files/libero_10/task_0.bddl", "h": 128, "w": 128}
    # the Gaussian policy's sampler and log-probs work at LIBERO's sizes
    eb2 = rollout(pool, states, pol.act, lambda t: pol.index(s.instruction(t)), torch.Generator().manual_seed(0))
    lp = pol.log_prob(torch.as_tensor(eb2.obs[:, :-1]), torch.zeros(4, 6, dtype=torch.int64),
                      torch.as_tensor(eb2.actions))
    assert lp.shape == (4, 6)
    with pytest.raises(KeyError, match="robot0_eef_quat"):
        flatten_obs({"robot0_eef_pos": np.zeros(3)}, 8)
    with pytest.raises(ValueError, match="7-d"):
        pool.acquire("task_0").step(np.zeros(4))

"""LIBERO adapter (optional extra ``wmrl[libero]``): LIBERO suites as the embodied track's environments.

LIBERO (Liu et al. 2023, "LIBERO: Benchmarking Knowledge Transfer for Lifelong Robot Learning") is built on
robosuite; its suites (``libero_10`` = LIBERO-Long, the WMRL paper's embodied benchmark, ``libero_spatial``,
``libero_object``, ``libero_goal``, ``libero_90``) each hold tasks with a language instruction, a BDDL scene
file and 50 fixed initial states. This module maps them onto the interfaces of :mod:`wmrl.embodied.env`:

- :class:`LiberoSuite` (like :class:`~wmrl.embodied.env.Suite`): the tasks of one LIBERO suite, their
  instructions (``task.language``), and the split of the 50 initial states into training and held-out
  indices; held-out tasks are task indices evaluated on only.
- :class:`LiberoPool` (like :class:`~wmrl.embodied.env.EnvPool`): ``OffScreenRenderEnv`` instances per task;
  ``reset_to`` calls ``env.set_init_state(init_states[i])``; its environments step Gymnasium-style with
  ``info["success"]`` = LIBERO's ``done`` (LIBERO ends an episode at success), so
  :func:`wmrl.embodied.env.rollout` runs them unchanged.
- Observations are the flat proprioceptive state and object poses: ``robot0_eef_pos`` (3),
  ``robot0_eef_quat`` (4), ``robot0_gripper_qpos`` (2) and ``object-state`` (scene-dependent), zero-padded
  or cut to ``obs_dim`` (default 64) so one policy serves every task of a suite; actions are 7-d (delta
  end-effector pose and gripper) in [-1, 1].

What is not tested (docs/embodied.md): LIBERO itself (it needs robosuite, its assets and, for images, an
EGL/GPU set-up) and SFT from LIBERO's demonstration datasets. The adapter is tested against a stand-in for
LIBERO's API (tests/embodied/test_libero_adapter.py), which pins the calls it makes.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wmrl.embodied.env import InitialState, split_states

LIBERO_SUITES = ("libero_10", "libero_spatial", "libero_object", "libero_goal", "libero_90")
LIBERO_ACT_DIM = 7
PROPRIO_KEYS = ("robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos")


def require_libero() -> tuple[Any, Any, Any]:
    """Import LIBERO: returns (``benchmark`` module, ``OffScreenRenderEnv``, ``get_libero_path``).

    Raises:
        ImportError: LIBERO is not installed (the message says how to install it).
    """
    try:
        from libero.libero import benchmark, get_libero_path  # noqa: PLC0415 - optional (libero)
        from libero.libero.envs import OffScreenRenderEnv  # noqa: PLC0415 - optional (libero)
    except ImportError as e:
        raise ImportError("the LIBERO adapter needs LIBERO and robosuite: pip install 'wmrl[libero]' (or LIBERO "
                          "from its repository) and download its assets; see docs/embodied.md") from e
    return benchmark, OffScreenRenderEnv, get_libero_path


def flatten_obs(obs: dict[str, Any], obs_dim: int) -> np.ndarray:
    """LIBERO's observation dict -> [obs_dim] float64: proprio keys then ``object-state``, padded with zeros or cut.

    Raises:
        KeyError: a proprio key is missing (the message names it).
    """
    parts = []
    for k in PROPRIO_KEYS:
        if k not in obs:
            raise KeyError(f"LIBERO observation has no {k!r} (keys: {', '.join(sorted(obs))})")
        parts.append(np.asarray(obs[k], np.float64).ravel())
    if "object-state" in obs:
        parts.append(np.asarray(obs["object-state"], np.float64).ravel())
    v = np.concatenate(parts)
    out = np.zeros(obs_dim)
    out[: min(obs_dim, v.size)] = v[:obs_dim]
    return out


@dataclass
class LiberoSuite:
    """Tasks of one LIBERO suite and the initial-state splits.

    Args:
        benchmark_name: one of :data:`LIBERO_SUITES`.
        task_ids: task indices trained on (None: every task not in ``heldout_task_ids``).
        heldout_task_ids: task indices evaluated on only.
        n_train_states / n_heldout_states: init states 0..n-1 train, the next n held out (<= 50 together).
        max_steps: episode cap (LIBERO-Long episodes take a few hundred steps).
        obs_dim: flat observation size. camera_size: rendered image size (the policy does not use images).
    """

    benchmark_name: str = "libero_10"
    task_ids: list[int] | None = None
    heldout_task_ids: list[int] = field(default_factory=list)
    n_train_states: int = 40
    n_heldout_states: int = 10
    max_steps: int = 520
    obs_dim: int = 64
    camera_size: int = 128

    def __post_init__(self) -> None:
        if self.benchmark_name not in LIBERO_SUITES:
            raise ValueError(f"unknown LIBERO suite {self.benchmark_name!r}; use one of {', '.join(LIBERO_SUITES)}")
        if self.n_train_states < 1 or self.n_heldout_states < 0 or self.n_train_states + self.n_heldout_states > 50:
            raise ValueError("n_train_states >= 1 and n_heldout_states >= 0 must add up to at most 50 (LIBERO's "
                             "initial states per task)")
        benchmark, _, _ = require_libero()
        self._bm = benchmark.get_benchmark_dict()[self.benchmark_name]()
        n = int(self._bm.n_tasks)
        ids = self.task_ids if self.task_ids is not None else [i for i in range(n) if i not in self.heldout_task_ids]
        for i in list(ids) + list(self.heldout_task_ids):
            if not 0 <= int(i) < n:
                raise ValueError(f"task index {i} is outside {self.benchmark_name}'s {n} tasks")
        if set(ids) & set(self.heldout_task_ids):
            raise ValueError("task_ids and heldout_task_ids overlap")
        self.task_ids = [int(i) for i in ids]
        self.names = {int(i): self._bm.get_task(int(i)).name for i in range(n)}
        self.tasks = [self.names[i] for i in self.task_ids]
        self.heldout_tasks = [self.names[int(i)] for i in self.heldout_task_ids]
        self._index = {v: k for k, v in self.names.items()}

    def instruction(self, task: str) -> str:
        return str(self._bm.get_task(self._index[task]).language)

    def all_instructions(self) -> list[str]:
        return [self.instruction(t) for t in self.tasks + self.heldout_tasks]

    def bddl_file(self, task: str) -> str:
        _, _, get_libero_path = require_libero()
        t = self._bm.get_task(self._index[task])
        return os.path.join(get_libero_path("bddl_files"), t.problem_folder, t.bddl_file)

    def init_states(self, task: str) -> np.ndarray:
        return np.asarray(self._bm.get_task_init_states(self._index[task]))

    def states(self, split: str) -> list[InitialState]:
        """As :meth:`wmrl.embodied.env.Suite.states`."""
        return split_states(self, split)


class _GymStep:
    """A LIBERO env stepping Gymnasium-style: (flat obs, reward, terminated, truncated, {"success": done})."""

    def __init__(self, env: Any, obs_dim: int):
        self.env, self.obs_dim = env, obs_dim

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        a = np.asarray(action, np.float64)
        if a.shape != (LIBERO_ACT_DIM,):
            raise ValueError(f"LIBERO actions are {LIBERO_ACT_DIM}-d, got shape {a.shape}")
        obs, reward, done, info = self.env.step(a)
        info = dict(info or {})
        info["success"] = float(bool(done))
        return flatten_obs(obs, self.obs_dim), float(reward), bool(done), False, info


class LiberoPool:
    """LIBERO environments per task, with :class:`~wmrl.embodied.env.EnvPool`'s interface."""

    def __init__(self, suite: LiberoSuite, seed: int = 0):
        _, self._Env, _ = require_libero()
        self.suite, self.seed = suite, int(seed)
        self.obs_dim, self.act_dim = suite.obs_dim, LIBERO_ACT_DIM
        self.env_steps = 0
        self._free: dict[str, list[_GymStep]] = {}
        self._init: dict[str, np.ndarray] = {}

    def acquire(self, task: str) -> _GymStep:
        free = self._free.setdefault(task, [])
        if free:
            return free.pop()
        env = self._Env(bddl_file_name=self.suite.bddl_file(task), camera_heights=self.suite.camera_size,
                        camera_widths=self.suite.camera_size)
        env.seed(self.seed)
        return _GymStep(env, self.suite.obs_dim)

    def release(self, task: str, env: _GymStep) -> None:
        self._free.setdefault(task, []).append(env)

    def reset_to(self, env: _GymStep, state: InitialState) -> np.ndarray:
        if state.task not in self._init:
            self._init[state.task] = self.suite.init_states(state.task)
        init = self._init[state.task]
        if not 0 <= state.index < len(init):
            raise ValueError(f"{state.task} has {len(init)} initial states, not index {state.index}")
        env.env.reset()
        obs = env.env.set_init_state(init[state.index])
        return flatten_obs(obs, self.suite.obs_dim)

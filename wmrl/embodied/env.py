"""Meta-World (v3) through the Gymnasium API: language-conditioned tasks, seeded initial states,
held-out splits, and batched episode roll-outs with exact log-probabilities.

Environment facts (measured on a 2-core CPU machine, docs/embodied.md): ``pip install metaworld==3.1.1``
brings mujoco 3.3.0 and gymnasium 1.4.0; ``gym.make("Meta-World/MT1", env_name=..., seed=s)`` builds one
task with 50 pre-sampled initial states (object and goal positions, drawn from ``seed``); one step costs
0.2-0.6 ms; the observation is the 39-d state (hand position, gripper opening, two object poses, the same
18 values of the previous frame, goal position); actions are 4-d in [-1, 1] (hand delta xyz, gripper).

Initial states. ``gym.make`` wraps the environment in Meta-World's ``RandomTaskSelectWrapper``, which would
draw a random initial state at every reset; we switch that off and select state ``i`` of the 50 with
``unwrapped.set_task(tasks[i])`` before ``reset()``, which makes the initial observation a deterministic
function of (task, ``state_seed``, ``i``) (tested). The first ``n_train_states`` states of each task are the
training initial states (SFT demonstrations and RL groups start only there); the next ``n_heldout_states``
are held out (evaluation only). Held-out *tasks* (instructions never trained on) are an option.

Episodes follow LIBERO's convention: an episode ends at the first step where Meta-World reports
``info["success"]`` (success = 1) or after ``max_steps`` steps (success = 0).

Rendering. Images are not used by the policy. :func:`measure_render` (``wmrl embodied render-check``) times
headless rendering (``MUJOCO_GL=egl`` or ``osmesa``), so a user can decide whether an image-based world model
fits; measured on a 2-core x86 CPU without a GPU (docs/embodied.md): EGL works at 160-300 ms per step with a 64 x
64 frame (330 ms at 128 x 128) against 0.5-1.7 ms without (software
GL on a loaded CPU), OSMesa is not installed. So observations are states.
"""
from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Sequence

import numpy as np

#: One instruction per Meta-World task (written for wmrl; Meta-World itself has no language). A task
#: without an entry needs ``instructions`` in the config.
INSTRUCTIONS: dict[str, str] = {
    "reach-v3": "reach the red goal position with the gripper",
    "push-v3": "push the puck to the goal",
    "pick-place-v3": "pick up the puck and place it at the goal",
    "button-press-topdown-v3": "press the button down from the top",
    "button-press-v3": "press the button from the front",
    "coffee-button-v3": "press the button on the coffee machine",
    "plate-slide-v3": "slide the plate into the goal",
    "faucet-open-v3": "turn the faucet handle to open it",
    "faucet-close-v3": "turn the faucet handle to close it",
    "drawer-open-v3": "pull the drawer open",
    "drawer-close-v3": "push the drawer closed",
    "door-open-v3": "pull the door open",
    "window-open-v3": "slide the window open",
    "window-close-v3": "slide the window closed",
    "handle-press-v3": "press the handle down",
}

OBS_DIM = 39
ACT_DIM = 4


def _quiet() -> None:
    # Meta-World's observation space has equal bounds on padded entries; gymnasium warns on every reset.
    warnings.filterwarnings("ignore", module="gymnasium")
    warnings.filterwarnings("ignore", message=".*is not within the observation space.*")


def require_metaworld() -> Any:
    """Import Meta-World (registers the ``Meta-World/*`` Gymnasium ids) or raise a clear error."""
    try:
        import metaworld  # noqa: PLC0415 - optional (metaworld)
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise ImportError("the embodied track needs Meta-World: pip install 'wmrl[embodied]' "
                          "(metaworld==3.1.1, packaging)") from e
    return metaworld


@dataclass(frozen=True)
class InitialState:
    """One initial state: ``task`` (a Meta-World env name), ``index`` into its 50 seeded states, ``split``."""

    task: str
    index: int
    split: str = "train"

    @property
    def key(self) -> str:
        return f"{self.task}#{self.index}"


@dataclass
class Suite:
    """The tasks, their instructions and the initial-state splits of one experiment.

    Args:
        tasks: Meta-World v3 env names trained on (e.g. ``["push-v3"]``).
        heldout_tasks: env names evaluated on only (held-out instructions); may be empty.
        n_train_states: initial states 0..n-1 of each task are the training states.
        n_heldout_states: states n_train..n_train+n_heldout-1 are held out. n_train + n_heldout <= 50.
        max_steps: episode cap (steps).
        state_seed: seed of Meta-World's 50 pre-sampled states (``gym.make(..., seed=state_seed)``).
        instructions: extra or overriding instructions {env name: text}.

    Raises:
        ValueError: unknown task, a task without an instruction, or splits that do not fit in 50.
    """

    tasks: list[str]
    heldout_tasks: list[str] = field(default_factory=list)
    n_train_states: int = 10
    n_heldout_states: int = 10
    max_steps: int = 100
    state_seed: int = 0
    instructions: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.tasks:
            raise ValueError("the suite needs at least one training task (e.g. tasks: [push-v3])")
        if self.n_train_states < 1 or self.n_heldout_states < 0 or self.n_train_states + self.n_heldout_states > 50:
            raise ValueError(f"n_train_states ({self.n_train_states}) >= 1 and n_heldout_states "
                             f"({self.n_heldout_states}) >= 0 must add up to at most 50 (Meta-World's MT1 states)")
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
        overlap = set(self.tasks) & set(self.heldout_tasks)
        if overlap:
            raise ValueError(f"tasks and heldout_tasks overlap: {sorted(overlap)}")
        for t in list(self.tasks) + list(self.heldout_tasks):
            if t not in self.instructions and t not in INSTRUCTIONS:
                raise ValueError(f"task {t!r} has no instruction: add it under instructions, or use one of "
                                 f"{', '.join(sorted(INSTRUCTIONS))}")

    def instruction(self, task: str) -> str:
        return self.instructions.get(task) or INSTRUCTIONS[task]

    def all_instructions(self) -> list[str]:
        return [self.instruction(t) for t in list(self.tasks) + list(self.heldout_tasks)]

    def states(self, split: str) -> list[InitialState]:
        """Initial states of ``split``: ``train``, ``heldout`` (held-out states of the training tasks)
        or ``heldout_tasks`` (the training-state indices of the held-out tasks)."""
        return split_states(self, split)


def split_states(suite: Any, split: str) -> list[InitialState]:
    """Initial states of ``split`` for any suite with ``tasks``, ``heldout_tasks``, ``n_train_states`` and
    ``n_heldout_states``: state indices [0, n_train) of the training tasks (``train``), the next
    n_heldout of them (``heldout``), or [0, n_train) of the held-out tasks (``heldout_tasks``).

    Raises:
        ValueError: an unknown split.
    """
    a, b = suite.n_train_states, suite.n_train_states + suite.n_heldout_states
    if split == "train":
        return [InitialState(t, i, split) for t in suite.tasks for i in range(a)]
    if split == "heldout":
        return [InitialState(t, i, split) for t in suite.tasks for i in range(a, b)]
    if split == "heldout_tasks":
        return [InitialState(t, i, split) for t in suite.heldout_tasks for i in range(a)]
    raise ValueError(f"unknown split {split!r}; use train, heldout or heldout_tasks")


class EnvPool:
    """Gymnasium Meta-World environments, created lazily and reused (several per task for batched
    episodes). ``reset_to(env, state)`` puts one at a seeded initial state."""

    def __init__(self, suite: Suite):
        require_metaworld()
        _quiet()
        self.suite = suite
        self.obs_dim, self.act_dim = OBS_DIM, ACT_DIM
        self._free: dict[str, list[Any]] = {}
        self._tasks: dict[str, list[Any]] = {}
        self.env_steps = 0

    def _make(self, task: str) -> Any:
        import gymnasium as gym  # noqa: PLC0415 - heavy (gymnasium)

        try:
            env = gym.make("Meta-World/MT1", env_name=task, seed=self.suite.state_seed,
                           max_episode_steps=self.suite.max_steps + 1)
        except (ValueError, KeyError, gym.error.Error) as e:
            raise ValueError(f"Meta-World has no v3 task {task!r}: {e}") from e
        env.get_wrapper_attr("toggle_sample_tasks_on_reset")(False)
        if task not in self._tasks:
            self._tasks[task] = list(env.get_wrapper_attr("tasks"))
        return env

    def acquire(self, task: str) -> Any:
        free = self._free.setdefault(task, [])
        return free.pop() if free else self._make(task)

    def release(self, task: str, env: Any) -> None:
        self._free.setdefault(task, []).append(env)

    def reset_to(self, env: Any, state: InitialState) -> np.ndarray:
        """Reset ``env`` to ``state``; returns the initial observation [39] float64."""
        env.unwrapped.set_task(self._tasks[state.task][state.index])
        obs, _ = env.reset()
        return np.asarray(obs, dtype=np.float64)


@dataclass
class EpisodeBatch:
    """B episodes run in lockstep.

    Attributes:
        states: B :class:`InitialState` (one per episode).
        obs: [B, T+1, D] float32 (D = 39 for Meta-World), the observations s_0..s_T (rows past an episode's end
            repeat its last).
        actions: [B, T, A] float32 (A = 4 for Meta-World), the sampled (unclipped) actions; the environment got
            ``clip(a, -1, 1)``.
        logprobs: [B, T] float32, log pi(a_t | s_t, instruction) at sampling time (0 past the end).
        mask: [B, T] bool, True on the steps that happened.
        success: [B] float64 in {0, 1}: the simulator's success (reached before ``max_steps``).
        length: [B] int64, steps taken (1..T).
    """

    states: list[InitialState]
    obs: np.ndarray
    actions: np.ndarray
    logprobs: np.ndarray
    mask: np.ndarray
    success: np.ndarray
    length: np.ndarray

    @property
    def B(self) -> int:
        return len(self.states)

    def visited(self, i: int) -> np.ndarray:
        """The observations episode ``i`` visited, s_0..s_L: [L+1, 39]."""
        return self.obs[i, : int(self.length[i]) + 1]


#: ``act(obs [n, 39] float32, instruction indices [n] int64, rng_or_None) -> (actions [n, 4], logprobs [n])``
ActFn = Callable[[np.ndarray, np.ndarray, Any], tuple[np.ndarray, np.ndarray]]


#: Episodes run in lockstep at most (bounds the environments a pool creates per task: each costs ~0.3 s).
MAX_LOCKSTEP = 32

_POOLS: dict[tuple, EnvPool] = {}


def shared_pool(suite: Suite) -> EnvPool:
    """One :class:`EnvPool` per (tasks, state seed, episode cap) in this process, so successive runs (a bench)
    reuse the environments instead of building them again; its ``env_steps`` counter is reset by callers
    that count."""
    key = (tuple(suite.tasks), tuple(suite.heldout_tasks), suite.state_seed, suite.max_steps)
    if key not in _POOLS:
        _POOLS[key] = EnvPool(suite)
    pool = _POOLS[key]
    pool.suite = suite
    return pool


def rollout(pool: EnvPool, states: Sequence[InitialState], act: ActFn, instr_index: Callable[[str], int],
            rng: Any = None) -> EpisodeBatch:
    """:func:`rollout_lockstep` in chunks of at most :data:`MAX_LOCKSTEP` episodes (same arguments and result;
    the random draws depend on the chunking, which is fixed)."""
    if len(states) <= MAX_LOCKSTEP:
        return rollout_lockstep(pool, states, act, instr_index, rng)
    parts = [rollout_lockstep(pool, states[s:s + MAX_LOCKSTEP], act, instr_index, rng)
             for s in range(0, len(states), MAX_LOCKSTEP)]
    return EpisodeBatch([x for p in parts for x in p.states], *(np.concatenate([getattr(p, k) for p in parts])
                        for k in ("obs", "actions", "logprobs", "mask", "success", "length")))


def rollout_lockstep(pool: EnvPool, states: Sequence[InitialState], act: ActFn, instr_index: Callable[[str], int],
                     rng: Any = None) -> EpisodeBatch:
    """Run one episode from each initial state, all in lockstep (one batched policy call per time step).

    Args:
        pool: the environments: :class:`EnvPool`, or anything with ``suite.max_steps``, ``obs_dim``,
            ``act_dim``, ``env_steps``, ``acquire``/``release``/``reset_to`` and Gymnasium-style ``step``
            returning ``info["success"]`` (e.g. :class:`wmrl.embodied.libero.LiberoPool`).
        states: B initial states (repeat a state G times for a GRPO group).
        act: the policy (see :data:`ActFn`); ``rng`` is passed through to it (a ``torch.Generator``).
        instr_index: task -> instruction index of the policy's vocabulary.

    Returns:
        :class:`EpisodeBatch`.
    """
    B, T = len(states), pool.suite.max_steps
    obs = np.zeros((B, T + 1, getattr(pool, "obs_dim", OBS_DIM)), np.float32)
    actions = np.zeros((B, T, getattr(pool, "act_dim", ACT_DIM)), np.float32)
    logp = np.zeros((B, T), np.float32)
    mask = np.zeros((B, T), bool)
    success = np.zeros(B)
    length = np.zeros(B, np.int64)
    envs = [pool.acquire(s.task) for s in states]
    try:
        for i, (e, s) in enumerate(zip(envs, states)):
            obs[i, 0] = pool.reset_to(e, s)
        instr = np.asarray([instr_index(s.task) for s in states], np.int64)
        active = np.ones(B, bool)
        for t in range(T):
            idx = np.flatnonzero(active)
            if idx.size == 0:
                break
            a, lp = act(obs[idx, t], instr[idx], rng)
            for j, i in enumerate(idx.tolist()):
                o, _r, _term, _trunc, info = envs[i].step(np.clip(a[j], -1.0, 1.0))
                pool.env_steps += 1
                obs[i, t + 1] = o
                actions[i, t] = a[j]
                logp[i, t] = lp[j]
                mask[i, t] = True
                length[i] = t + 1
                if float(info.get("success", 0.0)) >= 1.0:
                    success[i] = 1.0
                    active[i] = False
        for i in range(B):  # pad past the end with the last observation
            obs[i, length[i] + 1:] = obs[i, length[i]]
    finally:
        for e, s in zip(envs, states):
            pool.release(s.task, e)
    return EpisodeBatch(list(states), obs, actions, logp, mask, success, length)


def expert_rollout(pool: EnvPool, state: InitialState, noise_std: float, rng: np.random.Generator
                   ) -> tuple[np.ndarray, np.ndarray, bool]:
    """One episode of Meta-World's scripted expert (``metaworld.policies.ENV_POLICY_MAP``) with Gaussian
    action noise N(0, noise_std^2) added to what is executed (DART-style: the label stays the clean
    expert action, so the clone learns to recover from perturbed states).

    Returns:
        (visited observations [L+1, 39] float32, clean expert actions [L, 4] float32, success).
    """
    from metaworld.policies import ENV_POLICY_MAP  # noqa: PLC0415 - optional (metaworld)

    if state.task not in ENV_POLICY_MAP:
        raise ValueError(f"Meta-World has no scripted expert for {state.task!r}")
    expert = ENV_POLICY_MAP[state.task]()  # type: ignore[abstract]  # concrete experts, typed as their abstract base
    env = pool.acquire(state.task)
    try:
        o = pool.reset_to(env, state)
        obs, acts, ok = [o], [], False
        for _ in range(pool.suite.max_steps):
            a = np.asarray(expert.get_action(o), np.float64)
            acts.append(a)
            o, _r, _te, _tr, info = env.step(np.clip(a + rng.normal(0.0, noise_std, a.shape), -1.0, 1.0))
            pool.env_steps += 1
            obs.append(np.asarray(o, np.float64))
            if float(info.get("success", 0.0)) >= 1.0:
                ok = True
                break
    finally:
        pool.release(state.task, env)
    return np.asarray(obs, np.float32), np.asarray(acts, np.float32), ok


def measure_render(task: str = "push-v3", size: int = 64, steps: int = 20) -> dict[str, Any]:
    """Time headless rendering of ``task`` at ``size`` x ``size`` (``MUJOCO_GL`` as set, else egl). Run it in a
    fresh process: mujoco binds its GL backend once, at import.

    Returns:
        {"backend", "ok", "ms_per_step_and_frame", "ms_per_step", "error"}.
    """
    os.environ.setdefault("MUJOCO_GL", "egl")
    out: dict[str, Any] = {"backend": os.environ["MUJOCO_GL"], "ok": False, "ms_per_step_and_frame": None,
                           "ms_per_step": None, "error": None}
    try:
        require_metaworld()  # mujoco loads the GL backend at import: a missing library fails here
        _quiet()
        import gymnasium as gym  # noqa: PLC0415 - heavy (gymnasium)

        env = gym.make("Meta-World/MT1", env_name=task, seed=0, render_mode="rgb_array", width=size, height=size)
        env.reset()
        env.render()
        t0 = time.perf_counter()
        for _ in range(steps):
            env.step(env.action_space.sample())
            frame = env.render()
        out["ms_per_step_and_frame"] = (time.perf_counter() - t0) / steps * 1000
        t0 = time.perf_counter()
        for _ in range(steps):
            env.step(env.action_space.sample())
        out["ms_per_step"] = (time.perf_counter() - t0) / steps * 1000
        out["ok"] = bool(np.asarray(frame).shape == (size, size, 3))
    except Exception as e:  # noqa: BLE001 - any GL failure is the measurement's answer
        out["error"] = f"{type(e).__name__}: {str(e)[:200]}"
    return out

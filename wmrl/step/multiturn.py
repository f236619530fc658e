"""Multi-turn research episodes on Kaggle-style tasks as an environment (``episode.max_turns`` K > 1;
docs/multiturn.md).

:class:`MultiTurnKaggleEnvironment` is the Kaggle environment (:class:`wmrl.step.kaggle.KaggleEnvironment`) with the
``extend`` hook of :class:`wmrl.step.environment.ExtendingEnvironment`: the step engine samples turn 1 and routes its
groups, then the environment runs turns 2..K with :func:`wmrl.episodes.rollout.run_episodes`, whose feedback
function is :class:`TurnFeedbackFn`:

- anchor episodes: every turn's program is executed for real on the task's validation view
  (:func:`wmrl.tasks.validation.validation_view`: fitted on the harness's split of train.csv, predicting the
  validation rows and the test rows at once); the observation holds the validation score, the run time and the
  error tail (:func:`wmrl.episodes.observation.observation_from_result`); the grade of the test rows is the turn's
  reward. Executions are counted per turn in the ledger.
- world-model episodes: nothing is executed; the world model scores the program (r_hat) and the observation is
  the template of :func:`wmrl.episodes.observation.observation_from_prediction` (a predicted validation score, or
  a failed run). The feedback uses the raw r_hat, not the calibrated r_tilde: measured on held-out programs
  (studies/multiturn/feedback_fidelity.py) the isotonic map left the validation score's error unchanged (0.111 raw,
  0.107-0.112 calibrated) but its flat steps tied programs, so revisions were ordered right less often (0.676
  raw, 0.53-0.56 calibrated). The episode's reward still goes through the recipe's calibration.
- every scored anchor turn also gets the world model's would-be observation, kept in ``samples.jsonl`` for the
  feedback's fidelity (:mod:`wmrl.episodes.fidelity`).

The step then holds one trajectory per episode, its final submission (:class:`wmrl.step.environment.Extension`);
what the update and the logs make of the turns is the trainer's (:mod:`wmrl.training.multiturn`).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np

from wmrl.episodes.observation import Observation, observation_from_prediction, observation_from_result
from wmrl.episodes.rollout import Episodes, TurnFeedback, run_episodes
from wmrl.execution.log import ExecutionLog
from wmrl.execution.pool import result_or_infra
from wmrl.step.anchors import anchor_request
from wmrl.step.environment import Extension, Outcomes, Predictions, Rollouts, StageTimer, stage
from wmrl.step.kaggle import KaggleEnvironment, TextTrajectories, sampling_seed
from wmrl.tasks.validation import validation_view


class WallTimes:
    """Median wall seconds of each task's real executions so far (the last 64): the run time the world model's
    observation shows, since a simulated observation should look like a real one. Seeded from the warm-up
    corpus's executions (:meth:`seed_from_logs`); None for a task that never ran."""

    def __init__(self) -> None:
        self._t: dict[str, list[float]] = {}
        self.seeded = False

    def seed_from_logs(self, paths: Sequence[str | Path]) -> None:
        """Add the wall seconds of the ``ok`` executions in the execution logs at ``paths`` (missing ones skipped)."""
        for p in paths:
            if Path(p).is_file():
                with ExecutionLog(Path(p)) as lg:
                    for r in lg.records({"status": "ok"}):
                        if r.get("wall_s") is not None:
                            self.record(str(r["task_id"]), float(r["wall_s"]))
        self.seeded = True

    def record(self, task_id: str, wall_s: float) -> None:
        """Add one execution of ``task_id`` that took ``wall_s`` seconds."""
        self._t.setdefault(task_id, []).append(float(wall_s))
        del self._t[task_id][:-64]

    def typical(self, task_id: str) -> float | None:
        """The median wall seconds of ``task_id``'s executions kept, None when it never ran."""
        v = self._t.get(task_id)
        return float(np.median(v)) if v else None

    def state_dict(self) -> dict[str, list[float]]:
        """``{task id: [wall seconds]}`` (a checkpoint's ``wall_times``)."""
        return {k: list(v) for k, v in self._t.items()}

    def load_state_dict(self, d: dict[str, list[float]]) -> None:
        """Restore :meth:`state_dict`."""
        self._t = {k: [float(x) for x in v] for k, v in d.items()}
        self.seeded = self.seeded or bool(self._t)


class TurnFeedbackFn:
    """The :data:`~wmrl.episodes.rollout.FeedbackFn` of one step's episodes (module docstring).

    Args:
        env: the environment (scaffold, executor, world-model settings, run times).
        rollouts: the step's turn-1 rollouts (its tasks, groups and step).
        is_anchor: [B] bool the episodes whose programs are executed.
        predict: the world model's raw rewards [N] float64 of N trajectories, None when the step does not score.
        ledger: where stages and executions are counted, or None.

    Attributes:
        observations_wm: the world model's observation of each (episode, turn) it scored.
    """

    def __init__(self, env: MultiTurnKaggleEnvironment, rollouts: Rollouts, is_anchor: np.ndarray,
                 predict: Callable[[Rollouts], np.ndarray] | None, ledger: StageTimer | None) -> None:
        self.env, self.ro, self.is_anchor, self.predict, self.ledger = env, rollouts, is_anchor, predict, ledger
        self.base_prompts = {t.id: env.scaffold.prompt(t) for t in rollouts.tasks}
        self.observations_wm: dict[tuple[int, int], Observation] = {}

    def _r_hat(self, task_ids: list[str], completions: list[str]) -> np.ndarray:
        """The world model's raw rewards of the turn's programs (NaN [N] when the step does not score)."""
        if self.predict is None:
            return np.full(len(task_ids), np.nan)
        with stage(self.ledger, "wm_predict"):
            data = TextTrajectories(task_ids, [self.base_prompts[t] for t in task_ids], completions)
            return self.predict(Rollouts(step=self.ro.step, group_keys=["turn"],
                                         group_ids=np.zeros(len(task_ids), dtype=np.int64), data=data))

    def __call__(self, turn: int, eps: Sequence[int], batch: Any) -> list[TurnFeedback]:
        env, ro, L = self.env, self.ro, self.ledger
        by_id = {x.id: x for x in ro.tasks}
        tasks = [by_id[tid] for tid in batch.task_ids]
        views = {x.id: validation_view(x, env.validation_fraction) for x in {x.id: x for x in tasks}.values()}
        futures: dict[int, tuple[Future[Any], Any]] = {}
        with stage(L, "execute"):
            for r, e in enumerate(eps):
                if not self.is_anchor[e]:
                    continue
                req = anchor_request(
                    views[tasks[r].id], batch.programs[r], step=ro.step, group=int(ro.group_ids[e]), sample=int(e),
                    run=env.run, prompt=self.base_prompts[tasks[r].id], completion=batch.completions[r],
                    scaffold=getattr(env.scaffold, "name", ""), completion_tokens=int(batch.completion_mask[r].sum()),
                    time_limit_s=env.time_limit_s, turn=turn, extra={"episode_prompt_chars": len(batch.prompts[r])})
                futures[r] = (env.executor.submit(req), req)
        r_hat = self._r_hat([x.id for x in tasks], list(batch.completions))
        with stage(L, "execute"):
            results = {r: result_or_infra(f, req) for r, (f, req) in futures.items()}
        if results and L is not None:
            L.add_executions("anchor", list(results.values()), turn=turn)
        out = []
        for r, e in enumerate(eps):
            task = views[tasks[r].id]  # the view: the observation states its validation fraction
            wm_obs = None
            if math.isfinite(r_hat[r]):  # the raw r_hat: the isotonic map's flat steps would tie revisions (module doc)
                wm_obs = observation_from_prediction(task, turn, float(r_hat[r]), env.wall_times.typical(task.id),
                                                     env.wm_error_threshold)
                self.observations_wm[(int(e), turn)] = wm_obs
            if r in results:
                res = results[r]
                st = str(getattr(res.status, "value", res.status))
                ok = res.usable
                if st != "infra_error":
                    env.wall_times.record(task.id, float(res.wall_s))
                out.append(TurnFeedback(
                    observation=observation_from_result(res, task, turn, env.error_chars),
                    reward_true=float(res.reward) if ok and res.reward is not None else math.nan,
                    reward_wm=float(r_hat[r]), status=st,
                    error=(res.error or "")[-500:] or None, valid=ok, executed=True, result=res))
            elif wm_obs is None:  # a recipe without a world model (anchor-only): its world-model groups end at turn 1
                out.append(TurnFeedback(observation=None))
            else:
                out.append(TurnFeedback(observation=wm_obs, reward_wm=float(r_hat[r]), status=wm_obs.status))
        return out


class _TimedPolicy:
    """A policy whose ``sample`` is timed as the ledger's stage ``generate`` (the later turns of an episode)."""

    def __init__(self, policy: Any, ledger: StageTimer | None) -> None:
        self._p, self._L = policy, ledger

    def sample(self, *args: Any, **kwargs: Any) -> Any:
        import torch  # noqa: PLC0415 - heavy

        with stage(self._L, "generate"), torch.no_grad():
            return self._p.sample(*args, **kwargs)


def final_submissions(ep: Episodes) -> tuple[Outcomes, Predictions]:
    """The step's view of its episodes: the real outcomes of the executed final submissions (``reward_true``,
    ``status``, ``error``; not valid after an infrastructure failure) and the world model's raw r_hat [B] of every
    final submission (NaN where it was not scored)."""
    finals = [ep.final(e) for e in range(ep.B)]
    ex = [e for e in range(ep.B) if finals[e].executed]
    outcomes = Outcomes(idx=np.asarray(ex, dtype=np.int64),
                        reward_true=np.asarray([finals[e].reward_true for e in ex], dtype=np.float64),
                        valid=np.asarray([bool(ep.valid[e]) for e in ex], dtype=bool),
                        status=[finals[e].status for e in ex], error=[finals[e].error for e in ex])
    return outcomes, Predictions(reward_wm=np.asarray([f.reward_wm for f in finals], dtype=np.float64))


class MultiTurnKaggleEnvironment(KaggleEnvironment):
    """Kaggle-style tasks in episodes of up to ``max_turns`` turns (module docstring).

    Args:
        max_turns: K >= 2 turns per episode.
        validation_fraction: the fraction of train.csv held out as the validation split whose score is the feedback.
        error_chars: the longest error tail an observation shows (characters).
        wm_error_threshold: a predicted percentile below this is shown as a failed run.
        execution_logs: execution logs whose ``ok`` executions seed the run times the world model's observations
            show (the run's own and the warm-up corpus's; missing ones skipped), read before the first episode.
        **kwargs: those of :class:`~wmrl.step.kaggle.KaggleEnvironment`.

    Attributes:
        wall_times: the :class:`WallTimes` of the tasks' executions (a checkpoint keeps them).

    Raises:
        ValueError: ``max_turns`` below 2.
    """

    def __init__(self, *args: Any, max_turns: int = 2, validation_fraction: float = 0.2, error_chars: int = 400,
                 wm_error_threshold: float = 0.05, execution_logs: Sequence[str | Path] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if max_turns < 2:
            raise ValueError(f"a multi-turn environment needs max_turns >= 2, got {max_turns}; with one turn use the "
                             f"'kaggle' environment")
        self.max_turns, self.validation_fraction, self.error_chars = max_turns, validation_fraction, error_chars
        self.wm_error_threshold, self.execution_logs = wm_error_threshold, list(execution_logs)
        self.wall_times = WallTimes()

    def extend(self, policy: Any, rollouts: Rollouts, is_anchor: np.ndarray,
               predict: Callable[[Rollouts], np.ndarray] | None, ledger: StageTimer | None = None) -> Extension:
        """Turns 2..K of the step's episodes (turn 1 is ``rollouts.data``), seeded by the step
        (:func:`~wmrl.step.kaggle.sampling_seed`), so a resumed run draws the same ones.

        Raises:
            RuntimeError: the world model returned a wrong shape or non-finite rewards.
        """
        if not self.wall_times.seeded:  # the warm-up corpus's run times, so the first world-model feedback has one
            self.wall_times.seed_from_logs(self.execution_logs)
        feedback = TurnFeedbackFn(self, rollouts, np.asarray(is_anchor, dtype=bool), predict, ledger)
        ep = run_episodes(_TimedPolicy(policy, ledger), self.scaffold, rollouts.tasks, self.G, self.max_turns,
                          feedback, max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p,
                          seed=sampling_seed(self.seed, rollouts.step), first_turn=rollouts.data)
        outcomes, predictions = final_submissions(ep)
        return Extension(outcomes=outcomes, predictions=predictions, episodes=ep, feedback=feedback)

    def state_dict(self) -> dict[str, Any]:
        """``{"wall_times": ...}``: what a checkpoint keeps of the environment."""
        return {"wall_times": self.wall_times.state_dict()}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.wall_times.load_state_dict(d.get("wall_times", {}))

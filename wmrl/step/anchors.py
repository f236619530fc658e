"""The trainer's anchor stream: submitting a step's anchor programs and consuming their results, synchronously
(staleness bound k = 0, the default) or asynchronously (k > 0; :mod:`wmrl.core.staleness`).

k = 0: the step's executions are submitted, the world model scores the step meanwhile, then every execution of
the step is waited for (stage ``execute``: from submission to the last one done).

k > 0: the step's executions are submitted and left running. At the collection point of step t every anchor
group in flight whose executions have all finished is consumed; a group routed at s = t - k that is still
running is waited for (the bound; the blocked time is the stage ``anchor_wait``, which should be 0). The step's
own groups that finished in time are the step's anchors, as in the synchronous stream. Groups of earlier steps
are *late*; ``wmrl.asynchronous.late_anchors`` says where they go:

- ``gradient`` (default; the simulation's staleness axis chose it, docs/scaling.md): a group still in flight is
  left out of its own step's loss; at its arrival step its samples join the recipe's inputs as anchor groups
  (:func:`recipe_inputs`: calibrated out of sample, learned by the calibrator and the window, weighted with the
  step's anchors) and the update (:func:`late_update_parts`), whose clipped ratio to the behaviour log-probs
  kept in the batch is the importance correction (:func:`wmrl.core.staleness.late_clip`).
- ``calibration``: the group trains as a world-model group at its own step (its r_hat was scored with the
  rest), and its pairs only reach the calibrator and the window (:meth:`wmrl.core.recipe.Recipe.learn_late`).

``wmrl.asynchronous.over_bound_anchors`` says what happens to a group still running at the bound (routed at s = t - k):

- ``wait`` (default): it is waited for, as above, and consumed at s + k as a late group.
- ``calibration``: it is not waited for (``anchor_wait`` is 0 by construction) and is *over the bound*; its
  running executions keep running (those still queued in the executor are cancelled: they would start after
  the bound), and at the step where the last one is found finished its pairs feed only the calibrator and the
  window (:meth:`AnchorStream.learn_over_bound`, after the step's recipe; no gradient: beyond the bound the
  importance ratio is not trusted), whatever ``wmrl.asynchronous.late_anchors`` says.
- ``drop``: not waited for either; all its executions are cancelled (running ones killed, freeing their slots).

Cancelled executions are not executions in the ledger (``anchor_over_bound_cancelled`` counts them); the others
of an over-bound group are counted when they finish. Shedding keeps the executor's queue bounded when anchors are
routed faster than it can run them: without it the queue, and every group's latency, would grow step after
step.

In every mode, at its own step the group was treated as in flight (out of the loss in the ``gradient`` late
mode, a world-model group in ``calibration``).

Executions are counted in the ledger when consumed. A group still in flight when the run ends (or is killed) is
not consumed: the executor's close cancels it, and a resumed run does not see it (it is not re-submitted: its
programs were sampled by a policy the checkpoint no longer holds). Both are counted: ``ledger.json``'s
``anchors_lost`` (events ``end`` and ``resume``, from the checkpoint step's ``anchor_groups_in_flight`` /
``anchors_in_flight``) and a line in train.log (:func:`wmrl.training.run.run_training`).

The stream reads futures, whatever runs them: those of an environment's
:meth:`~wmrl.step.environment.Environment.submit` (the Kaggle environment's are the executor's: the local pool,
Ray), one per trajectory; done futures (a simulator's success) are consumed at their own step. The step engine owns
the stream (:class:`wmrl.step.engine.StepEngine`).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wmrl.core.staleness import check_at_bound, check_staleness, is_due
from wmrl.step.batch import LatePairs, StepBatch
from wmrl.step.environment import Outcomes, result_of
from wmrl.core.recipe import StepInputs
from wmrl.execution.types import program_hash
from wmrl.program_text import text_sha256


@dataclass
class AnchorRuns:
    """The anchor executions of one step: the future by sample index, when each finished
    (``perf_counter``), the submission's start (``w0``, seconds) and trainer CPU (``submit_cpu``, CPU-seconds);
    ``groups`` [n] the anchor groups' ids, ``reward_wm`` the raw world-model score by sample index (for late pairs)."""

    step: int
    w0: float
    futures: dict[int, Future[Any]] = field(default_factory=dict)
    done_at: dict[int, float] = field(default_factory=dict)
    submit_cpu: float = 0.0
    group_of: dict[int, int] = field(default_factory=dict)
    reward_wm: dict[int, float] = field(default_factory=dict)
    batch: Any = None
    over: set[int] = field(default_factory=set)  # groups still running at the bound, not waited for

    def group_done(self, g: int) -> bool:
        """Whether every execution of group ``g`` has finished."""
        return all(f.done() for i, f in self.futures.items() if self.group_of[i] == g)


def _pairs(rows: list[tuple[int, int, float, float]], step: int, parts: list[Any] | None = None) -> LatePairs:
    """:class:`LatePairs` from ``(origin step, group, reward_true, reward_wm)`` rows consumed at ``step``."""
    a = np.asarray(rows, dtype=np.float64).reshape(-1, 4)
    og = a[:, 0].astype(np.int64)
    return LatePairs(og, a[:, 1].astype(np.int64), a[:, 2], a[:, 3], step - og, parts or [])


class AnchorStream:
    """Tracks anchor futures and hands their outcomes back under the staleness bound ``k`` (steps).

    Args:
        k: the staleness bound (``wmrl.asynchronous.staleness``), 0 = synchronous.
        at_bound: ``wmrl.asynchronous.over_bound_anchors`` (:data:`wmrl.core.staleness.AT_BOUND_MODES`): a group still
            running at the bound is waited for (``wait``) or not (``calibration``, ``drop``).

    Raises:
        ValueError: ``k`` is not an integer >= 0, ``at_bound`` unknown, or not ``wait`` with k = 0.
    """

    def __init__(self, k: int = 0, at_bound: str = "wait") -> None:
        self.k = check_staleness(k)
        self.ledger: Any = None  # the run's Ledger, set by the engine for each collection (None: nothing counted)
        self.at_bound = check_at_bound(at_bound)
        if at_bound != "wait" and not self.k:
            raise ValueError(f"over-bound mode {at_bound!r} needs a staleness bound k >= 1 (k = 0 always waits)")
        self.in_flight: list[AnchorRuns] = []
        self.n_late_infra = 0  # late executions that failed for infrastructure reasons (dropped, counted)
        self.n_over_bound_total = 0  # groups that reached the bound still running (all steps)
        self.over_bound: LatePairs | None = None  # over-bound pairs consumed at the last collect (calibration mode)
        self.step_counts: dict[str, int] = {}  # the last collect's over-bound counts (metrics.jsonl)
        self.own_results: dict[int, Any] = {}  # the last collect's results of its own step, by trajectory index

    def track(self, sb: StepBatch, idx: np.ndarray, futures: list[Future[Any]], w0: float | None = None,
              submit_cpu: float = 0.0) -> AnchorRuns:
        """Track ``futures`` (one per trajectory of ``idx``, [n]) of step ``sb.step``, submitted from ``w0``
        (``perf_counter`` seconds; default now) at ``submit_cpu`` CPU-seconds; returns the runs.

        Raises:
            ValueError: not one future per index.
        """
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        if len(futures) != idx.size:
            raise ValueError(f"the environment returned {len(futures)} futures for {idx.size} trajectories; submit "
                             "returns one future per trajectory")
        runs = AnchorRuns(step=sb.step, w0=time.perf_counter() if w0 is None else w0,
                          batch=sb.batch if self.k else None, submit_cpu=submit_cpu)
        def finished_at(i: int) -> Callable[[Future[Any]], None]:
            return lambda _f: runs.done_at.__setitem__(i, time.perf_counter())

        for i, fut in zip(idx.tolist(), futures):
            fut.add_done_callback(finished_at(int(i)))
            runs.futures[int(i)] = fut
            runs.group_of[int(i)] = int(sb.gid[i])
        if self.k:
            self.in_flight.append(runs)
        return runs

    def collect(self, sb: StepBatch, runs: AnchorRuns) -> LatePairs | None:
        """Consume what the bound allows at step ``sb.step``: fill ``sb.reward_true``, ``sb.status``,
        ``sb.error``, ``sb.valid`` and ``sb.is_anchor`` for the step's own groups (a group still in flight is
        not an anchor at this step), and return the late pairs of earlier steps (None when k = 0).

        Infrastructure failures (a future that raised or was cancelled, status ``infra_error``, no reward) are
        not valid; on a late group they are dropped and counted."""
        if not self.k:
            self._consume_sync(sb, runs)
            return None
        runs.reward_wm = {i: float(sb.reward_wm[i]) for i in runs.futures}
        c0, w0 = time.process_time(), time.perf_counter()
        waited, n_cancelled = 0.0, 0
        due = [(r, g) for r in self.in_flight for g in sorted(set(r.group_of.values()))
               if is_due(r.step, sb.step, self.k) and g not in r.over and not r.group_done(g)]
        if due and self.at_bound == "wait":
            t0 = time.perf_counter()
            wait([f for r, g in due for i, f in r.futures.items() if r.group_of[i] == g])
            waited = time.perf_counter() - t0
        elif due:  # not waited for: over the bound from now on, whenever it finishes
            for r, g in due:
                r.over.add(g)
                n_cancelled += self._shed(r, g)
        self.n_over_bound_total += len(due)
        over: list[tuple[int, int, float, float]] = []
        n_over = 0
        late: list[tuple[int, int, float, float]] = []
        parts: list[tuple[Any, list[int]]] = []
        results: list[Any] = []
        own: list[tuple[int, Any]] = []
        keep: list[AnchorRuns] = []
        for r in self.in_flight:
            for g in sorted(set(r.group_of.values())):
                if not r.group_done(g):
                    continue
                for i in [i for i, gg in r.group_of.items() if gg == g]:
                    if g in r.over and r.futures[i].cancelled():  # shed at the bound: not an execution
                        del r.futures[i], r.group_of[i]
                        continue
                    res = self._result(r, i)
                    results.append(res)
                    ok = bool(Outcomes.from_results([i], [res]).valid[0])
                    if g in r.over:  # arrived over the bound: calibration only, or discarded
                        n_over += 1
                        if not ok:
                            self.n_late_infra += 1
                        elif self.at_bound == "calibration":
                            over.append((r.step, g, float(res.reward), r.reward_wm[i]))
                    elif r.step == sb.step:
                        own.append((i, res))
                    elif ok:
                        late.append((r.step, g, float(res.reward), r.reward_wm[i]))
                        if not parts or parts[-1][0] is not r.batch:
                            parts.append((r.batch, []))
                        parts[-1][1].append(i)
                    else:
                        self.n_late_infra += 1
                    del r.futures[i], r.group_of[i]
                r.over.discard(g)
            if r.futures:
                keep.append(r)
        self.in_flight = keep
        self.own_results = dict(own)
        sb.apply_outcomes(Outcomes.from_results([i for i, _ in own], [res for _, res in own]))
        own_running = set(runs.group_of.values()) if any(r is runs for r in keep) else set()
        sb.is_anchor = sb.is_anchor & ~np.isin(sb.gid, sorted(own_running))
        if results and self.ledger is not None:
            self.ledger.add_executions("anchor", results)
        if self.ledger is not None:
            self.ledger.add_stage("execute", time.perf_counter() - w0 - waited,
                                  runs.submit_cpu + time.process_time() - c0)
            self.ledger.add_stage("anchor_wait", waited, 0.0)
        self.over_bound = _pairs(over, sb.step) if over else None
        self.step_counts = {"anchor_groups_over_bound": len(due),
                            "anchor_groups_over_bound_total": self.n_over_bound_total,
                            "anchor_over_bound_samples": n_over, "anchor_over_bound_cancelled": n_cancelled,
                            "anchor_groups_in_flight": len(self.in_flight_groups())}
        return _pairs(late, sb.step, [(b, np.asarray(ix, dtype=np.int64)) for b, ix in parts])

    def _shed(self, r: AnchorRuns, g: int) -> int:
        """Cancel what of over-bound group ``g`` is not worth running: its queued executions (``calibration``:
        they would start after the bound; the running ones go on) or all of them (``drop``: running ones are
        killed, their slots freed). Without this a saturated executor's queue grows step after step and every
        group ends over the bound. Returns how many were cancelled."""
        n = 0
        for i, f in r.futures.items():
            if r.group_of[i] == g and not f.done() and (self.at_bound == "drop" or not f.running()):
                n += bool(f.cancel())
        return n

    def learn_over_bound(self, recipe: Any, state: Any, step: int) -> dict[str, list[Any]]:
        """``calibration`` mode: feed the over-bound pairs consumed at ``step``'s collection to the calibrator and
        the window (:meth:`~wmrl.core.recipe.Recipe.learn_late`; call it after the step's recipe, as the late
        pairs of the ``calibration`` late mode). Returns the calibration.jsonl keys ``over_bound_wm``,
        ``over_bound_wm_calibrated``, ``over_bound_true``, ``over_bound_origin_steps`` (empty dict when none)."""
        o, self.over_bound = self.over_bound, None
        if o is None or not o.n:
            return {}
        tilde = recipe.learn_late(state, step, o.origin_steps, o.group_ids, o.reward_true, o.reward_wm)
        return {"over_bound_wm": o.reward_wm.tolist(), "over_bound_wm_calibrated": np.asarray(tilde).tolist(),
                "over_bound_true": o.reward_true.tolist(), "over_bound_origin_steps": o.origin_steps.tolist()}

    def in_flight_groups(self) -> list[tuple[int, int, int]]:
        """``(routing step, group, executions not consumed)`` of every anchor group still in flight."""
        return [(r.step, g, sum(1 for gg in r.group_of.values() if gg == g))
                for r in self.in_flight for g in sorted(set(r.group_of.values()))]

    @property
    def n_in_flight(self) -> int:
        """Anchor executions submitted and not consumed yet."""
        return sum(len(r.futures) for r in self.in_flight)

    @staticmethod
    def _result(runs: AnchorRuns, i: int) -> Any:
        res = result_of(runs.futures[i])  # cancelled or failed executor: infrastructure error
        runs.done_at.setdefault(i, time.perf_counter())
        return res

    def _consume_sync(self, sb: StepBatch, runs: AnchorRuns) -> None:
        """k = 0: wait for every execution of the step (stage ``execute``, from submission to the last one done)."""
        c2 = time.process_time()
        results: dict[int, Any] = {i: self._result(runs, i) for i in list(runs.futures)}
        if runs.futures and self.ledger is not None:
            self.ledger.add_stage("execute", max(runs.done_at.values(), default=runs.w0) - runs.w0,
                                  runs.submit_cpu + time.process_time() - c2)
            self.ledger.add_executions("anchor", results.values())
        self.own_results = results
        sb.apply_outcomes(Outcomes.from_results(list(results), list(results.values())))


# ---------------------------------------------------------------------------------------------- the recipe's view
LATE_MODES = ("gradient", "calibration")


def recipe_inputs(sb: StepBatch, late: LatePairs | None, late_mode: str, recalled: np.ndarray | None = None) -> Any:
    """The recipe's :class:`~wmrl.core.recipe.StepInputs` at step t ([B + N]; N = late samples in the gradient).
    ``recalled`` [B] is the measured reward of the step's samples whose programs were executed before (NaN
    elsewhere), or None; late rows have none.

    The step's B samples come first. ``late_mode="gradient"``: the step's own anchor groups still in flight are
    left out of this step's loss (``valid`` False for the recipe, so weight 0; they enter at their arrival step),
    and the N late samples follow as anchor groups with ids M, M+1, ... (one per (origin step, group)), so the
    recipe calibrates them out of sample, learns them, and weighs them with this step's anchors.
    ``calibration``: the in-flight groups train as world-model groups, and no late row is added (the trainer
    feeds the late pairs to :meth:`~wmrl.core.recipe.Recipe.learn_late` after the step).
    """

    valid = sb.valid.copy()
    gid, anc, rt, rw = sb.gid, sb.is_anchor, sb.reward_true, sb.reward_wm
    if late is not None and late_mode == "gradient":
        valid &= ~(sb.anchor_groups[sb.gid] & ~sb.is_anchor)
        if late.n:
            key = np.stack([late.origin_steps, late.group_ids], axis=1)
            _, j = np.unique(key, axis=0, return_inverse=True)
            n = late.n
            gid = np.concatenate([gid, sb.M + j.reshape(-1)])
            anc, valid = np.concatenate([anc, np.ones(n, bool)]), np.concatenate([valid, np.ones(n, bool)])
            rt, rw = np.concatenate([rt, late.reward_true]), np.concatenate([rw, late.reward_wm])
    if recalled is not None and gid.size > sb.B:
        recalled = np.concatenate([recalled, np.full(gid.size - sb.B, np.nan)])
    return StepInputs(step=sb.step, group_ids=gid, is_anchor=anc, valid=valid, reward_true=rt, reward_wm=rw,
                      reward_recalled=recalled)


def late_update_parts(late: LatePairs | None, adv: np.ndarray, weights: np.ndarray) -> list[tuple[Any, Any, Any]]:
    """``(rows of the origin batch, adv [n], weights [n])`` per origin step for :func:`grpo_update`'s ``extra``,
    from the late rows' advantages and weights ([N], the recipe's output after the step's B rows)."""
    if late is None or not adv.size:
        return []
    out, s = [], 0
    for batch, idx in late.parts:
        out.append((batch.slice(idx.tolist()), adv[s:s + idx.size], weights[s:s + idx.size]))
        s += idx.size
    return out


def late_sample_lines(step: int, late: LatePairs, tilde: np.ndarray, used: np.ndarray, adv: np.ndarray,
                      weights: np.ndarray) -> list[dict[str, Any]]:
    """samples.jsonl lines of the late anchor samples trained on at ``step`` (stream ``anchor_late``; ``sample`` is the
    row of the origin step's batch, as in the execution's request id)."""
    lines, s = [], 0
    for batch, idx in late.parts:
        programs = getattr(batch, "programs", None) or []
        for i in idx:
            lines.append({"step": step, "origin_step": int(late.origin_steps[s]), "group": int(late.group_ids[s]),
                          "sample": int(i), "task_id": batch.task_ids[i], "stream": "anchor_late",
                          "staleness": int(late.staleness[s]), "recalled": False,
                          "program_sha256": program_hash(programs[i]) if i < len(programs) else None,
                          "prompt_sha256": text_sha256(batch.prompts[i]), "prompt": batch.prompts[i],
                          "reward_true": float(late.reward_true[s]), "reward_wm": float(late.reward_wm[s]),
                          "reward_wm_calibrated": float(tilde[s]), "reward_used": float(used[s]),
                          "advantage": float(adv[s]), "weight": float(weights[s]), "dropped": False,
                          "completion": batch.completions[i][:2000]})
            s += 1
    return lines


def anchor_request(task: Any, program: str, *, step: int, group: int, sample: int, run: str, prompt: str,
                   completion: str, scaffold: str, completion_tokens: int | None = None,
                   time_limit_s: float | None = None, turn: int | None = None,
                   extra: dict[str, Any] | None = None) -> Any:
    """The :class:`~wmrl.execution.types.ExecutionRequest` of one anchor trajectory, as every trainer and integration
    writes it: request id ``s{step}-g{group}-i{sample}`` (``-t{turn}`` for a later turn of a multi-turn episode), the
    trajectory record the execution log keeps (stream ``anchor``), the wall limit (seconds; None: the task's own).
    """
    from wmrl.execution.types import ExecutionRequest  # noqa: PLC0415 - keeps the engine's import light
    from wmrl.trajectory import Trajectory  # noqa: PLC0415

    return ExecutionRequest(
        task=task, program=program,
        request_id=f"s{step}-g{group}-i{sample}" + (f"-t{turn}" if turn is not None else ""),
        time_limit_s=time_limit_s,
        trajectory=Trajectory(stream="anchor", run=run, step=int(step), group_id=int(group), sample=int(sample),
                              task_id=task.id, prompt=prompt, completion=completion, scaffold=scaffold,
                              completion_tokens=completion_tokens,
                              extra=({"turn": turn} if turn is not None else {}) | dict(extra or {})))

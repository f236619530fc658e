"""The compute ledger: where a training run spends its wall seconds and CPU-seconds.

Two sources of compute are counted apart and added up:

- the trainer process itself (generation, world-model forward passes, calibration, the policy
  update, ...): wall seconds from ``time.perf_counter`` and CPU-seconds (user+sys of every thread of
  this process) from ``time.process_time``, per stage and per phase (set-up, warm-up, world-model fit);
- real executions, which run in sandboxed child processes or on Ray workers: their CPU-seconds come
  from each :class:`~wmrl.execution.types.ExecutionResult` (``cpu_s``, rusage of the sandboxed process
  tree) and are summed per kind (``anchor``, ``verify``: a world-model group's favourite executed by
  ``wmrl.routing.verify_favourites``, ``warmup``, ``eval``).

The training compute of a run, the quantity methods are compared on, is
``train_compute_cpu_s = trainer CPU (all phases and training stages) + sandbox CPU of warm-up, anchor and
verification executions``. Evaluation compute is reported apart. The layout of ``ledger.json`` is in
docs/run-directory.md.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

EXEC_KINDS = ("anchor", "verify", "warmup", "eval")
#: The execution kinds of a training step (the step's ``exec_count``); with ``warmup`` they are training compute.
STEP_EXEC_KINDS = ("anchor", "verify")
#: The execution kinds whose sandbox CPU is training compute.
TRAIN_EXEC_KINDS = (*STEP_EXEC_KINDS, "warmup")


@dataclass
class _Timer:
    wall_s: float = 0.0
    cpu_s: float = 0.0
    calls: int = 0

    def add(self, wall_s: float, cpu_s: float, calls: int = 1) -> None:
        self.wall_s += float(wall_s)
        self.cpu_s += float(cpu_s)
        self.calls += calls

    def to_dict(self) -> dict[str, float]:
        return {"wall_s": self.wall_s, "cpu_s": self.cpu_s, "calls": self.calls}


@dataclass
class _Exec:
    count: int = 0
    ok: int = 0
    infra_errors: int = 0
    sandbox_cpu_s: float = 0.0
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, float]:
        return {"count": self.count, "ok": self.ok, "infra_errors": self.infra_errors,
                "sandbox_cpu_s": self.sandbox_cpu_s, "wall_s": self.wall_s}


@dataclass
class Ledger:
    """Accumulates per-stage and per-execution compute for one run (state survives a resume).

    Use :meth:`stage` around each pipeline stage of a step, :meth:`phase` around one-off phases
    (``setup``, ``warmup``, ``wm_fit``), :meth:`add_executions` for execution results, and
    :meth:`begin_step` / :meth:`end_step` to get the per-step figures for ``metrics.jsonl``.
    """

    method: str = ""
    anchor_fraction_configured: float | None = None
    stages: dict[str, _Timer] = field(default_factory=dict)
    phases: dict[str, _Timer] = field(default_factory=dict)
    executions: dict[str, _Exec] = field(default_factory=lambda: {k: _Exec() for k in EXEC_KINDS})
    steps: int = 0
    groups_total: int = 0
    groups_anchor: int = 0
    #: anchor executions per episode turn ({"1": n, "2": n, ...}; multi-turn episodes, docs/multiturn.md)
    turn_executions: dict[str, int] = field(default_factory=dict)
    # asynchronous anchors submitted and never consumed: the run ended, or a resume lost its process's futures
    anchors_lost: list[dict[str, Any]] = field(default_factory=list)
    # wall/cpu of the run's life before the current process (restored on resume)
    _wall_before: float = 0.0
    _cpu_before: float = 0.0
    _t0_wall: float = field(default_factory=time.perf_counter)
    _t0_cpu: float = field(default_factory=time.process_time)
    _step: dict[str, Any] | None = None
    _pending: dict[str, list[float]] = field(default_factory=dict)

    # ------------------------------------------------------------------ timing
    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time one pipeline stage of the current step (wall seconds and trainer CPU-seconds)."""
        w0, c0 = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.add_stage(name, time.perf_counter() - w0, time.process_time() - c0)

    def add_stage(self, name: str, wall_s: float, cpu_s: float) -> None:
        """Record ``wall_s`` seconds and ``cpu_s`` CPU-seconds for stage ``name`` (e.g. a span measured
        by hand, such as the executions that overlap the world-model stage)."""
        self.stages.setdefault(name, _Timer()).add(wall_s, cpu_s)
        # outside a step (e.g. logging and checkpointing after the step's line was closed) the time is
        # carried into the next step's figures, so the per-step lines still add up to the loop's time
        st = (self._step["stages"] if self._step is not None else self._pending).setdefault(name, [0.0, 0.0])
        st[0] += wall_s
        st[1] += cpu_s

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a one-off phase (``setup``, ``warmup``, ``wm_fit``, ``wm_refresh``)."""
        w0, c0 = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.phases.setdefault(name, _Timer()).add(time.perf_counter() - w0, time.process_time() - c0)

    # ------------------------------------------------------------------ executions
    def add_executions(self, kind: str, results: Iterable[Any], turn: int | None = None) -> dict[str, float]:
        """Count execution results of ``kind`` (one of :data:`EXEC_KINDS`).

        ``turn``: the episode turn (1-based) of anchor executions of a multi-turn episode; counted per turn
        in ``turn_executions`` and the step's ``exec_count_turn<j>``. ``results`` are :class:`~wmrl.execution.types.ExecutionResult` (``status``, ``cpu_s``, ``wall_s``).
        Returns this call's figures ``{count, ok, infra_errors, sandbox_cpu_s, wall_s}``.

        Raises:
            ValueError: unknown ``kind``.
        """
        if kind not in self.executions:
            raise ValueError(f"unknown execution kind {kind!r}; use one of {', '.join(EXEC_KINDS)}")
        add = _Exec()
        for r in results:
            status = getattr(r.status, "value", r.status)
            add.count += 1
            add.ok += int(status == "ok")
            add.infra_errors += int(status == "infra_error")
            add.sandbox_cpu_s += float(r.cpu_s or 0.0)
            add.wall_s += float(r.wall_s or 0.0)
        tot = self.executions[kind]
        for k in ("count", "ok", "infra_errors", "sandbox_cpu_s", "wall_s"):
            setattr(tot, k, getattr(tot, k) + getattr(add, k))
        if self._step is not None and kind in STEP_EXEC_KINDS:
            for k in ("count", "sandbox_cpu_s", "wall_s"):
                self._step["exec"][k] += getattr(add, k)
        if turn is not None and kind == "anchor":
            key = str(int(turn))
            self.turn_executions[key] = self.turn_executions.get(key, 0) + add.count
            if self._step is not None:
                self._step["turns"][key] = self._step["turns"].get(key, 0) + add.count
        return add.to_dict()

    def add_lost_anchors(self, when: str, step: int, groups: int, executions: int) -> None:
        """Record anchor groups submitted and never consumed (asynchronous anchors): ``when`` is ``end`` (in
        flight when the run finished) or ``resume`` (in flight at the checkpoint a resume started from; they
        ran in the killed process and are not re-submitted)."""
        if groups or executions:
            self.anchors_lost.append({"when": when, "step": int(step), "groups": int(groups),
                                      "executions": int(executions)})

    def add_groups(self, n_total: int, n_anchor: int) -> None:
        """Count the groups of one step and how many went to the anchor stream."""
        self.groups_total += int(n_total)
        self.groups_anchor += int(n_anchor)

    # ------------------------------------------------------------------ steps
    def begin_step(self) -> None:
        """Start collecting the figures of one training step."""
        pending, self._pending = self._pending, {}
        self._step = {"w0": time.perf_counter(), "c0": time.process_time(), "stages": pending,
                      "pw": sum(v[0] for v in pending.values()), "pc": sum(v[1] for v in pending.values()),
                      "exec": {"count": 0, "sandbox_cpu_s": 0.0, "wall_s": 0.0}, "turns": {}}

    def end_step(self) -> dict[str, Any]:
        """Close the step; returns the flat ledger keys of ``metrics.jsonl`` for it (see
        docs/run-directory.md): ``wall_s.<stage>``, ``cpu_s.<stage>``, ``step_wall_s``, ``step_cpu_s``,
        ``exec_*`` and the ``cum_*`` totals.

        Stages timed after this call (writing the step's logs, the checkpoint) are carried into the
        next step's figures."""
        if self._step is None:
            raise RuntimeError("end_step() without begin_step()")
        s = self._step
        self._step = None
        self.steps += 1
        out: dict[str, Any] = {}
        for name, (w, c) in s["stages"].items():
            out[f"wall_s.{name}"] = w
            out[f"cpu_s.{name}"] = c
        out["step_wall_s"] = time.perf_counter() - s["w0"] + s["pw"]
        out["step_cpu_s"] = time.process_time() - s["c0"] + s["pc"]
        out["exec_count"] = s["exec"]["count"]
        out["exec_sandbox_cpu_s"] = s["exec"]["sandbox_cpu_s"]
        out["exec_wall_s"] = s["exec"]["wall_s"]
        for turn, n in sorted(s["turns"].items(), key=lambda kv: int(kv[0])):
            out[f"exec_count_turn{turn}"] = n
        tot = self.totals()
        out["cum_wall_s"] = tot["wall_s"]
        out["cum_trainer_cpu_s"] = tot["trainer_cpu_s"]
        out["cum_exec_count"] = sum(self.executions[k].count for k in STEP_EXEC_KINDS)
        out["cum_exec_sandbox_cpu_s"] = sum(self.executions[k].sandbox_cpu_s for k in STEP_EXEC_KINDS)
        out["cum_compute_cpu_s"] = tot["train_compute_cpu_s"]
        out["cum_anchor_groups"] = self.groups_anchor
        out["cum_groups"] = self.groups_total
        return out

    # ------------------------------------------------------------------ totals
    def wall_s(self) -> float:
        """Wall seconds of the run so far (this process plus earlier processes before a resume)."""
        return self._wall_before + (time.perf_counter() - self._t0_wall)

    def trainer_cpu_s(self) -> float:
        """Trainer-process CPU-seconds of the run so far (this process plus earlier ones)."""
        return self._cpu_before + (time.process_time() - self._t0_cpu)

    def totals(self) -> dict[str, float]:
        """Run totals: ``wall_s``, ``trainer_cpu_s``, ``sandbox_cpu_s``, ``train_compute_cpu_s``,
        ``eval_compute_cpu_s``, ``executions``.

        Trainer CPU spent inside the ``eval`` stage is moved from training compute to evaluation compute.
        """
        trainer = self.trainer_cpu_s()
        eval_trainer = self.stages.get("eval", _Timer()).cpu_s + self.phases.get("eval", _Timer()).cpu_s
        sandbox_train = sum(self.executions[k].sandbox_cpu_s for k in TRAIN_EXEC_KINDS)
        sandbox_eval = self.executions["eval"].sandbox_cpu_s
        return {
            "wall_s": self.wall_s(),
            "trainer_cpu_s": trainer,
            "sandbox_cpu_s": sandbox_train + sandbox_eval,
            "train_compute_cpu_s": trainer - eval_trainer + sandbox_train,
            "eval_compute_cpu_s": eval_trainer + sandbox_eval,
            "executions": sum(e.count for e in self.executions.values()),
        }

    def to_json(self) -> dict[str, Any]:
        """The ``ledger.json`` document (see docs/run-directory.md)."""
        frac = self.groups_anchor / self.groups_total if self.groups_total else None
        return {
            "method": self.method,
            "steps": self.steps,
            "stages": {k: v.to_dict() for k, v in self.stages.items()},
            "phases": {k: v.to_dict() for k, v in self.phases.items()},
            "executions": {k: v.to_dict() for k, v in self.executions.items()},
            "groups": {"total": self.groups_total, "anchor": self.groups_anchor,
                       "wm": self.groups_total - self.groups_anchor, "anchor_fraction": frac,
                       "anchor_fraction_configured": self.anchor_fraction_configured},
            "totals": self.totals(),
        } | ({"turn_executions": dict(self.turn_executions)} if self.turn_executions else {}) \
          | ({"anchors_lost": {"groups": sum(e["groups"] for e in self.anchors_lost),
                               "executions": sum(e["executions"] for e in self.anchors_lost),
                               "events": [dict(e) for e in self.anchors_lost]}} if self.anchors_lost else {})

    # ------------------------------------------------------------------ resume
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue the ledger after a resume (JSON-serialisable)."""
        d = self.to_json()
        d["wall_s_total"] = self.wall_s()
        d["cpu_s_total"] = self.trainer_cpu_s()
        return d

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`; time of this process counts on top of the saved totals."""
        self.method = d.get("method", self.method)
        self.steps = int(d["steps"])
        self.stages = {k: _Timer(v["wall_s"], v["cpu_s"], v["calls"]) for k, v in d["stages"].items()}
        self.phases = {k: _Timer(v["wall_s"], v["cpu_s"], v["calls"]) for k, v in d["phases"].items()}
        self.executions = {k: _Exec(**{kk: v[kk] for kk in ("count", "ok", "infra_errors",
                                                             "sandbox_cpu_s", "wall_s")})
                           for k, v in d["executions"].items()}
        for k in EXEC_KINDS:
            self.executions.setdefault(k, _Exec())
        self.groups_total = int(d["groups"]["total"])
        self.groups_anchor = int(d["groups"]["anchor"])
        self.turn_executions = {str(k): int(v) for k, v in d.get("turn_executions", {}).items()}
        self.anchors_lost = [dict(e) for e in d.get("anchors_lost", {}).get("events", [])]
        self._wall_before = float(d["wall_s_total"])
        self._cpu_before = float(d["cpu_s_total"])
        self._t0_wall = time.perf_counter()
        self._t0_cpu = time.process_time()


def format_ledger(ledger: dict[str, Any]) -> str:
    """A plain-text table of a ``ledger.json`` document (for terminals and reports)."""
    lines = [f"compute ledger: method={ledger.get('method')} steps={ledger.get('steps')}"]
    lines.append(f"  {'stage/phase':<14}{'wall s':>10}{'cpu s':>10}{'calls':>7}")
    for title, section in (("phase", ledger.get("phases", {})), ("stage", ledger.get("stages", {}))):
        for k, v in section.items():
            lines.append(f"  {title[0]}:{k:<12}{v['wall_s']:>10.1f}{v['cpu_s']:>10.1f}{v['calls']:>7}")
    lines.append(f"  {'executions':<14}{'count':>7}{'ok':>6}{'infra':>7}{'sandbox cpu s':>15}{'wall s':>9}")
    for k, v in ledger.get("executions", {}).items():
        lines.append(f"  {k:<14}{v['count']:>7}{v['ok']:>6}{v['infra_errors']:>7}"
                     f"{v['sandbox_cpu_s']:>15.1f}{v['wall_s']:>9.1f}")
    g = ledger.get("groups", {})
    frac = g.get("anchor_fraction")
    lines.append(f"  groups: {g.get('total')} total, {g.get('anchor')} anchor, {g.get('wm')} world-model; "
                 f"anchor fraction {frac if frac is None else round(frac, 3)} "
                 f"(configured {g.get('anchor_fraction_configured')})")
    t = ledger.get("totals", {})
    lines.append(f"  totals: wall {t.get('wall_s', 0):.1f} s, trainer cpu {t.get('trainer_cpu_s', 0):.1f} s, "
                 f"sandbox cpu {t.get('sandbox_cpu_s', 0):.1f} s, train compute "
                 f"{t.get('train_compute_cpu_s', 0):.1f} cpu-s, eval compute {t.get('eval_compute_cpu_s', 0):.1f} "
                 f"cpu-s, executions {t.get('executions', 0)}")
    return "\n".join(lines)

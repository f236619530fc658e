"""Loading run directories (docs/run-directory.md) into pandas for plots, reports and the bench.

Everything here only reads files; a run that is still going, or was killed mid-write, loads too
(a truncated last JSONL line is skipped).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml
from wmrl.runs.ledger import TRAIN_EXEC_KINDS


class NotARunDir(FileNotFoundError):
    """The folder is not a wmrl run directory; the message says what is missing and what to pass."""


def read_jsonl(path: Path, skip_bad: bool = False) -> list[dict[str, Any]]:
    """Records of a JSON-lines file; ``[]`` when it is absent.

    A last line that does not parse (a writer killed mid-line) is skipped; a bad line anywhere
    else raises ``ValueError`` naming the file and line number, or is skipped too with ``skip_bad``
    (as the trainer's own reader, :func:`wmrl.runs.rundir.read_jsonl`, does).
    """
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[dict[str, Any]] = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if i == len(lines) - 1:
                break
            if skip_bad:
                continue
            raise ValueError(f"{path}:{i + 1}: not valid JSON ({exc}); the file is corrupt") from exc
    return out


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return None  # being rewritten right now; treated as absent


def method_label(config: dict[str, Any]) -> str:
    """A short name for the method a run config trains, e.g. ``"wmrl"``, ``"wmrl (no debias)"``,
    ``"wmrl (fusion=ppi)"``, ``"grpo"``, ``"wm"``.

    Reads ``method.name`` and, for ``wmrl``, the switches of ``method`` / ``wmrl`` sections that the
    ablations change (``debias``, ``denoise``, ``fusion``). Unknown layouts fall back to ``"?"``.
    """
    m = config.get("method")
    name = m.get("name") if isinstance(m, dict) else m
    if not name:
        return "?"
    name = str(name)
    if name != "wmrl":
        return name
    opts: dict[str, Any] = {}
    for sect in ("wmrl", "method"):
        s = config.get(sect)
        if isinstance(s, dict):
            opts = {**s, **opts}
    tags = []
    if opts.get("debias") is False:
        tags.append("no debias")
    if opts.get("denoise") is False:
        tags.append("no denoise")
    fusion = opts.get("fusion")  # the removed switch (a name); the recipe section's ``fusion`` is a sub-section
    if isinstance(fusion, str) and fusion not in ("inverse_variance", "ivw", "inverse-variance"):
        tags.append(f"fusion={fusion}")
    return name + (f" ({', '.join(tags)})" if tags else "")


@dataclass
class RunData:
    """One run directory, loaded.

    Attributes:
        path: the run directory.
        name: display name (the folder name unless given).
        config: resolved config (``config.yaml``) as a nested dict.
        method: ``method_label(config)``.
        metrics: one row per training step (``metrics.jsonl``; columns as in docs/run-directory.md,
            nested keys like ``wall_s.generate`` kept as dotted column names), sorted by ``step``.
        evals: one row per (evaluation, split) (``eval.jsonl``).
        calibration: one record per step (``calibration.jsonl``), lists kept as lists.
        ledger: ``ledger.json`` (``{}`` when absent).
        summary: ``summary.json`` or ``None`` while the run has not finished.
        fidelity: ``fidelity.json`` (the world model's fidelity card on the anchors,
            :meth:`wmrl.world_model.fidelity.FidelityCard.to_dict`), or ``None``: no anchor scored by a world
            model, the run not finished, or a run from before the card.
    """

    path: Path
    name: str
    config: dict[str, Any]
    method: str
    metrics: pd.DataFrame
    evals: pd.DataFrame
    calibration: list[dict[str, Any]] = field(default_factory=list)
    ledger: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] | None = None
    fidelity: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        """True when ``summary.json`` exists (the run ended)."""
        return self.summary is not None

    def final_eval(self, split: str = "heldout") -> dict[str, Any] | None:
        """The last evaluation record of ``split`` (from ``summary.json``, else ``eval.jsonl``)."""
        if self.summary and isinstance(self.summary.get("final_eval"), dict):
            rec = self.summary["final_eval"].get(split)
            if rec:
                return rec
        if self.evals.empty or "split" not in self.evals:
            return None
        ev = self.evals[self.evals["split"] == split]
        if ev.empty:
            return None
        return ev.sort_values("step", kind="stable").iloc[-1].to_dict()

    def initial_eval(self, split: str = "heldout") -> dict[str, Any] | None:
        """The evaluation record of ``split`` at step 0 (the policy before training), or None."""
        if self.evals.empty or "split" not in self.evals:
            return None
        ev = self.evals[(self.evals["split"] == split) & (self.evals["step"] == 0)]
        return None if ev.empty else ev.iloc[-1].to_dict()

    def totals(self) -> dict[str, float]:
        """``ledger.json`` totals (``wall_s``, ``trainer_cpu_s``, ``sandbox_cpu_s``,
        ``train_compute_cpu_s``, ``eval_compute_cpu_s``, ``executions``), falling back to the
        summary's ``ledger_totals``; ``{}`` when neither exists."""
        t = self.ledger.get("totals") if self.ledger else None
        if not t and self.summary:
            t = self.summary.get("ledger_totals")
        return dict(t or {})


def _frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    if not records:
        return pd.DataFrame()
    flat = []
    for r in records:
        row = {}
        for k, v in r.items():
            if isinstance(v, dict) and k not in ("per_task", "medals", "diagnostics"):
                for k2, v2 in v.items():
                    row[f"{k}.{k2}"] = v2
            else:
                row[k] = v
        flat.append(row)
    df = pd.DataFrame(flat)
    if "step" in df:
        df = df.sort_values("step", kind="stable").reset_index(drop=True)
    return df


def load_run(run_dir: str | Path, name: str | None = None) -> RunData:
    """Load one run directory.

    Raises:
        NotARunDir: when ``run_dir`` does not exist or has neither ``config.yaml`` nor
            ``metrics.jsonl`` (pass the folder ``wmrl train`` wrote, e.g. ``runs/wmrl-...``).
    """
    p = Path(run_dir)
    if not p.is_dir():
        raise NotARunDir(f"{p}: no such directory; pass a run directory written by `wmrl train`")
    cfg_path = p / "config.yaml"
    if not cfg_path.exists() and not (p / "metrics.jsonl").exists():
        raise NotARunDir(
            f"{p}: not a wmrl run directory (no config.yaml and no metrics.jsonl); "
            "pass the folder `wmrl train` wrote (its run_dir), see docs/run-directory.md"
        )
    config = yaml.safe_load(cfg_path.read_text(encoding="utf-8")) if cfg_path.exists() else {}
    config = config or {}
    metrics = _frame(read_jsonl(p / "metrics.jsonl"))
    evals = _frame(read_jsonl(p / "eval.jsonl"))
    summary = _read_json(p / "summary.json")
    label = method_label(config)
    if label == "?" and not metrics.empty and "method" in metrics:
        label = str(metrics["method"].iloc[0])
    return RunData(
        path=p,
        name=name or p.name,
        config=config,
        method=label,
        metrics=metrics,
        evals=evals,
        calibration=read_jsonl(p / "calibration.jsonl"),
        ledger=_read_json(p / "ledger.json") or {},
        summary=summary,
        fidelity=_read_json(p / "fidelity.json"),
    )


def load_runs(run_dirs: list[str | Path]) -> list[RunData]:
    """Load several run directories. Display names are the folder names, or ``parent/folder`` where
    folder names repeat (bench runs ``grpo/seed0``, ``wmrl/seed0``), then ``#2``, ``#3`` suffixes."""
    runs = [load_run(d) for d in run_dirs]
    names = [r.name for r in runs]
    if len(set(names)) < len(names):
        for r in runs:
            if names.count(r.path.name) > 1:
                r.name = f"{r.path.parent.name}/{r.path.name}"
    seen: dict[str, int] = {}
    for r in runs:
        if r.name in seen:
            seen[r.name] += 1
            r.name = f"{r.name}#{seen[r.name]}"
        else:
            seen[r.name] = 1
    return runs


def train_executions(run: RunData) -> int | None:
    """Real executions spent on training: anchor + warm-up executions from ``ledger.json``
    (evaluation executions are not counted); ``totals.executions`` when the breakdown is absent."""
    ex = run.ledger.get("executions") if run.ledger else None
    if isinstance(ex, dict) and ex:
        return int(sum(int((ex.get(k) or {}).get("count", 0) or 0) for k in TRAIN_EXEC_KINDS))
    t = run.totals().get("executions")
    return int(t) if t is not None else None


def repeated_sandbox_cpu_s(run_dir: str | Path) -> float:
    """Sandbox CPU-seconds of a run's training executions that re-ran a program the run had already executed on
    the same task under the same wall limit: what the run would not have paid with the exact execution cache
    (``executor.cache: true``, :mod:`wmrl.execution.cache`). Executions are deterministic, so the cached run is
    the same run at this lower cost.

    Training executions are the log's rows of the streams of :data:`~wmrl.runs.ledger.TRAIN_EXEC_KINDS` (anchor,
    verify, warm-up), in log order; the first execution of each (task id, program SHA-256, wall limit) pays, an
    infrastructure error never counts as the first (the cache does not keep one), a row the cache already served
    (``meta.cached_from``) cost nothing. ``cpu_s`` is the unit the compute ledger charges (CPU-seconds).

    Returns:
        CPU-seconds (float); NaN when the run has no ``executions.sqlite``.
    """
    from wmrl.execution.log import ExecutionLog  # noqa: PLC0415 - sqlite and the trajectory types, only here

    path = Path(run_dir) / "executions.sqlite"
    if not path.is_file():
        return math.nan
    seen: set[tuple[str, str, float | None]] = set()
    repeated = 0.0
    with ExecutionLog(path) as log:
        for r in log.records():
            traj = r["trajectory"]
            if traj is None or traj.stream not in TRAIN_EXEC_KINDS or r["meta"].get("cached_from"):
                continue
            key = (r["task_id"], r["program_sha256"], r["time_limit_s"])
            if key in seen:
                repeated += float(r["cpu_s"] or 0.0)
            elif r["status"] != "infra_error":
                seen.add(key)
    return repeated


def improvement_rows(run: RunData) -> list[dict[str, Any]]:
    """Did the agent improve? One row per evaluated split (``train``, ``heldout``) that has both a
    step-0 and a later evaluation: ``run``, ``split``, ``samples`` (per evaluation), ``step 0`` and
    ``final`` mean leaderboard percentile ([0, 1], real execution, the same sampling seeds at both
    steps), ``change`` (final - step 0) and ``final step``."""
    rows = []
    for split in ("train", "heldout"):
        first, last = run.initial_eval(split), run.final_eval(split)
        if not first or not last or int(last.get("step", 0)) == 0:
            continue
        p0, p1 = first.get("mean_percentile"), last.get("mean_percentile")
        rows.append({"run": run.name, "split": "train tasks" if split == "train" else "held-out tasks",
                     "samples": last.get("n_samples"), "step 0": p0, "final": p1,
                     "change": (p1 - p0) if p0 is not None and p1 is not None else None,
                     "final step": int(last["step"])})
    return rows


def turn_rows(run: RunData) -> list[dict[str, Any]]:
    """Multi-turn episodes (docs/multiturn.md): one row per evaluation with ``max_turns`` K > 1: ``run``, ``split``,
    ``step``, the mean leaderboard percentile of each episode's current submission after ``turn 1`` and after
    ``turn K`` (every turn executed for real), their difference ``gain``, ``best turn`` (mean of each episode's
    best turn) and ``submitted early`` (fraction of episodes that submitted before turn K). Empty for K = 1."""
    rows = []
    for rec in ([] if run.evals.empty else run.evals.to_dict("records")):
        k = rec.get("max_turns")
        if not isinstance(k, (int, float)) or k != k or int(k) < 2:
            continue
        turns = rec.get("mean_percentile_turn") or [None]
        rows.append({"run": run.name, "split": rec.get("split"), "step": int(rec.get("step", 0)), "K": int(k),
                     "turn 1": turns[0], "turn K": turns[-1], "gain": rec.get("turn_gain"),
                     "best turn": rec.get("best_turn_mean"), "submitted early": rec.get("submitted_rate")})
    return rows


def run_overview(run: RunData) -> dict[str, Any]:
    """One row of the runs table: method, steps, held-out result, executions and compute.

    Units: hours for ``*_h`` fields (CPU-hours for CPU, wall hours for wall); fractions in [0, 1].
    """
    tot = run.totals()
    ev = run.final_eval("heldout") or {}
    steps = int(run.metrics["step"].max()) if not run.metrics.empty and "step" in run.metrics else 0
    anchor_frac = None
    if run.ledger.get("groups"):
        anchor_frac = run.ledger["groups"].get("anchor_fraction")

    def h(x: Any) -> float:
        return float(x) / 3600.0 if x is not None else math.nan

    return {
        "run": run.name,
        "method": run.method,
        "status": "finished" if run.finished else "unfinished",
        "steps": steps,
        "heldout_percentile": ev.get("mean_percentile"),
        "heldout_valid_rate": ev.get("valid_rate"),
        "train_executions": train_executions(run),
        "anchor_fraction": anchor_frac,
        "sandbox_cpu_h": h(tot.get("sandbox_cpu_s")),
        "train_compute_cpu_h": h(tot.get("train_compute_cpu_s")),
        "wall_h": h(tot.get("wall_s")),
    }

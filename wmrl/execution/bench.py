"""Benchmarks of the execution side: sandbox overhead per execution and pool throughput.

:func:`sandbox_overhead` runs one trivial program (``print("ok")``) the same number of times in
three ways, interleaved in one run so that machine load affects them alike:

* ``plain``: ``subprocess.run([python, prog.py])`` in a fresh temp folder, nothing else;
* ``rlimit``: wmrl's launcher (limits, fork/reap, accounting) without isolation
  (``SandboxConfig(use_bwrap=False, allow_unsandboxed=True)``);
* ``bwrap``: the full sandbox (:func:`wmrl.execution.sandbox.run_program`).

The overhead of the sandbox is the difference of medians ``bwrap - plain`` (seconds per execution).

:func:`pool_throughput` runs real reference solutions of a task through :class:`LocalExecutor` at
each concurrency level and reports executions per minute, wall and CPU seconds.
"""
from __future__ import annotations

import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from wmrl.execution.pool import LocalExecutor
from wmrl.execution.sandbox import SandboxConfig, UnsandboxedWarning, run_program
from wmrl.execution.types import ExecutionRequest

TRIVIAL_PROGRAM = 'print("ok")\n'


@dataclass
class Timing:
    """Per-execution wall seconds of one way of running the trivial program."""

    name: str
    wall_s: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.wall_s)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.wall_s)

    @property
    def p90(self) -> float:
        s = sorted(self.wall_s)
        return s[min(len(s) - 1, int(round(0.9 * (len(s) - 1))))]

    def as_dict(self) -> dict:
        return {"name": self.name, "n": len(self.wall_s), "median_s": self.median, "mean_s": self.mean,
                "p90_s": self.p90, "min_s": min(self.wall_s)}


def _plain_run(python: str, public_dir: Path) -> float:
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="wmrl-plain-") as d:
        prog = Path(d) / "prog.py"
        prog.write_text(TRIVIAL_PROGRAM)
        (Path(d) / "input").symlink_to(public_dir)
        r = subprocess.run([python, str(prog)], cwd=d, capture_output=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"plain run failed: {r.stderr.decode()[-500:]}")
    return time.perf_counter() - t0


def sandbox_overhead(repeats: int = 20, public_dir: Path | None = None,
                     config: SandboxConfig | None = None) -> dict[str, Timing]:
    """Time the trivial program ``repeats`` times each as plain subprocess, rlimit-only and bwrap.

    Returns ``{"plain": Timing, "rlimit": Timing, "bwrap": Timing}`` (end-to-end wall seconds per
    execution as the caller sees it: folder setup, start, wait, output capture, cleanup).

    Raises:
        SandboxUnavailable: bwrap is missing.
        ValueError: ``repeats`` < 1.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    config = config or SandboxConfig()
    weak = config.with_(use_bwrap=False, allow_unsandboxed=True)
    python = config.python or sys.executable
    with tempfile.TemporaryDirectory(prefix="wmrl-bench-public-") as tmp:
        os.chmod(tmp, 0o755)  # the sandboxed program runs under another uid when we are root
        pub = Path(public_dir) if public_dir is not None else Path(tmp)
        out = {k: Timing(k) for k in ("plain", "rlimit", "bwrap")}
        # one warm-up each (page cache, bwrap probe)
        _plain_run(python, pub)
        run_program(TRIVIAL_PROGRAM, pub, 30, config)
        sandbox_log = logging.getLogger("wmrl.execution.sandbox")
        level = sandbox_log.level
        with warnings.catch_warnings():
            # the weak mode warns on every run; here it is run on purpose, on a trivial program
            warnings.simplefilter("ignore", UnsandboxedWarning)
            sandbox_log.setLevel(logging.ERROR)
            try:
                _weak_rounds(out, repeats, python, pub, config, weak)
            finally:
                sandbox_log.setLevel(level)
    return out


def _weak_rounds(out: dict[str, Timing], repeats: int, python: str, pub: Path, config: SandboxConfig,
                 weak: SandboxConfig) -> None:
    """Warm up the weak mode, then ``repeats`` interleaved rounds of plain, bwrap and rlimit-only."""
    run_program(TRIVIAL_PROGRAM, pub, 30, weak)
    for _ in range(repeats):
        out["plain"].wall_s.append(_plain_run(python, pub))
        for key, cfg in (("bwrap", config), ("rlimit", weak)):
            t0 = time.perf_counter()
            r = run_program(TRIVIAL_PROGRAM, pub, 30, cfg)
            out[key].wall_s.append(time.perf_counter() - t0)
            if r.infra_error or r.exit_code != 0 or r.stdout.strip() != "ok":
                raise RuntimeError(f"{key} run failed: {r.infra_error or r.stderr[-500:]}")


@dataclass
class Throughput:
    """One concurrency level of :func:`pool_throughput`."""

    concurrency: int
    n: int
    wall_s: float
    cpu_s: float
    exec_wall_s: float
    statuses: dict[str, int]
    scores: list[float | None]

    @property
    def per_minute(self) -> float:
        return 60.0 * self.n / self.wall_s if self.wall_s > 0 else float("nan")

    def as_dict(self) -> dict:
        return {"concurrency": self.concurrency, "n": self.n, "wall_s": self.wall_s,
                "executions_per_min": self.per_minute, "cpu_s_total": self.cpu_s,
                "mean_exec_wall_s": self.exec_wall_s / max(1, self.n), "statuses": self.statuses,
                "scores": self.scores}


def pool_throughput(task, programs: Sequence[str], concurrencies: Sequence[int] = (1, 2),
                    config: SandboxConfig | None = None, time_limit_s: float | None = None) -> list[Throughput]:
    """Run ``programs`` on ``task`` through :class:`LocalExecutor` at each concurrency level.

    Returns one :class:`Throughput` per level (batch wall seconds, total CPU-seconds, statuses,
    scores in program order).
    """
    out = []
    for c in concurrencies:
        reqs = [ExecutionRequest(task=task, program=p, request_id=f"bench-c{c}-{i}", time_limit_s=time_limit_s)
                for i, p in enumerate(programs)]
        with LocalExecutor(max_workers=c, sandbox=config) as ex:
            t0 = time.perf_counter()
            res = ex.run_batch(reqs)
            wall = time.perf_counter() - t0
        statuses: dict[str, int] = {}
        for r in res:
            statuses[r.status.value] = statuses.get(r.status.value, 0) + 1
        out.append(Throughput(c, len(res), wall, sum(r.cpu_s for r in res), sum(r.wall_s for r in res),
                              statuses, [r.score for r in res]))
    return out

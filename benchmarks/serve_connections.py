"""Idle connections against the two services (docs/services.md, "Measured: connections"): how long `/v1/health` and a
good request take while thousands of unauthenticated connections sit open and send nothing, and when connections
that send nothing or half a request line are closed. A sibling of benchmarks/serve_load.py (the same subprocess
services).

    PYTHONPATH=. python benchmarks/serve_connections.py [--idle 2000] [--beyond 400] [--nofile 2300]
                                                       [--header-timeout-s 10] [--tasks-root DIR] [--out DIR]

Per service (`wmrl serve sandbox --workers 1`, `wmrl serve world-model` on a regression world model of the `tiny`
backbone), started with its descriptor limit (RLIMIT_NOFILE) at ``--nofile`` and the default connection cap it
implies: 0 idle connections, then ``--idle`` (most of the limit), then ``--beyond`` more (past the limit). At each:
`/v1/health` five times on fresh connections (the median and the slowest, ms) and one good request on a fresh
connection (ms; sandbox: a new execution of a majority-class program, then its replay from the log; world model: one
prediction).
Then six connections (three silent, three with half a request line) and the seconds until the service closed each.
Exits 1 when a check fails: every answer 200, every idle connection closed by ``--header-timeout-s`` + 5 s.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.serve.servers import (BINARY, TOKEN, Server, auth, closed_by_server, fitted_world_model,  # noqa: E402
                                 open_idle)
from wmrl.tasks.datasets import SMALL_TASKS  # noqa: E402
from wmrl.tasks.loader import TaskSuite, default_suite  # noqa: E402


def _ms(call: Any) -> tuple[float, int]:
    t = time.perf_counter()
    status = call().status_code
    return round((time.perf_counter() - t) * 1000, 1), status


def probe(server: Server, rid: str) -> dict[str, Any]:
    """Health five times and a good request (and, for the sandbox, its replay), each on a fresh connection."""
    health = [_ms(lambda: httpx.get(server.url + "/v1/health", timeout=120)) for _ in range(5)]
    body = {"request_id": rid, "task_id": SMALL_TASKS[0], "program": BINARY}
    if server.kind == "world-model":
        body.update(prompt="a task", completion="model = Ridge(alpha=1)\n")

    def grade() -> httpx.Response:
        return httpx.post(server.url + "/v1/grade", headers=auth(), json=body, timeout=300)

    good = _ms(grade)
    ms = sorted(h[0] for h in health)
    out = {"health_p50_ms": ms[len(ms) // 2], "health_max_ms": ms[-1], "good_request_ms": good[0]}
    statuses = [h[1] for h in health] + [good[1]]
    if server.kind == "sandbox":
        replay = _ms(grade)
        out["replay_ms"] = replay[0]
        statuses.append(replay[1])
    out["all_200"] = all(s == 200 for s in statuses)
    return out


def bench(kind: str, args: list[str], n_idle: int, n_beyond: int, nofile: int, header_s: float) -> list[dict]:
    """The rows of one service."""
    rows = []
    with Server(kind, [*args, "--header-timeout-s", str(header_s)], nofile=nofile) as s:
        socks: list = []
        try:
            for n, label in ((0, "0"), (n_idle, str(n_idle)), (n_beyond, f"{n_idle} + {n_beyond}")):
                t = time.perf_counter()
                socks += open_idle(s.port, n)
                opened = time.perf_counter() - t
                rows.append({"service": kind, "idle_connections": label, "connected": len(socks),
                             "open_s": round(opened, 1), **probe(s, f"conn-{kind}-{len(rows)}")})
        finally:
            for sk in socks:
                sk.close()
        time.sleep(1.0)
        quiet = open_idle(s.port, 3) + open_idle(s.port, 3, b"GET /v1/hea")
        closed = closed_by_server(quiet, header_s + 60)
        for sk in quiet:
            sk.close()
        secs = sorted(round(v, 1) for v in closed.values())
        rows.append({"service": kind, "idle_connections": "3 silent + 3 half request line", "connected": len(quiet),
                     "closed_after_s": f"{secs[0]}-{secs[-1]}" if secs else "-", "closed": len(closed),
                     "all_200": len(closed) == len(quiet) and bool(secs) and secs[-1] <= header_s + 5})
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when every check passed."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--idle", type=int, default=2000, help="idle connections (most of --nofile)")
    ap.add_argument("--beyond", type=int, default=400, help="idle connections more, past --nofile")
    ap.add_argument("--nofile", type=int, default=2300, help="the services' descriptor limit")
    ap.add_argument("--header-timeout-s", type=float, default=10.0, help="the services' header deadline, seconds")
    ap.add_argument("--tasks-root", action="append", default=None, help="task roots (default: the built-in suite)")
    ap.add_argument("--out", type=Path, default=None, help="where serve_connections.json / .md go (default: a temp "
                                                           "folder)")
    a = ap.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = a.idle + a.beyond + 200
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            print(f"error: this benchmark opens {need} sockets but the descriptor hard limit is {hard}; lower --idle "
                  "and --beyond or raise the limit", file=sys.stderr)
            return 2
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    roots = list(a.tasks_root or [])
    suite = TaskSuite(roots) if roots else default_suite()
    if not roots:
        roots = [str(r) for r in suite.roots]
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="wmrl-serve-conn-") as td:
        tmp = Path(td)
        common = ["--token", TOKEN, *[x for r in roots for x in ("--tasks-root", r)]]
        rows += bench("sandbox", [*common, "--workers", "1", "--log", str(tmp / "log.sqlite")], a.idle, a.beyond,
                      a.nofile, a.header_timeout_s)
        wm = fitted_world_model(tmp / "wm", Path(roots[0]))
        rows += bench("world-model", [*common, "--model", str(wm), "--backbone", "tiny", "--seed", "0", "--threads",
                                      "1"], a.idle, a.beyond, a.nofile, a.header_timeout_s)
    keys = list(dict.fromkeys(k for r in rows for k in r))
    md = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    md += ["| " + " | ".join(str(r.get(k, "")) for k in keys) + " |" for r in rows]
    text = "\n".join(md)
    print(text)
    ok = all(r["all_200"] for r in rows)
    print("checks:", "passed" if ok else "FAILED")
    out = a.out or Path(tempfile.mkdtemp(prefix="wmrl-serve-conn-out-"))
    out.mkdir(parents=True, exist_ok=True)
    meta = {"date": _dt.date.today().isoformat(), "machine": platform.platform(), "python": platform.python_version(),
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()}}
    (out / "serve_connections.json").write_text(json.dumps({**meta, "rows": rows, "ok": ok}, indent=2))
    (out / "serve_connections.md").write_text(text + "\n")
    print(f"written to {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Load on the two services (docs/services.md, "Measured"): C concurrent clients with retries against `wmrl serve
sandbox` and `wmrl serve world-model` (real subprocesses), each service killed with SIGKILL mid-load and restarted,
beside the in-process executor / world model on the same requests.

    PYTHONPATH=. python benchmarks/serve_load.py [--requests 40] [--wm-requests 256] [--clients 8] [--workers 2]
                                                [--kill-at 0.4] [--tasks-root DIR] [--out DIR]

What runs:

- sandbox: ``--requests`` cheap programs (the majority class / a scaled mean / a small sklearn model, each a
  distinct program) on the two small built-in tasks. In process: a :class:`~wmrl.execution.pool.LocalExecutor` of
  ``--workers`` sandboxes. Served: ``wmrl serve sandbox --workers W --max-concurrency W`` (so clients beyond W get
  503 and back off) through :class:`~wmrl.serve.client.RemoteExecutor`; when a fraction ``--kill-at`` of the
  requests is logged the service is killed with SIGKILL and restarted on the same log and port; the clients retry
  with the same request ids.
- world model: ``--wm-requests`` one-row requests (the grammar scaffold's prompts, distinct completions) to a
  regression world model on the ``tiny`` backbone (fitted on 12 labelled rows; tests/serve/servers.py). In
  process: one ``predict_outcome`` call per request (the clients take turns on the model), and the same rows as one
  batch. Served: ``wmrl serve world-model --max-wait-ms 5`` through :class:`~wmrl.serve.client.RemoteWorldModel`,
  killed and restarted the same way.

Both modes are closed loops: each of the C clients sends its next request when the last one is answered. Printed
per row: requests, wall seconds, throughput (requests/s), p50 and p95 latency (ms, request sent -> answer, retries
and backoff included), retries, and the checks: requests lost (no answer), executions per id in the service's log
(sandbox: must be exactly 1 for every id), and for the world model the largest difference between a served and the
in-process prediction. Exits 1 when a check fails. The table also goes to ``--out``/serve_load.json and .md.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import platform
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.serve.servers import BINARY, REGRESSION, TOKEN, Server, fitted_world_model  # noqa: E402
from wmrl.execution.log import ExecutionLog  # noqa: E402
from wmrl.execution.pool import LocalExecutor  # noqa: E402
from wmrl.execution.types import ExecutionRequest  # noqa: E402
from wmrl.models.backbone import tiny_backbone  # noqa: E402
from wmrl.models.scaffolds import get_scaffold  # noqa: E402
from wmrl.serve.client import RemoteExecutor, RemoteWorldModel  # noqa: E402
from wmrl.tasks.datasets import SMALL_TASKS  # noqa: E402
from wmrl.tasks.loader import TaskSuite, default_suite  # noqa: E402
from wmrl.world_model.factory import load_world_model  # noqa: E402

SKLEARN = """import pandas as pd
from sklearn.linear_model import LogisticRegression
tr = pd.read_csv("input/train.csv"); te = pd.read_csv("input/test.csv")
X = pd.get_dummies(tr.drop(columns=["id", "survived"])).fillna(0)
Xt = pd.get_dummies(te.drop(columns=["id"])).reindex(columns=X.columns, fill_value=0).fillna(0)
m = LogisticRegression(C=%s, max_iter=200).fit(X, tr["survived"])
pd.DataFrame({"id": te["id"], "survived": m.predict(Xt)}).to_csv("submission.csv", index=False)
"""


def programs(n: int) -> list[tuple[str, str]]:
    """``n`` distinct ``(task id, program)`` pairs, cheap: a third each majority class, scaled mean, sklearn."""
    out = []
    for i in range(n):
        if i % 3 == 0:
            out.append((SMALL_TASKS[0], BINARY + f"# variant {i}\n"))
        elif i % 3 == 1:
            out.append((SMALL_TASKS[1], REGRESSION % (0.9 + 0.01 * i)))
        else:
            out.append((SMALL_TASKS[0], SKLEARN % (0.1 + 0.05 * i)))
    return out


def closed_loop(n: int, clients: int, call: Callable[[int], Any]) -> tuple[list[Any], list[float], float]:
    """Run ``call(i)`` for i in 0..n-1 on ``clients`` threads, each taking the next index when done: the answers (in
    index order), each call's latency (seconds) and the wall seconds of the whole."""
    answers: list[Any] = [None] * n
    lat = [0.0] * n
    nxt = iter(range(n))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                i = next(nxt, None)
            if i is None:
                return
            t = time.perf_counter()
            answers[i] = call(i)
            lat[i] = time.perf_counter() - t

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        for f in [pool.submit(worker) for _ in range(clients)]:
            f.result()
    return answers, lat, time.perf_counter() - t0


def row(service: str, mode: str, lat: list[float], wall: float, **extra: Any) -> dict[str, Any]:
    """One table row."""
    ms = np.asarray(lat) * 1000
    return {"service": service, "mode": mode, "requests": len(lat), "wall_s": round(wall, 2),
            "throughput_per_s": round(len(lat) / wall, 2), "p50_ms": round(float(np.percentile(ms, 50)), 1),
            "p95_ms": round(float(np.percentile(ms, 95)), 1), **extra}


def kill_when(server: Server, ready: Callable[[], bool], args_done: threading.Event,
              log: list[str]) -> threading.Thread:
    """A thread that SIGKILLs ``server`` once ``ready()`` and starts it again on the same port."""

    def run() -> None:
        while not ready() and not args_done.is_set():
            time.sleep(0.05)
        if args_done.is_set():
            return
        t = time.perf_counter()
        server.kill9()
        server.start(timeout_s=300)
        log.append(f"{server.kind} killed and back in {time.perf_counter() - t:.1f} s")

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th


def bench_sandbox(suite: Any, roots: list[str], n: int, clients: int, workers: int, kill_at: float, tmp: Path,
                  events: list[str]) -> tuple[list[dict[str, Any]], bool]:
    """The sandbox rows, and whether every check passed."""
    pairs = programs(n)
    reqs = [ExecutionRequest(task=suite.get(t), program=p, request_id=f"load-{i}") for i, (t, p) in enumerate(pairs)]
    with LocalExecutor(max_workers=workers) as ex:
        local, lat, wall = closed_loop(n, clients, lambda i: ex.submit(reqs[i]).result())
    rows = [row("sandbox", "in-process LocalExecutor", lat, wall, retries=0, lost=0, executions_per_id="-",
                ok=sum(r.status.value == "ok" for r in local))]
    def served_pass(kill: bool) -> bool:
        log = tmp / f"served-{kill}.sqlite"
        args = ["--token", TOKEN, "--workers", str(workers), "--max-concurrency", str(workers), "--log", str(log),
                *[a for r in roots for a in ("--tasks-root", r)]]
        server = Server("sandbox", args).start()
        remote = RemoteExecutor(server.url, TOKEN, max_workers=clients, namespace="bench", retries=12)
        done = threading.Event()
        reader = ExecutionLog(log)
        killer = kill_when(server, lambda: kill and reader.count() >= int(kill_at * n), done, events)
        try:
            served, lat, wall = closed_loop(n, clients, lambda i: remote.submit(reqs[i]).result())
        finally:
            done.set()
            killer.join(timeout=300)
            remote.close()
            server.stop()
        per_id = Counter(r["request_id"] for r in reader.records())
        reader.close()
        lost = sum(1 for r in served if r is None or r.status.value == "infra_error")
        once = sorted(per_id) == sorted(f"bench/load-{i}" for i in range(n)) and set(per_id.values()) == {1}
        same = [r.reward for r in served] == [r.reward for r in local]
        rows.append(row("sandbox", "served, killed + restarted" if kill else "served", lat, wall,
                        retries=remote.client.n_retries, lost=lost,
                        executions_per_id="1 each" if once else f"{dict(Counter(per_id.values()))}",
                        ok=sum(r.status.value == "ok" for r in served), rewards_equal_in_process=same))
        return lost == 0 and once and same

    ok = [served_pass(kill) for kill in (False, True)]
    return rows, all(ok)


def bench_world_model(suite: Any, roots: list[str], n: int, clients: int, kill_at: float, tmp: Path,
                      events: list[str]) -> tuple[list[dict[str, Any]], bool]:
    """The world-model rows, and whether every check passed."""
    torch.set_num_threads(1)
    wm_dir = fitted_world_model(tmp / "wm", Path(roots[0]) if roots else suite.root)
    scaffold = get_scaffold("grammar")
    prompts = [scaffold.prompt(suite.get(SMALL_TASKS[i % 2])) for i in range(n)]
    comps = [f"model = Ridge(alpha={i})\nfeatures = {['all', 'numeric'][i % 2]}\n" for i in range(n)]
    model, tok = tiny_backbone(seed=0)
    wm = load_world_model(wm_dir, model, tok)
    lock = threading.Lock()

    def one_local(i: int) -> float:
        with lock, torch.no_grad():
            return float(wm.predict_outcome([prompts[i]], [comps[i]]).reward[0])

    local, lat, wall = closed_loop(n, clients, one_local)
    rows = [row("world model", "in-process, one call per request", lat, wall, retries=0, lost=0)]
    t = time.perf_counter()
    with torch.no_grad():
        batch = wm.predict_outcome(prompts, comps).reward
    bw = time.perf_counter() - t
    rows.append({"service": "world model", "mode": "in-process, all rows in one call", "requests": n,
                 "wall_s": round(bw, 2), "throughput_per_s": round(n / bw, 2), "p50_ms": "-", "p95_ms": "-",
                 "retries": 0, "lost": 0})
    def served_pass(kill: bool) -> bool:
        server = Server("world-model", ["--token", TOKEN, "--model", str(wm_dir), "--backbone", "tiny", "--seed",
                                        "0", "--threads", "1", "--max-wait-ms", "5"]).start()
        remote = RemoteWorldModel(server.url, TOKEN, retries=12)
        answered = [0]
        count_lock = threading.Lock()
        done = threading.Event()
        killer = kill_when(server, lambda: kill and answered[0] >= int(kill_at * n), done, events)

        def one_served(i: int) -> float:
            r = float(remote.predict([prompts[i]], [comps[i]])[0])
            with count_lock:
                answered[0] += 1
            return r

        try:
            served, lat, wall = closed_loop(n, clients, one_served)
            batches = server.health()["load"]["batches"]
        finally:
            done.set()
            killer.join(timeout=300)
            remote.close()
            server.stop()
        diff = float(np.max(np.abs(np.asarray(served) - np.asarray(local))))
        lost = sum(1 for r in served if r is None)
        rows.append(row("world model", "served, micro-batched" + (", killed + restarted" if kill else ""), lat, wall,
                        retries=remote.client.n_retries, lost=lost, max_abs_diff_in_process=f"{diff:.1e}",
                        model_calls=batches if not kill else f"{batches} after the restart"))
        return lost == 0 and diff < 1e-5

    ok = [served_pass(kill) for kill in (False, True)]
    rows[1]["max_abs_diff_in_process"] = f"{float(np.max(np.abs(np.asarray(local) - batch))):.1e}"
    return rows, all(ok)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when every check passed."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=40, help="sandbox requests")
    ap.add_argument("--wm-requests", type=int, default=256, help="world-model requests")
    ap.add_argument("--clients", type=int, default=8, help="concurrent clients")
    ap.add_argument("--workers", type=int, default=2, help="sandboxes at once (in process and served)")
    ap.add_argument("--kill-at", type=float, default=0.4, help="fraction of requests done when a service is killed")
    ap.add_argument("--tasks-root", action="append", default=None, help="task roots (default: the built-in suite)")
    ap.add_argument("--out", type=Path, default=None, help="where serve_load.json / .md go (default: a temp folder)")
    a = ap.parse_args(argv)
    roots = list(a.tasks_root or [])
    suite = TaskSuite(roots) if roots else default_suite()
    if not roots:
        roots = [str(r) for r in suite.roots]
    events: list[str] = []
    with tempfile.TemporaryDirectory(prefix="wmrl-serve-load-") as td:
        tmp = Path(td)
        sb_rows, sb_ok = bench_sandbox(suite, roots, a.requests, a.clients, a.workers, a.kill_at, tmp, events)
        wm_rows, wm_ok = bench_world_model(suite, roots, a.wm_requests, a.clients, a.kill_at, tmp, events)
    rows = sb_rows + wm_rows
    keys = list(dict.fromkeys(k for r in rows for k in r))
    md = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    md += ["| " + " | ".join(str(r.get(k, "")) for k in keys) + " |" for r in rows]
    text = "\n".join(md)
    print(text)
    for e in events:
        print(e)
    ok = sb_ok and wm_ok
    print("checks:", "passed" if ok else "FAILED")
    out = a.out or Path(tempfile.mkdtemp(prefix="wmrl-serve-load-out-"))
    out.mkdir(parents=True, exist_ok=True)
    meta = {"date": _dt.date.today().isoformat(), "machine": platform.platform(), "python": platform.python_version(),
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()}}
    (out / "serve_load.json").write_text(json.dumps({**meta, "rows": rows, "events": events, "ok": ok}, indent=2))
    (out / "serve_load.md").write_text(text + "\n\n" + "\n".join(events) + "\n")
    print(f"written to {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Start ``wmrl serve sandbox`` / ``wmrl serve world-model`` as real subprocesses on free ports, and the helpers the
serve tests share (a fitted tiny world model, cheap programs for the small built-in tasks)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "serve-test-token"

#: a cheap program per small task: the majority class / the mean, or a small sklearn model with a choice
BINARY = """import pandas as pd
tr = pd.read_csv("input/train.csv"); te = pd.read_csv("input/test.csv")
pd.DataFrame({"id": te["id"], "survived": tr["survived"].mode()[0]}).to_csv("submission.csv", index=False)
"""
REGRESSION = """import pandas as pd
tr = pd.read_csv("input/train.csv"); te = pd.read_csv("input/test.csv")
pd.DataFrame({"id": te["id"], "price": tr["price"].mean() * %s}).to_csv("submission.csv", index=False)
"""
CRASH = "raise SystemExit(3)\n"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One service subprocess (its own process group, so a kill takes its children too).

    Args:
        kind: ``sandbox`` or ``world-model``. args: the command's options. env: extra environment.
        nofile: the service's descriptor limit (``RLIMIT_NOFILE``, soft and hard); None: this process's.
    """

    def __init__(self, kind: str, args: list[str], env: dict[str, str] | None = None, port: int | None = None,
                 nofile: int | None = None):
        self.kind, self.args, self.port, self.nofile = kind, list(args), port or free_port(), nofile
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        self.proc: subprocess.Popen | None = None
        self.stderr_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"wmrl-serve-{self.kind}-{self.port}.log"

    def start(self, timeout_s: float = 120.0) -> Server:
        """Start it and wait until ``/v1/health`` answers.

        Raises:
            RuntimeError: it exited or did not answer within ``timeout_s`` (with its stderr).
        """
        cmd = [sys.executable, "-m", "wmrl.cli", "serve", self.kind, "--port", str(self.port), *self.args]
        err = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=subprocess.DEVNULL, stderr=err, cwd=str(ROOT),
                                     start_new_session=True, preexec_fn=self._limits if self.nofile else None)
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"wmrl serve {self.kind} exited {self.proc.returncode}: {self.stderr()}")
            try:
                if httpx.get(self.url + "/v1/health", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"wmrl serve {self.kind} did not answer in {timeout_s} s: {self.stderr()}")

    def _limits(self) -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (int(self.nofile or 0), int(self.nofile or 0)))

    def stderr(self) -> str:
        """The last 3000 characters the server wrote to stderr."""
        try:
            return self.stderr_path.read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def kill9(self) -> None:
        """SIGKILL the server's whole process group (a crash: nothing is cleaned up)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM (then SIGKILL after 20 s) the server's process group."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill9()

    def health(self) -> dict[str, Any]:
        """``GET /v1/health``."""
        return httpx.get(self.url + "/v1/health", timeout=10).json()

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def open_idle(port: int, n: int, first_bytes: bytes = b"") -> list[socket.socket]:
    """Up to ``n`` connections to 127.0.0.1:``port`` that send ``first_bytes`` (nothing by default) and then nothing
    more (the attacker's side of an idle connection); those that cannot connect within 10 s are left out."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.settimeout(10)
        try:
            s.connect(("127.0.0.1", port))
            if first_bytes:
                s.sendall(first_bytes)
        except OSError:
            s.close()
            continue
        socks.append(s)
    return socks


def closed_by_server(socks: list[socket.socket], seconds: float) -> dict[socket.socket, float]:
    """Which of ``socks`` the server closed (EOF, reset, or an error answer) within ``seconds``: socket -> seconds
    after this call it was seen closed."""
    import select

    pending, closed = list(socks), {}
    t0 = time.monotonic()
    while pending and time.monotonic() < t0 + seconds:
        ready, _, _ = select.select(pending, [], [], min(1.0, max(0.0, t0 + seconds - time.monotonic())))
        for s in ready:
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            if not data or data.startswith((b"HTTP/1.1 4", b"HTTP/1.1 5")):
                closed[s] = time.monotonic() - t0
                pending.remove(s)
    return closed


def auth() -> dict[str, str]:
    """The test token's Authorization header."""
    return {"Authorization": f"Bearer {TOKEN}"}


def fitted_world_model(out: Path, tasks_root: Path, seed: int = 0) -> Path:
    """A regression world model (head on the frozen ``tiny`` backbone of ``seed``, as configs/tiny.yaml's) fitted on
    12 labelled trajectories of the grammar scaffold's prompts for the small tasks; saved to ``out``."""
    from wmrl.models.backbone import tiny_backbone
    from wmrl.models.scaffolds import get_scaffold
    from wmrl.tasks.datasets import SMALL_TASKS
    from wmrl.tasks.loader import TaskSuite
    from wmrl.trajectory import Trajectory
    from wmrl.world_model.factory import new_world_model

    suite = TaskSuite(tasks_root)
    scaffold = get_scaffold("grammar")
    model, tok = tiny_backbone(seed=seed)
    wm = new_world_model("regression", model, tok, lora=None, max_length=320)
    recs = []
    for k in range(12):
        task = suite.get(SMALL_TASKS[k % 2])
        completion = f"model = Ridge(alpha={k + 1})\nfeatures = {['all', 'numeric', 'top3'][k % 3]}\n"
        recs.append({"status": "ok" if k % 4 else "runtime_error", "reward": (k % 5) / 5.0 if k % 4 else 0.0,
                     "trajectory": Trajectory(stream="warmup", run="fixture", step=-1, group_id=k // 2, sample=k,
                                              task_id=task.id, prompt=scaffold.prompt(task), completion=completion)})
    wm.fit(recs, epochs=1, heldout_fraction=0.0, seed=seed)
    wm.save(out)
    return out


class ThreadServer:
    """An ASGI app served by uvicorn on a thread of this process (a real socket, quick to start); a context manager.

    Args:
        app: the ASGI app.
    """

    def __init__(self, app: Any):
        import threading

        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    access_log=False))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ThreadServer:
        self.thread.start()
        deadline = time.time() + 30
        while not self.server.started and time.time() < deadline:
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)

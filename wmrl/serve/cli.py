"""Commands of ``wmrl.serve``: ``wmrl serve sandbox`` and ``wmrl serve world-model`` (docs/services.md).

Heavy imports (FastAPI, uvicorn, torch) stay inside the commands.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, NoReturn

import typer

serve_app = typer.Typer(help="Serve the sandbox or the world model over HTTP, one contract (docs/services.md).",
                        no_args_is_help=True)

_HOST = typer.Option("127.0.0.1", "--host", help="Interface to listen on (0.0.0.0: every interface).")
_TOKEN = typer.Option(None, "--token", help="Shared secret clients send as 'Authorization: Bearer TOKEN' "
                                            "(default: --token-file, else $WMRL_SERVE_TOKEN).")
_TOKEN_FILE = typer.Option(None, "--token-file", help="File whose first line is the shared secret.")
_NO_TOKEN = typer.Option(False, "--no-token", help="Serve without a token (trusted networks only).")
_BODY = typer.Option(16 * 2**20, "--max-body-bytes", min=1024, help="Request body limit, bytes (413 beyond).")
_READ = typer.Option(30.0, "--read-timeout-s", min=0.1,
                     help="Longest pause while a request body arrives, seconds (408 after it).")
_CONNS = typer.Option(0, "--max-connections", min=0, help=(
    "Open connections at most; beyond it the longest-idle one is closed, and when every one is answering a "
    "request a new one is answered 503 (/v1/health excepted). 0: from the descriptor limit (ulimit -n, less an "
    "eighth for the service's own files)."))
_HEADER = typer.Option(10.0, "--header-timeout-s", min=0.1, help=(
    "Longest wait for a complete request head, seconds, from the connection's start or its next byte; then "
    "the connection is closed (token or not)."))
_IDLE = typer.Option(30.0, "--idle-timeout-s", min=0.1, help=(
    "Longest a connection may sit between requests, or leave its answer unread, seconds; then it is closed."))
_ROOTS = typer.Option(None, "--root", "--tasks-root", help="Task roots (repeatable; default: $WMRL_TASKS_ROOT, else "
                                                           "the built-in suite), the same the trainer uses; "
                                                           "--tasks-root is the older spelling.")


def _fail(msg: str) -> NoReturn:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(2)


def _token(token: str | None, token_file: Path | None, no_token: bool) -> str | None:
    from wmrl.serve.common import read_token

    try:
        return read_token(token, token_file, no_token=no_token)
    except (ValueError, OSError) as e:
        _fail(str(e))


def check_port(host: str, port: int) -> None:
    """Exit with a one-line error (exit 2) when ``host:port`` cannot be bound (in use, or not an address here);
    run before anything is created or printed. Port 0 (any free port) is always fine."""
    import socket

    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as e:
        _fail(f"--host {host}: {e}")
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds it
        try:
            s.bind(addr)
        except OSError as e:
            _fail(f"cannot listen on {host}:{port} (--port {port}): {e.strerror or e}; pick a free port or stop the "
                  "process that holds it")


def _suite(roots: list[Path] | None) -> Any:
    from wmrl.tasks.loader import TaskSuite, default_suite

    return TaskSuite([str(r) for r in roots]) if roots else default_suite()


def _guard(max_connections: int, header_timeout_s: float, idle_timeout_s: float) -> Any:
    """The connection guard of the options; refuses (one line, exit 2) a cap the descriptor limit cannot hold."""
    import resource

    from wmrl.serve.connections import HEALTH_RESERVE, ConnectionGuard, default_max_connections

    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if max_connections and nofile != resource.RLIM_INFINITY and max_connections + HEALTH_RESERVE + 64 > nofile:
        _fail(f"--max-connections {max_connections} does not fit the descriptor limit of {nofile} (ulimit -n; the "
              f"service needs {HEALTH_RESERVE + 64} more for health and its own files): give at most "
              f"{default_max_connections(nofile)}, or 0 for that, or raise ulimit -n")
    return ConnectionGuard(max_connections or None, header_timeout_s, idle_timeout_s)


def _serve(app: Any, host: str, port: int, what: str, guard: Any) -> None:
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    typer.echo(f"wmrl serve {what}: http://{host}:{port}/v1/health (at most {guard.max_connections} connections)",
               err=True)
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_keep_alive=int(max(1, guard.idle_timeout_s)),
                access_log=False, http=guard.protocol_class())


@serve_app.command("sandbox")
def sandbox_command(
    host: str = _HOST,
    port: int = typer.Option(8765, "--port", min=0, max=65535, help="Port to listen on."),
    token: str | None = _TOKEN, token_file: Path | None = _TOKEN_FILE, no_token: bool = _NO_TOKEN,
    workers: int = typer.Option(os.cpu_count() or 1, "--workers", min=1, help="Concurrent sandboxed executions."),
    max_concurrency: int | None = typer.Option(None, "--max-concurrency", min=1, help=(
        "Requests admitted at once, running or queued (default 4 x --workers); beyond: 503 + Retry-After.")),
    max_body_bytes: int = _BODY, read_timeout_s: float = _READ,
    max_connections: int = _CONNS, header_timeout_s: float = _HEADER, idle_timeout_s: float = _IDLE,
    timeout_s: float = typer.Option(900.0, "--timeout-s", min=0.1, help=(
        "Longest a request waits for its outcome, seconds; then 504 and the execution goes on (retry the same id).")),
    max_attempts: int = typer.Option(2, "--max-attempts", min=1, help=(
        "Starts of one request id without a logged outcome (the service died while running it; every start after "
        "the first runs alone) before it is answered as the program's failure (runtime_error, the task's failure "
        "reward) instead of started again.")),
    log_path: Path = typer.Option(Path("serve-executions.sqlite"), "--log", help=(
        "The SQLite execution log: every outcome, and the source of truth for idempotency (restart on the same "
        "log to keep answering finished ids).")),
    tasks_root: list[Path] | None = _ROOTS,
    unsandboxed: bool = typer.Option(False, "--unsandboxed", help=(
        "Allow the weak rlimit-only mode when bwrap is missing (no isolation: trusted programs only!).")),
) -> None:
    """Serve the sandbox and the trusted grader: POST /v1/grade runs a program on a task and grades it."""
    import sqlite3

    from wmrl.execution.log import ExecutionLog
    from wmrl.execution.pool import LocalExecutor
    from wmrl.execution.sandbox import SandboxConfig, SandboxUnavailable
    from wmrl.serve.sandbox_app import SandboxService, create_sandbox_app

    secret = _token(token, token_file, no_token)
    check_port(host, port)
    guard = _guard(max_connections, header_timeout_s, idle_timeout_s)
    try:
        suite = _suite(tasks_root)
        n = len(suite)
    except Exception as e:  # noqa: BLE001 - a suite that is not built: say how to build it
        _fail(f"cannot read the tasks: {e}")
    try:
        exlog = ExecutionLog(log_path)
    except (sqlite3.DatabaseError, OSError) as e:
        _fail(f"--log {log_path}: not a wmrl execution log, or not writable ({e}); pass a new file name or an "
              f"execution log that wmrl wrote")
    sandbox = SandboxConfig(allow_unsandboxed=True) if unsandboxed else SandboxConfig()
    try:
        executor = LocalExecutor(max_workers=workers, sandbox=sandbox, log=exlog)
    except SandboxUnavailable as e:
        _fail(f"{e} (or pass --unsandboxed for trusted programs)")
    service = SandboxService(suite, executor, exlog, max_concurrency=max_concurrency or 4 * workers,
                             timeout_s=timeout_s, max_attempts=max_attempts)
    app = create_sandbox_app(service, token=secret, max_body_bytes=max_body_bytes, read_timeout_s=read_timeout_s)
    typer.echo(f"{n} tasks, {workers} workers, log {log_path}", err=True)
    try:
        _serve(app, host, port, "sandbox", guard)
    finally:
        executor.close()
        exlog.close()


@serve_app.command("world-model")
def world_model_command(
    model: Path = typer.Option(..., "--model", help=(
        "A saved world-model folder (`wmrl wm fit --out`, a run's world_model/) or a run folder (its world_model/, "
        "backbone, seed and scaffold from its config.yaml).")),
    host: str = _HOST,
    port: int = typer.Option(8766, "--port", min=0, max=65535, help="Port to listen on."),
    token: str | None = _TOKEN, token_file: Path | None = _TOKEN_FILE, no_token: bool = _NO_TOKEN,
    backbone: str | None = typer.Option(None, "--backbone", help=(
        "The backbone the world model was fitted on (default: the run folder's model.name, else smollm2-135m).")),
    seed: int | None = typer.Option(None, "--seed", help=(
        "The tiny backbone's initialisation seed (default: the run's).")),
    scaffold: str | None = typer.Option(None, "--scaffold", help=(
        "Scaffold that builds a task's prompt for requests without one (default: the run's, else the default).")),
    tasks_root: list[Path] | None = _ROOTS,
    max_batch: int = typer.Option(64, "--max-batch", min=1, help="Rows per model call at most."),
    max_wait_ms: float = typer.Option(5.0, "--max-wait-ms", min=0.0, help=(
        "How long a model call waits for more requests to batch, milliseconds.")),
    max_concurrency: int = typer.Option(1024, "--max-concurrency", min=1, help=(
        "Rows waiting or running at once; beyond: 503 + Retry-After.")),
    max_body_bytes: int = _BODY, read_timeout_s: float = _READ,
    max_connections: int = _CONNS, header_timeout_s: float = _HEADER, idle_timeout_s: float = _IDLE,
    timeout_s: float = typer.Option(120.0, "--timeout-s", min=0.1, help=(
        "Longest wait for a prediction, seconds (504).")),
    threads: int = typer.Option(0, "--threads", min=0, help="torch threads (0: torch's default)."),
) -> None:
    """Serve a world model: POST /v1/grade predicts a program's outcome without running it, batched across clients."""
    import torch

    from wmrl.models.scaffolds import DEFAULT_SCAFFOLD, get_scaffold
    from wmrl.serve.world_model_app import (WorldModelService, create_world_model_app,
                                            load_served_world_model)

    secret = _token(token, token_file, no_token)
    check_port(host, port)
    guard = _guard(max_connections, header_timeout_s, idle_timeout_s)
    if threads:
        torch.set_num_threads(threads)
    try:
        wm, info = load_served_world_model(model, backbone=backbone, seed=seed, scaffold=scaffold)
    except (FileNotFoundError, ValueError) as e:
        _fail(str(e))
    scaffold_obj = get_scaffold(info["scaffold"] or DEFAULT_SCAFFOLD)
    info["scaffold"] = scaffold_obj.name
    try:
        suite = _suite(tasks_root)
    except Exception as e:  # noqa: BLE001 - no tasks: the service still scores requests that carry their prompt
        typer.echo(f"warning: no tasks ({e}); requests must carry their prompt", err=True)
        suite = None
    service = WorldModelService(wm, suite, scaffold_obj, max_batch=max_batch,
                                max_wait_s=max_wait_ms / 1000.0, max_concurrency=max_concurrency, timeout_s=timeout_s,
                                info=info)
    app = create_world_model_app(service, token=secret, max_body_bytes=max_body_bytes, read_timeout_s=read_timeout_s)
    try:
        _serve(app, host, port, "world-model", guard)
    finally:
        service.batcher.close()


def register(app: typer.Typer) -> None:
    """Add ``wmrl serve`` to the ``wmrl`` app."""
    app.add_typer(serve_app, name="serve")

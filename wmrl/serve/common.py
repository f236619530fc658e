"""What both services share: the bearer-token check, the body guard (size limit, slow clients), error answers in the
contract's shape, the load counters, and the token's sources.
"""
from __future__ import annotations

import asyncio
import hmac
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from starlette.exceptions import HTTPException as StarletteHTTPException
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from wmrl.serve.contract import CONTRACT, PREFIX, Health, TaskList

#: the environment variable a token is read from when neither ``--token`` nor ``--token-file`` is given
TOKEN_ENV = "WMRL_SERVE_TOKEN"

_CODES = {400: "invalid", 401: "unauthorized", 404: "not_found", 405: "method_not_allowed", 408: "body_timeout",
          409: "conflict", 413: "too_large", 422: "invalid", 503: "busy", 504: "timeout"}

#: the detail of FastAPI's 400 for a body that is not parseable JSON for a reason other than a decode error
_FASTAPI_BODY_ERROR = "There was an error parsing the body"


def read_token(token: str | None, token_file: Path | None, *, no_token: bool = False) -> str | None:
    """The shared secret: ``token``, else the first line of ``token_file``, else ``$WMRL_SERVE_TOKEN``; None only
    with ``no_token`` (an open service).

    Raises:
        ValueError: no token from any source (and not ``no_token``), an empty token file, or both a token and
            ``no_token``.
    """
    if no_token:
        if token or token_file:
            raise ValueError("--no-token and --token/--token-file contradict each other; give one")
        return None
    if token:
        return token
    if token_file is not None:
        try:
            first = Path(token_file).read_text(encoding="utf-8").strip().splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"--token-file {token_file}: cannot read it ({e}); give a readable file whose first "
                             "line is the shared secret") from None
        if not first or not first[0].strip():
            raise ValueError(f"--token-file {token_file} is empty; write the shared secret on its first line")
        return first[0].strip()
    env = os.environ.get(TOKEN_ENV, "").strip()
    if env:
        return env
    raise ValueError(f"no token: pass --token, --token-file FILE or set {TOKEN_ENV} (clients send it as "
                     "'Authorization: Bearer TOKEN'); --no-token serves without one (trusted networks only)")


@dataclass
class Counters:
    """The load a service reports in ``/v1/health`` (thread-safe increments)."""

    served: int = 0
    replayed: int = 0
    executed: int = 0
    rejected: int = 0
    started: float = field(default_factory=time.time)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **kw: int) -> None:
        """Add ``kw`` (counter name -> increment)."""
        with self._lock:
            for k, v in kw.items():
                setattr(self, k, getattr(self, k) + int(v))


def error_response(status: int, detail: Any, headers: dict[str, str] | None = None) -> JSONResponse:
    """An :class:`~wmrl.serve.contract.ErrorBody` answer with HTTP ``status``."""
    return JSONResponse({"contract": CONTRACT, "error": _CODES.get(status, "internal" if status >= 500 else "invalid"),
                         "detail": jsonable_encoder(detail)}, status_code=status, headers=headers)


def install_errors(app: FastAPI, counters: Counters) -> None:
    """Every error of ``app`` answered as an ErrorBody (HTTP errors with their headers, validation errors as 422
    naming the fields, anything else as 500 with its type and message); refusals are counted."""

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        counters.add(rejected=1)
        if exc.status_code == 400 and exc.detail == _FASTAPI_BODY_ERROR:
            # FastAPI's answer to a body json cannot parse other than by a JSONDecodeError (nesting too deep)
            return error_response(422, "malformed JSON body: it could not be parsed (nested too deep?); send a "
                                       "JSON object as docs/services.md describes")
        if exc.status_code == 404 and exc.detail == "Not Found":
            detail: Any = (f"no route {request.method} {request.url.path}: the contract's routes are under "
                           f"{PREFIX}/ (docs/services.md)")
        elif exc.status_code == 405:
            detail = (f"method {request.method} is not allowed on {request.url.path}; "
                      f"allowed: {dict(exc.headers or {}).get('allow', '?')}")
        else:
            detail = exc.detail
        return error_response(exc.status_code, detail, dict(exc.headers or {}))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        counters.add(rejected=1)
        errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
                  for e in exc.errors()]
        return error_response(422, {"message": "the request does not follow the contract (docs/services.md); "
                                               "each entry names a field and what is wrong with it",
                                    "errors": errors})

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        return error_response(500, f"{type(exc).__name__}: {exc}")


def create_app(title: str, service: Any, token: str | None, max_body_bytes: int,
               task_ids: Any) -> tuple[FastAPI, list[Any]]:
    """A service's FastAPI app with what both services share: the error handlers, ``GET /v1/health`` (no token:
    it holds no task data; ``service.health()`` with the body limit filled in) and ``GET /v1/tasks``
    (``task_ids()``: the ids the service knows). Returns the app and the dependencies that require the bearer
    token, for the service's own routes."""
    app = FastAPI(title=title, version=CONTRACT)
    install_errors(app, service.counters)
    auth = [Depends(token_dependency(token))]

    @app.get(f"{PREFIX}/health", response_model=Health)
    def health() -> Health:
        h = service.health()
        h.capacity.max_body_bytes = int(max_body_bytes)
        return h

    @app.get(f"{PREFIX}/tasks", response_model=TaskList, dependencies=auth)
    def tasks() -> TaskList:
        return TaskList(tasks=list(task_ids()))

    return app, auth


def check_token(request: Request, token: str | None) -> None:
    """Refuse a request whose ``Authorization: Bearer`` token is missing or wrong (constant-time comparison).

    Raises:
        HTTPException: 401 with ``WWW-Authenticate: Bearer``.
    """
    problem = token_problem(request.headers.get("authorization", ""), token)
    if problem:
        raise HTTPException(401, problem, headers={"WWW-Authenticate": "Bearer"})


def token_problem(authorization: str, token: str | None) -> str | None:
    """What is wrong with an ``Authorization`` header value for ``token`` (None: nothing, or an open service);
    constant-time comparison."""
    if token is None:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not value:
        return "missing bearer token: send 'Authorization: Bearer TOKEN' (the service's --token)"
    if not hmac.compare_digest(value.strip().encode(), token.encode()):
        return "wrong bearer token"
    return None


def token_dependency(token: str | None) -> Any:
    """A FastAPI dependency running :func:`check_token` (dependencies run before the body is validated, so a request
    without the token is a 401 whatever its body)."""

    def _auth(request: Request) -> None:
        check_token(request, token)

    return _auth


class BodyGuard:
    """ASGI middleware: checks the bearer token of a request with a body (401 before any byte of the body is read),
    then reads its whole body before the app sees it, answering 413 as soon as it grows
    past ``max_body_bytes`` (or its Content-Length says it will) and 408 when the client stops sending for
    ``read_timeout_s`` seconds. A slow client only ever holds its own connection: the server is asynchronous, so
    other requests are served meanwhile.

    Args:
        app: the ASGI app. max_body_bytes: the size limit, bytes. read_timeout_s: the longest gap between two
            chunks of a body, seconds. counters: where refusals are counted. token: the bearer token (None: an
            open service).
    """

    def __init__(self, app: Any, max_body_bytes: int, read_timeout_s: float, counters: Counters,
                 token: str | None = None):
        self.app, self.max_body_bytes, self.read_timeout_s, self.counters = app, int(max_body_bytes), \
            float(read_timeout_s), counters
        self.token = token

    async def _refuse(self, send: Any, status: int, detail: str, extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        self.counters.add(rejected=1)
        body = json.dumps({"contract": CONTRACT, "error": _CODES[status], "detail": detail}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close"), *extra]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD"):
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        problem = token_problem(headers.get(b"authorization", b"").decode("latin-1"), self.token)
        if problem:
            return await self._refuse(send, 401, problem, ((b"www-authenticate", b"Bearer"),))
        limit = f"the limit is {self.max_body_bytes} bytes (--max-body-bytes); send fewer items per batch"
        try:
            declared = int(headers.get(b"content-length", b"-1"))
        except ValueError:
            declared = -1
        if declared > self.max_body_bytes:
            return await self._refuse(send, 413, f"request body of {declared} bytes is too large: {limit}")
        chunks, size = [], 0
        while True:
            try:
                msg = await asyncio.wait_for(receive(), self.read_timeout_s)
            except TimeoutError:
                return await self._refuse(send, 408, f"the request body stalled for {self.read_timeout_s:g} s; "
                                                     "send the whole body at once")
            if msg["type"] == "http.disconnect":
                return None
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return await self._refuse(send, 413, f"request body larger than {self.max_body_bytes} bytes: {limit}")
            chunks.append(chunk)
            if not msg.get("more_body", False):
                break
        body = b"".join(chunks)
        sent = False

        async def replay() -> Any:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: wait for the disconnect, as the server would

        return await self.app(scope, replay, send)


def retry_after(seconds: float) -> dict[str, str]:
    """The ``Retry-After`` header of a 503 (whole seconds, at least 1)."""
    return {"Retry-After": str(max(1, int(round(seconds))))}

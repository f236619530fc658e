"""Connections neither service can be held open by (``wmrl serve sandbox`` and ``wmrl serve world-model``).

uvicorn gives a request head no deadline (its keep-alive timeout runs only between requests), so a client that
connects and sends nothing, or trickles a request line, holds a connection and a descriptor for as long as it likes;
enough of them exhaust the process's descriptors and nothing more is accepted, ``/v1/health`` included.
:class:`ConnectionGuard` is shared by every connection of a server (all on its event loop's thread) and enforces:

- a **header deadline**: a new connection must deliver a complete request head within ``header_timeout_s``
  seconds, and so must a kept-alive one from its next byte; otherwise it is closed, authenticated or not;
- an **idle timeout**: a kept-alive connection with no next request, or one whose client stops reading the
  answer (the write buffer stays full), is closed after ``idle_timeout_s`` seconds. A body that stalls is the
  services' own ``--read-timeout-s`` (408);
- a **cap** on open connections (``max_connections``): a connection beyond it first evicts the connection that
  has been idle longest (one with no request being answered: it waits for a head or sits between requests); when
  every connection is answering a request, up to :data:`HEALTH_RESERVE` more are admitted for ``GET /v1/health``
  only (anything else on them is a 503 and the connection closes), and beyond those a connection is answered 503
  and closed at once. So idle sockets can never keep ``/v1/health`` or a good request out.

The default cap follows the descriptor limit (:func:`default_max_connections`), so the connections alone never use
up the descriptors the executions, the execution log and the model need.
"""
from __future__ import annotations

import asyncio
import json
import resource
from collections import OrderedDict
from typing import Any

from wmrl.serve.contract import CONTRACT, PREFIX

#: connections admitted beyond the cap, when every connection is answering a request, for ``GET /v1/health`` only
HEALTH_RESERVE = 16

#: the most connections the default cap allows, however high the descriptor limit
MAX_DEFAULT_CONNECTIONS = 16384

_HEALTH = f"{PREFIX}/health"


def default_max_connections(nofile: int | None = None) -> int:
    """The default cap on open connections for a descriptor limit of ``nofile`` (default: this process's soft
    ``RLIMIT_NOFILE``): the limit less :data:`HEALTH_RESERVE` and a headroom of an eighth of it (64 to 1024
    descriptors for the executions, the execution log and the model), between 8 and :data:`MAX_DEFAULT_CONNECTIONS`.
    """
    if nofile is None:
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if nofile == resource.RLIM_INFINITY:
            nofile = 1 << 20
    headroom = min(1024, max(64, nofile // 8))
    return max(8, min(MAX_DEFAULT_CONNECTIONS, nofile - headroom - HEALTH_RESERVE))


def _raw_503(detail: str) -> bytes:
    body = json.dumps({"contract": CONTRACT, "error": "busy", "detail": detail}).encode()
    return (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"
            b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


class ConnectionGuard:
    """The deadlines and the cap of every connection of one server (see the module docstring); use
    :meth:`protocol_class` as uvicorn's ``http`` protocol. Not thread-safe: it lives on the server's event loop.

    Args:
        max_connections: open connections at most before idle ones are evicted (>= 1; 0 or None: the default of
            :func:`default_max_connections`). header_timeout_s: longest wait for a complete request head, seconds
            (> 0). idle_timeout_s: longest a connection may sit between requests or with its answer unread, seconds
            (> 0).

    Raises:
        ValueError: a limit out of range.
    """

    def __init__(self, max_connections: int | None = None, header_timeout_s: float = 10.0,
                 idle_timeout_s: float = 30.0):
        if max_connections is not None and max_connections < 0:
            raise ValueError(f"max_connections must be >= 1 (0: the default); got {max_connections}")
        if header_timeout_s <= 0 or idle_timeout_s <= 0:
            raise ValueError("header_timeout_s and idle_timeout_s must be > 0 seconds")
        self.max_connections = int(max_connections or default_max_connections())
        self.header_timeout_s, self.idle_timeout_s = float(header_timeout_s), float(idle_timeout_s)
        self.open: set[Any] = set()
        #: the connections with no request being answered, the longest idle first
        self.idle: OrderedDict[Any, None] = OrderedDict()
        #: connections closed for a missed header deadline or idle timeout, evicted for a newer one, refused at once
        self.expired = self.evicted = self.refused = 0

    def stats(self) -> dict[str, int]:
        """Open connections, the cap, and how many were expired, evicted and refused so far."""
        return {"open": len(self.open), "max_connections": self.max_connections, "expired": self.expired,
                "evicted": self.evicted, "refused": self.refused}

    def admit(self, conn: Any) -> str:
        """Admit a new connection: ``"ok"``, ``"reserve"`` (health only) or ``"refuse"`` (answer 503 and close);
        evicts the longest-idle connection when the cap is reached."""
        if len(self.open) >= self.max_connections and self.idle:
            victim, _ = self.idle.popitem(last=False)
            self.evicted += 1
            victim.drop()
        if len(self.open) >= self.max_connections + HEALTH_RESERVE:
            self.refused += 1
            return "refuse"
        self.open.add(conn)
        self.idle[conn] = None
        return "reserve" if len(self.open) > self.max_connections else "ok"

    def busy(self, conn: Any) -> None:
        """``conn`` started answering a request: it cannot be evicted."""
        self.idle.pop(conn, None)

    def rested(self, conn: Any) -> None:
        """``conn`` answered its requests: it may be evicted (the longest idle first)."""
        if conn in self.open:
            self.idle.pop(conn, None)
            self.idle[conn] = None

    def forget(self, conn: Any) -> None:
        """``conn`` is closed."""
        self.open.discard(conn)
        self.idle.pop(conn, None)

    def protocol_class(self, base: type | None = None) -> type:
        """uvicorn's HTTP protocol (``base``; default: httptools' when installed, else h11's, as uvicorn picks) with
        this guard on every connection; pass it as ``uvicorn.run(..., http=...)``."""
        if base is None:
            try:
                from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol  # noqa: PLC0415

                base = HttpToolsProtocol
            except ImportError:
                from uvicorn.protocols.http.h11_impl import H11Protocol  # noqa: PLC0415

                base = H11Protocol
        return type(f"Guarded{base.__name__}", (_Guarded, base), {"guard": self})


class _Guarded:
    """The guard's side of one connection (mixed into uvicorn's protocol class by
    :meth:`ConnectionGuard.protocol_class`)."""

    guard: ConnectionGuard

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._active = 0  # requests of this connection the app is answering
        self._reserve = False
        self._timer: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None
        self._waiting_head = True  # a head is due (header deadline) rather than nothing (idle timeout)
        inner = self.app  # type: ignore[has-type]

        async def app(scope: Any, receive: Any, send: Any) -> None:
            self._started()
            try:
                if self._reserve:
                    if scope.get("type") == "http" and scope.get("path") != _HEALTH:
                        return await _busy(send, len(self.guard.open) - HEALTH_RESERVE)
                    send = _closing(send)
                await inner(scope, receive, send)
            finally:
                self._finished()

        self.app = app

    # -------------------------------------------------------------- asyncio's protocol callbacks
    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        verdict = self.guard.admit(self)
        if verdict == "refuse":
            transport.write(_raw_503(f"the service has {len(self.guard.open)} connections open, its limit "
                                     "(--max-connections) and health reserve; retry in a moment"))
            transport.close()
            return
        self._reserve = verdict == "reserve"
        self._arm(self.guard.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.forget(self)
        self._cancel()
        if self._write_timer is not None:
            self._write_timer.cancel()
        super().connection_lost(exc)  # type: ignore[misc]

    def data_received(self, data: bytes) -> None:
        if not self._active and not self._waiting_head:  # a kept-alive connection's next head starts
            self._waiting_head = True
            self._arm(self.guard.header_timeout_s)
        super().data_received(data)  # type: ignore[misc]

    def pause_writing(self) -> None:
        super().pause_writing()  # type: ignore[misc]
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(self.guard.idle_timeout_s, self._stalled)  # type: ignore[attr-defined]

    def resume_writing(self) -> None:
        super().resume_writing()  # type: ignore[misc]
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    # -------------------------------------------------------------- the guard's
    def drop(self) -> None:
        """Close this connection (evicted or expired) and stop counting it."""
        self.guard.forget(self)
        self._cancel()
        transport = self.transport  # type: ignore[attr-defined]
        if transport is not None and not transport.is_closing():
            transport.close()

    def _arm(self, seconds: float) -> None:
        self._cancel()
        self._timer = self.loop.call_later(seconds, self._expire)  # type: ignore[attr-defined]

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        if not self._active:
            self.guard.expired += 1
            self.drop()

    def _stalled(self) -> None:
        self._write_timer = None
        self.guard.expired += 1
        self.guard.forget(self)
        self._cancel()
        self.transport.abort()  # type: ignore[attr-defined]  # the client does not read: nothing more can be sent

    def _started(self) -> None:
        self._active += 1
        self._cancel()
        self.guard.busy(self)

    def _finished(self) -> None:
        self._active -= 1
        if not self._active:
            self._waiting_head = False
            self.guard.rested(self)
            if self in self.guard.open:
                self._arm(self.guard.idle_timeout_s)


async def _busy(send: Any, n_open: int) -> None:
    body = json.dumps({"contract": CONTRACT, "error": "busy", "detail": (
        f"the service has {n_open} connections open, its limit (--max-connections), each answering a request; "
        f"only {_HEALTH} is answered beyond it: retry after Retry-After seconds")}).encode()
    await send({"type": "http.response.start", "status": 503,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"retry-after", b"1"), (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


def _closing(send: Any) -> Any:
    """``send`` with ``connection: close`` added to the answer (a reserve connection serves one request)."""

    async def wrapped(message: Any) -> None:
        if message.get("type") == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
        await send(message)

    return wrapped

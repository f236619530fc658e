"""Clients of the two services: :class:`RemoteExecutor` (an :class:`wmrl.interfaces.Executor`) and
:class:`RemoteWorldModel` (a :class:`wmrl.interfaces.WorldModel` that predicts; it cannot be fitted or saved).

Both retry what a retry can fix, with the same request id (so the sandbox never runs a program twice): a connection
that failed or broke, 504 and other 5xx (exponential backoff with jitter, 0.2 s doubling up to 10 s; ``retries``
of them), and 503 (after the server's ``Retry-After``, capped, for up to ``max_busy_s``: a busy service is waited
for, not given up on). A 4xx is the request's fault and is not retried. The trainer builds them from
``executor.kind: remote`` / ``executor.url`` and ``world_model.url`` (docs/services.md); the token comes from the
environment variable the config names (default ``WMRL_SERVE_TOKEN``).
"""
from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from wmrl.execution.pool import append_to_log, result_or_infra
from wmrl.execution.runner import cap_error, infra_result
from wmrl.execution.types import ExecutionRequest, ExecutionResult, ExecutionStatus
from wmrl.serve.contract import OUTCOME_CLASSES, PREFIX

log = logging.getLogger(__name__)


class ServiceError(RuntimeError):
    """A service refused a request (a 4xx: the request's fault, not retried) or stayed unreachable / failing
    after every retry. ``status`` is the last HTTP status (0: no answer at all); ``detail`` its message."""

    def __init__(self, status: int, detail: Any, url: str):
        self.status, self.detail, self.url = int(status), detail, url
        super().__init__(f"{url}: HTTP {status}: {detail}" if status else f"{url}: {detail}")


def token_from_env(token_env: str | None) -> str | None:
    """The token in environment variable ``token_env`` (None when unset, empty, or no variable is named)."""
    return (os.environ.get(token_env) or None) if token_env else None


class ServiceClient:
    """One service's HTTP client with the retry policy of the module docstring (thread-safe).

    Args:
        url: the service's base URL (``http://host:port``; the ``/v1`` paths are added).
        token: the bearer token, or None.
        timeout_s: one HTTP call's limit, seconds (connect and read).
        retries: retries after a failed connection, a 5xx or a 408 (>= 0). max_busy_s: how long 503 answers (the
            service at capacity) are retried, seconds; they do not use up ``retries``.
        max_retry_after_s: the longest ``Retry-After`` honoured, seconds.
        seed: the jitter's random seed (jitter never changes an answer).

    Raises:
        ImportError: httpx is missing (``pip install 'wmrl[serve]'``). ValueError: a URL without ``http(s)://``.
    """

    def __init__(self, url: str, token: str | None = None, *, timeout_s: float = 960.0, retries: int = 8,
                 max_busy_s: float = 3600.0, max_retry_after_s: float = 30.0, seed: int | None = None):
        try:
            import httpx  # noqa: PLC0415 - optional dependency (the serve extra)
        except ImportError as e:
            raise ImportError("the service clients need httpx: pip install 'wmrl[serve]'") from e
        if not str(url).startswith(("http://", "https://")):
            raise ValueError(f"service URL {url!r} must start with http:// or https://")
        self.url = str(url).rstrip("/")
        self.retries, self.max_busy_s = int(retries), float(max_busy_s)
        self.max_retry_after_s = float(max_retry_after_s)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._httpx = httpx
        self._client = httpx.Client(base_url=self.url, headers=headers, timeout=httpx.Timeout(timeout_s),
                                    limits=httpx.Limits(max_connections=256, max_keepalive_connections=64))
        self._rng = random.Random(seed)
        self._rng_lock = threading.Lock()
        self.n_retries = 0  # retries made so far (all calls)

    def _backoff(self, attempt: int) -> float:
        """The wait before retry ``attempt`` (0-based), seconds; counts the retry."""
        with self._rng_lock:
            self.n_retries += 1
            return min(10.0, 0.2 * 2 ** attempt) * (0.5 + self._rng.random())

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """``method`` ``/v1{path}`` with JSON ``body``; the answer's JSON.

        Raises:
            ServiceError: a 4xx (at once), no success after ``retries`` retries, or 503 for longer than ``max_busy_s``.
        """
        last: tuple[int, Any] = (0, "no attempt")
        busy_until = time.monotonic() + self.max_busy_s
        attempt = 0
        while attempt <= self.retries:
            try:
                r = self._client.request(method, PREFIX + path, json=body)
            except self._httpx.TransportError as e:  # refused, reset, timed out: the server may be restarting
                last = (0, f"{type(e).__name__}: {e}")
                attempt += 1
                time.sleep(self._backoff(attempt - 1))
                continue
            if r.status_code < 400:
                return r.json()
            detail = _detail(r)
            last = (r.status_code, detail)
            if r.status_code == 503 and time.monotonic() < busy_until:  # busy: wait, without using up a retry
                try:
                    wait = float(r.headers.get("retry-after", "1"))
                except ValueError:
                    wait = 1.0
                with self._rng_lock:
                    self.n_retries += 1
                    jitter = 0.5 + self._rng.random()
                time.sleep(min(self.max_retry_after_s, max(0.05, wait)) * jitter)
                continue
            if r.status_code >= 500 or r.status_code == 408:
                attempt += 1
                time.sleep(self._backoff(attempt - 1))
                continue
            raise ServiceError(r.status_code, detail, self.url + PREFIX + path)
        raise ServiceError(last[0], f"no answer after {attempt} tries; last: {last[1]}", self.url + PREFIX + path)

    def health(self) -> dict[str, Any]:
        """``GET /v1/health`` (the :class:`~wmrl.serve.contract.Health` as a dict)."""
        return self.request("GET", "/health")

    def task_ids(self) -> list[str]:
        """``GET /v1/tasks``: the task ids the service knows."""
        return list(self.request("GET", "/tasks")["tasks"])

    def close(self) -> None:
        """Close the connection pool (idempotent)."""
        self._client.close()


def _detail(r: Any) -> Any:
    try:
        return r.json().get("detail", r.text)
    except (ValueError, AttributeError):
        return r.text[:500]


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(d, default=str))


def result_from_answer(answer: dict[str, Any], request: ExecutionRequest) -> ExecutionResult:
    """The :class:`ExecutionResult` of a sandbox answer (:class:`~wmrl.serve.contract.GradeResponse` as a dict),
    under ``request``'s own request id."""
    keep = {f for f in ExecutionResult.__dataclass_fields__} - {"request_id", "status"}
    kw = {k: v for k, v in answer.items() if k in keep}
    return ExecutionResult(request_id=request.request_id or answer["request_id"],
                           status=ExecutionStatus(answer["status"]), **kw)


class RemoteExecutor:
    """An :class:`wmrl.interfaces.Executor` whose programs run in a ``wmrl serve sandbox`` service.

    A request on a validation view (``request.task.validation``, multi-turn episodes) asks the service for the view
    of the same fraction and seed, built with the service's own secret. Each request goes out as ``POST /v1/grade``
    under the id ``{namespace}/{request.request_id}`` (a fresh uuid when
    the request has none), retried with that id (module docstring), so the service runs it once however often it is
    sent. The result comes back under the request's own id and, when ``log`` is given, is appended to that execution
    log too (a run's own log stays complete). A request that cannot be answered (the service refuses it, or stays
    unreachable through every retry) is an ``infra_error`` result whose error says why; futures never raise.

    Args:
        url: the service's base URL. token: its bearer token (None: an open service).
        max_workers: requests in flight at once (>= 1).
        namespace: prefix of every request id on the service (default: a fresh random one, so two runs whose
            request ids coincide never share an answer).
        log: a local execution log every result is appended to. timeout_s: one HTTP call's limit, seconds.
        retries: retries of one request.

    Raises:
        ImportError: httpx missing. ValueError: a bad URL or ``max_workers`` < 1.
    """

    recheck_infra = False  # the service's own executor re-checks infra errors

    def __init__(self, url: str, token: str | None = None, *, max_workers: int = 8, namespace: str | None = None,
                 log: Any = None, timeout_s: float = 960.0, retries: int = 8):
        if int(max_workers) < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self.client = ServiceClient(url, token, timeout_s=timeout_s, retries=retries)
        self.max_workers = int(max_workers)
        self.namespace = namespace or uuid.uuid4().hex[:12]
        self.log = log
        self._log_failures = 0
        self._pool = ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="wmrl-remote")
        self._closed = False

    @property
    def log_failures(self) -> int:
        """Results that could not be appended to the local log."""
        return self._log_failures

    def check_tasks(self, task_ids: Sequence[str]) -> None:
        """Refuse to start when the service does not know every task of ``task_ids``.

        Raises:
            ValueError: naming the missing tasks and the service. ServiceError: the service cannot be reached.
        """
        have = set(self.client.task_ids())
        missing = sorted(set(task_ids) - have)
        if missing:
            raise ValueError(f"the sandbox service {self.client.url} does not know task(s) {', '.join(missing)}; "
                             "start it with the same task roots as the trainer (--root)")

    def wire_id(self, request: ExecutionRequest) -> str:
        """The id ``request`` has on the service."""
        return f"{self.namespace}/{request.request_id or uuid.uuid4().hex}"

    def _call(self, request: ExecutionRequest, wire_id: str) -> ExecutionResult:
        body = {"request_id": wire_id, "task_id": request.task.id, "program": request.program,
                "time_limit_s": request.time_limit_s, "meta": _jsonable(request.meta),
                "trajectory": _jsonable(request.trajectory.to_dict()) if request.trajectory is not None else None}
        view = getattr(request.task, "validation", None)
        if view is not None:  # a validation view (multi-turn feedback): the service builds its own
            body["validation"] = {"fraction": float(view.fraction), "seed": int(view.seed)}
        try:
            result = result_from_answer(self.client.request("POST", "/grade", body), request)
        except Exception as e:  # noqa: BLE001 - every failure is this request's infra_error, never a raised future
            result = infra_result(request, cap_error(f"sandbox service: {e}"))
        append_to_log(self, request, result)
        return result

    def submit(self, request: ExecutionRequest) -> Future[ExecutionResult]:
        """Send one request; its future (cancellable until it is sent).

        Raises:
            RuntimeError: the executor is closed.
        """
        if self._closed:
            raise RuntimeError("RemoteExecutor is closed; create a new one")
        return self._pool.submit(self._call, request, self.wire_id(request))

    def run_batch(self, requests: Sequence[ExecutionRequest]) -> list[ExecutionResult]:
        """Run all requests (at most ``max_workers`` in flight); results in submission order."""
        futures = [self.submit(r) for r in requests]
        return [result_or_infra(f, r) for f, r in zip(futures, requests)]

    def close(self) -> None:
        """Cancel requests not sent yet, wait for those in flight, close the connections (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.client.close()

    def __enter__(self) -> RemoteExecutor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class RemoteWorldModel:
    """A :class:`wmrl.interfaces.WorldModel` served by ``wmrl serve world-model``: ``predict`` and ``predict_outcome``
    send the prompts and completions (``POST /v1/grade/batch``, at most ``max_items`` rows a request, retried as in
    the module docstring); ``fit``, ``save`` and ``load`` raise: the model lives in the service.

    Args:
        url: the service's base URL. token: its bearer token (None: an open service).
        max_items: rows per request (>= 1). timeout_s: one HTTP call's limit, seconds. retries: retries of one call.

    Raises:
        ImportError: httpx missing. ValueError: a bad URL or ``max_items`` < 1.
    """

    kind = "remote"

    def __init__(self, url: str, token: str | None = None, *, max_items: int = 512, timeout_s: float = 300.0,
                 retries: int = 8):
        if int(max_items) < 1:
            raise ValueError(f"max_items must be >= 1, got {max_items}")
        self.client = ServiceClient(url, token, timeout_s=timeout_s, retries=retries)
        self.max_items = int(max_items)
        self._n = 0
        self._lock = threading.Lock()
        self.tag = uuid.uuid4().hex[:12]

    def predict_outcome(self, prompts: Sequence[str], completions: Sequence[str]) -> Any:
        """A :class:`wmrl.world_model.outcome.OutcomePrediction` of N rows (reward [N], status_probs [N, 4] in
        :data:`wmrl.serve.contract.OUTCOME_CLASSES` order, reward_std [N]), from the service.

        Raises:
            ValueError: ``prompts`` and ``completions`` differ in length. ServiceError: the service refused the rows
                or stayed unreachable through every retry.
        """
        from wmrl.world_model.outcome import OutcomePrediction  # noqa: PLC0415 - keeps the client's import light

        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
        rewards, probs, stds = [], [], []
        for lo in range(0, len(prompts), self.max_items):
            with self._lock:
                self._n += 1
                call = self._n
            items = [{"request_id": f"{self.tag}-{call}-{i}", "prompt": p, "program": c}
                     for i, (p, c) in enumerate(zip(prompts[lo:lo + self.max_items],
                                                    completions[lo:lo + self.max_items]))]
            for a in self.client.request("POST", "/grade/batch", {"items": items})["results"]:
                rewards.append(float(a["reward"]))
                stds.append(float(a["reward_std"]))
                p = a["status_probs"]
                probs.append([float(p[c]) for c in OUTCOME_CLASSES] if p else [np.nan] * len(OUTCOME_CLASSES))
        n = len(prompts)
        return OutcomePrediction(np.asarray(rewards, dtype=np.float64),
                                 np.asarray(probs, dtype=np.float64).reshape(n, len(OUTCOME_CLASSES)),
                                 np.asarray(stds, dtype=np.float64))

    def predict(self, prompts: Sequence[str], completions: Sequence[str]) -> np.ndarray:
        """Predicted rewards r_hat, float64 [N] (``predict_outcome(...).reward``)."""
        return self.predict_outcome(prompts, completions).reward

    def _served(self, what: str) -> NotImplementedError:
        return NotImplementedError(f"RemoteWorldModel cannot {what}: the world model is served by "
                                   f"{self.client.url}; {what} it where it is served (wmrl wm fit, then restart "
                                   "`wmrl serve world-model --model DIR`)")

    def fit(self, records: Sequence[Any], **kwargs: Any) -> dict[str, Any]:
        """Raises NotImplementedError: a served model is fitted where it is served."""
        raise self._served("fit")

    def save(self, directory: str | Path) -> Path:
        """Raises NotImplementedError: a served model is saved where it is served."""
        raise self._served("save")

    def load(self, directory: str | Path) -> Any:
        """Raises NotImplementedError: a served model is loaded where it is served."""
        raise self._served("load")

    def close(self) -> None:
        """Close the connection pool."""
        self.client.close()

"""``wmrl serve world-model``: a saved world model behind the service contract (:mod:`wmrl.serve.contract`).

A request is the sandbox's request; the answer is the world model's prediction for it (reward, status distribution
over the outcome classes, predictive std; :class:`wmrl.world_model.outcome.OutcomePrediction`). The model reads
``prompt`` + ``completion``: the completion defaults to the program and the prompt to the task's prompt under the
service's scaffold (``--scaffold``; a run folder's own), so a request written for the sandbox is scored as it is; a
trainer sends the prompts and completions it has (multi-turn prompts carry the episode's history, which the service
cannot rebuild), and that is what :class:`wmrl.serve.client.RemoteWorldModel` does.

Requests are batched across clients: a :class:`wmrl.serve.batching.MicroBatcher` collects what arrives within
``max_wait_s`` (up to ``max_batch`` rows; one client's batch is never split) into one ``predict_outcome`` call on
one thread. At most ``max_concurrency`` rows wait or run at once (503 + Retry-After beyond; a batch of more rows than
``max_concurrency`` is a 413, as in the sandbox); an answer later than
``timeout_s`` is a 504. Predictions are pure, so a retried request id is simply predicted again.
"""
from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import HTTPException

from wmrl.execution.types import program_hash
from wmrl.serve.batching import MicroBatcher
from wmrl.serve.common import BodyGuard, Counters, create_app, retry_after
from wmrl.serve.contract import (OUTCOME_CLASSES, PREFIX, BatchRequest, BatchResponse, Capacity,
                                 GradeRequest, Health, Load, PredictResponse)
from wmrl.world_model.outcome import STATUS_CLASSES, predict_rewards

assert tuple(STATUS_CLASSES) == OUTCOME_CLASSES, "the contract's outcome classes follow the world model's"


class WorldModelService:
    """The state behind the world-model app.

    Args:
        world_model: anything with ``predict_outcome(prompts, completions) -> OutcomePrediction``
            (:class:`wmrl.interfaces.WorldModel`).
        tasks: ``get(task_id)`` / ``ids()`` (a :class:`wmrl.tasks.loader.TaskSuite`), or None: every request must
            carry its prompt.
        scaffold: builds a task's prompt (``scaffold.prompt(task)``) for requests without one; None: they must
            carry it.
        max_batch: rows per model call at most. max_wait_s: how long a call waits for more rows, seconds.
        max_concurrency: rows waiting or running at once at most. timeout_s: longest wait for an answer, seconds.
        info: facts reported in ``/v1/health`` (kind, backbone, scaffold, model folder).
    """

    def __init__(self, world_model: Any, tasks: Any, scaffold: Any, *, max_batch: int = 64, max_wait_s: float = 0.005,
                 max_concurrency: int = 1024, timeout_s: float = 120.0, info: dict[str, Any] | None = None):
        if max_concurrency < 1 or timeout_s <= 0:
            raise ValueError("max_concurrency must be >= 1 and timeout_s > 0")
        self.world_model, self.tasks, self.scaffold = world_model, tasks, scaffold
        self.max_concurrency, self.timeout_s, self.info = int(max_concurrency), float(timeout_s), dict(info or {})
        self.counters = Counters()
        self.batcher = MicroBatcher(self._predict, max_batch=max_batch, max_wait_s=max_wait_s)

    def _predict(self, rows: list[tuple[str, str]]) -> list[tuple[float, list[float], float]]:
        r_hat, outcome = predict_rewards(self.world_model, [p for p, _ in rows], [c for _, c in rows])
        if outcome is None:  # a world model with predict only: no distribution, no spread
            probs = np.tile(np.full(len(OUTCOME_CLASSES), np.nan), (len(rows), 1))
            std = np.full(len(rows), np.nan)
        else:
            probs, std = outcome.status_probs, outcome.reward_std
        return [(float(r_hat[i]), [float(x) for x in probs[i]], float(std[i])) for i in range(len(rows))]

    def row(self, it: GradeRequest) -> tuple[str, str]:
        """``(prompt, completion)`` of one request.

        Raises:
            HTTPException: 422 when neither a prompt nor a task id is given (or no scaffold), 404 for an unknown task.
        """
        completion = it.completion if it.completion is not None else it.program
        if it.prompt is not None:
            return it.prompt, completion
        if not it.task_id:
            raise HTTPException(422, "give prompt, or task_id (the service builds the task's prompt with its scaffold)")
        if self.tasks is None or self.scaffold is None:
            raise HTTPException(422, "this service has no tasks/scaffold to build prompts from: send prompt")
        try:
            task = self.tasks.get(it.task_id)
        except KeyError as e:
            raise HTTPException(404, str(e.args[0] if e.args else e)) from None
        return self.scaffold.prompt(task), completion

    async def answer(self, items: list[GradeRequest]) -> list[PredictResponse]:
        """Predict ``items`` in one request of the micro-batcher.

        Raises:
            HTTPException: as :meth:`row`; 413 for more rows than ``max_concurrency``; 503 at capacity; 504 after
                ``timeout_s``; 500 when the model fails.
        """
        rows = [self.row(it) for it in items]
        b = self.batcher
        if len(rows) > self.max_concurrency:
            raise HTTPException(413, f"the batch has {len(rows)} rows but at most {self.max_concurrency} wait or run "
                                     "at once (--max-concurrency): it could never be admitted; split it into "
                                     f"batches of at most {self.max_concurrency} items")
        busy = b.queued_rows + b.running_rows
        if busy + len(rows) > self.max_concurrency:
            raise HTTPException(503, f"at capacity: {busy} rows waiting or running of {self.max_concurrency}; retry "
                                     "after Retry-After seconds", headers=retry_after(1.0))
        fut = b.submit(rows)
        try:
            answers, n = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(fut)), self.timeout_s)
        except TimeoutError:
            raise HTTPException(504, f"no prediction within {self.timeout_s:g} s (--timeout-s); retry") from None
        self.counters.add(served=len(items))
        out = []
        for it, (_, completion), (reward, probs, std) in zip(items, rows, answers):
            p = {c: v for c, v in zip(OUTCOME_CLASSES, probs)}
            out.append(PredictResponse(request_id=it.request_id or f"anon-{uuid.uuid4().hex}", task_id=it.task_id,
                                       reward=reward, reward_std=std if np.isfinite(std) else 0.0,
                                       status_probs=p if all(np.isfinite(probs)) else {},
                                       status=max(p, key=lambda c: p[c]) if all(np.isfinite(probs)) else "",
                                       program_sha256=program_hash(completion), batch_size=n))
        return out

    def health(self) -> Health:
        """Capacity and load now."""
        b, c = self.batcher, self.counters
        n_tasks = 0
        if self.tasks is not None:
            try:
                n_tasks = len(self.tasks.ids())
            except Exception:  # noqa: BLE001 - a suite that is not built: prompts must come with requests
                n_tasks = 0
        return Health(service="world-model",
                      capacity=Capacity(workers=1, max_concurrency=self.max_concurrency, max_batch=b.max_batch,
                                        max_body_bytes=0, timeout_s=self.timeout_s),
                      load=Load(in_flight=b.queued_rows + b.running_rows, queued=b.queued_rows, served=c.served,
                                executed=b.rows_done, rejected=c.rejected, batches=b.calls),
                      uptime_s=time.time() - c.started, n_tasks=n_tasks,
                      detail={**self.info, "max_wait_s": b.max_wait_s})


def create_world_model_app(service: WorldModelService, *, token: str | None, max_body_bytes: int = 16 * 2**20,
                           read_timeout_s: float = 30.0) -> Any:
    """The ASGI app of ``service`` (FastAPI, wrapped in :class:`wmrl.serve.common.BodyGuard`); arguments as
    :func:`wmrl.serve.sandbox_app.create_sandbox_app`."""
    app, auth = create_app("wmrl world model", service, token, max_body_bytes,
                           lambda: service.tasks.ids() if service.tasks is not None else [])

    @app.post(f"{PREFIX}/grade", response_model=PredictResponse, dependencies=auth)
    async def grade(item: GradeRequest) -> PredictResponse:
        return (await service.answer([item]))[0]

    @app.post(f"{PREFIX}/grade/batch", response_model=BatchResponse, dependencies=auth)
    async def grade_batch(batch: BatchRequest) -> BatchResponse:
        return BatchResponse(results=await service.answer(batch.items))

    return BodyGuard(app, max_body_bytes, read_timeout_s, service.counters, token=token)


def load_served_world_model(model_dir: str | Path, *, backbone: str | None = None, seed: int | None = None,
                            scaffold: str | None = None) -> tuple[Any, dict[str, Any]]:
    """The world model saved in ``model_dir`` on its backbone, and what ``/v1/health`` reports about it.

    ``model_dir`` is a world-model folder (``wmrl wm fit --out``, a run's ``world_model/``) or a run folder (its
    ``world_model/``, with the backbone, seed and scaffold read from its ``config.yaml``). ``backbone`` and ``seed``
    (the ``tiny`` backbone's initialisation) override what the run folder says; for a bare world-model folder they
    default to ``smollm2-135m`` and 0.

    Raises:
        FileNotFoundError: not a world-model or run folder. ValueError: the weights do not fit the backbone.
    """
    from wmrl.models import backbone as bb  # noqa: PLC0415 - heavy: loads torch and transformers
    from wmrl.world_model.base import BackboneWorldModel  # noqa: PLC0415 - heavy: loads torch
    from wmrl.world_model.factory import load_world_model  # noqa: PLC0415 - heavy: loads torch

    d = Path(model_dir)
    run_cfg: dict[str, Any] = {}
    if (d / "world_model" / "world_model.json").is_file():
        import yaml  # noqa: PLC0415 - only for a run folder

        cfg_path = d / "config.yaml"
        run_cfg = yaml.safe_load(cfg_path.read_text()) if cfg_path.is_file() else {}
        d = d / "world_model"
    if not (d / "world_model.json").is_file():
        raise FileNotFoundError(f"{model_dir} is neither a world-model folder (with world_model.json) nor a run "
                                "folder holding world_model/; fit one with `wmrl wm fit` or train a run")
    saved = BackboneWorldModel.read_saved_config(d)
    recorded = "tiny" if saved.get("base_model") == "tiny" else None  # pretrained ones record a local path
    name = backbone or (run_cfg.get("model") or {}).get("name") or recorded or bb.DEFAULT_MODEL
    s = int(seed if seed is not None else run_cfg.get("seed", saved.get("base_seed") or 0))
    model, tok = bb.tiny_backbone(seed=s) if name == "tiny" else bb.load_backbone(name)
    try:
        wm = load_world_model(d, model, tok)
    except ValueError as e:
        raise ValueError(f"{e}; serve it on the backbone it was fitted on: --backbone NAME (e.g. tiny, "
                         f"{bb.DEFAULT_MODEL})") from None
    scaffold_name = scaffold or (run_cfg.get("scaffold") or {}).get("name")
    return wm, {"kind": getattr(wm, "kind", ""), "backbone": name, "seed": s, "model": str(d),
                "scaffold": scaffold_name}

"""The world-model service: micro-batching across concurrent clients (one model call for many requests, each answer
the row's own prediction), the client world model, capacity (503), timeouts (504), bad input; and the batcher."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from tests.serve.servers import TOKEN, ThreadServer, auth
from wmrl.serve.batching import MicroBatcher
from wmrl.serve.client import RemoteWorldModel, ServiceError
from wmrl.serve.world_model_app import WorldModelService, create_world_model_app
from wmrl.world_model.outcome import OutcomePrediction


class CountingWorldModel:
    """A deterministic world model: each row's prediction depends on that row only; calls and their sizes counted;
    ``delay_s`` per call."""

    def __init__(self, delay_s: float = 0.0):
        self.calls: list[int] = []
        self.delay_s = delay_s
        self.lock = threading.Lock()

    def predict_outcome(self, prompts, completions):
        time.sleep(self.delay_s)
        with self.lock:
            self.calls.append(len(prompts))
        h = np.array([(sum(map(ord, p + c)) % 997) / 997.0 for p, c in zip(prompts, completions)])
        probs = np.stack([0.1 * h, 0.1 * (1 - h), 0.1 * np.ones_like(h), 1 - 0.1 * h - 0.1 * (1 - h) - 0.1], 1)
        return OutcomePrediction(h, probs, 0.05 + 0.1 * h)

    def predict(self, prompts, completions):
        return self.predict_outcome(prompts, completions).reward


class FakeTasks:
    def get(self, task_id):
        if task_id != "t1":
            raise KeyError(f"unknown task {task_id!r}; known tasks: t1")
        return type("T", (), {"id": "t1"})()

    def ids(self):
        return ["t1"]


class PromptScaffold:
    name = "fake"

    def prompt(self, task):
        return f"solve {task.id}"


def _service(wm, **kw):
    return WorldModelService(wm, FakeTasks(), PromptScaffold(), **{"max_batch": 64, "max_wait_s": 0.05, **kw})


def test_concurrent_requests_share_model_calls_and_get_their_own_rows():
    wm = CountingWorldModel(delay_s=0.05)
    svc = _service(wm)
    with ThreadServer(create_world_model_app(svc, token=TOKEN)) as srv:
        def one(i: int) -> dict:
            r = httpx.post(srv.url + "/v1/grade", headers=auth(), timeout=60,
                           json={"request_id": f"q{i}", "prompt": f"p{i % 3}", "program": f"c{i}"})
            assert r.status_code == 200, r.text
            return r.json()

        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(one, range(32)))
        direct = CountingWorldModel().predict_outcome([f"p{i % 3}" for i in range(32)], [f"c{i}" for i in range(32)])
        assert [a["request_id"] for a in answers] == [f"q{i}" for i in range(32)]
        assert np.array_equal([a["reward"] for a in answers], direct.reward)
        assert [a["status"] for a in answers] == direct.status
        assert np.array_equal([a["reward_std"] for a in answers], direct.reward_std)
        assert sum(wm.calls) == 32 and len(wm.calls) < 32  # batched across clients
        assert max(a["batch_size"] for a in answers) > 1
        h = httpx.get(srv.url + "/v1/health", timeout=10).json()
        assert h["service"] == "world-model" and h["load"]["served"] == 32 and h["load"]["batches"] == len(wm.calls)
        assert h["capacity"]["max_batch"] == 64 and h["load"]["in_flight"] == 0
    svc.batcher.close()


def test_remote_world_model_is_the_world_model_and_refuses_fit():
    wm = CountingWorldModel()
    svc = _service(wm)
    with ThreadServer(create_world_model_app(svc, token=TOKEN)) as srv:
        remote = RemoteWorldModel(srv.url, TOKEN, max_items=5)
        prompts, comps = [f"p{i}" for i in range(12)], [f"c{i}" for i in range(12)]
        got, want = remote.predict_outcome(prompts, comps), wm.predict_outcome(prompts, comps)
        assert np.array_equal(got.reward, want.reward) and np.array_equal(got.status_probs, want.status_probs)
        assert np.array_equal(got.reward_std, want.reward_std)
        assert np.array_equal(remote.predict(prompts, comps), want.reward)
        assert wm.calls[:3] == [5, 5, 2]  # max_items rows a request, in order
        for call in (lambda: remote.fit([]), lambda: remote.save("x"), lambda: remote.load("x")):
            with pytest.raises(NotImplementedError, match="served by"):
                call()
        # a request written for the sandbox (task id + program) is scored on the task's prompt + the program
        r = httpx.post(srv.url + "/v1/grade", headers=auth(), timeout=30, json={"task_id": "t1", "program": "x = 1"})
        assert r.json()["reward"] == wm.predict(["solve t1"], ["x = 1"])[0]
        bad = RemoteWorldModel(srv.url, "wrong", retries=0)
        with pytest.raises(ServiceError, match="401"):
            bad.predict(["p"], ["c"])
        remote.close()
    svc.batcher.close()


def test_bad_input_capacity_and_timeouts():
    wm = CountingWorldModel(delay_s=1.0)
    svc = _service(wm, max_concurrency=4, timeout_s=0.3)
    with ThreadServer(create_world_model_app(svc, token=TOKEN, max_body_bytes=4096)) as srv:
        post = lambda body, **kw: httpx.post(srv.url + "/v1/grade/batch", headers=auth(), json=body, timeout=30, **kw)  # noqa: E731
        assert post({"items": [{"task_id": "nope", "program": "x"}]}).status_code == 404
        assert post({"items": [{"program": "x"}]}).status_code == 422  # neither a prompt nor a task
        assert post({"items": []}).status_code == 422
        assert post({"items": [{"prompt": "p", "program": "#" * 8000}]}).status_code == 413
        # the model is slow: the first request waits past the timeout (504), a second one finds it busy (503)
        with ThreadPoolExecutor(2) as pool:
            slow = pool.submit(post, {"items": [{"prompt": "p", "program": f"c{i}"} for i in range(3)]})
            time.sleep(0.1)
            busy = post({"items": [{"prompt": "p", "program": f"d{i}"} for i in range(3)]})
            assert busy.status_code == 503 and int(busy.headers["retry-after"]) >= 1
            assert slow.result().status_code == 504
        time.sleep(1.2)  # the slow call has finished: admitted again, and again later than 0.3 s
        assert post({"items": [{"prompt": "p", "program": "c"}]}).status_code == 504
        svc.timeout_s = 10.0  # a patient service answers: it served on through all of the above
        assert post({"items": [{"prompt": "p", "program": "c"}]}).status_code == 200
    svc.batcher.close()


def test_microbatcher_keeps_each_request_whole_and_in_order():
    seen: list[list[int]] = []

    def fn(rows):
        seen.append(list(rows))
        return [r * 10 for r in rows]

    b = MicroBatcher(fn, max_batch=5, max_wait_s=0.05)
    futs = [b.submit([i, i + 100]) for i in range(6)] + [b.submit(list(range(200, 208)))]
    outs = [f.result(timeout=10) for f in futs]
    assert [o[0] for o in outs[:6]] == [[i * 10, (i + 100) * 10] for i in range(6)]
    assert outs[6][0] == [r * 10 for r in range(200, 208)] and outs[6][1] == 8  # larger than max_batch: its own call
    assert all(len(call) <= 5 for call in seen[:-1]) and sum(map(len, seen)) == 20
    bad = MicroBatcher(lambda rows: [1], max_batch=4, max_wait_s=0.0)
    with pytest.raises(RuntimeError, match="returned 1 answers for 2 rows"):
        bad.submit([1, 2]).result(timeout=10)
    assert bad.submit([3]).result(timeout=10) == ([1], 1)  # the thread lives on after a failed call
    b.close()
    bad.close()
    with pytest.raises(RuntimeError, match="closed"):
        b.submit([1])

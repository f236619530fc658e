"""The asynchronous anchor stream in the trainer (wmrl.step.anchors), on the fake parts: k = 0 is the
synchronous stream recorded before it existed, generation does not wait with k > 0, the bound is kept, late
groups reach the loss (gradient mode) or only the calibration."""
from __future__ import annotations

import json
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.support.fakes import FakeExecutor, FakePolicy
from test_loop_fakes import cfg_for, comps

from wmrl.training.config import ConfigError, load_config
from wmrl.runs.rundir import RunDir, read_jsonl
from wmrl.training.run import run_training

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _golden

#: metrics and samples of 5-step fake runs recorded on commit ab7050e, before the asynchronous stream existed
SYNC = Path(__file__).resolve().parent / "golden" / "fakes_sync_5step.json"


class SlowExecutor(FakeExecutor):
    """The fake executor whose results come ``latency`` seconds after submission (a timer thread each)."""

    def __init__(self, latency: float):
        super().__init__()
        self.latency = latency

    def submit(self, req):
        f: Future = Future()
        f.set_running_or_notify_cancel()  # running at once (as on a free slot): not cancelled when queued ones are
        threading.Timer(self.latency, lambda: f.set_result(self._run(req))).start()
        return f


def _run_fakes(tmp_path, method, *extra, executor=None, steps=5, wm_sleep=0.0):
    c = comps(method)
    if executor is not None:
        c.executor = executor
    if wm_sleep:
        predict = c.world_model.predict
        c.world_model.predict = lambda p, q: (time.sleep(wm_sleep), predict(p, q))[1]
    cfg = cfg_for(tmp_path, method, steps, "eval.every_k=0", "eval.at_end=false", "wmrl.fusion.min_pairs=2", *extra)
    run_training(cfg, components=c)
    rd = RunDir(cfg.run_dir)
    return read_jsonl(rd.metrics), read_jsonl(rd.samples), rd


def _stopped_run(tmp_path, steps: int, k: int, stop: int):
    """A run of ``steps`` steps with staleness bound ``k`` whose executions never finish within it, stopped after step
    ``stop`` (as a killed process: a checkpoint at ``stop``, nothing after); returns (config, RunDir)."""
    cfg = cfg_for(tmp_path, "wmrl", steps, "eval.every_k=0", "eval.at_end=false", "wmrl.fusion.min_pairs=2",
                  f"wmrl.asynchronous.staleness={k}", "wmrl.routing.anchor_fraction=0.5")
    c = comps("wmrl")
    c.executor = SlowExecutor(5.0)
    run_training(cfg, components=c, stop_after_step=stop)
    return cfg, RunDir(cfg.run_dir)


def _numbers(m, s):
    return {"steps": [{k: r.get(k) for k in _golden.STEP_KEYS} for r in m],
            "samples": [{k: x.get(k) for k in _golden.SAMPLE_KEYS} for x in s]}


@pytest.mark.parametrize("method", ["wmrl", "wmrl-ppi", "grpo"])
def test_k0_is_the_synchronous_stream_recorded_before(tmp_path, method):
    m, s, _ = _run_fakes(tmp_path, method)
    ref = json.loads(SYNC.read_text())[method]
    assert not _golden.differences(_numbers(m, s), ref)
    assert all("wall_s.anchor_wait" not in r and "anchor_staleness_mean" not in r for r in m)


@pytest.mark.parametrize("method, at_bound", [("wmrl", "wait"), ("wmrl-ppi", "wait"), ("wmrl", "calibration"),
                                              ("wmrl-ppi", "drop")])
def test_k3_with_instant_executions_changes_no_number(tmp_path, method, at_bound):
    """Executions that are done before the collection are consumed at their own step: the same run as k = 0,
    whatever happens at the bound (nothing reaches it)."""
    m, s, _ = _run_fakes(tmp_path, method, "wmrl.asynchronous.staleness=3",
                         f"wmrl.asynchronous.over_bound_anchors={at_bound}")
    assert not _golden.differences(_numbers(m, s), json.loads(SYNC.read_text())[method])
    assert all(r["anchor_staleness_max"] in (0, None) and r["anchors_in_flight"] == 0 for r in m)
    assert all(r["wall_s.anchor_wait"] == 0.0 and r["anchor_groups_over_bound"] == 0 for r in m)


def test_async_generation_never_waits_and_late_groups_enter_the_loss(tmp_path):
    latency = 0.4
    m, s, rd = _run_fakes(tmp_path, "wmrl", "wmrl.asynchronous.staleness=20", executor=SlowExecutor(latency),
                          steps=12, wm_sleep=0.03)
    assert [r.get("wall_s.anchor_wait") for r in m] == [0.0] * 12  # the ledger records no waiting
    assert np.median([r["step_wall_s"] for r in m]) < latency  # a step is shorter than one execution
    late = [x for x in s if x["stream"] == "anchor_late"]
    assert late and all(1 <= x["staleness"] <= 20 and x["weight"] > 0 for x in late)
    assert all(x["step"] - x["origin_step"] == x["staleness"] for x in late)
    assert sum(r["anchor_late_samples"] for r in m) == len(late)
    assert max(r["anchor_staleness_max"] or 0 for r in m) >= 1
    # at its own step a group in flight is out of the loss (it enters at its arrival step), not dropped
    fresh_routed = {(x["step"], x["group"]) for x in late}
    own = [x for x in s if x["stream"] == "wm" and (x["step"], x["group"]) in {(o, g) for o, g in
           ((y["origin_step"], y["group"]) for y in late)}]
    assert own and all(x["weight"] == 0 and not x["dropped"] for x in own) and fresh_routed
    assert m[-1]["calibrator_n_anchors"] == sum(r["anchor_samples_consumed"] for r in m)
    cal = read_jsonl(rd.calibration)
    assert sum(len(c.get("late_true", [])) for c in cal) == len(late)
    led = json.loads(rd.ledger.read_text())
    assert led["stages"]["anchor_wait"]["wall_s"] == 0.0
    assert led["executions"]["anchor"]["count"] == sum(r["anchor_samples_consumed"] for r in m)


@pytest.mark.parametrize("mode", ["skip", "update"])
def test_steps_without_anchors_skip_their_update(tmp_path, mode):
    """wmrl.asynchronous.steps_without_anchors: a step whose own anchor groups are all in flight and at which nothing
    arrives (the first steps, with 0.4 s executions and ~0.05 s steps) makes no update with ``skip`` (no rows, no
    gradient) and trains on its world-model groups with ``update``; steps with late rows update in both."""
    m, s, rd = _run_fakes(tmp_path, "wmrl", "wmrl.asynchronous.staleness=20",
                          f"wmrl.asynchronous.steps_without_anchors={mode}",
                          executor=SlowExecutor(0.4), steps=12, wm_sleep=0.03)
    unanchored = [r for r in m if r["n_anchor_samples"] == 0 and r["anchor_groups_in_flight"] > 0]
    assert unanchored and unanchored[0]["step"] == 1  # the pipeline fill
    anchored = [r for r in m if r["n_anchor_samples"] > 0]
    assert anchored and all(not r["update_skipped"] and r["update_rows"] > 0 for r in anchored)
    if mode == "skip":
        assert all(r["update_skipped_without_anchors"] and r["update_skipped"] and r["update_rows"] == 0
                   and r["grad_norm"] is None for r in unanchored)
        assert m[-1]["updates_skipped_without_anchors_total"] == len(unanchored)
        log = rd.log.read_text()
        assert log.count("update skipped (anchors in flight, none arrived)") == len(unanchored)
        # its samples are still logged and scored; their loss weight is 0 (nothing was trained on them)
        skipped = {r["step"] for r in unanchored}
        lines = [x for x in s if x["step"] in skipped]
        assert lines and all(np.isfinite(x["reward_wm"]) and x["weight"] == 0.0 for x in lines)
        assert any(x["weight"] > 0 for x in s if x["step"] not in skipped)
    else:
        assert all(not r["update_skipped_without_anchors"] and r["update_rows"] > 0 for r in unanchored)
        assert m[-1]["updates_skipped_without_anchors_total"] == 0
    assert [r.get("wall_s.anchor_wait") for r in m] == [0.0] * 12


@pytest.mark.parametrize("saved_before_the_key", [False, True])
def test_a_resumed_run_keeps_its_steps_without_anchors(tmp_path, saved_before_the_key):
    """A resume starts a new pipeline fill (the anchors in flight at the checkpoint are lost, counted in
    anchors_lost), so its run of skipped updates starts from 0: nothing ever arrives here, k = 3, steps 1-2 skip
    before the stop and 3-5 after it; the count over the run is kept. Review: a run saved before
    wmrl.asynchronous.steps_without_anchors existed (its config.yaml lacks the key) updated at such steps; resumed, it
    switched to the new default ``skip``."""
    from wmrl.training.run import resume_training

    cfg, rd = _stopped_run(tmp_path, steps=5, k=3, stop=2)
    if saved_before_the_key:  # the run as an older wmrl saved it
        text = rd.config.read_text()
        assert text.count("\n    steps_without_anchors: skip\n") == 1
        rd.config.write_text(text.replace("\n    steps_without_anchors: skip\n", "\n"))
        rd.save_config_hash()
        with pytest.raises(ConfigError, match="steps_without_anchors"):  # its past updated: a frozen key
            resume_training(cfg.run_dir, overrides=["wmrl.asynchronous.steps_without_anchors=skip"],
                            components=comps("wmrl"))
    c2 = comps("wmrl")
    c2.executor = SlowExecutor(5.0)
    resume_training(cfg.run_dir, components=c2)
    m = read_jsonl(rd.metrics)
    assert [r["step"] for r in m] == [1, 2, 3, 4, 5]
    skipped = [r["update_skipped_without_anchors"] for r in m]
    if saved_before_the_key:
        assert skipped == [True, True, False, False, False]
        assert ("predates wmrl.asynchronous.steps_without_anchors: resuming with "
                "wmrl.asynchronous.steps_without_anchors=update"
                in rd.log.read_text())
    else:
        assert skipped == [True] * 5  # at most k = 3 in a row since the resume
        assert m[-1]["updates_skipped_without_anchors_total"] == 5
    assert all(r["update_rows"] > 0 for r, sk in zip(m, skipped) if not sk)


def test_the_bound_is_kept_by_waiting(tmp_path):
    """k = 1 with executions slower than a step: every group is consumed one step late, after a wait."""
    m, s, _ = _run_fakes(tmp_path, "wmrl", "wmrl.asynchronous.staleness=1", executor=SlowExecutor(0.5), steps=4)
    assert all(r["anchor_staleness_max"] in (1, None) for r in m)
    assert sum(r["wall_s.anchor_wait"] for r in m) > 0.3
    assert m[0]["anchor_samples_consumed"] == 0 and all(r["anchor_samples_consumed"] > 0 for r in m[1:]
                                                        if r["n_anchor_groups"])


def test_calibration_mode_keeps_late_groups_out_of_the_loss(tmp_path):
    m, s, rd = _run_fakes(tmp_path, "wmrl", "wmrl.asynchronous.staleness=20",
                          "wmrl.asynchronous.late_anchors=calibration",
                          executor=SlowExecutor(0.3), steps=10, wm_sleep=0.03)
    assert not [x for x in s if x["stream"] == "anchor_late"]
    assert sum(r["anchor_late_samples"] for r in m) > 0
    # the step's metrics are taken before its late pairs are learned (Recipe.learn_late runs after the step)
    assert m[-1]["calibrator_n_anchors"] == sum(r["anchor_samples_consumed"] for r in m) - m[-1]["anchor_late_samples"]
    wm_rows = [x for x in s if x["stream"] == "wm"]
    assert all(x["weight"] > 0 for x in wm_rows)  # in-flight groups train as world-model groups
    assert sum(len(c.get("late_true", [])) for c in read_jsonl(rd.calibration)) > 0


def test_staleness_needs_a_recipe_with_both_streams(tmp_path):
    with pytest.raises(ConfigError, match="wmrl.asynchronous.staleness=2 needs a method with both"):
        load_config(None, ["method=grpo", "wmrl.asynchronous.staleness=2"])
    with pytest.raises(ConfigError, match="late_anchors"):
        load_config(None, ["wmrl.asynchronous.late_anchors=drop"])


def test_over_bound_config_errors_are_clear():
    with pytest.raises(ConfigError, match=r"wmrl.asynchronous.over_bound_anchors='calibration' needs an asynchronous "
                                          r"anchor stream: set wmrl.asynchronous.staleness"):
        load_config(None, ["wmrl.asynchronous.over_bound_anchors=calibration"])
    with pytest.raises(ConfigError, match=r"wmrl.asynchronous.over_bound_anchors: 'skip' is not allowed; choose one "
                                          r"of 'wait', 'calibration', 'drop'"):
        load_config(None, ["wmrl.asynchronous.over_bound_anchors=skip", "wmrl.asynchronous.staleness=3"])
    assert load_config(None, []).wmrl.asynchronous.over_bound_anchors == "wait"
    cfg = load_config(None, ["wmrl.asynchronous.over_bound_anchors=drop", "wmrl.asynchronous.staleness=3"])
    assert cfg.wmrl.asynchronous.over_bound_anchors == "drop"
    from wmrl.step.anchors import AnchorStream

    with pytest.raises(ValueError, match="k >= 1"):
        AnchorStream(0, "calibration")


# ------------------------------------------------------------------------ a group still running at the bound
def _step(step, groups, anchor_groups, G=2):
    """A minimal step batch for AnchorStream: ``groups`` groups of G samples, ``anchor_groups`` executed."""
    from wmrl.step.batch import StepBatch

    gid = np.repeat(np.arange(groups), G)
    ag = np.isin(np.arange(groups), anchor_groups)
    sb = StepBatch(step=step, tasks=[], batch=f"batch{step}", gid=gid, group_keys=[f"g{g}" for g in range(groups)])
    sb.anchor_groups, sb.is_anchor, sb.reward_wm = ag, ag[gid], np.linspace(0, 1, gid.size)
    return sb


def _submit(stream, ex, sb, requests):
    """Submit ``(sample index, request)`` pairs to the manual executor and track their futures in the stream."""
    return stream.track(sb, [i for i, _ in requests], [ex.submit(r) for _, r in requests])


class _ManualExecutor:
    """Futures the test completes by hand (``finish(request)``)."""

    def __init__(self):
        self.futures = {}

    def submit(self, req):
        from wmrl.execution.pool import ExecutionFuture

        self.futures[req] = f = ExecutionFuture()  # the local pool's and Ray's future: cancellable while running
        if not req.endswith("q"):  # a request named ...q stays queued (pending) in the executor
            f.set_running_or_notify_cancel()
        return f

    def finish(self, req, reward=0.5):
        from types import SimpleNamespace

        self.futures[req].set_result(SimpleNamespace(status="ok", reward=reward, error=None, wall_s=0.1,
                                                     cpu_s=0.1, compute_s=0.1))


def _stream(mode, k=1):
    from wmrl.step.anchors import AnchorStream
    from wmrl.runs.ledger import Ledger

    ex, led = _ManualExecutor(), Ledger(method="wmrl", anchor_fraction_configured=0.5)
    stream = AnchorStream(k, mode)
    stream.ledger = led
    return stream, ex, led


class _LearnLate:
    """A recipe stand-in that records learn_late's calls."""

    def __init__(self):
        self.seen = []

    def learn_late(self, state, step, og, gid, rt, rw):
        self.seen.append((step, og.tolist(), gid.tolist(), rt.tolist()))
        return np.asarray(rw) + 1


def _counts(**kw):
    return {"anchor_groups_over_bound": 0, "anchor_groups_over_bound_total": 1, "anchor_over_bound_samples": 0,
            "anchor_over_bound_cancelled": 0, "anchor_groups_in_flight": 0} | kw


def test_a_slow_group_at_the_bound_is_not_waited_for_calibration():
    """k = 1: the group of step 1 (one execution done, one running, one queued) is still running at step 2, its
    bound: the collection returns at once (no wait), the queued execution is cancelled, the running one goes on;
    when it finishes (step 4) the pairs reach only learn_late, never the late pairs of the gradient."""
    stream, ex, led = _stream("calibration")
    sb1 = _step(1, 2, [0], G=3)
    late = stream.collect(sb1, _submit(stream, ex, sb1, [(0, "s1a"), (1, "s1b"), (2, "s1cq")]))
    assert late.n == 0 and not sb1.is_anchor.any()  # in flight: not an anchor at its own step
    ex.finish("s1a")
    sb2 = _step(2, 2, [])
    t0 = time.perf_counter()
    late = stream.collect(sb2, _submit(stream, ex, sb2, []))
    assert time.perf_counter() - t0 < 0.5 and late.n == 0
    assert stream.step_counts == _counts(anchor_groups_over_bound=1, anchor_over_bound_cancelled=1,
                                         anchor_groups_in_flight=1)
    assert ex.futures["s1cq"].cancelled() and ex.futures["s1b"].running()
    sb3 = _step(3, 2, [])
    stream.collect(sb3, _submit(stream, ex, sb3, []))
    assert stream.step_counts == _counts(anchor_groups_in_flight=1)  # counted once, at the step of its bound
    ex.finish("s1b", 0.7)
    sb4 = _step(4, 2, [])
    late = stream.collect(sb4, _submit(stream, ex, sb4, []))
    assert late.n == 0 and stream.n_in_flight == 0  # consumed, but not as a late pair (no gradient)
    assert stream.step_counts == _counts(anchor_over_bound_samples=2)
    assert led.to_json()["stages"]["anchor_wait"]["wall_s"] == 0.0
    assert led.to_json()["executions"]["anchor"]["count"] == 2  # the cancelled one is not an execution
    rec = _LearnLate()
    out = stream.learn_over_bound(rec, None, 4)
    assert rec.seen == [(4, [1, 1], [0, 0], [0.5, 0.7])]
    assert out["over_bound_true"] == [0.5, 0.7] and out["over_bound_origin_steps"] == [1, 1]
    assert out["over_bound_wm_calibrated"] == pytest.approx([1.0, 1.2])
    assert stream.learn_over_bound(rec, None, 5) == {}  # fed once


def test_a_slow_group_at_the_bound_is_dropped():
    """drop: at the bound every unfinished execution of the group is cancelled (running ones too: their slots are
    freed); the finished one is counted in the ledger and discarded; nothing reaches the calibration."""
    stream, ex, led = _stream("drop")
    sb1 = _step(1, 2, [0])
    stream.collect(sb1, _submit(stream, ex, sb1, [(0, "s1a"), (1, "s1b")]))
    ex.finish("s1a")
    sb2 = _step(2, 2, [])
    late = stream.collect(sb2, _submit(stream, ex, sb2, []))
    assert late.n == 0 and ex.futures["s1b"].cancelled()
    assert stream.step_counts == _counts(anchor_groups_over_bound=1, anchor_over_bound_samples=1,
                                         anchor_over_bound_cancelled=1)
    assert stream.n_in_flight == 0 and stream.over_bound is None
    assert led.to_json()["executions"]["anchor"]["count"] == 1
    assert led.to_json()["stages"]["anchor_wait"]["wall_s"] == 0.0
    rec = _LearnLate()
    assert stream.learn_over_bound(rec, None, 2) == {} and not rec.seen


def test_wait_mode_waits_at_the_bound():
    """The same schedule in the wait mode: step 2 blocks until the slow execution is done."""
    stream, ex, led = _stream("wait")
    sb1 = _step(1, 2, [0])
    stream.collect(sb1, _submit(stream, ex, sb1, [(0, "s1a"), (1, "s1b")]))
    ex.finish("s1a")
    threading.Timer(0.3, lambda: ex.finish("s1b", 0.7)).start()
    sb2 = _step(2, 2, [])
    late = stream.collect(sb2, _submit(stream, ex, sb2, []))
    assert late.n == 2 and late.staleness.tolist() == [1, 1] and late.reward_true.tolist() == [0.5, 0.7]
    assert led.to_json()["stages"]["anchor_wait"]["wall_s"] >= 0.25
    assert stream.step_counts["anchor_groups_over_bound"] == 1 and stream.over_bound is None


@pytest.mark.parametrize("late_mode", ["gradient", "calibration"])
def test_non_blocking_run_never_waits_and_over_bound_pairs_reach_only_the_calibration(tmp_path, late_mode):
    """k = 1 with executions of 0.3 s and steps of about 0.05 s: every group is over the bound. No step waits;
    no late sample enters the loss; the calibrator learns every over-bound pair after its arrival step."""
    m, s, rd = _run_fakes(tmp_path, "wmrl", "wmrl.asynchronous.staleness=1",
                          "wmrl.asynchronous.over_bound_anchors=calibration",
                          f"wmrl.asynchronous.late_anchors={late_mode}", executor=SlowExecutor(0.3), steps=14,
                          wm_sleep=0.05)
    assert [r["wall_s.anchor_wait"] for r in m] == [0.0] * 14  # the ledger records no waiting
    assert sum(r["anchor_groups_over_bound"] for r in m) >= 3 and m[-1]["anchor_groups_over_bound_total"] >= 3
    over = sum(r["anchor_over_bound_samples"] for r in m)
    assert over > 0
    # only in-bound late groups (staleness <= k = 1: a step slowed by a loaded machine) reach the gradient
    late = [x for x in s if x["stream"] == "anchor_late"]
    assert all(x["staleness"] <= 1 for x in late) and max(r["anchor_staleness_max"] or 0 for r in m) <= 1
    assert len(late) == (sum(r["anchor_late_samples"] for r in m) if late_mode == "gradient" else 0)
    # the over-bound pairs are learned after their step's map: the calibrator has all but the last step's
    after = m[-1]["anchor_over_bound_samples"] + (m[-1]["anchor_late_samples"] if late_mode == "calibration" else 0)
    assert m[-1]["calibrator_n_anchors"] == sum(r["anchor_samples_consumed"] for r in m) + over - after
    cal = read_jsonl(rd.calibration)
    assert sum(len(c.get("over_bound_true", [])) for c in cal) == over
    assert all(c["step"] - o > 1 for c in cal for o in c.get("over_bound_origin_steps", []))
    led = json.loads(rd.ledger.read_text())
    assert led["stages"]["anchor_wait"]["wall_s"] == 0.0
    assert led["executions"]["anchor"]["count"] == sum(r["anchor_samples_consumed"] for r in m) + over
    if late_mode == "gradient":  # in flight at its own step: out of the loss there
        anchor_steps = {r["step"] for r in m if r["n_anchor_groups"]}
        assert any(x["weight"] == 0 for x in s if x["step"] in anchor_steps)


def test_drop_mode_discards_over_bound_pairs(tmp_path):
    m, s, rd = _run_fakes(tmp_path, "wmrl", "wmrl.asynchronous.staleness=1",
                          "wmrl.asynchronous.over_bound_anchors=drop",
                          executor=SlowExecutor(0.3), steps=14, wm_sleep=0.05)
    assert [r["wall_s.anchor_wait"] for r in m] == [0.0] * 14
    over = sum(r["anchor_over_bound_samples"] for r in m)
    assert over > 0 and m[-1]["calibrator_n_anchors"] == sum(r["anchor_samples_consumed"] for r in m)
    assert max(r["anchor_staleness_max"] or 0 for r in m) <= 1
    assert not any("over_bound_true" in c for c in read_jsonl(rd.calibration))


def test_update_with_extra_parts_equals_one_batch():
    """grpo_update's extra rows (late groups) give the same step as the rows in one batch (token mean)."""
    from wmrl.training.config import OptimConfig
    from wmrl.training.update import grpo_update
    from tests.support.fakes import FakeScaffold, fake_task

    pol = FakePolicy(0)
    batch = pol.sample([fake_task(i) for i in range(3)], FakeScaffold(), group_size=4, generator_seed=5)
    rng = np.random.default_rng(0)
    adv, w = rng.standard_normal(12), rng.random(12)
    o = OptimConfig(lr=0.1, micro_batch=3)
    results = []
    for split in (None, 7):
        p = FakePolicy(0)
        opt = torch.optim.SGD([p.theta], lr=0.1)
        if split is None:
            grpo_update(p, opt, [p.theta], batch, adv, w, np.ones(12, bool), o)
        else:
            grpo_update(p, opt, [p.theta], batch.slice(list(range(split))), adv[:split], w[:split],
                        np.ones(split, bool), o, [(batch.slice(list(range(split, 12))), adv[split:], w[split:])])
        results.append(p.theta.detach().clone())
    assert torch.allclose(results[0], results[1], atol=1e-7)
    assert not torch.allclose(results[0], FakePolicy(0).theta.detach())


def test_groups_in_flight_at_the_end_and_at_a_resume_are_counted(tmp_path):
    """A run stopped with anchor groups in flight, then resumed: the resume counts those in flight at the
    checkpoint's step (lost with the stopped process), the end those still running; ledger.json and train.log."""
    from wmrl.training.run import resume_training

    cfg, rd = _stopped_run(tmp_path, steps=8, k=20, stop=3)
    m3 = read_jsonl(rd.metrics)[-1]
    assert m3["step"] == 3 and m3["anchor_groups_in_flight"] >= 1 and m3["anchors_in_flight"] >= 4
    c2 = comps("wmrl")
    c2.executor = SlowExecutor(5.0)
    s = resume_training(cfg.run_dir, components=c2)
    lost = s.ledger["anchors_lost"]
    events = lost["events"]
    assert events[0] == {"when": "resume", "step": 3, "groups": m3["anchor_groups_in_flight"],
                         "executions": m3["anchors_in_flight"]}
    m8 = read_jsonl(rd.metrics)[-1]
    assert events[1] == {"when": "end", "step": 8, "groups": m8["anchor_groups_in_flight"],
                         "executions": m8["anchors_in_flight"]}
    assert lost["executions"] == m3["anchors_in_flight"] + m8["anchors_in_flight"]
    assert json.loads(rd.ledger.read_text())["anchors_lost"] == lost
    text = rd.log.read_text()
    assert "in flight at step 3 were lost with the stopped process" in text and "at the end of step 8" in text


def test_a_synchronous_run_has_no_lost_anchors_key(tmp_path):
    _, _, rd = _run_fakes(tmp_path, "wmrl")
    assert "anchors_lost" not in json.loads(rd.ledger.read_text())

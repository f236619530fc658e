"""Experiment trackers (wmrl.runs.tracking): a tiny-model run with every tracker writes, in each tracker's own files
read back with the tracker's own reader, the metric names and values of metrics.jsonl and eval.jsonl, the resolved
config and the final summary; a run resumed from an earlier checkpoint than its trackers had reached holds each step
once; unknown trackers, missing packages and a tracker failing mid-run are clear; no tracker reaches the network.

One run serves the read-back tests (module fixture): grpo on the tiny model and two small real tasks, three steps,
evaluated at the start and the end; stopped after step 2, its step-2 checkpoint removed (as if killed after logging
step 2 but before its checkpoint was complete), then resumed: it replays steps 2 and 3."""
from __future__ import annotations

import json
import math
import shutil
import sqlite3
import struct
from pathlib import Path
from typing import Any

import pytest
import yaml

from wmrl.runs.rundir import RunDir, read_jsonl
from wmrl.runs.tracking import TrackerSet, TrackerUnavailable, TrackingConfig, check_trackers, open_trackers, \
    scalars, summary_scalars
from wmrl.training.config import ConfigError, load_config
from wmrl.training.run import resume_training, run_training

pytest.importorskip("wandb")
pytest.importorskip("trackio")
pytest.importorskip("mlflow")

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
ALL = ["tensorboard", "wandb", "trackio", "mlflow"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(small_suite, tmp_path_factory) -> Path:
    """The run described in the module docstring (its folder)."""
    run = tmp_path_factory.mktemp("trackers") / "grpo-trackers"
    cfg = load_config(TINY, [f"tasks.root={small_suite}", f"run_dir={run}", "method=grpo", "optim.steps=3",
                             "eval.at_start=true", f"trackers=[{', '.join(ALL)}]", "tracking.wandb.project=wmrl-test",
                             "tracking.mlflow.experiment=wmrl-test", "tracking.trackio.project=wmrl-test"])
    summary = run_training(cfg, stop_after_step=2)
    assert summary.status == "stopped" and summary.steps == 2
    rd = RunDir(run)
    shutil.rmtree(rd.checkpoints / "step_000002")  # checkpoints/latest still names it: the resume passes it over
    resume_training(run)
    return run


def _expected(run: Path) -> dict[int, dict[str, float]]:
    """What every tracker must hold: {step: {name: value}} from metrics.jsonl and eval.jsonl."""
    out: dict[int, dict[str, float]] = {}
    for r in read_jsonl(run / "metrics.jsonl"):
        out.setdefault(r["step"], {}).update(scalars(r))
    for r in read_jsonl(run / "eval.jsonl"):
        out.setdefault(r["step"], {}).update(scalars(r, prefix=f"eval_{r['split']}."))
    return out


# ------------------------------------------------------------------------------------------------ readers
def _tensorboard(run: Path) -> tuple[dict[int, dict[str, float]], dict[str, Any]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    hist: dict[int, dict[str, float]] = {}
    seen: dict[tuple[int, str], int] = {}
    for tag in acc.Tags()["scalars"]:
        for ev in acc.Scalars(tag):
            seen[(ev.step, tag)] = seen.get((ev.step, tag), 0) + 1
            hist.setdefault(ev.step, {})[tag] = ev.value
    assert max(seen.values()) == 1, "a (step, tag) written twice"
    text = {tag: acc.Tensors(tag)[-1].tensor_proto.string_val[0].decode() for tag in acc.Tags()["tensors"]}
    return hist, text


def _wandb_records(path: Path) -> list[Any]:
    """The records of a ``.wandb`` file (LevelDB-log framing: 32 KiB blocks, 7-byte chunk headers; each record a
    ``wandb_internal_pb2.Record``). wandb 0.31 no longer ships a Python reader of its own."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a .wandb file"
    pos, block, chunks, buf = 7, 32768, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:  # zero padding at the end of a block
            pos += left
            continue
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 1:  # full
            chunks.append(chunk)
        elif kind == 2:  # first
            buf = chunk
        elif kind == 3:  # middle
            buf += chunk
        elif kind == 4:  # last
            chunks.append(buf + chunk)
    out = []
    for c in chunks:
        r = pb.Record()
        r.ParseFromString(c)
        out.append(r)
    return out


def _item_key(item: Any) -> str:
    return item.key or "/".join(item.nested_key)


def _wandb(run: Path) -> tuple[list[dict[int, dict[str, float]]], dict[str, Any], dict[str, float], set[str]]:
    """Per offline segment (in order) its history, plus the config, the summary and the run ids."""
    segments, config, summary, ids = [], {}, {}, set()
    files = sorted((run / "wandb").glob("offline-run-*/run-*.wandb"), key=lambda p: p.parent.name)
    for f in files:
        hist: dict[int, dict[str, float]] = {}
        for r in _wandb_records(f):
            kind = r.WhichOneof("record_type")
            if kind == "run":
                ids.add(r.run.run_id)
                config.update({_item_key(i): json.loads(i.value_json) for i in r.run.config.update})
            elif kind == "config":
                config.update({_item_key(i): json.loads(i.value_json) for i in r.config.update})
            elif kind == "history":
                row = {_item_key(i): json.loads(i.value_json) for i in r.history.item}
                step = int(row.pop("_step"))
                hist.setdefault(step, {}).update({k: v for k, v in row.items() if not k.startswith("_")})
            elif kind == "summary":
                summary.update({_item_key(i): json.loads(i.value_json) for i in r.summary.update})
        segments.append(hist)
    return segments, config, summary, ids


def _trackio(run: Path) -> tuple[list[tuple[int, dict[str, float]]], dict[str, Any]]:
    with sqlite3.connect(run / "trackio" / "wmrl-test.db") as conn:
        rows = conn.execute("SELECT step, metrics FROM metrics WHERE run_name = ? ORDER BY id",
                            (run.name,)).fetchall()
        (config,), = conn.execute("SELECT config FROM configs WHERE run_name = ?", (run.name,)).fetchall()
    return [(s, json.loads(m)) for s, m in rows], json.loads(config)


def _mlflow(run: Path) -> tuple[dict[int, dict[str, float]], dict[str, str], dict[str, Any], Any]:
    from mlflow.tracking import MlflowClient

    state = json.loads((run / "trackers.json").read_text())["mlflow"]
    client = MlflowClient(tracking_uri=state["tracking_uri"])
    r = client.get_run(state["run_id"])
    hist: dict[int, dict[str, float]] = {}
    for key in r.data.metrics:
        points = client.get_metric_history(r.info.run_id, key)
        assert len({p.step for p in points}) == len(points), f"{key}: a step logged twice"
        for p in points:
            hist.setdefault(p.step, {})[key] = p.value
    dst = run.parent / "mlflow-artifacts"
    dst.mkdir(exist_ok=True)
    config = yaml.safe_load(Path(client.download_artifacts(r.info.run_id, "config.yaml", str(dst))).read_text())
    return hist, r.data.params, config, r


def _close(a: dict[str, float], b: dict[str, float], rel: float) -> None:
    assert set(a) == set(b), (sorted(set(a) - set(b))[:5], sorted(set(b) - set(a))[:5])
    for k in a:
        assert math.isclose(a[k], b[k], rel_tol=rel, abs_tol=1e-9), (k, a[k], b[k])


# ------------------------------------------------------------------------------------------------ tests
def test_the_run_is_a_plain_run_with_its_steps_once(run):
    m = read_jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in m] == [1, 2, 3]
    assert [(r["step"], r["split"]) for r in read_jsonl(run / "eval.jsonl")] == [(0, "train"), (3, "train")]
    assert "resumed from step_000001" in (run / "train.log").read_text()
    exp = _expected(run)
    assert {"loss", "wall_s.generate", "reward_true_mean", "cum_compute_cpu_s"} <= set(exp[1])
    assert {"eval_train.mean_percentile", "eval_train.valid_rate", "eval_train.medals.gold"} <= set(exp[3])


def test_tensorboard_has_the_same_scalars_each_step_once(run):
    hist, text = _tensorboard(run)
    summary = json.loads((run / "summary.json").read_text())
    final = {k: hist[3].pop(k) for k in list(hist[3]) if k.startswith("summary/")}
    for step, want in _expected(run).items():
        _close(hist[step], {k.replace(".", "/"): v for k, v in want.items()}, rel=1e-6)  # float32 events
    assert "eval_train/mean_percentile" in hist[0] and "wall_s/generate" in hist[1]
    assert math.isclose(final["summary/final_eval/train/mean_percentile"],
                        summary["final_eval"]["train"]["mean_percentile"], rel_tol=1e-6)
    assert "method: grpo" in text["config/text_summary"]


def test_wandb_offline_run_has_the_metrics_config_and_summary(run):
    segments, config, summary, ids = _wandb(run)
    assert len(ids) == 1 and ids == {json.loads((run / "trackers.json").read_text())["wandb"]["id"]}
    assert len(segments) == 2  # the first process and the resumed one: one run id, two offline segments
    first, resumed = segments
    assert sorted(first) == [0, 1, 2] and sorted(resumed) == [2, 3]  # the resumed one replays from step 2
    exp = _expected(run)
    merged = {**first, **resumed}  # what the resumed process logged is the run's record from step 2 on
    for step, want in exp.items():
        _close(merged[step], want, rel=1e-12)
    assert config["method"] == "grpo" and config["optim"]["steps"] == 3 and config["trackers"] == ALL
    s = json.loads((run / "summary.json").read_text())
    assert summary["final_eval.train.mean_percentile"] == s["final_eval"]["train"]["mean_percentile"]
    assert summary["steps"] == 3


def test_trackio_store_has_each_step_once_with_the_same_values(run):
    rows, config = _trackio(run)
    steps = [s for s, _ in rows]
    exp = _expected(run)
    summary_rows = [m for s, m in rows if any(k.startswith("summary.") for k in m)]
    assert len(summary_rows) == 1 and len(set(steps)) == len(exp) and sorted(set(steps)) == [0, 1, 2, 3]
    hist: dict[int, dict[str, float]] = {}
    for s, m in rows:
        hist.setdefault(s, {}).update({k: v for k, v in m.items() if not k.startswith(("summary.", "_"))})
    for step, want in exp.items():
        _close(hist[step], want, rel=1e-12)
    assert sum(1 for s, m in rows if s == 2 and "loss" in m) == 1  # the replayed step once, not twice
    s = json.loads((run / "summary.json").read_text())
    assert summary_rows[0]["summary.final_eval.train.mean_percentile"] == s["final_eval"]["train"]["mean_percentile"]
    assert config["method"] == "grpo" and config["trackers"] == ALL


def test_mlflow_run_has_each_step_once_params_config_and_summary(run):
    hist, params, config, r = _mlflow(run)
    final = {k: hist[3].pop(k) for k in list(hist[3]) if k.startswith("summary.")}
    for step, want in _expected(run).items():
        _close(hist[step], want, rel=1e-12)
    assert r.info.status == "FINISHED" and r.info.run_name == run.name
    assert params["method"] == "grpo" and params["optim.lr"] == "0.001" and params["trackers"] == f"[{', '.join(ALL)}]"
    assert config["optim"]["steps"] == 3
    s = json.loads((run / "summary.json").read_text())
    assert final["summary.final_eval.train.mean_percentile"] == s["final_eval"]["train"]["mean_percentile"]
    assert final["summary.steps"] == 3


def test_an_unknown_tracker_is_refused_at_load_with_the_choices():
    with pytest.raises(ConfigError, match=r"'wandbb' is not a tracker \(did you mean 'wandb'\?\); choose from "
                                          r"tensorboard, wandb, trackio, mlflow"):
        load_config(TINY, ["trackers=[tensorboard, wandbb]"])
    with pytest.raises(ConfigError, match="'mlflow' is listed twice"):
        load_config(TINY, ["trackers=mlflow,mlflow"])
    assert load_config(TINY, ["trackers=[]"]).trackers == []
    assert load_config(TINY).trackers == ["tensorboard"]  # the default


def test_a_missing_package_is_refused_before_the_run_directory_exists(tmp_path, monkeypatch, small_suite):
    import wmrl.runs.tracking as tracking

    real = tracking.find_spec
    monkeypatch.setattr(tracking, "find_spec", lambda name: None if name == "mlflow" else real(name))
    run = tmp_path / "never"
    cfg = load_config(TINY, [f"tasks.root={small_suite}", f"run_dir={run}", "trackers=[tensorboard, mlflow]"])
    with pytest.raises(TrackerUnavailable, match=r"trackers: 'mlflow' needs the mlflow package, which is not "
                                                 r"installed: pip install 'wmrl\[trackers\]' \(or pip install "
                                                 r"'mlflow-skinny==3.18.0'\), or remove 'mlflow' from trackers"):
        run_training(cfg)
    assert not run.exists()
    check_trackers(["tensorboard", "wandb"])  # installed: no error


def test_trackio_refuses_to_leave_the_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACKIO_SPACE_ID", "someone/space")
    with pytest.raises(TrackerUnavailable, match=r"\$TRACKIO_SPACE_ID is set"):
        open_trackers(["trackio"], TrackingConfig(), tmp_path, config={})


class _Broken:
    name = "broken"

    def __init__(self):
        self.closed = None

    def log_config(self, config):
        pass

    def log_metrics(self, step, metrics):
        raise OSError("disk full")

    def log_summary(self, step, summary):
        pass

    def close(self, status):
        self.closed = status


class _Recorder(_Broken):
    name = "recorder"

    def __init__(self):
        super().__init__()
        self.rows = []

    def log_metrics(self, step, metrics):
        self.rows.append((step, metrics))


def test_a_failing_tracker_is_dropped_with_a_warning_and_the_others_go_on():
    broken, rec, said = _Broken(), _Recorder(), []
    ts = TrackerSet([broken, rec], on_error=said.append)
    ts.log_metrics(1, {"step": 1, "time": 5.0, "loss": 0.5, "update_skipped": True, "method": "wmrl", "kl": None,
                       "alpha": float("nan")})
    ts.log_eval(1, "heldout", {"step": 1, "mean_percentile": 0.25, "medals": {"gold": 1}, "sample_outcomes": {}})
    assert ts.names == ["recorder"] and broken.closed == "failed"
    assert said == ["tracker broken failed in log_metrics (OSError: disk full); it is dropped for the rest of the run "
                    "(metrics.jsonl and eval.jsonl go on)"]
    assert rec.rows == [(1, {"loss": 0.5}),
                        (1, {"eval_heldout.mean_percentile": 0.25, "eval_heldout.medals.gold": 1.0})]
    assert summary_scalars({"steps": 3, "ledger": {"x": 1}, "last_metrics": {"loss": 1}, "final_eval": {
        "train": {"mean_percentile": 0.5, "per_task": {"t": {"n": 2}}}}}) == {
        "steps": 3.0, "final_eval.train.mean_percentile": 0.5, "final_eval.train.per_task.t.n": 2.0}


def test_the_embodied_trainer_logs_the_same_stream(tmp_path, monkeypatch):
    pytest.importorskip("metaworld")
    from wmrl.embodied.config import load_config as load_embodied
    from wmrl.embodied.trainer import run_embodied

    monkeypatch.setenv("WMRL_HOME", str(tmp_path / "home"))  # the SFT artefacts of the tiny preset: seconds
    run = tmp_path / "embodied"
    cfg = load_embodied(preset="tiny", overrides=[f"run_dir={run}", "optim.steps=2", "eval.at_start=false",
                                                  "trackers=[tensorboard, mlflow]"])
    summary = run_embodied(cfg, progress=False)
    exp = _expected(run)
    assert sorted(exp) == [1, 2] and {"success_anchor_mean", "policy_std", "eval_train.success_rate"} <= {
        k for v in exp.values() for k in v}
    tb, text = _tensorboard(run)
    ml, params, config, r = _mlflow(run)
    for step, want in exp.items():
        _close({k: v for k, v in tb[step].items() if not k.startswith("summary/")},
               {k.replace(".", "/"): v for k, v in want.items()}, rel=1e-6)
        _close({k: v for k, v in ml[step].items() if not k.startswith("summary.")}, want, rel=1e-12)
    assert ml[2]["summary.final.train"] == summary["final"]["train"] and r.info.status == "FINISHED"
    assert params["method"] == "wmrl" and config["suite"]["tasks"] == ["reach-v3"]
    assert "method: wmrl" in text["config/text_summary"]


def test_the_cli_says_what_is_wrong_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from wmrl.cli import app

    res = CliRunner().invoke(app, ["train", "--config", str(TINY), "--set", f"run_dir={tmp_path / 'r'}", "--set",
                                   "trackers=[tensorboard, wandbb]"])
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert "'wandbb' is not a tracker (did you mean 'wandb'?)" in " ".join(res.output.split())
    assert not (tmp_path / "r").exists()


_NET: list[Any] = []  # (event, args) of network calls while a test listens; None at the head = not listening


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _NET and _NET[0] is not None and event in ("socket.connect", "socket.getaddrinfo", "socket.gethostbyname"):
        where = args[1] if event == "socket.connect" else args[0]
        if not isinstance(where, (str, bytes)) or event != "socket.connect":  # an AF_UNIX path is local
            host = where[0] if isinstance(where, tuple) else where
            if host not in ("127.0.0.1", "::1", "localhost", b"localhost"):
                _NET.append((event, where))


def test_no_tracker_reaches_the_network(tmp_path):
    """Every tracker opened, logged, closed and resumed with Python's network calls audited: no lookup, no connect
    beyond local sockets. (wandb's own wandb-core process is not audited here: docs/tracking.md, "Measured".)"""
    import sys

    if not _NET:
        sys.addaudithook(_audit)  # audit hooks cannot be removed: it listens only while _NET[0] is not None
        _NET.append(None)
    _NET[0] = True
    try:
        for start in (0, 1):
            ts = open_trackers(ALL, TrackingConfig(), tmp_path / "run", config={"optim": {"steps": 2}},
                               start_step=start)
            ts.log_metrics(start + 1, {"step": start + 1, "loss": 0.5})
            ts.log_summary(start + 1, {"steps": start + 1})
            ts.close("finished")
    finally:
        _NET[0] = None
    assert _NET[1:] == []
    del _NET[1:]

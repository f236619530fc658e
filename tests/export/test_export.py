"""`wmrl export` on run directories and a bench folder written by the real trainer (the CI miniature bench: tiny
model, two steps, grpo and wmrl; a two-turn run), loaded back with `datasets` and pandas, and its refusals."""
from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from wmrl.cli import app
from wmrl.export import METADATA_KEY, RUNS_METADATA_KEY, SCHEMA_VERSION, arrow_schema, column_names, schema_markdown

ROOT = Path(__file__).resolve().parents[2]
KEYS = ["step", "group", "sample", "task_id", "reward_true", "reward_wm", "reward_wm_calibrated", "reward_used",
        "advantage", "weight", "dropped", "status", "status_wm", "failure_prob_wm", "reward_wm_std",
        "completion_tokens", "program_sha256", "prompt_sha256", "n_turns", "final_turn", "submitted"]


def _export(*args: str) -> str:
    res = CliRunner().invoke(app, ["export", *args])
    assert res.exit_code == 0, res.output + repr(res.exception)
    return res.output


def _refused(*args: str) -> str:
    res = CliRunner().invoke(app, ["export", *args])
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)  # no traceback
    return res.output


def _lines(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines() if x.strip()]


def _anchor_rows(run: Path) -> dict[str, dict]:
    con = sqlite3.connect(run / "executions.sqlite")
    con.row_factory = sqlite3.Row
    rows = [dict(r) for r in con.execute("SELECT * FROM executions")]
    con.close()
    return {r["request_id"]: r for r in rows if json.loads(r["meta"]).get("stream") == "anchor"}


def _same(a, b) -> bool:
    if a is None or (isinstance(a, float) and pd.isna(a)):
        return b is None
    if isinstance(b, float):
        return a == pytest.approx(b, rel=1e-12, abs=0)
    return a == b


def _check_rows_match(run: Path, df: pd.DataFrame) -> int:
    """Every row equals its samples.jsonl line (key columns) and its execution; returns the executed rows."""
    lines = _lines(run)
    assert len(df) == len(lines)
    anchors = _anchor_rows(run)
    executed = 0
    for rec, row in zip(lines, df.to_dict("records")):
        for k in KEYS:
            assert _same(row[k], rec.get(k)), (k, row[k], rec.get(k))
        assert row["stream"] == ("recalled" if rec.get("recalled") else rec["stream"])
        # every row has its prompt's text (samples.jsonl writes it on a group's first line of a step)
        assert hashlib.sha256(row["prompt"].encode()).hexdigest() == rec["prompt_sha256"]
        assert rec["prompt"] in (None, row["prompt"])
        assert row["schema_version"] == SCHEMA_VERSION
        if rec["stream"] != "anchor":
            assert not row["executed"] and pd.isna(row["program"]) and pd.isna(row["wall_s"])
            continue
        executed += 1
        suffix = f"-t{rec['final_turn']}" if "turns" in rec else ""
        ex = anchors[f"s{rec['step']}-g{rec['group']}-i{rec['sample']}{suffix}"]
        assert row["request_id"] == ex["request_id"] and row["program"] == ex["program"]
        assert hashlib.sha256(row["program"].encode()).hexdigest() == row["program_sha256"] == ex["program_sha256"]
        assert row["score"] == ex["score"] and row["status"] == ex["status"]
        assert row["completion"] == json.loads(ex["meta"])["completion"]
        if "turns" not in rec:
            assert row["wall_s"] == ex["wall_s"] and row["cpu_s"] == ex["cpu_s"]
            assert row["peak_rss_bytes"] == ex["peak_rss_bytes"] > 0
    return executed


@pytest.fixture(scope="module")
def bench():
    from tests.support.real_runs import mini_bench

    out, _ = mini_bench()
    return out


@pytest.mark.slow
def test_real_run_exports_one_row_per_sample(bench, tmp_path):
    from datasets import load_dataset

    run = bench / "wmrl" / "seed0"
    out = tmp_path / "wmrl.parquet"
    text = _export(str(run), "--out", str(out))
    assert f"to {out}" in text and "schema v1" in text
    df = pd.read_parquet(out)
    assert _check_rows_match(run, df) == json.loads((run / "ledger.json").read_text())["executions"]["anchor"]["count"]
    assert set(df["stream"]) <= {"anchor", "wm", "recalled"} and (df["stream"] == "anchor").any()
    assert df["method"].unique().tolist() == ["wmrl"] and df["seed"].unique().tolist() == [0]
    assert df["run_id"].unique().tolist() == ["seed0"]
    assert df["status_wm"].notna().all() and df["prompt"].str.startswith("Task:").all()
    ds = load_dataset("parquet", data_files=str(out), split="train", cache_dir=str(tmp_path / "hf"))
    assert ds.num_rows == len(df) and ds.column_names == column_names()
    assert ds[0]["reward_used"] == pytest.approx(df["reward_used"][0])
    schema = pq.read_schema(out)
    assert schema.remove_metadata().equals(arrow_schema())
    assert json.loads(schema.metadata[METADATA_KEY])["schema_version"] == SCHEMA_VERSION
    tail = json.loads(pq.read_metadata(out).metadata[RUNS_METADATA_KEY])
    assert tail["rows"] == len(df) and tail["runs"][0]["skipped_lines"] == []


@pytest.mark.slow
def test_bench_folder_exports_every_run_with_method_and_seed(bench):
    text = _export(str(bench))  # default: BENCH/samples.parquet
    df = pd.read_parquet(bench / "samples.parquet")
    assert "samples of 2 runs" in text
    counts = df.groupby(["method", "seed"]).size().to_dict()
    assert counts == {(m, 0): len(_lines(bench / m / "seed0")) for m in ("grpo", "wmrl")}
    assert sorted(df["run_id"].unique()) == ["grpo/seed0", "wmrl/seed0"]
    grpo = df[df["method"] == "grpo"]
    assert (grpo["stream"] == "anchor").all() and grpo["reward_wm"].isna().all() and grpo["reward_true"].notna().any()
    assert pq.read_schema(bench / "samples.parquet").remove_metadata().equals(arrow_schema())  # typed though all null
    _check_rows_match(bench / "grpo" / "seed0", grpo.reset_index(drop=True))


@pytest.mark.slow
def test_run_logged_before_the_sample_keys_joins_on_its_place(bench, tmp_path):
    """A run directory written before samples.jsonl had sample, prompt and program_sha256: the rows join their
    executions on the line's place in its step, and take the prompt from the execution log."""
    run = tmp_path / "old"
    shutil.copytree(bench / "wmrl" / "seed0", run, ignore=shutil.ignore_patterns("checkpoints", "world_model", "tb"))
    new = _lines(run)
    old = [{k: v for k, v in r.items() if k not in ("sample", "prompt", "prompt_sha256", "program_sha256", "recalled")}
           for r in new]
    (run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    _export(str(run))
    df = pd.read_parquet(run / "samples.parquet")
    assert df["sample"].tolist() == [r["sample"] for r in new]
    anchor = df["stream"] == "anchor"
    assert df.loc[anchor, "wall_s"].notna().all() and df.loc[anchor, "prompt"].notna().all()
    assert df.loc[anchor, "program_sha256"].tolist() == [r["program_sha256"] for r in new if r["stream"] == "anchor"]
    assert df.loc[~anchor, "prompt"].isna().all() and df["prompt_sha256"].notna().sum() == anchor.sum()


@pytest.mark.slow
def test_multiturn_run_exports_turns_and_observations(small_suite, tmp_path):
    from wmrl.training.config import load_config
    from wmrl.training.run import run_training

    run = tmp_path / "mt"
    run_training(load_config(ROOT / "configs" / "tiny.yaml", [
        f"tasks.root={small_suite}", f"run_dir={run}", "optim.steps=1", "episode.max_turns=2",
        "episode.validation_fraction=0.25", "eval.at_end=false"]))
    _export(str(run))
    df = pd.read_parquet(run / "samples.parquet")
    _check_rows_match(run, df)
    anchors = _anchor_rows(run)
    n_turns = 0
    for rec, row in zip(_lines(run), df.to_dict("records")):
        assert [t["turn"] for t in row["turns"]] == [t["turn"] for t in rec["turns"]]
        for t_rec, t_row in zip(rec["turns"], row["turns"]):
            n_turns += 1
            for k in ("stream", "executed", "status", "final", "completion", "program_sha256"):
                assert t_row[k] == t_rec[k]
            for k in ("observation", "observation_wm"):
                assert (t_row[k] is None) == (t_rec[k] is None)
                if t_rec[k] is not None:
                    assert {a: t_row[k][a] for a in t_rec[k]} == t_rec[k]
            if t_rec["executed"]:
                ex = anchors[t_row["request_id"]]
                assert t_row["wall_s"] == ex["wall_s"] and t_row["program_sha256"] == ex["program_sha256"]
        done = [t for t in row["turns"] if t["executed"]]
        if done:
            assert row["wall_s"] == pytest.approx(sum(t["wall_s"] for t in done))
            assert row["peak_rss_bytes"] == max(t["peak_rss_bytes"] for t in done)
    assert n_turns > len(df)  # some episode has two turns


def test_late_anchors_join_their_executions_at_their_origin_step(tmp_path, monkeypatch):
    """Asynchronous anchors (fake parts, executions finishing 0.3 s after submission, each appended to the run's
    execution log as the executor pool does): every anchor_late row is joined with the execution of its origin
    step, group and sample."""
    import threading
    from concurrent.futures import Future

    from tests.support.fakes import FakeExecutor
    from wmrl.execution.log import ExecutionLog
    from wmrl.training.run import run_training

    monkeypatch.syspath_prepend(str(ROOT / "tests" / "training"))
    from test_loop_fakes import cfg_for, comps

    class LoggedSlowExecutor(FakeExecutor):
        def __init__(self, log_path: Path):
            super().__init__()
            self.log_path = log_path

        def submit(self, req):
            f: Future = Future()
            f.set_running_or_notify_cancel()

            def done():
                res = self._run(req)
                with ExecutionLog(self.log_path) as lg:
                    lg.append(req, res)
                f.set_result(res)
            threading.Timer(0.3, done).start()
            return f

    c = comps("wmrl")
    cfg = cfg_for(tmp_path, "wmrl", 8, "eval.every_k=0", "eval.at_end=false", "wmrl.fusion.min_pairs=2",
                  "wmrl.asynchronous.staleness=20")
    c.executor = LoggedSlowExecutor(Path(cfg.run_dir) / "executions.sqlite")
    predict = c.world_model.predict
    c.world_model.predict = lambda p, q: (__import__("time").sleep(0.03), predict(p, q))[1]
    run_training(cfg, components=c)
    run = Path(cfg.run_dir)
    _export(str(run))
    df = pd.read_parquet(run / "samples.parquet")
    lines = _lines(run)
    late = df[df["stream"] == "anchor_late"]
    assert len(df) == len(lines) and len(late) > 0
    assert (late["staleness"] == late["step"] - late["origin_step"]).all() and (late["staleness"] >= 1).all()
    anchors = _anchor_rows(run)
    for row in late.to_dict("records"):
        ex = anchors[f"s{row['origin_step']}-g{row['group']}-i{row['sample']}"]
        assert row["request_id"] == ex["request_id"] and row["program_sha256"] == ex["program_sha256"]
        assert row["wall_s"] == ex["wall_s"] and row["reward_true"] == ex["reward"] and row["executed"]
    assert [r["sample"] for r in lines] == df["sample"].tolist()


# ----------------------------------------------------------------------------------------- bad input (fast)
def _tiny_run(root: Path, n: int = 4, seed: int = 0) -> Path:
    """A run directory with config.yaml and n samples.jsonl lines (world-model samples; no execution log)."""
    from tests.support.fake_run import write_fake_run

    write_fake_run(root, steps=1, seed=seed)
    lines = [{"step": 1, "group": i // 2, "sample": i, "task_id": "t", "stream": "wm", "recalled": i == 1,
              "reward_true": None, "status": None, "error": None, "reward_wm": 0.5, "reward_wm_calibrated": 0.4,
              "reward_used": 0.4, "advantage": 0.0, "weight": 0.25, "dropped": False, "completion_tokens": 3,
              "program_sha256": "ab" * 32, "prompt": "p", "completion": "c"} for i in range(n)]
    (root / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return root


def test_a_folder_that_is_not_a_run_or_bench_is_refused(tmp_path):
    assert "neither a wmrl run directory" in _refused(str(tmp_path))
    assert "no such file or directory" in _refused(str(tmp_path / "missing"))
    (tmp_path / "x.txt").write_text("x")
    assert "not a folder" in _refused(str(tmp_path / "x.txt"))
    assert list(tmp_path.iterdir()) == [tmp_path / "x.txt"]  # nothing written


def test_a_run_with_no_samples_yet_is_refused(tmp_path):
    from tests.support.fake_run import write_fake_run

    run = write_fake_run(tmp_path / "run", steps=1)
    assert "no samples yet" in _refused(str(run))
    (run / "samples.jsonl").write_text("")
    assert "no samples yet" in _refused(str(run))
    assert not (run / "samples.parquet").exists()


def test_a_cut_last_line_is_skipped_and_said(tmp_path):
    run = _tiny_run(tmp_path / "run")
    text = (run / "samples.jsonl").read_text()
    (run / "samples.jsonl").write_text(text[: len(text) - 40])  # killed mid-write
    out = _export(str(run))
    assert "samples.jsonl:4: the last line is cut short" in out
    df = pd.read_parquet(run / "samples.parquet")
    assert df["sample"].tolist() == [0, 1, 2]
    tail = json.loads(pq.read_metadata(run / "samples.parquet").metadata[RUNS_METADATA_KEY])
    assert len(tail["runs"][0]["skipped_lines"]) == 1 and tail["rows"] == 3


def test_a_damaged_line_is_skipped_counted_and_named(tmp_path):
    run = _tiny_run(tmp_path / "run")
    lines = (run / "samples.jsonl").read_text().splitlines()
    lines[1] = lines[1][:30]
    (run / "samples.jsonl").write_text("\n".join(lines) + "\n")
    out = _export(str(run))
    assert "skipped 1 bad line; the first: samples.jsonl:2: not valid JSON" in out
    assert pd.read_parquet(run / "samples.parquet")["sample"].tolist() == [0, 2, 3]
    assert not [p for p in run.iterdir() if ".tmp-" in p.name]  # no temporary file left


def test_lines_that_are_not_samples_are_skipped_and_a_damaged_execution_log_is_refused(tmp_path):
    run = _tiny_run(tmp_path / "run")
    good = (run / "samples.jsonl").read_text()
    (run / "samples.jsonl").write_text(good + "[1, 2]\n" + json.dumps({"group": 0}) + "\n")
    out = _export(str(run))
    assert "skipped 2 bad lines; the first: samples.jsonl:5: a JSON list, not a sample record" in out
    tail = json.loads(pq.read_metadata(run / "samples.parquet").metadata[RUNS_METADATA_KEY])
    assert tail["rows"] == 4 and tail["runs"][0]["bad_lines"] == 2
    (run / "samples.jsonl").write_text(json.dumps({"group": 0}) + "\n")
    assert "none of its lines is a sample record" in _refused(str(run))
    (run / "samples.parquet").unlink()
    (run / "samples.jsonl").write_text(good)
    (run / "executions.sqlite").write_bytes(b"not a database" * 100)
    assert "not a readable execution log" in _refused(str(run))
    assert not (run / "samples.parquet").exists()


def test_out_must_be_parquet_or_a_folder(tmp_path):
    run = _tiny_run(tmp_path / "run")
    assert "the export is a Parquet file" in _refused(str(run), "--out", str(tmp_path / "x.csv"))
    _export(str(run), "--out", str(tmp_path / "data"))
    df = pd.read_parquet(tmp_path / "data" / "samples.parquet")
    assert df["stream"].tolist() == ["wm", "recalled", "wm", "wm"]  # a recalled world-model sample is its own stream
    assert not df["executed"].any() and df["program"].isna().all() and df["completion_truncated"].eq(False).all()


def test_a_bench_run_without_samples_is_skipped_and_named(tmp_path):
    from tests.support.fake_run import write_fake_run

    _tiny_run(tmp_path / "b" / "wmrl" / "seed0")
    _tiny_run(tmp_path / "b" / "wmrl" / "seed1", n=2, seed=1)
    write_fake_run(tmp_path / "b" / "grpo" / "seed0", method="grpo", steps=1)  # started, no step done
    out = _export(str(tmp_path / "b"))
    assert "skipped grpo/seed0" in out and "no samples yet" in out and "samples of 2 runs" in out
    df = pd.read_parquet(tmp_path / "b" / "samples.parquet")
    assert df.groupby(["run_id", "seed"]).size().to_dict() == {("wmrl/seed0", 0): 4, ("wmrl/seed1", 1): 2}
    shutil.rmtree(tmp_path / "b" / "wmrl")
    assert "no run of this bench has samples yet" in _refused(str(tmp_path / "b"))


def test_the_docs_table_is_the_schema():
    assert schema_markdown() in (ROOT / "docs" / "export.md").read_text()
    assert len(column_names()) == len(set(column_names()))

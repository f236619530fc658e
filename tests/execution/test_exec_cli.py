"""``wmrl exec`` and ``wmrl sandbox-bench`` (typer runner, the tiny task in the folder layout of the suite)."""
from __future__ import annotations

import json
import shutil

import pytest
import typer
import yaml
from typer.testing import CliRunner

from wmrl.execution import cli as exec_cli

from conftest import GOOD_PROGRAM, make_tiny_task, require_bwrap


@pytest.fixture(scope="module")
def app():
    a = typer.Typer()
    exec_cli.register(a)
    return a


@pytest.fixture(scope="module")
def suite_dir(tmp_path_factory):
    """A one-task suite in wmrl's folder layout (task.yaml, public/, private/answers.csv)."""
    root = tmp_path_factory.mktemp("suite")
    t = make_tiny_task(root / "tiny-binary")
    shutil.move(str(t.answers_path), str(t.root / "private" / "answers.csv"))
    (t.root / "task.yaml").write_text(yaml.safe_dump({
        "id": "tiny-binary", "type": "binary", "metric": "roc_auc", "target": "y", "id_column": "id",
        "classes": ["0", "1"], "time_limit_s": 30, "split": "train", "leaderboards": ["leaderboard.csv"]}))
    (t.root / "description.md").write_text("tiny")
    return root


def test_exec_prints_outcome_and_json(app, suite_dir, tmp_path):
    require_bwrap()
    prog = tmp_path / "good.py"
    prog.write_text(GOOD_PROGRAM)
    r = CliRunner().invoke(app, ["exec", "tiny-binary", str(prog), "--root", str(suite_dir), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["status"] == "ok" and out["score"] == pytest.approx(1.0) and out["sandbox"] == "bwrap"
    r = CliRunner().invoke(app, ["exec", "tiny-binary", str(prog), "--tasks-dir", str(suite_dir),
                                 "--log", str(tmp_path / "l.sqlite")])
    assert r.exit_code == 0 and "ok" in r.stdout and "CPU-s" in r.stdout


def test_exec_program_failure_is_exit_zero(app, suite_dir, tmp_path):
    require_bwrap()
    prog = tmp_path / "bad.py"
    prog.write_text("raise SystemExit(3)\n")
    r = CliRunner().invoke(app, ["exec", "tiny-binary", str(prog), "--tasks-dir", str(suite_dir), "--json"])
    assert r.exit_code == 0
    assert json.loads(r.stdout.strip().splitlines()[-1])["status"] == "runtime_error"


def test_exec_tool_failures_are_nonzero(app, suite_dir, tmp_path):
    prog = tmp_path / "p.py"
    prog.write_text("print(1)\n")
    r = CliRunner().invoke(app, ["exec", "no-such-task", str(prog), "--tasks-dir", str(suite_dir)])
    assert r.exit_code == 1 and "unknown task" in r.output
    r = CliRunner().invoke(app, ["exec", "tiny-binary", str(tmp_path / "missing.py"), "--tasks-dir", str(suite_dir)])
    assert r.exit_code == 1 and "cannot read" in r.output


def test_exec_bad_input_is_a_clear_error_without_traceback(app, suite_dir, tmp_path):
    """QA: each of these was a Python traceback (or an infra_error) instead of a one-line error."""
    prog = tmp_path / "p.py"
    prog.write_text("print(1)\n")
    notdb = tmp_path / "notdb.sqlite"
    notdb.write_text("junk")
    latin1 = tmp_path / "latin1.py"
    latin1.write_bytes(b"# caf\xe9\nprint(1)\n")
    cases = [
        (["tiny-binary", str(prog), "--time-limit", "inf"], "at most"),
        (["tiny-binary", str(prog), "--time-limit", "1e308"], "at most"),
        (["tiny-binary", str(prog), "--memory-mb", "99999999999999"], "memory_bytes"),
        (["tiny-binary", str(prog), "--log", str(tmp_path)], "cannot open the execution log"),
        (["tiny-binary", str(prog), "--log", str(notdb)], "cannot open the execution log"),
        (["tiny-binary", str(latin1)], "not UTF-8"),
        (["tiny-binary", str(tmp_path)], "cannot read the program"),
        ([str(tmp_path), str(prog)], "not a task folder"),
    ]
    for args, msg in cases:
        r = CliRunner().invoke(app, ["exec", *args, "--tasks-dir", str(suite_dir)])
        assert r.exit_code == 1 and msg in r.output, (args, r.output)
        assert r.exception is None or isinstance(r.exception, SystemExit), (args, r.exception)
    import os
    fifo = tmp_path / "fifo.py"
    os.mkfifo(fifo)  # reading it would block forever
    for path in (fifo, "/dev/zero"):  # /dev/zero would fill memory
        r = CliRunner().invoke(app, ["exec", "tiny-binary", str(path), "--tasks-dir", str(suite_dir)])
        assert r.exit_code == 1 and "not a regular file" in r.output, r.output
    assert notdb.read_text() == "junk"  # left alone
    r = CliRunner().invoke(app, ["exec", "tiny-binary", str(prog), "--tasks-dir", str(tmp_path / "missing")])
    assert r.exit_code == 1 and "--root" in r.output and "not a folder" in r.output


def test_sandbox_bench_overhead_only(app):
    require_bwrap()
    r = CliRunner().invoke(app, ["sandbox-bench", "--repeats", "2", "--skip-pool", "--json"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert set(report["overhead"]) >= {"plain", "rlimit", "bwrap", "bwrap_minus_plain_median_s"}
    assert report["overhead"]["bwrap"]["n"] == 2


def test_sandbox_bench_bad_flags_fail_fast(app, tmp_path):
    """QA: --concurrency 0 was a ValueError traceback after the overhead runs; a bad --task/--tasks-dir
    was reported only after them; --solutions 0 printed an empty table."""
    for args, msg in ([["--concurrency", "0"], "--concurrency"], [["--concurrency", ","], "--concurrency"],
                      [["--solutions", "0"], "--solutions"],
                      [["--tasks-dir", str(tmp_path / "missing")], "not a folder"]):
        r = CliRunner().invoke(app, ["sandbox-bench", "--repeats", "1", *args])
        assert r.exit_code == 1 and msg in r.output, (args, r.output)
        assert "sandbox overhead" not in r.output  # nothing was measured

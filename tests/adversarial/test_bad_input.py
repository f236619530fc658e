"""Bad input ends in one line, never a traceback: configs and CLI values out of range, YAML that expands without
bound, an empty config, a ``run_dir`` or ``--log`` of the wrong kind, and hostile run folders given to ``wmrl
export`` (each bad record skipped, counted and the first named, in no more memory than the file).

Commands run through typer's CliRunner (as tests/training and tests/export do); those that could take the machine's
memory before they were bounded run in a subprocess whose address space is capped at 1 GiB above what its imports
took, so a regression fails with a MemoryError instead of swapping.
"""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from wmrl.cli import app
from wmrl.export import RUNS_METADATA_KEY

ROOT = Path(__file__).resolve().parents[2]

#: A YAML value of 9 levels of 9 aliases each: 9**9 (387 million) leaves once expanded, 300 bytes as text.
BOMB = "[" + ", ".join(['&a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]'] +
                       [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]) + "]"

#: Runs the wmrl CLI with argv[1:] after importing what the commands import, its address space capped at 1 GiB
#: above that; a training run that would start instead exits 1.
LIMITED = """
import resource, sys
import wmrl.cli, wmrl.training.run, wmrl.export.dataset, pyarrow.parquet
wmrl.training.run.run_training = lambda *a, **k: sys.exit("a run started")
size = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmSize")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + 2**30, size + 2**30))
sys.argv = ["wmrl", *sys.argv[1:]]
wmrl.cli.app()
"""


def _one_line(res) -> str:
    """The refusal of a CliRunner result: exit 2, no exception but the exit, one line of output."""
    assert res.exit_code == 2, (res.exit_code, res.output, repr(res.exception))
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1, res.output
    return lines[0]


def _cli(*args: str) -> str:
    return _one_line(CliRunner().invoke(app, list(args)))


@pytest.fixture
def no_run(monkeypatch, tmp_path):
    """A config refused before the run starts: a run that starts (the config accepted) fails the test at once
    instead of loading the model; the working folder is ``tmp_path`` (a default run_dir lands there)."""
    import wmrl.training.run as run_mod

    def started(*_a, **_k):
        raise AssertionError("the config was accepted and a run started")

    monkeypatch.setattr(run_mod, "run_training", started)
    monkeypatch.chdir(tmp_path)


def _cli_limited(*args: str, cwd: Path) -> str:
    r = subprocess.run([sys.executable, "-c", LIMITED, *args], capture_output=True, text=True, cwd=cwd,
                       env=dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="300",
                                # Arrow's own allocator reserves address space it may never use: plain malloc
                                ARROW_DEFAULT_MEMORY_POOL="system"), timeout=600)
    assert r.returncode == 2, (r.returncode, r.stderr[-3000:])
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1, r.stdout + r.stderr[-3000:]
    return lines[0]


# ------------------------------------------------------------------------------------------------ configs
def test_a_seed_beyond_what_numpy_and_torch_take_is_refused(tmp_path, no_run):
    run = tmp_path / "run"
    line = _cli("train", "--set", "seed=18446744073709551616", "--set", f"run_dir={run}")
    assert "seed" in line and "18446744073709551616" in line and "4294967295" in line, line
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"seed: 18446744073709551616\nrun_dir: {run}\n")
    assert "seed" in _cli("train", "--config", str(cfg))
    assert not run.exists()


def test_a_run_dir_that_names_a_file_is_refused_by_name(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("the user's file")
    line = _cli("train", "--set", f"run_dir={path}", "--set", "optim.steps=1")
    assert f"run_dir {path} is a file, not a folder" in line, line
    assert path.read_text() == "the user's file" and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_token_count_beyond_the_models_context_is_refused(tmp_path, no_run):
    run = tmp_path / "run"
    line = _cli("train", "--set", "model.name=tiny", "--set", "rollout.max_new_tokens=1.0e+12", "--set",
                f"run_dir={run}")
    assert "rollout.max_new_tokens" in line and "2048" in line, line
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"rollout:\n  max_new_tokens: 1000000000000\nrun_dir: {run}\n")  # the default model, 8192
    line = _cli("train", "--config", str(cfg))
    assert "rollout.max_new_tokens" in line and "8192" in line, line
    line = _cli("train", "--set", "rollout.max_new_tokens=96.5", "--set", f"run_dir={run}")
    assert "rollout.max_new_tokens" in line and "integer" in line, line
    assert not run.exists()


def test_a_yaml_alias_bomb_in_a_config_is_refused_in_bounded_memory(tmp_path):
    cfg = tmp_path / "bomb.yaml"
    cfg.write_text(f"name: {BOMB}\nrun_dir: {tmp_path / 'run'}\n")
    line = _cli_limited("train", "--config", str(cfg), cwd=tmp_path)
    assert str(cfg) in line and "alias" in line, line
    assert not (tmp_path / "run").exists()


def test_an_empty_config_file_is_refused_with_what_to_put_in_it(tmp_path, no_run):
    for text in ("", "# nothing yet\n"):
        cfg = tmp_path / "empty.yaml"
        cfg.write_text(text)
        line = _cli("train", "--config", str(cfg))
        assert f"{cfg} is empty" in line and "method:" in line and "wmrl config show" in line, line


def test_serve_log_that_is_not_sqlite_is_refused_by_name(tmp_path):
    log = tmp_path / "notes.txt"
    log.write_text("not a database, the user's notes\n" * 100)
    (tmp_path / "tasks").mkdir()
    line = _cli("serve", "sandbox", "--no-token", "--port", "0", "--unsandboxed", "--tasks-root",
                str(tmp_path / "tasks"), "--log", str(log))
    assert f"--log {log}" in line and "not a wmrl execution log" in line, line
    assert log.read_text() == "not a database, the user's notes\n" * 100


# ------------------------------------------------------------------------------------------------ export
def _run(root: Path, lines: list[str]) -> Path:
    """A run directory with config.yaml and the given samples.jsonl lines (after two good ones)."""
    from tests.support.fake_run import write_fake_run

    write_fake_run(root, steps=1)
    good = [json.dumps({"step": 1, "group": 0, "sample": i, "task_id": "t", "stream": "wm", "reward_wm": 0.5,
                        "prompt": "p", "completion": "c"}) for i in range(2)]
    (root / "samples.jsonl").write_text("\n".join(good + lines) + "\n")
    return root


def _skipped(run: Path, rows: int, what: str) -> str:
    res = CliRunner().invoke(app, ["export", str(run)])
    assert res.exit_code == 0 and res.exception is None, (res.output, repr(res.exception))
    notes = [ln for ln in res.output.splitlines() if what in ln]
    assert len(notes) == 1, res.output
    assert pd.read_parquet(run / "samples.parquet")["sample"].tolist()[:2] == [0, 1]
    tail = json.loads(pq.read_metadata(run / "samples.parquet").metadata[RUNS_METADATA_KEY])
    assert tail["rows"] == rows, tail
    return notes[0]


def test_export_skips_a_line_nested_100000_deep(tmp_path):
    deep = '{"a": ' * 100_000 + "1" + "}" * 100_000
    run = _run(tmp_path / "run", [deep, json.dumps({"step": 1, "stream": "wm"})])
    note = _skipped(run, 3, "skipped 1 bad line")
    assert "samples.jsonl:3" in note, note


def test_export_skips_integers_of_10_to_the_30(tmp_path):
    big = json.dumps({"step": 10**30, "group": 0, "sample": 2, "stream": "wm"})
    big2 = json.dumps({"step": 1, "group": 10**30, "sample": 3, "stream": "wm", "completion_tokens": -10**30})
    run = _run(tmp_path / "run", [big, big2])
    note = _skipped(run, 2, "skipped 2 bad lines")
    assert "samples.jsonl:3" in note and "integer" in note, note


def test_export_skips_a_lone_surrogate(tmp_path):
    run = _run(tmp_path / "run", ['{"step": 1, "group": 0, "sample": 2, "stream": "wm", "completion": "\\ud800x"}'])
    res = CliRunner().invoke(app, ["export", str(run)])
    assert res.exit_code == 0 and res.exception is None, (res.output, repr(res.exception))
    df = pd.read_parquet(run / "samples.parquet")
    assert len(df) == 3 and df["completion"].tolist()[2] == "\ufffdx"  # kept, the surrogate shown replaced


def test_export_skips_an_anchor_row_whose_step_is_not_a_number(tmp_path):
    from wmrl.execution.log import ExecutionLog

    run = _run(tmp_path / "run", [])
    ExecutionLog(run / "executions.sqlite").close()
    con = sqlite3.connect(run / "executions.sqlite")
    for step in ("abc", 10**30, 1):
        meta = {"stream": "anchor", "step": step, "group_id": 0, "sample": 0, "completion": "c"}
        con.execute("INSERT INTO executions (request_id, task_id, status, program_sha256, program, meta) "
                    "VALUES (?, 't', 'ok', 'ab', 'print(1)', ?)", (f"r{step}"[:20], json.dumps(meta)))
    con.commit()
    con.close()
    note = _skipped(run, 2, "skipped 2 bad anchor rows")
    assert "executions.sqlite" in note and "'abc'" in note, note


def test_export_refuses_an_alias_bomb_in_config_yaml_in_one_line_and_bounded_memory(tmp_path):
    run = _run(tmp_path / "run", [])
    (run / "config.yaml").write_text(f"method: wmrl\nname: {BOMB}\n")
    line = _cli_limited("export", str(run), cwd=tmp_path)
    assert "config.yaml" in line and "alias" in line, line
    assert not (run / "samples.parquet").exists()

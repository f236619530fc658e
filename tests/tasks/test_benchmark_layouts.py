"""The three benchmarks' real on-disk layouts (fixtures made from real tables), graded by their own rules."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from wmrl.tasks.benchcode import recognise_metric, run_metric_code
from wmrl.tasks.fixtures import build_benchmark_fixtures
from wmrl.tasks.grading import (GRADED_BY_WMRL, grade_submission, graded_by, metric_disagreement, read_answers,
                                score_submission)
from wmrl.tasks.probes import probe_submissions
from wmrl.tasks.leaderboard import read_leaderboard
from wmrl.tasks.loader import TaskFormatError, TaskSuite, discover
from wmrl.tasks.splits import SplitError, heldout_ids


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> Path:
    """All six fixtures, with the DSBench release nested two levels deeper than the others."""
    out = tmp_path_factory.mktemp("bench")
    build_benchmark_fixtures(out)
    (out / "nested" / "deeper").mkdir(parents=True)
    shutil.move(str(out / "dsbench"), str(out / "nested" / "deeper" / "dsbench"))
    return out


def _cli(*args: str, env_home: Path) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "WMRL_HOME": str(env_home)}
    return subprocess.run([sys.executable, "-m", "wmrl.cli", "tasks", *args], capture_output=True, text=True, env=env)


def test_tasks_list_several_roots_names_adapter_metric_and_reward(bench, tmp_path):
    r = _cli("list", "--json", "--root", str(bench / "mle-dojo"), "--root", str(bench / "nested"),
             "--root", str(bench / "mle-bench"), "--root", str(bench / "mle-bench-data"), env_home=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = {t["id"]: t for t in json.loads(r.stdout)}
    assert "refused" not in r.stderr
    assert {k: (v["adapter"], v["metric"], v["reward_kind"]) for k, v in rows.items()} == {
        "dojo-titanicp": ("mledojo", "accuracy", "percentile"), "dojo-houseprices": ("mledojo", "r2", "percentile"),
        "mleb-attrition": ("mlebench", "log_loss", "percentile"),
        "mleb-seattle-weather": ("mlebench", "accuracy", "percentile"),
        "dsb-concrete": ("dsbench", "rmse", "rpg"), "dsb-diabetes": ("dsbench", "r2", "rpg")}
    assert rows["dojo-titanicp"]["metric_source"] == "utils/metric.py"
    assert rows["mleb-attrition"]["metric_source"] == "config.yaml grader.name"
    assert rows["mleb-seattle-weather"]["awards_medals"] is False


def test_wrong_metric_refuses_that_task_by_name(bench, tmp_path):
    hint = bench / "mle-dojo" / "data" / "prepared" / "dojo-houseprices" / "wmrl.yaml"
    hint.write_text("metric: rmse\n")
    try:
        r = _cli("list", "--root", str(bench), env_home=tmp_path)
    finally:
        hint.unlink()
    assert r.returncode == 1
    assert "refused dojo-houseprices" in r.stdout and "conflicting field 'metric'" in r.stdout
    assert "dojo-titanicp" in r.stdout and "found 5 task(s)" in r.stdout


def test_wrong_direction_metric_on_a_board_is_refused(bench):
    # An MLE-bench config naming r2 for a log-loss board (ascending best-first): refused, not graded as gold.
    cfg = bench / "mle-bench" / "mlebench" / "competitions" / "mleb-attrition" / "config.yaml"
    text = cfg.read_text()
    cfg.write_text(text.replace("name: log-loss", "name: accuracy"))
    try:
        d = discover(bench)
    finally:
        cfg.write_text(text)
    assert "mleb-attrition" not in d.tasks
    (tid, _, why), = [r for r in d.refused if r[0] == "mleb-attrition"]
    assert "higher is better" in why or "better than the best entry" in why


def test_no_metric_is_refused_not_guessed(bench, tmp_path):
    src = bench / "mle-dojo" / "data" / "prepared" / "dojo-titanicp"
    lone = tmp_path / "elsewhere" / "dojo-titanicp"
    shutil.copytree(src, lone)  # no package, no utils/metric.py anywhere above it
    with pytest.raises(TaskFormatError, match="no metric found.*refused rather than guessed"):
        from wmrl.tasks.loader import load_task

        load_task(lone)


def test_metric_code_runs_in_a_child_and_agrees_with_wmrl(bench, tmp_path):
    suite = TaskSuite(bench)
    for tid in ("dojo-titanicp", "mleb-attrition", "dsb-concrete"):
        t = suite.get(tid)
        sub = probe_submissions(t, read_answers(t), seed=3)["good"]
        path = tmp_path / f"{tid}.csv"
        sub.to_csv(path, index=False)
        theirs = run_metric_code(t.layout, t.metric_code, t.answers_path, path)
        want = theirs.score if t.score_decimals is None else round(theirs.score, t.score_decimals)  # MLE-bench: 5
        # wmrl's own metric graded (it agreed with the code on every probe), so the equality below compares
        # wmrl's metric with the code, not the code with itself
        assert graded_by(t) == GRADED_BY_WMRL, (tid, metric_disagreement(t))
        assert score_submission(t, sub) == pytest.approx(want, rel=1e-9)
    assert recognise_metric(suite.get("dsb-concrete").metric_code) == "rmse"


def test_rewards_by_each_benchmarks_rules(bench):
    suite = TaskSuite(bench)
    # MLE-Dojo: position score averaged over the public (every second entry) and private boards.
    dojo = suite.get("dojo-titanicp")
    pub, priv = (read_leaderboard(p) for p in dojo.leaderboard_paths)
    value = float(priv[3])
    g = grade_submission(dojo, _with_score(dojo, value))
    assert g.score == pytest.approx(value)
    n1, n2 = len(pub), len(priv)
    p1 = next(i for i, s in enumerate(pub, 1) if value >= s - 1e-9)
    assert g.reward == pytest.approx(((n1 - p1 + 1) / n1 + (n2 - 4 + 1) / n2) / 2)
    # MLE-bench with awards_medals: false: its grading code awards the medal anyway (the default), and the
    # documented alternative honours the flag.
    mb = suite.get("mleb-seattle-weather")
    top = grade_submission(mb, _answers(mb))
    assert top.reward == 1.0 and top.medal == "gold"
    import dataclasses

    assert grade_submission(dataclasses.replace(mb, medals="awards_medals"), _answers(mb)).medal is None
    assert grade_submission(suite.get("mleb-attrition"), _answers_proba(suite.get("mleb-attrition"))).medal == "gold"
    # DSBench: RPG = max(0, (p - b) / (g - b)) against save_performance's baseline and GT.
    ds = suite.get("dsb-concrete")
    home = Path(ds.root).parents[2]
    b = float((home / "save_performance" / "baseline" / "dsb-concrete" / "result.txt").read_text())
    assert ds.baseline_score == b and ds.gold_score == 0.0
    sub = _answers(ds)
    sub[ds.target] = sub[ds.target] + b / 2  # RMSE exactly b/2 -> RPG 0.5
    g = grade_submission(ds, sub)
    assert g.score == pytest.approx(b / 2) and g.reward == pytest.approx(0.5) and g.rpg == pytest.approx(0.5)
    assert grade_submission(ds, Path(ds.sample_submission_path)).reward == 0.0


def _answers(task) -> pd.DataFrame:
    from wmrl.tasks.grading import read_answers

    return read_answers(task)


def _answers_proba(task) -> pd.DataFrame:
    a = _answers(task)
    a[task.target] = (a[task.target] == task.classes[1]).astype(float)
    return a


def _with_score(task, accuracy: float) -> pd.DataFrame:
    """A label submission of the given accuracy (rounded to whole rows) on a binary task."""
    a = _answers(task)
    k = round((1 - accuracy) * len(a))
    other = {task.classes[0]: task.classes[1], task.classes[1]: task.classes[0]}
    a.loc[a.index[:k], task.target] = a[task.target].iloc[:k].map(other)
    return a


def test_capitalised_score_column_is_read(tmp_path):
    p = tmp_path / "b.csv"
    pd.DataFrame({"Rank": [2, 1], "Score": [0.5, 0.9]}).to_csv(p, index=False)
    assert list(read_leaderboard(p)) == [0.9, 0.5]


def test_heldout_splits_by_benchmark_list_and_fraction(bench, tmp_path):
    tasks = TaskSuite(bench).tasks()
    assert heldout_ids(tasks, "benchmark:dsbench") == ["dsb-concrete", "dsb-diabetes"]
    f = tmp_path / "held.txt"
    f.write_text("# held out\nmleb-attrition\n")
    assert heldout_ids(tasks, f"list:{f}") == ["mleb-attrition"]
    a, b = heldout_ids(tasks, "fraction:0.5", seed=1), heldout_ids(tasks, "fraction:0.5", seed=1)
    assert a == b and len(a) == 3
    assert {tuple(heldout_ids(tasks, "fraction:0.5", seed=s)) for s in range(6)} != {tuple(a)}
    with pytest.raises(SplitError, match="unknown benchmark"):
        heldout_ids(tasks, "benchmark:kaggle")
    f.write_text("nope\n")
    with pytest.raises(SplitError, match="unknown task id"):
        heldout_ids(tasks, f"list:{f}")


def test_fixture_answers_live_only_in_private_places(bench):
    from wmrl.tasks.checks import answers_in_public

    for t in TaskSuite(bench):
        assert answers_in_public(t) == []
        assert not str(t.answers_path).startswith(str(t.public_dir) + "/")

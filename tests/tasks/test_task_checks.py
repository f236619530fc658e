"""Tasks are checked before training: answers in ``public/`` and metric/leaderboard mismatches refused."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from wmrl.tasks.checks import UnsoundTask, answers_in_public, check_task, metric_problems, require_sound_tasks
from wmrl.tasks.loader import load_task

from conftest import write_board


def test_a_clean_task_passes(wmrl_binary_task):
    """The toy task: a feature that predicts the label, a constant sample submission: no leak."""
    assert check_task(load_task(wmrl_binary_task)) == []


def test_a_copy_of_the_answers_in_public_is_refused(wmrl_binary_task):
    shutil.copy(wmrl_binary_task / "private" / "answers.csv", wmrl_binary_task / "public" / "test_answers.csv")
    problems = check_task(load_task(wmrl_binary_task))
    assert [p.kind for p in problems] == ["answers_in_public"]
    assert problems[0].message == "public/test_answers.csv is a copy of the answers file answers.csv"


def test_ids_alongside_their_values_are_refused(wmrl_binary_task):
    """The answers, shuffled, renamed and with an extra column: still the ids alongside their values."""
    ans = pd.read_csv(wmrl_binary_task / "private" / "answers.csv")
    leak = ans.sample(frac=1.0, random_state=0).rename(columns={"label": "hint"}).assign(junk=1)
    leak.to_csv(wmrl_binary_task / "public" / "extra.csv", index=False)
    msgs = answers_in_public(load_task(wmrl_binary_task))
    assert msgs == ["public/extra.csv holds the answers: its column 'hint' equals the private target 'label' on "
                    "100% of the 20 test ids it lists"]


def test_test_rows_with_targets_in_train_csv_are_refused(wmrl_binary_task):
    pub = wmrl_binary_task / "public"
    train = pd.read_csv(pub / "train.csv")
    test = pd.read_csv(pub / "test.csv")
    ans = pd.read_csv(wmrl_binary_task / "private" / "answers.csv")
    pd.concat([train, test.merge(ans, on="id")]).to_csv(pub / "train.csv", index=False)
    msgs = answers_in_public(load_task(wmrl_binary_task))
    assert any(m.startswith("public/train.csv holds the answers: its column 'label'") for m in msgs), msgs


def test_the_target_in_row_order_is_refused(wmrl_binary_task):
    pub = wmrl_binary_task / "public"
    ans = pd.read_csv(wmrl_binary_task / "private" / "answers.csv")
    pd.DataFrame({"what": ans["label"]}).to_csv(pub / "notes.csv", index=False)
    msgs = answers_in_public(load_task(wmrl_binary_task))
    assert msgs == ["public/notes.csv holds the answers: its column 'what', in row order, equals the private target "
                    "'label' on 100% of the 20 test rows"]


def test_a_near_copy_is_refused_but_a_noisy_column_is_not(wmrl_binary_task):
    pub = wmrl_binary_task / "public"
    ans = pd.read_csv(wmrl_binary_task / "private" / "answers.csv")
    other = ans["label"].map({"yes": "no", "no": "yes"})

    def flip(k: int) -> pd.Series:  # the answers with the first k of the 20 rows wrong
        return ans["label"].where(np.arange(len(ans)) >= k, other)

    pd.DataFrame({"id": ans["id"], "noisy": flip(5)}).to_csv(pub / "noisy.csv", index=False)  # 75%: a feature
    assert answers_in_public(load_task(wmrl_binary_task)) == []
    pd.DataFrame({"id": ans["id"], "near": flip(1)}).to_csv(pub / "near.csv", index=False)  # 95%: the answers
    assert answers_in_public(load_task(wmrl_binary_task)) == [
        "public/near.csv holds the answers: its column 'near' equals the private target 'label' on 95% of the 20 "
        "test ids it lists"]


def _regression_task(root: Path, metric: str, board: list[float]) -> Path:
    rng = np.random.default_rng(1)
    n = 40
    df = pd.DataFrame({"id": np.arange(n), "x": rng.normal(size=n).round(3)})
    df["price"] = (3 * df["x"] + rng.normal(size=n)).round(3)
    (root / "public").mkdir(parents=True)
    (root / "private").mkdir()
    df.iloc[:20].to_csv(root / "public" / "train.csv", index=False)
    df.iloc[20:].drop(columns="price").to_csv(root / "public" / "test.csv", index=False)
    df.iloc[20:][["id"]].assign(price=0.0).to_csv(root / "public" / "sample_submission.csv", index=False)
    df.iloc[20:][["id", "price"]].to_csv(root / "private" / "answers.csv", index=False)
    write_board(root / "leaderboard.csv", board)
    (root / "description.md").write_text("toy regression")
    (root / "task.yaml").write_text(yaml.safe_dump({
        "id": root.name, "type": "regression", "metric": metric, "target": "price", "id_column": "id",
        "split": "train", "leaderboards": ["leaderboard.csv"]}))
    return root


def test_r2_on_an_rmse_leaderboard_is_flagged(tmp_path):
    """The motivating case: an RMSE board (ascending, best first) under ``metric: r2``."""
    rmse_board = [0.61, 0.74, 0.9, 1.2, 1.5, 2.0, 2.8, 3.1]
    task = load_task(_regression_task(tmp_path / "toy-r2", "r2", rmse_board))
    problems = metric_problems(task)
    assert [p.kind for p in problems] == ["metric_direction", "score_range"]  # and R^2 > 1 is impossible
    assert "ordered best-first as if lower is better (first 0.61, last 3.1), but its metric r2 is higher is better" \
        in problems[0].message
    ok = load_task(_regression_task(tmp_path / "toy-rmse", "rmse", rmse_board))
    assert check_task(ok) == []


def test_scores_outside_the_metrics_range_are_flagged(tmp_path):
    task = load_task(_regression_task(tmp_path / "toy-r2-range", "r2", [3.1, 2.8, 2.0, 1.5]))  # descending: no
    # direction problem, but R^2 cannot exceed 1
    problems = metric_problems(task)
    assert [p.kind for p in problems] == ["score_range"]
    assert "4 score(s) outside the range [-inf, 1] of its metric r2 (e.g. 3.1)" in problems[0].message


def test_the_trainer_refuses_the_task_by_name(wmrl_binary_task, tmp_path):
    from wmrl.training.config import ConfigError, TrainConfig
    from wmrl.training.parts import resolve_tasks

    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copytree(wmrl_binary_task, suite / "toy-binary")
    meta = yaml.safe_load((suite / "toy-binary" / "task.yaml").read_text())
    meta["split"] = "train"
    (suite / "toy-binary" / "task.yaml").write_text(yaml.safe_dump(meta))
    cfg = TrainConfig()
    cfg.tasks.root = str(suite)
    cfg.tasks.heldout = []
    assert [t.id for t in resolve_tasks(cfg)[0]] == ["toy-binary"]
    shutil.copy(suite / "toy-binary" / "private" / "answers.csv", suite / "toy-binary" / "public" / "answers.csv")
    with pytest.raises(ConfigError) as e:
        resolve_tasks(cfg)
    assert str(e.value) == ("tasks.train: task(s) refused before training: toy-binary: public/answers.csv is a copy "
                            "of the answers file answers.csv")
    with pytest.raises(UnsoundTask, match="toy-binary"):
        require_sound_tasks([load_task(suite / "toy-binary")])


def test_the_built_in_small_tasks_are_sound(small_suite):
    from wmrl.tasks.loader import TaskSuite

    for task in TaskSuite(small_suite):
        assert check_task(task) == [], task.id


def test_the_check_command_names_the_problem(wmrl_binary_task):
    from typer.testing import CliRunner

    from wmrl.cli import app

    r = CliRunner().invoke(app, ["tasks", "check", str(wmrl_binary_task)])
    assert r.exit_code == 0 and r.output.strip() == "toy-binary: ok"
    shutil.copy(wmrl_binary_task / "private" / "answers.csv", wmrl_binary_task / "public" / "a.csv")
    r = CliRunner().invoke(app, ["tasks", "check", str(wmrl_binary_task)])
    assert r.exit_code == 1
    assert "toy-binary: answers_in_public: public/a.csv is a copy of the answers file answers.csv" in r.output


def test_files_that_parse_as_no_table_are_skipped_not_errors(wmrl_binary_task):
    """Junk under a misleading name, a truncated archive, JSON nested past the parser's depth, an empty file, a
    zip whose member inflates past the read cap: no table, no answers, no exception; a real leak beside them is
    still named."""
    import gzip
    import zipfile

    pub = wmrl_binary_task / "public"
    rng = np.random.default_rng(0)
    (pub / "junk.parquet").write_bytes(b"PAR1" + rng.bytes(4000))
    (pub / "junk.feather").write_bytes(b"ARROW1" + rng.bytes(4000))
    (pub / "cut.csv.gz").write_bytes(gzip.compress(b"id,label\n" * 2000)[:300])
    (pub / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    (pub / "empty.tsv").write_bytes(b"")
    (pub / "binary.dat").write_bytes(b"\0\1\2" * 5000)
    with zipfile.ZipFile(pub / "big.zip", "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("zeros.csv", b"0\n" * (40 * 1024**2))  # 80 MB inflated, more than the read cap
    assert answers_in_public(load_task(wmrl_binary_task)) == []
    ans = pd.read_csv(wmrl_binary_task / "private" / "answers.csv")
    ans.to_json(pub / "hidden.dat", orient="index")  # misnamed JSON, {row: {id, label}}
    assert [m.split(":")[0] for m in answers_in_public(load_task(wmrl_binary_task))] == [
        "public/hidden.dat holds the answers"]


def test_a_task_without_a_view_is_advised_the_callers_one_turn_setting(wmrl_binary_task):
    """A task whose submission is the sample submission's table has no validation view; the refusal of several
    turns names how the caller runs one turn (the config key, or the protocol's override), and only there."""
    import dataclasses

    task = dataclasses.replace(load_task(wmrl_binary_task), outputs=("Prediction",))
    for one_turn in ("episode.max_turns: 1", "--override max_turns=1"):
        with pytest.raises(UnsoundTask) as e:
            require_sound_tasks([task], "2-turn episodes", 0.2, one_turn)
        msg = str(e.value)
        assert "has no validation view: its submission is the sample submission's table (Prediction)" in msg, msg
        assert msg.endswith(f"episodes of one turn need no validation view ({one_turn})"), msg
    with pytest.raises(UnsoundTask) as e:  # another problem: no advice about turns
        shutil.copy(wmrl_binary_task / "private" / "answers.csv", wmrl_binary_task / "public" / "test_answers.csv")
        require_sound_tasks([load_task(wmrl_binary_task)], "tasks", 0.2)
    assert "one turn" not in str(e.value), str(e.value)

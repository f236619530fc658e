"""Private answers leaked into ``public/`` in any readable form are found by value and the task refused.

A copy of a built-in task gets its private answers added to ``public/`` in one form each (TSV, JSON records,
Parquet, a CSV with the id and target columns renamed and the rows shuffled, gzipped JSON lines, a wider Feather
table with the labels coded 0/1, a zipped table with the answers split across two column pairs). Each must be
refused by ``wmrl tasks check`` (one line naming the file, exit 1) and by the trainer's pre-flight
(:func:`wmrl.training.parts.resolve_tasks`, the function ``wmrl train`` calls before anything runs). The same holds
for the validation view of a multi-turn episode: a public file that keeps the held-out train rows' targets lets a
program look its validation answers up. Every built-in task, and its view, passes.
"""
from __future__ import annotations

import gzip
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from wmrl.cli import app

TASK = "vcdextra-titanicp"  # binary, labels "died"/"survived", integer ids


def _answers(task_dir: Path) -> pd.DataFrame:
    meta = yaml.safe_load((task_dir / "task.yaml").read_text())
    ans = pd.read_csv(task_dir / "private" / "answers.csv")
    return ans[[meta["id_column"], meta["target"]]]


def _tsv(pub: Path, ans: pd.DataFrame) -> Path:
    ans.to_csv(pub / "answers.tsv", sep="\t", index=False)
    return pub / "answers.tsv"


def _json_records(pub: Path, ans: pd.DataFrame) -> Path:
    ans.to_json(pub / "answers.json", orient="records")
    return pub / "answers.json"


def _parquet(pub: Path, ans: pd.DataFrame) -> Path:
    ans.to_parquet(pub / "answers.parquet", index=False)
    return pub / "answers.parquet"


def _renamed_shuffled_csv(pub: Path, ans: pd.DataFrame) -> Path:
    out = ans.sample(frac=1.0, random_state=7)
    out.columns = ["passenger", "outcome"]
    out.to_csv(pub / "notes.csv", index=False)
    return pub / "notes.csv"


def _gzipped_jsonl(pub: Path, ans: pd.DataFrame) -> Path:
    with gzip.open(pub / "extra.jsonl.gz", "wt") as f:
        f.write(ans.sample(frac=1.0, random_state=3).to_json(orient="records", lines=True))
    return pub / "extra.jsonl.gz"


def _wide_feather_coded(pub: Path, ans: pd.DataFrame) -> Path:
    rng = np.random.default_rng(5)
    idc, target = ans.columns
    wide = pd.DataFrame({"noise_a": rng.normal(size=len(ans)), "key": ans[idc].astype(np.int64),
                         "noise_b": rng.integers(0, 3, len(ans)),
                         "flag": (ans[target] == "survived").astype(np.int8), "noise_c": rng.normal(size=len(ans))})
    wide.sample(frac=1.0, random_state=1).reset_index(drop=True).to_feather(pub / "meta.feather")
    return pub / "meta.feather"


def _split_pairs_zip(pub: Path, ans: pd.DataFrame) -> Path:
    half = len(ans) // 2
    a, b = ans.iloc[:half].reset_index(drop=True), ans.iloc[half:2 * half].reset_index(drop=True)
    wide = pd.DataFrame({"k1": a.iloc[:, 0], "v1": a.iloc[:, 1], "x": range(half), "k2": b.iloc[:, 0],
                         "v2": b.iloc[:, 1]})
    with zipfile.ZipFile(pub / "bundle.zip", "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("tables/pairs.csv", wide.to_csv(index=False))
    return pub / "bundle.zip"


FORMS = {"tsv": _tsv, "json_records": _json_records, "parquet": _parquet,
         "csv_renamed_shuffled": _renamed_shuffled_csv, "jsonl_gz": _gzipped_jsonl,
         "feather_wide_coded": _wide_feather_coded, "zip_split_pairs": _split_pairs_zip}


@pytest.fixture
def suite(small_suite, tmp_path) -> Path:
    """A suite folder holding a copy of the built-in task."""
    root = tmp_path / "suite"
    root.mkdir()
    shutil.copytree(small_suite / TASK, root / TASK)
    return root


def _train_config(root: Path, turns: int = 1):
    from wmrl.training.config import TrainConfig

    cfg = TrainConfig()
    cfg.tasks.root = str(root)
    cfg.tasks.train = [TASK]
    cfg.tasks.heldout = []
    cfg.episode.max_turns = turns
    return cfg


@pytest.mark.parametrize("form", sorted(FORMS))
def test_answers_leaked_in_any_form_are_refused(suite, form):
    from wmrl.training.config import ConfigError
    from wmrl.training.parts import resolve_tasks

    task_dir = suite / TASK
    r = CliRunner().invoke(app, ["tasks", "check", str(task_dir)])
    assert r.exit_code == 0 and r.output.strip() == f"{TASK}: ok", r.output  # the copy is clean before the leak
    leak = FORMS[form](task_dir / "public", _answers(task_dir))
    rel = f"public/{leak.name}"

    r = CliRunner().invoke(app, ["tasks", "check", str(task_dir)])
    assert r.exit_code == 1, r.output
    naming = [line for line in r.output.splitlines() if rel in line]
    assert len(naming) == 1 and naming[0].startswith(f"{TASK}: answers_in_public: {rel} "), r.output
    assert " holds the answers: " in naming[0], r.output

    with pytest.raises(ConfigError) as e:
        resolve_tasks(_train_config(suite))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"tasks.train: task(s) refused before training: {TASK}: {rel} "), msg


def test_held_out_rows_readable_in_a_validation_view_are_refused(suite):
    """A public file beside train.csv that keeps every train row with its target is copied into the validation view,
    where the held-out rows are the validation answers: the view is refused, and so is multi-turn training."""
    from wmrl.tasks.loader import load_task
    from wmrl.tasks.validation import validation_view
    from wmrl.training.config import ConfigError
    from wmrl.training.parts import resolve_tasks

    task_dir = suite / TASK
    pd.read_csv(task_dir / "public" / "train.csv").to_parquet(task_dir / "public" / "train_full.parquet")
    assert resolve_tasks(_train_config(suite))[0][0].id == TASK  # one turn: no view, the task itself is sound
    with pytest.raises(ValueError, match="public/train_full.parquet holds the validation answers"):
        validation_view(load_task(task_dir), 0.2, cache_dir=suite.parent / "views")
    with pytest.raises(ConfigError) as e:
        resolve_tasks(_train_config(suite, turns=2))
    msg = str(e.value)
    assert "\n" not in msg and "public/train_full.parquet holds the validation answers" in msg, msg
    r = CliRunner().invoke(app, ["tasks", "check", str(task_dir)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["tasks", "check", str(task_dir), "--views", "0.2"])
    naming = [line for line in r.output.splitlines() if "public/train_full.parquet" in line]
    assert r.exit_code == 1 and len(naming) == 1, r.output
    assert naming[0].startswith(f"{TASK}: validation_view: task {TASK!r} has no validation view: "), r.output


@pytest.mark.slow
def test_no_built_in_task_or_its_view_triggers(tmp_path):
    """train.csv, test.csv and the constant sample_submission.csv of every built-in task, and of its view, pass."""
    from wmrl.tasks.build import build_suite
    from wmrl.tasks.checks import answers_in_public
    from wmrl.tasks.validation import validation_view

    for task in build_suite(tmp_path / "all"):
        assert answers_in_public(task) == [], task.id
        validation_view(task, 0.2, cache_dir=tmp_path / "views")  # checked as it is built: raises if it leaks

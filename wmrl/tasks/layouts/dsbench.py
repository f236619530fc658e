"""DSBench's layout: the data-modeling release ``data_modeling/``, one task per ``data/data_resplit/<id>/``::

    data_modeling/data/data_resplit/<id>/{train.csv,test.csv,sample_submission.csv}   (public files)
    data_modeling/data/answers/<id>/test_answer.csv
    data_modeling/data/task/<id>.txt                                                   (description)
    data_modeling/evaluation/<id>_eval.py                                              (metric code)
    data_modeling/save_performance/{baseline,GT}/<id>/result.txt                       (RPG's scores)

A task folder is known by where it lies (its own files are only data); discovery finds the release's
``data_modeling`` folder and takes every task folder in it. Reward: RPG against the baseline and GT scores.
What the files do not say is inferred (:mod:`wmrl.tasks.layouts.common`).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from wmrl.tasks.layouts.base import (FIXTURE_EXPR, FIXTURE_IMPORT, FixtureDef, FixtureSource, TaskFormatError,
                                     TaskLayout, copy_public, make_public_readable)
from wmrl.tasks.layouts.common import (BY_CODE, code_claim, code_metric, foreign_description, infer_meta,
                                       make_task, read_yaml, resolve_metric)
from wmrl.tasks.spec import Task, hints_file
from wmrl.tasks.grading import score_submission


def _read_result(path: Path) -> float | None:
    """The number in a ``result.txt``, or None when there is no such file."""
    if not path.is_file():
        return None
    try:
        return float(path.read_text().strip())
    except ValueError:
        raise TaskFormatError(f"{path} holds {path.read_text()[:40]!r}, not a number") from None


def _dsbench_home(resplit_dir: Path) -> Path:
    """The ``data_modeling`` folder of a DSBench task folder ``data_modeling/data/data_resplit/<id>``."""
    return resplit_dir.parent.parent.parent


def is_dsbench_home(path: Path) -> bool:
    """True for DSBench's ``data_modeling`` folder (``data/data_resplit/`` and ``data/answers/``)."""
    return (path / "data" / "data_resplit").is_dir() and (path / "data" / "answers").is_dir()


def detect(path: Path) -> bool:
    """True for ``data_modeling/data/data_resplit/<id>`` inside a DSBench ``data_modeling`` folder."""
    return path.parent.name == "data_resplit" and is_dsbench_home(_dsbench_home(path))


def find(path: Path) -> list[Path] | None:
    """For discovery: every task folder of a DSBench ``data_modeling`` folder (sorted), or None for any other
    folder (a task folder itself is found through its release)."""
    if not is_dsbench_home(path):
        return None
    return [t for t in sorted((path / "data" / "data_resplit").iterdir()) if t.is_dir()]


def load(resplit_dir: Path, search: Sequence[Path] = ()) -> Task:
    """One DSBench data-modeling task ``data_modeling/data/data_resplit/<id>/`` (public files), with
    ``data/answers/<id>/test_answer.csv``, ``data/task/<id>.txt``, ``evaluation/<id>_eval.py`` and the
    baseline and GT scores in ``save_performance/{baseline,GT}/<id>/result.txt``. Reward: RPG. ``search`` is not
    used (the release holds all its metadata).

    Raises:
        TaskFormatError: no answers or no baseline score, a result file that is not a number, or metadata that
            the hints do not make consistent.
    """
    home = _dsbench_home(resplit_dir)
    task_id = resplit_dir.name
    answers = home / "data" / "answers" / task_id / "test_answer.csv"
    if not answers.is_file():
        raise TaskFormatError(f"DSBench task {task_id!r}: no answers at {answers}")
    hints_path = hints_file("dsbench", resplit_dir)
    hints = read_yaml(hints_path) if hints_path.is_file() else {}
    code_path = home / "evaluation" / f"{task_id}_eval.py"
    code = code_path if code_path.is_file() else None
    claims = code_claim(task_id, code, f"evaluation/{task_id}_eval.py")
    if "metric" in hints:
        claims.append((f"wmrl/{task_id}.yaml metric", str(hints.pop("metric"))))
    by_code = not claims and code is not None
    meta: dict[str, Any] = {"id": task_id, "row_match": "position"}  # DSBench's scripts match rows by position
    meta["metric"], meta["metric_source"] = (BY_CODE, f"evaluation/{task_id}_eval.py") if by_code else \
        resolve_metric(task_id, claims, hints=hints_path)
    perf = home / "save_performance"
    baseline = _read_result(perf / "baseline" / task_id / "result.txt")
    gold = _read_result(perf / "GT" / task_id / "result.txt")
    if baseline is None:
        raise TaskFormatError(f"DSBench task {task_id!r}: no baseline score at "
                              f"{perf / 'baseline' / task_id / 'result.txt'}"
                              " (unzip DSBench's save_performance.zip into data_modeling/), so no RPG can be computed")
    meta["baseline_score"] = baseline
    if gold is not None:
        meta["gold_score"] = gold
    meta.update(hints)
    meta = infer_meta(meta, resplit_dir, answers, hints_path)
    if (by_code or meta.get("outputs")) and code is not None:
        meta = code_metric(meta, resplit_dir, code, "dsbench")
    description = foreign_description(home / "data" / "task" / f"{task_id}.txt")
    task = make_task(meta, root=resplit_dir, public_dir=resplit_dir, answers_path=answers, leaderboards=(),
                     description=description, layout="dsbench", metric_code=code, reward_kind="rpg")
    if gold is None:  # DSBench's GT score is the answers graded as a submission

        gold_value = score_submission(task, pd.read_csv(answers, dtype={task.id_column: str}))
        task = dataclasses.replace(task, gold_score=float(gold_value))
    return task


def _eval_script(target: str, metric: str) -> str:
    """The source of a fixture's ``evaluation/<id>_eval.py`` in DSBench's convention (``--answer_file``,
    ``--predict_file``; writes ``<path>/<name>/result.txt``)."""
    return f'''import argparse
import os

import numpy as np
import pandas as pd
from sklearn.metrics import {FIXTURE_IMPORT[metric]}

parser = argparse.ArgumentParser()
parser.add_argument("--path", type=str, required=True)
parser.add_argument("--name", type=str, required=True)
parser.add_argument("--answer_file", type=str, required=True)
parser.add_argument("--predict_file", type=str, required=True)
parser.add_argument("--value", type=str, default={target!r})
args = parser.parse_args()

answers = pd.read_csv(args.answer_file)
predictions = pd.read_csv(args.predict_file)
key = answers.columns[0]
t = answers.astype({{key: str}}).set_index(key)
s = predictions.astype({{key: str}}).set_index(key).loc[t.index]
y, p = t[args.value], s[args.value]
performance = {FIXTURE_EXPR[metric]}
with open(os.path.join(args.path, args.name, "result.txt"), "w") as f:
    f.write(str(performance))
'''


def fixture(out: Path, f: FixtureDef, source: FixtureSource) -> Path:
    """Write fixture ``f`` as DSBench's release holds a task, under ``<out>/dsbench/data_modeling/``: the public
    files in ``data/data_resplit/<id>/``, the answers in ``data/answers/<id>/``, the description, the evaluation
    script, and as baseline the constant sample submission's score and as GT the answers graded against
    themselves (how DSBench's GT results arise); returns ``data/data_resplit/<id>``."""

    t, desc, answers = source.task, source.description, source.answers
    src = Path(t.root)
    home = out / "dsbench" / "data_modeling"
    resplit = home / "data" / "data_resplit" / f.id
    copy_public(src / "public", resplit)
    (home / "data" / "task").mkdir(parents=True, exist_ok=True)
    (home / "data" / "task" / f"{f.id}.txt").write_text(desc, encoding="utf-8")
    (home / "data" / "answers" / f.id).mkdir(parents=True, exist_ok=True)
    answers.to_csv(home / "data" / "answers" / f.id / "test_answer.csv", index=False)
    (home / "evaluation").mkdir(parents=True, exist_ok=True)
    (home / "evaluation" / f"{f.id}_eval.py").write_text(_eval_script(t.target, t.metric))
    base = float(score_submission(t, src / "public" / "sample_submission.csv"))
    gt = float(score_submission(t, answers.astype({t.id_column: str})))
    for kind, v in (("baseline", base), ("GT", gt)):
        d = home / "save_performance" / kind / f.id
        d.mkdir(parents=True, exist_ok=True)
        (d / "result.txt").write_text(repr(v))
    make_public_readable(resplit)
    return resplit


LAYOUT = TaskLayout(name="dsbench", title="DSBench", expects="data_modeling/data/data_resplit/<id>", detect=detect,
                    find=find, load=load, fixture=fixture, self_describing=False)

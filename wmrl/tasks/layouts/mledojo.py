"""MLE-Dojo's layout: a prepared competition folder (``data/public`` and ``data/private``)::

    data/public/{train.csv,test.csv,sample_submission.csv}   data/private/test_answer.csv
    public_leaderboard.csv  private_leaderboard.csv          (in data/private, the folder, data/ or info/)
    description.md|txt                                       (in data/public, the folder or info/)

``prepare/mle.py`` writes ``<data-dir>/<id>/data/``; the package's ``mledojo/competitions/<id>/`` holds the
metric code (``utils/metric.py``, a ``CompetitionMetrics`` subclass), ``info/`` the leaderboards and the
description. What the files do not say is inferred (:mod:`wmrl.tasks.layouts.common`).
"""
from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from wmrl.tasks.layouts.base import (FIXTURE_EXPR, FIXTURE_IMPORT, FixtureDef, FixtureSource, TaskFormatError,
                                     TaskLayout, copy_public, find_self, make_public_readable)
from wmrl.tasks.layouts.common import (BY_CODE, code_claim, code_metric, first_existing, foreign_description,
                                       infer_meta, make_task, package_competition_dir, read_yaml, resolve_metric,
                                       search_dirs)
from wmrl.tasks.spec import Task, hints_file


def detect(path: Path) -> bool:
    """True for a folder holding ``data/public`` and ``data/private``."""
    path = Path(path)
    return (path / "data" / "public").is_dir() and (path / "data" / "private").is_dir()


def load(root: Path, search: Sequence[Path] = ()) -> Task:
    """A prepared MLE-Dojo competition ``<data-dir>/<id>/data/{public,private}``: answers
    ``data/private/test_answer.csv``, both leaderboards in ``data/private/`` (where ``prepare/mle.py`` copies
    them) or the package's ``info/``; the metric from the package's ``utils/metric.py``."""
    hints_path = hints_file("mledojo", root)
    hints: dict[str, Any] = read_yaml(hints_path) if hints_path.is_file() else {}
    public_dir = root / "data" / "public"
    answers = first_existing(root / "data" / "private" / "test_answer.csv",
                             *sorted(p for p in (root / "data" / "private").glob("*.csv")
                                     if "leaderboard" not in p.name))
    if answers is None:
        raise TaskFormatError(f"MLE-Dojo folder {root}: no data/private/test_answer.csv")
    task_id = str(hints.get("id", root.name))
    pkg = root if (root / "utils" / "metric.py").is_file() or (root / "info").is_dir() else \
        package_competition_dir("mledojo", root.name, search_dirs(root, search))
    code = pkg / "utils" / "metric.py" if pkg is not None and (pkg / "utils" / "metric.py").is_file() else None
    claims = code_claim(task_id, code, "utils/metric.py")
    if "metric" in hints:
        claims.append(("wmrl.yaml metric", str(hints.pop("metric"))))
    by_code = not claims and code is not None
    meta: dict[str, Any] = {"id": task_id}
    meta["metric"], meta["metric_source"] = (BY_CODE, "utils/metric.py") if by_code else \
        resolve_metric(task_id, claims, hints=hints_path)
    meta.update({k: v for k, v in hints.items() if k != "id"})
    meta = infer_meta(meta, public_dir, answers, hints_path)
    leaderboards = []
    for name in ("public_leaderboard.csv", "private_leaderboard.csv"):
        p = first_existing(root / "data" / "private" / name, root / name, root / "data" / name,
                           *((pkg / "info" / name,) if pkg is not None else ()))
        if p:
            leaderboards.append(p)
    if (by_code or meta.get("outputs")) and code is not None:
        meta = code_metric(meta, public_dir, code, "mledojo", leaderboards)
    description = foreign_description(public_dir / "description.txt", public_dir / "description.md",
                                      root / "description.md", root / "description.txt",
                                      *((pkg / "info" / "description.txt",) if pkg is not None else ()))
    return make_task(meta, root=root, public_dir=public_dir, answers_path=answers,
                     leaderboards=tuple(leaderboards), description=description, layout="mledojo", metric_code=code)


def no_data(cid: str) -> str:
    """Why the package metadata of competition ``cid`` was skipped when no prepared data for it lies under the
    roots: how to prepare it."""
    return ("mledojo package metadata without prepared data under the task roots (run prepare/mle.py "
            "--competitions <id> --data-dir DIR and give DIR as a root)")


def _metric_code(cls: str, target: str, metric: str, higher: bool) -> str:
    """The source of a fixture's ``utils/metric.py``: an MLE-Dojo ``CompetitionMetrics`` subclass named ``cls``."""
    return f'''import numpy as np
import pandas as pd
from sklearn.metrics import {FIXTURE_IMPORT[metric]}

from mledojo.metrics.base import CompetitionMetrics, InvalidSubmissionError


class {cls}(CompetitionMetrics):
    """Fixture metric ({metric}) in MLE-Dojo's convention: evaluate(y_true, y_pred) on DataFrames."""

    def __init__(self, value: str = "{target}", higher_is_better: bool = {higher}):
        super().__init__(higher_is_better)
        self.value = value

    def evaluate(self, y_true: pd.DataFrame, y_pred: pd.DataFrame) -> float:
        key = y_true.columns[0]
        t = y_true.astype({{key: str}}).set_index(key)
        s = y_pred.astype({{key: str}}).set_index(key).loc[t.index]
        y, p = t[self.value], s[self.value]
        return {FIXTURE_EXPR[metric]}

    def validate_submission(self, submission: pd.DataFrame, ground_truth: pd.DataFrame) -> str:
        if len(submission) != len(ground_truth):
            raise InvalidSubmissionError("the submission must have one row per test id")
        if set(submission.columns) != set(ground_truth.columns):
            raise InvalidSubmissionError("the submission must have the columns of the sample submission")
        return "Submission is valid."
'''


def _class_name(task_id: str) -> str:
    """MLE-Dojo's metric class name of a competition: ``dojo-titanicp`` -> ``DojoTitanicpMetrics``."""
    return "".join(w.capitalize() for w in task_id.replace("_", "-").split("-")) + "Metrics"


def fixture(out: Path, f: FixtureDef, source: FixtureSource) -> Path:
    """Write fixture ``f`` as MLE-Dojo leaves a competition: the package's
    ``<out>/mle-dojo/mledojo/competitions/<id>/{info/description.txt, info/*_leaderboard.csv, utils/metric.py}``
    and the prepared data ``<out>/mle-dojo/data/prepared/<id>/data/{public,private}`` (both leaderboards copied
    to ``data/private``, the description to ``data/public``, as ``prepare/mle.py`` does); returns
    ``<out>/mle-dojo/data/prepared/<id>``."""
    t, desc, board, answers = source.task, source.description, source.board, source.answers
    src = Path(t.root)
    higher = not t.lower_is_better
    pkg = out / "mle-dojo" / "mledojo" / "competitions" / f.id
    data = out / "mle-dojo" / "data" / "prepared" / f.id / "data"
    (pkg / "info").mkdir(parents=True, exist_ok=True)
    (pkg / "utils").mkdir(parents=True, exist_ok=True)
    (pkg / "info" / "description.txt").write_text(desc, encoding="utf-8")
    public_board = pd.DataFrame({"rank": range(1, len(board[::2]) + 1), "score": board[::2]})
    private_board = pd.DataFrame({"rank": range(1, len(board) + 1), "score": board})
    public_board.to_csv(pkg / "info" / "public_leaderboard.csv", index=False)
    private_board.to_csv(pkg / "info" / "private_leaderboard.csv", index=False)
    (pkg / "utils" / "metric.py").write_text(_metric_code(_class_name(f.id), t.target, t.metric, higher))
    copy_public(src / "public", data / "public")
    (data / "public" / "description.txt").write_text(desc, encoding="utf-8")  # prepare/mle.py copies it
    (data / "private").mkdir(parents=True, exist_ok=True)
    answers.to_csv(data / "private" / "test_answer.csv", index=False)
    for n in ("public_leaderboard.csv", "private_leaderboard.csv"):  # prepare/mle.py copies both
        shutil.copyfile(pkg / "info" / n, data / "private" / n)
    make_public_readable(data / "public")
    return data.parent


LAYOUT = TaskLayout(name="mledojo", title="MLE-Dojo", expects="data/public + data/private", detect=detect,
                    find=find_self(detect), load=load, fixture=fixture, package="mledojo", no_data=no_data)

"""MLE-bench's layout: a prepared competition folder (``prepared/``; ``config.yaml`` in it or in the package)::

    config.yaml  description.md  leaderboard.csv (Kaggle export: a 'score' column, best-first)
    prepared/public/{train.csv,test.csv,sample_submission.csv}
    prepared/private/test.csv                  (answers; the path in config.yaml's dataset.answers)

``mlebench prepare`` writes the data to ``<data-dir>/<id>/prepared/``; the metadata (``config.yaml``,
``description.md``, ``leaderboard.csv``, ``grade.py``) lies in the package's ``mlebench/competitions/<id>/``.
The metric comes from ``grader.name`` (``accuracy``, ``auc-roc``, ``log-loss``, ``rmse``, ...), else from
``grade.py``; what the files do not say is inferred (:mod:`wmrl.tasks.layouts.common`).
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from wmrl.tasks.layouts.base import (FIXTURE_EXPR, FIXTURE_IMPORT, FixtureDef, FixtureSource, TaskFormatError,
                                     TaskLayout, copy_public, find_self, make_public_readable)
from wmrl.tasks.layouts.common import (BY_CODE, code_claim, code_metric, first_existing, foreign_description,
                                       infer_meta, make_task, metric_name, package_competition_dir, read_yaml,
                                       resolve_metric, search_dirs)
from wmrl.tasks.spec import Task, hints_file

#: Benchmark data folders inside a hidden folder by MLE-bench's own default, searched although discovery enters
#: no other hidden folder below a root: ``<user cache>/mle-bench/data`` (``appdirs.user_cache_dir()``,
#: ``~/.cache`` on Linux), where ``mlebench prepare`` writes without ``--data-dir``.
HIDDEN_DATA_DIRS: tuple[tuple[str, ...], ...] = (("mle-bench", "data"),)

#: MLE-bench grader names of the fixture metrics (as MLE-bench's config.yaml files spell them).
_GRADER = {"accuracy": "accuracy", "log_loss": "log-loss", "roc_auc": "auc-roc", "rmse": "rmse"}


def detect(path: Path) -> bool:
    """True for a prepared competition folder: ``prepared/public`` and ``prepared/private``, or ``config.yaml``
    and ``prepared/``."""
    path = Path(path)
    if (path / "prepared" / "public").is_dir() and (path / "prepared" / "private").is_dir():
        return True
    return (path / "config.yaml").is_file() and (path / "prepared").is_dir()


def mlebench_default_data_dir() -> Path:
    """MLE-bench's default data folder: ``$XDG_CACHE_HOME/mle-bench/data``, else ``~/.cache/mle-bench/data``
    (``mlebench.registry.DEFAULT_DATA_DIR``, ``appdirs.user_cache_dir()`` on Linux), read from the environment,
    never by importing ``mlebench``."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "mle-bench" / "data"


def answers_problem(task_id: str, config: dict[str, Any]) -> str:
    """Why the answers ``config.yaml`` names (``dataset.answers``) cannot be graded against, or ``""``: a file
    that is not CSV (``test.jsonl``: MLE-bench's ``load_answers`` hands ``grade`` its parsed records, not a
    table)."""
    name = Path(str((config.get("dataset") or {}).get("answers", "test.csv"))).name
    if Path(name).suffix.lower() == ".csv":
        return ""
    return (f"task {task_id!r}: its answers are {name} (config.yaml dataset.answers), which MLE-bench's grade.py "
            "takes as parsed records, not a table; wmrl grades against CSV answers only; refused")


def load(root: Path, search: Sequence[Path] = ()) -> Task:
    """A prepared MLE-bench competition: data in ``<data-dir>/<id>/prepared/{public,private}``, metadata
    (``config.yaml``, ``description.md``, ``leaderboard.csv``, ``grade.py``) in the folder itself or in the
    package's ``mlebench/competitions/<id>/`` (found under the roots, the folder's ancestors or the installed
    ``mlebench``)."""
    meta_dir = root if (root / "config.yaml").is_file() else package_competition_dir(
        "mlebench", root.name, search_dirs(root, search))
    if meta_dir is None:
        raise TaskFormatError(f"MLE-bench data folder {root}: no config.yaml for competition {root.name!r} "
                              "(looked in the folder, in mlebench/competitions/ under the task roots and their "
                              "parents, and in the installed mlebench package); add the mle-bench checkout as a "
                              "task root")
    config = read_yaml(meta_dir / "config.yaml")
    for section in ("grader", "dataset"):
        if config.get(section) is not None and not isinstance(config[section], dict):
            raise TaskFormatError(f"task {root.name!r}: field '{section}' of {meta_dir / 'config.yaml'} must be a "
                                  f"mapping (MLE-bench's {section}: name, ...), not {config[section]!r}")
    problem = answers_problem(str(config.get("id", root.name)), config)
    if problem:
        raise TaskFormatError(problem)
    hints_path = hints_file("mlebench", root)
    hints = read_yaml(hints_path) if hints_path.is_file() else {}
    public_dir = root / "prepared" / "public"
    answers_name = Path(str((config.get("dataset") or {}).get("answers", "test.csv"))).name
    answers = first_existing(root / "prepared" / "private" / answers_name,
                             root / "prepared" / "private" / "test.csv",
                             *sorted((root / "prepared" / "private").glob("*.csv")))
    if answers is None:
        raise TaskFormatError(f"MLE-bench folder {root}: no answers CSV under prepared/private/")
    task_id = str(config.get("id", root.name))
    meta: dict[str, Any] = {"id": task_id, "title": config.get("name", root.name)}
    claims: list[tuple[str, str]] = []
    grader = (config.get("grader") or {}).get("name")
    code = meta_dir / "grade.py" if (meta_dir / "grade.py").is_file() else None
    if grader and str(grader).lower() not in ("auto", "custom"):
        try:
            metric_name(grader, f"the hints file {hints_path}")
            claims.append(("config.yaml grader.name", str(grader)))
        except TaskFormatError:
            if code is None and "metric" not in hints:  # the hints file's metric stands in for the unknown grader
                raise TaskFormatError(f"task {task_id!r}: field 'metric': config.yaml grader.name {grader!r} is not a "
                                      "metric wmrl computes, and the competition has no grade.py to score "
                                      "with; refused "
                                      f"rather than guessed (set 'metric' in the hints file {hints_path})") from None
    claims += code_claim(task_id, code, "grade.py") if not claims else []
    if "metric" in hints:
        claims.append(("wmrl.yaml metric", str(hints.pop("metric"))))
    by_code = not claims and code is not None
    meta["metric"], meta["metric_source"] = (BY_CODE, "grade.py") if by_code else \
        resolve_metric(task_id, claims, hints=hints_path)
    meta.update(hints)
    meta.setdefault("medals", "always")  # MLE-bench's grading code never reads awards_medals
    meta.setdefault("score_decimals", 5)  # MLE-bench's Grader.__call__ rounds every score to 5 decimals
    meta = infer_meta(meta, public_dir, answers, hints_path)
    leaderboards = tuple(p for p in (meta_dir / "leaderboard.csv",) if p.is_file())
    if (by_code or meta.get("outputs")) and code is not None:
        meta = code_metric(meta, public_dir, code, "mlebench", leaderboards)
    description = foreign_description(meta_dir / Path(str(config.get("description", "description.md"))).name,
                                      meta_dir / "description.md", public_dir / "description.md")
    meta.setdefault("awards_medals", bool(config.get("awards_medals", True)))
    return make_task(meta, root=root, public_dir=public_dir, answers_path=answers, leaderboards=leaderboards,
                     description=description, layout="mlebench", metric_code=code)


def no_data(cid: str) -> str:
    """Why the package metadata of competition ``cid`` was skipped when no prepared data for it lies under the
    roots: its data lies in MLE-bench's default data folder outside the roots, or was not prepared."""
    default_data = mlebench_default_data_dir()
    if (default_data / cid / "prepared").is_dir():
        return (f"mlebench package metadata whose prepared data lies in MLE-bench's default data folder "
                f"{default_data}, which is not under the task roots; add {default_data} as a root")
    return (f"mlebench package metadata without prepared data under the task roots (run mlebench prepare -c "
            f"<id>, which writes to {default_data} unless given --data-dir, and give that folder as a root)")


def _grade(target: str, metric: str, classes: tuple[str, ...]) -> str:
    """The source of a fixture's ``grade.py``: MLE-bench's ``grade(submission, answers) -> float``."""
    if metric == "log_loss":
        body = (f"    p = s[{target!r}].astype(float).clip(1e-15, 1 - 1e-15)\n"
                f"    return float(log_loss(y.astype(str), np.column_stack([1 - p, p]), labels={list(classes)!r}))\n")
    else:
        body = f"    p = s[{target!r}]\n    return {FIXTURE_EXPR[metric]}\n"
    return f'''import numpy as np
import pandas as pd
from sklearn.metrics import {FIXTURE_IMPORT[metric]}

from mlebench.grade_helpers import InvalidSubmissionError


def grade(submission: pd.DataFrame, answers: pd.DataFrame) -> float:
    """Fixture grader ({metric}) in MLE-bench's convention: grade(submission, answers) -> float."""
    key = answers.columns[0]
    if len(submission) != len(answers):
        raise InvalidSubmissionError("the submission must have one row per test id")
    t = answers.astype({{key: str}}).set_index(key)
    s = submission.astype({{key: str}}).set_index(key).loc[t.index]
    y = t[{target!r}]
{body}'''


def fixture(out: Path, f: FixtureDef, source: FixtureSource) -> Path:
    """Write fixture ``f`` as MLE-bench leaves a competition: metadata in
    ``<out>/mle-bench/mlebench/competitions/<id>/{config.yaml, description.md, leaderboard.csv, grade.py}``,
    data in ``<out>/mle-bench-data/<id>/prepared/{public,private}``; returns ``<out>/mle-bench-data/<id>``."""
    t, desc, board, answers = source.task, source.description, source.board, source.answers
    src = Path(t.root)
    pkg = out / "mle-bench" / "mlebench" / "competitions" / f.id
    data = out / "mle-bench-data" / f.id / "prepared"
    pkg.mkdir(parents=True, exist_ok=True)
    config = {"id": f.id, "name": f"{t.title} ({f.id})", "competition_type": "simple",
              "awards_medals": f.awards_medals, "prizes": None,
              "description": f"mlebench/competitions/{f.id}/description.md",
              "dataset": {"answers": f"{f.id}/prepared/private/test.csv",
                          "sample_submission": f"{f.id}/prepared/public/sample_submission.csv"},
              "grader": {"name": _GRADER[t.metric],
                         "grade_fn": f"mlebench.competitions.{f.id}.grade:grade"},
              "preparer": f"mlebench.competitions.{f.id}.prepare:prepare"}
    (pkg / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (pkg / "description.md").write_text(desc, encoding="utf-8")
    # Kaggle's leaderboard export as MLE-bench ships it: best first, no rank column.
    pd.DataFrame({"scoreNullable": board, "teamId": range(1000, 1000 + len(board)),
                  "teamName": [f"team {i + 1}" for i in range(len(board))],
                  "submissionDate": "2024-01-01 00:00:00", "score": board}
                 ).to_csv(pkg / "leaderboard.csv", index=False)
    (pkg / "grade.py").write_text(_grade(t.target, t.metric, t.classes))
    copy_public(src / "public", data / "public")
    (data / "private").mkdir(parents=True, exist_ok=True)
    answers.to_csv(data / "private" / "test.csv", index=False)
    make_public_readable(data / "public")
    return data.parent


LAYOUT = TaskLayout(name="mlebench", title="MLE-bench", expects="prepared/public + prepared/private", detect=detect,
                    find=find_self(detect), load=load, fixture=fixture, package="mlebench", no_data=no_data,
                    hidden_data=HIDDEN_DATA_DIRS)

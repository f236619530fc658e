"""wmrl's own layout, the one ``wmrl tasks build`` writes the built-in suite in (``task.yaml`` in the folder)::

    task.yaml  description.md  leaderboard.csv (rank,score; or the files task.yaml lists)
    public/{train.csv,test.csv,sample_submission.csv}
    private/answers.csv                        (id column + target; never copied to a sandbox)

``task.yaml`` says everything (:class:`wmrl.tasks.spec.Task`'s fields); nothing is inferred. This layout has no
fixture writer: its folders are what :func:`wmrl.tasks.build.build_suite` writes.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from wmrl.tasks.layouts.base import TaskLayout, find_self
from wmrl.tasks.layouts.common import make_task, read_yaml
from wmrl.tasks.spec import Task


def detect(path: Path) -> bool:
    """True for a folder holding ``task.yaml``."""
    return (Path(path) / "task.yaml").is_file()


def load(root: Path, search: Sequence[Path] = ()) -> Task:
    """The task of a wmrl folder ``root`` (``search`` is not used: the folder holds all its metadata).

    Raises:
        TaskFormatError: ``task.yaml`` is not valid YAML, lacks a required key or holds an invalid value.
    """
    meta = read_yaml(root / "task.yaml")
    public_dir = root / meta.get("public_dir", "public")
    answers = root / meta.get("answers", "private/answers.csv")
    boards = meta.get("leaderboards")
    if boards is None:
        boards = [n for n in ("leaderboard.csv", "public_leaderboard.csv", "private_leaderboard.csv")
                  if (root / n).is_file()]
    leaderboards = tuple(root / b for b in boards if (root / b).is_file())
    desc_path = root / meta.get("description_file", "description.md")
    description = desc_path.read_text(encoding="utf-8") if desc_path.is_file() else ""
    meta.setdefault("id", root.name)
    return make_task(meta, root=root, public_dir=public_dir, answers_path=answers,
                     leaderboards=leaderboards, description=description, layout="wmrl")


LAYOUT = TaskLayout(name="wmrl", title="wmrl", expects="task.yaml", detect=detect, find=find_self(detect), load=load)

"""One miniature bench (grpo and wmrl, one seed, two steps, tiny model, real tasks) shared by the bench
and report tests of a pytest session: built once by whichever test asks first, through the CLI."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import yaml

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

#: A small held-out task (1,030 rows, held-out split) next to the two small train tasks.
HELDOUT_TASK = "modeldata-concrete"
_CACHE: dict[str, object] = {}


def write_mini_preset(root: Path) -> Path:
    """Build the three tasks under ``root/tasks`` and write the miniature preset ``root/mini.yaml``."""
    from wmrl.tasks.build import build_suite
    from wmrl.tasks.datasets import SMALL_TASKS

    tasks_dir = root / "tasks"
    build_suite(tasks_dir, [*SMALL_TASKS, HELDOUT_TASK])
    preset = root / "mini.yaml"
    preset.write_text(yaml.safe_dump({
        "preset": "ci-mini",
        "description": "CI miniature of the bench",
        "backbone_note": "tiny random backbone, grammar scaffold",
        "seeds": 1,
        "methods": ["grpo", "wmrl"],
        "eval_initial": True,
        "corpus": {"samples_per_task": 2, "group_size": 2, "seed": 0},
        "config": {
            "model": {"name": "tiny"},
            "scaffold": {"name": "grammar"},
            "tasks": {"root": str(tasks_dir), "train": list(SMALL_TASKS), "heldout": [HELDOUT_TASK]},
            "rollout": {"tasks_per_step": 2, "group_size": 2, "max_new_tokens": 64},
            "wmrl": {"anchor_fraction": 0.5},
            "world_model": {"fit_epochs": 1, "refresh_every_k": 1},
            "optim": {"steps": 2},
            "executor": {"workers": 2},
            "eval": {"samples_per_task": 2, "train_tasks": True},
        },
    }))
    return preset


def run_mini_bench(root: Path, overrides: tuple[str, ...] = ()) -> tuple[Path, str]:
    """``(bench folder, CLI output)`` of ``wmrl bench --preset mini.yaml --out ROOT/out --steps 2`` with
    ``--set`` ``overrides``, the tasks and preset written under ``root``."""
    from typer.testing import CliRunner

    from wmrl.cli import app

    preset = write_mini_preset(root)
    out = root / "out"
    args = ["bench", "--preset", str(preset), "--out", str(out), "--steps", "2"]
    for o in overrides:
        args += ["--set", o]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output + repr(res.exception)
    return out, res.output


def mini_bench() -> tuple[Path, str]:
    """The session's shared :func:`run_mini_bench` (built once, removed at exit)."""
    if "out" not in _CACHE:
        root = Path(tempfile.mkdtemp(prefix="wmrl-bench-mini-"))
        atexit.register(shutil.rmtree, root, True)
        _CACHE["out"], _CACHE["output"] = run_mini_bench(root)
    return _CACHE["out"], _CACHE["output"]  # type: ignore[return-value]

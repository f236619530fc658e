"""What code and command trained a run: ``provenance.json`` in the run directory.

One entry per invocation that trained or resumed the run, appended atomically once its parts are built (before
its first step), so a run stopped half-way still says which code trained it. The trainers of both tracks write
``code_version``, ``command`` (the process's command line), ``resumed`` and ``started_at``; ``wmrl bench`` adds its
own entry per run it trains with the preset's name and SHA-256. The bench tables read the commits of every entry
(``wmrl.report.bench_results``) and refuse to mix code versions unless told.
"""
from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, UTC
from pathlib import Path
from typing import Any

from wmrl import __version__
from wmrl.runs.rundir import write_json_atomic

#: The file, in the run directory: ``{"invocations": [entry, ...]}``.
PROVENANCE = "provenance.json"


def code_version() -> dict[str, Any]:
    """The code a run, bench or report ran: ``{"wmrl": package version, "commit": full git commit hash or None,
    "dirty": bool or None}``. The commit is read from the git checkout that holds the imported ``wmrl`` package
    (None for an installed wheel, or where git is missing); ``dirty`` says whether tracked files under its ``wmrl/``
    differ from the commit, in which case the commit alone does not reproduce the results. Never raises."""
    root = Path(__file__).resolve().parents[2]
    info: dict[str, Any] = {"wmrl": __version__, "commit": None, "dirty": None}

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20,
                                  check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != root:
        return info  # not a checkout of wmrl (e.g. site-packages inside some other repository)
    info["commit"] = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no", "--", "wmrl")
    info["dirty"] = None if status is None else bool(status)
    return info


def read_invocations(run_dir: str | Path) -> list[dict[str, Any]]:
    """The entries of ``run_dir``'s provenance record, oldest first; ``[]`` when it is missing or unreadable."""
    path = Path(run_dir) / PROVENANCE
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        return [dict(e) for e in data.get("invocations", [])]
    except (ValueError, TypeError, AttributeError, OSError):
        return []


def record_invocation(run_dir: str | Path, entry: dict[str, Any]) -> None:
    """Append ``entry`` to ``run_dir``'s provenance record (written atomically: a kill leaves the old record or
    the new one, never a torn file; an unreadable old record is replaced)."""
    write_json_atomic(Path(run_dir) / PROVENANCE, {"invocations": [*read_invocations(run_dir), entry]})


def record_training_start(run_dir: str | Path, resumed: bool) -> None:
    """The trainers' entry: this process's code version (:func:`code_version`), its command line, whether it
    resumed, and the UTC start time (ISO 8601)."""
    record_invocation(run_dir, {"code_version": code_version(), "command": " ".join(sys.argv),
                                "resumed": bool(resumed),
                                "started_at": datetime.now(UTC).isoformat(timespec="seconds")})

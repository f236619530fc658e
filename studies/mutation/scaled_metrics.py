"""The metric scaled by 10 %: do the metric tests notice accuracy, RMSE or log loss off by a tenth?

    PYTHONPATH=. python studies/mutation/scaled_metrics.py --date 2026-12-05 --hardware "..."

makes, for each place of ``wmrl/tasks/metrics.py`` that returns accuracy, RMSE or log loss (binary and
multiclass), two copies of the repository's ``wmrl`` and ``tests`` in a temporary folder, one with that value
multiplied by 1.1 and one by 0.9, runs the metric tests (``TESTS``) against each copy with pytest, and writes
``scaled_metrics.md`` beside this script: one row per scaled copy with the tests that failed. A row with no
failing test is a scaling the tests cannot see. mutmut does not make this mutation (it changes operators and
constants, not a result's scale), hence this script. Ends with one line and exit status 1 when a place is not
found in the file (the code changed: update ``SITES``) or a test fails with nothing scaled.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
METRICS = Path("wmrl/tasks/metrics.py")
#: The metric tests (as mutmut selects them for the metrics, ``pyproject.toml`` ``[tool.mutmut]``).
TESTS = ("tests/tasks/test_metrics_leaderboard.py", "tests/tasks/test_metrics_mutants.py")
#: (label, the exact source text of the value, which must occur once in the file).
SITES = (
    ("accuracy", "float(skm.accuracy_score(yt, yp))"),
    ("rmse", "float(np.sqrt(skm.mean_squared_error(yt, yp)))"),
    ("log_loss, binary", "float(skm.log_loss(yt, np.column_stack([1 - p1, p1]), labels=labels))"),
    ("log_loss, multiclass", "float(skm.log_loss(yt, _clip_proba(p), labels=labels))"),
)
FACTORS = (1.1, 0.9)


def failing_tests(src: Path) -> list[str]:
    """The node ids of ``TESTS`` that fail in the copy ``src`` (holding ``wmrl/`` and ``tests/``)."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider", *TESTS],
                          cwd=src, env=env, capture_output=True, text=True, check=False)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"pytest could not run the metric tests (exit {proc.returncode}):\n{proc.stdout[-2000:]}")
    return sorted({m.group(1) for m in re.finditer(r"^FAILED (\S+)", proc.stdout, re.M)})


def run(date: str, hardware: str) -> str:
    """Run every scaled copy; the Markdown of ``scaled_metrics.md``."""
    source = (ROOT / METRICS).read_text(encoding="utf-8")
    for label, text in SITES:
        if source.count(text) != 1:
            raise SystemExit(f"{METRICS}: the {label} value `{text}` occurs {source.count(text)} times, not once; "
                             "update SITES in studies/mutation/scaled_metrics.py")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp)
        for part in ("wmrl", "tests"):
            shutil.copytree(ROOT / part, src / part, ignore=shutil.ignore_patterns("__pycache__"))
        if unscaled := failing_tests(src):
            raise SystemExit(f"tests fail with nothing scaled: {', '.join(unscaled)}; fix them first")
        for label, text in SITES:
            for factor in FACTORS:
                (src / METRICS).write_text(source.replace(text, f"({text} * {factor})"), encoding="utf-8")
                failed = failing_tests(src)
                names = ", ".join(f"`{t.split('::')[-1]}`" for t in failed) or "**none**"
                rows.append(f"| {label} | x{factor} | {len(failed)} | {names} |")
        (src / METRICS).write_text(source, encoding="utf-8")
    return "\n".join([
        f"`PYTHONPATH=. python studies/mutation/scaled_metrics.py`, {date}, {hardware}: each value scaled in a "
        f"copy of `{METRICS}`, against {', '.join(f'`{t}`' for t in TESTS)}.", "",
        "| metric | scaled by | tests failed | failing tests |", "|---|---|---|---|", *rows]) + "\n"


def main() -> None:
    """Write ``scaled_metrics.md`` (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--date", required=True)
    ap.add_argument("--hardware", required=True)
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("scaled_metrics.md"))
    a = ap.parse_args()
    a.out.write_text(run(a.date, a.hardware), encoding="utf-8")
    print(a.out.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()

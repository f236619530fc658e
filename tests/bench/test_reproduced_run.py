"""The committed check that runs are deterministic given the seed across versions of the code: the ``wmrl`` seed 0
run of ``cpu-small`` rerun at a later commit (``studies/benchmark/cpu-small-repro``) equals the run of
``studies/benchmark/cpu-small-rerun`` line for line, timings aside, which is what lets the older runs of that bench
stand for the later commit (docs/benchmark.md)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

STUDIES = Path(__file__).resolve().parents[2] / "studies" / "benchmark"
ORIGINAL = STUDIES / "cpu-small-rerun" / "wmrl" / "seed0"
RERUN = STUDIES / "cpu-small-repro" / "wmrl" / "seed0"
#: Fields that measure time, CPU or memory, which differ between two runs of one computation.
TIMING = ("wall", "cpu", "time", "_s", "elapsed", "throughput", "rss", "mem")


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _strip(row: dict) -> dict:
    return {k: v for k, v in row.items() if not any(t in k for t in TIMING)}


def _commit(run: Path) -> str:
    return json.loads((run / "provenance.json").read_text(encoding="utf-8"))["invocations"][0]["code_version"]["commit"]


@pytest.mark.parametrize("name", ["metrics.jsonl", "eval.jsonl"])
def test_the_rerun_at_a_later_commit_equals_the_committed_run(name: str) -> None:
    a, b = _lines(ORIGINAL / name), _lines(RERUN / name)
    assert len(a) == len(b) > 0
    assert [_strip(x) for x in a] == [_strip(y) for y in b]


def test_the_two_runs_are_from_different_commits() -> None:
    assert _commit(ORIGINAL) != _commit(RERUN)

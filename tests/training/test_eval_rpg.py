"""DSBench's RPG in every evaluation record and in the summaries of `wmrl train` and `wmrl eval`: computed for each
task with a baseline and a gold score (whatever its reward kind), n/a with the reason otherwise."""
from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest

from wmrl.execution.types import ExecutionResult, ExecutionStatus
from wmrl.training.components import RunSummary
from wmrl.training.console import print_summary, rpg_text
from wmrl.training.evaluation import summarize_eval


def _res(tid: str, score: float | None, status: ExecutionStatus = ExecutionStatus.OK,
         reward: float | None = 0.5) -> ExecutionResult:
    return ExecutionResult("r", tid, status, score, reward, 1.0, 1.0, 0, "", "", "h")


def test_rpg_per_task_then_averaged_over_tasks_failures_count_zero():
    fail = ExecutionStatus.RUNTIME_ERROR
    ids = ["hi", "hi", "lo", "lo", "lo", "none", "flat"]
    results = [_res("hi", 0.75), _res("hi", None, fail, 0.0),  # (0.75 - 0.5) / (1 - 0.5) = 0.5; a failure: 0
               _res("lo", 4.0), _res("lo", 12.0), _res("lo", 0.0, ExecutionStatus.INFRA_ERROR, None),
               _res("none", 1.0), _res("flat", 1.0)]
    rec = summarize_eval(ids, results, step=3, split="heldout",
                         rpg_scores={"hi": (0.5, 1.0), "lo": (10.0, 2.0), "flat": (1.0, 1.0)})
    # lower is better on "lo": 4.0 -> (4 - 10) / (2 - 10) = 0.75; 12.0 is worse than the baseline -> 0; the
    # infrastructure error is left out
    assert rec["per_task"]["hi"]["rpg"] == pytest.approx(0.25)
    assert rec["per_task"]["lo"]["rpg"] == pytest.approx(0.375)
    assert rec["mean_rpg_tasks"] == pytest.approx((0.25 + 0.375) / 2) and rec["rpg_n_tasks"] == 2
    assert rec["rpg_missing"] == {"flat": "its baseline and gold scores are equal",
                                  "none": "no baseline and no gold score"}
    assert "rpg" not in rec["per_task"]["none"]
    assert rpg_text(rec) == ("0.312 (over 2 of 4 tasks (flat: its baseline and gold scores are equal; none: no "
                             "baseline and no gold score))")
    before = dict(rec, mean_rpg_tasks=0.1)
    assert rpg_text(rec, before).startswith("0.100 -> 0.312 (+0.212) (over 2 of 4 tasks")
    none = summarize_eval(["a"], [_res("a", 1.0)], step=0, split="train", rpg_scores={"a": (None, 2.0)})
    assert none["mean_rpg_tasks"] is None and none["rpg_n_tasks"] == 0
    assert rpg_text(none) == "n/a (no task has both a baseline and a gold score (a: no baseline score))"
    assert rpg_text({"mean_percentile": 0.5}).startswith("n/a (not recorded")


def test_the_train_summary_prints_rpg_or_why_not():
    from rich.console import Console

    def rec(step: int, rpg: float | None, missing: dict) -> dict:
        return {"step": step, "mean_percentile": 0.5, "valid_rate": 1.0, "medals": {}, "mean_rpg_tasks": rpg,
                "rpg_n_tasks": 0 if rpg is None else 1, "rpg_missing": missing}

    summary = RunSummary(run_dir=Path("run"), method="grpo", status="completed", steps=2, wall_s=1.0,
                         ledger={}, final_eval={"train": rec(2, 0.6, {}),
                                                "heldout": rec(2, None, {"t": "no gold score"})},
                         last_metrics={}, anchor_fraction=None, reward_true_mean_last=None,
                         initial_eval={"train": rec(0, 0.2, {})})
    buf = StringIO()
    print_summary(summary, Console(file=buf, width=250))
    text = buf.getvalue()
    assert "train: RPG (DSBench), step 0 -> step 2" in text and "0.200 -> 0.600 (+0.400)" in text
    assert "heldout (step 2): RPG (DSBench)" in text
    assert "n/a (no task has both a baseline and a gold score (t: no gold score))" in text

"""The models CLI on the tiny backbone: `wm fit` / `wm eval` on a synthetic execution log (fast),
`wm warmup` and `scaffolds` on two small built-in tasks with real sandboxed executions (slow)."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from wmrl.cli import app

runner = CliRunner()


def _write_log(path, make_task, n_groups=8, g=4):
    import numpy as np

    from wmrl.execution.log import ExecutionLog
    from wmrl.execution.types import ExecutionRequest, ExecutionResult, ExecutionStatus

    task = make_task(path.parent / "task", "binary")
    rng = np.random.default_rng(0)
    comps = {"make_pipeline(GaussianNB())": 0.2,
             "make_pipeline(RandomForestClassifier(n_estimators=50, max_depth=8, min_samples_leaf=1))": 0.8}
    log = ExecutionLog(path)
    for grp in range(n_groups):
        for i in range(g):
            c = list(comps)[rng.integers(2)]
            req = ExecutionRequest(task=task, program="print(1)", request_id=f"{grp}-{i}",
                                   meta={"prompt": "Task: synthetic.", "completion": c, "group_id": grp, "step": -1,
                                         "task_id": task.id, "stream": "warmup"})
            res = ExecutionResult(request_id=req.request_id, task_id=task.id, status=ExecutionStatus.OK, score=0.5,
                                  reward=float(comps[c] + rng.normal(scale=0.05)), wall_s=1.0, cpu_s=1.0,
                                  peak_rss_bytes=0, stdout="", stderr="", program_sha256="x")
            log.append(req, res)
    log.close()


def _write_mixed_log(path, make_task):
    """3 groups of 2 programs, each outcome class once or twice, and one infrastructure error."""
    from wmrl.execution.log import ExecutionLog
    from wmrl.execution.types import ExecutionRequest, ExecutionResult, ExecutionStatus

    task = make_task(path.parent / "task-mixed", "binary")
    rows = [  # (group, completion, program, status, reward)
        (0, "make_pipeline(GaussianNB())", "print(1)", ExecutionStatus.OK, 0.3),
        (0, "make_pipeline(RandomForestClassifier(n_estimators=50))", "print(2)", ExecutionStatus.OK, 0.7),
        (1, "make_pipeline(GaussianNB())", "import sys; sys.exit(1)", ExecutionStatus.RUNTIME_ERROR, 0.0),
        (1, "make_pipeline(GaussianNB(", "make_pipeline(GaussianNB(", ExecutionStatus.RUNTIME_ERROR, 0.0),
        (2, "make_pipeline(KNeighborsClassifier())", "print(3)", ExecutionStatus.TIMEOUT, 0.0),
        (2, "make_pipeline(DecisionTreeClassifier())", "print(4)", ExecutionStatus.INVALID_SUBMISSION, 0.0),
        (2, "make_pipeline(DecisionTreeClassifier())", "print(4)", ExecutionStatus.INFRA_ERROR, None),
    ]
    log = ExecutionLog(path)
    for i, (grp, comp, prog, status, reward) in enumerate(rows):
        req = ExecutionRequest(task=task, program=prog, request_id=f"m{i}",
                               meta={"prompt": "Task: synthetic.", "completion": comp, "group_id": grp, "step": 1,
                                     "task_id": task.id, "stream": "anchor"})
        log.append(req, ExecutionResult(request_id=req.request_id, task_id=task.id, status=status, score=None,
                                        reward=reward, wall_s=1.0, cpu_s=1.0, peak_rss_bytes=0, stdout="", stderr="",
                                        program_sha256="x"))
    log.close()


def test_wm_fit_and_eval_on_a_log(tmp_path, task_factory):
    logp = tmp_path / "ex.sqlite"
    _write_log(logp, task_factory)
    out = tmp_path / "wm"
    r = runner.invoke(app, ["wm", "fit", "--log", str(logp), "--out", str(out), "--model", "tiny",
                            "--epochs", "3", "--lr", "2e-3", "--lora-r", "4"])
    assert r.exit_code == 0, r.output
    assert "held-out metrics" in r.output and "Spearman" in r.output
    assert (out / "calibration.png").stat().st_size > 1000
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["n_heldout"] == 8 and metrics["heldout"]["spearman"] > 0.3
    r = runner.invoke(app, ["wm", "eval", "--wm", str(out), "--log", str(logp), "--model", "tiny"])
    assert r.exit_code == 0, r.output
    assert "MAE" in r.output and "fidelity card: 32 programs in 8 groups" in " ".join(r.output.split())
    # the fidelity card on a log with failures: the true class comes from each record's status and program
    mixed = tmp_path / "mixed.sqlite"
    _write_mixed_log(mixed, task_factory)
    card_json = tmp_path / "card.json"
    r = runner.invoke(app, ["wm", "eval", "--wm", str(out), "--log", str(mixed), "--model", "tiny", "--json",
                            str(card_json), "--boot", "50"])
    assert r.exit_code == 0, r.output
    card = json.loads(card_json.read_text())
    assert (card["n"], card["n_groups"], card["n_boot"]) == (6, 3, 50)
    assert card["truth_mix"] == {"syntax_error": 1 / 6, "runtime_error": 2 / 6, "no_submission": 1 / 6,
                                 "valid": 2 / 6}
    assert "infra_error" not in json.dumps(card) and "skipped_infra" in r.output  # the infrastructure error is left out
    from wmrl.world_model.regression import RegressionWorldModel

    # a kind with status probabilities gets the status figures, one without gets the reward figures only
    assert card["status_available"] == hasattr(RegressionWorldModel, "predict_outcome")
    assert (card["figures"]["status_acc1"]["value"] is not None) == card["status_available"]
    assert card["n_pairs"] == 1  # group 0 only: the failures of groups 1 and 2 share their reward
    for f in ("mae", "ece", "spearman", "pairwise_acc"):
        assert card["figures"][f]["value"] is not None, f


def test_wm_fit_saves_the_settings_a_run_compares(tmp_path, task_factory):
    """--program-features / --residual-neighbours / --neighbours-other-programs are saved with the model, so a
    run's world_model.path check (wmrl.training.parts.check_saved_settings) sees them; the generative kind refuses
    them."""
    from wmrl.world_model.base import BackboneWorldModel

    logp = tmp_path / "ex.sqlite"
    _write_log(logp, task_factory)
    out = tmp_path / "wm"
    r = runner.invoke(app, ["wm", "fit", "--log", str(logp), "--out", str(out), "--model", "tiny", "--epochs", "1",
                            "--lora-r", "0", "--program-features", "64", "--residual-neighbours", "4",
                            "--neighbours-other-programs"])
    assert r.exit_code == 0, r.output
    saved = BackboneWorldModel.read_saved_config(out)
    assert (saved["program_features"], saved["residual_neighbours"], saved["neighbours_own_program"]) == (64, 4, False)
    from wmrl.training.config import ConfigError, TrainConfig
    from wmrl.training.parts import check_saved_settings

    def cfg(method: str) -> TrainConfig:
        return TrainConfig.model_validate({"method": method, "world_model": {
            "path": str(out), "adapter": False, "program_features": 64, "residual_neighbours": 4}})

    check_saved_settings(saved, cfg("wmrl-no-recall"), out)  # a method without recall: other programs only
    with pytest.raises(ConfigError, match="neighbours_own_program"):
        check_saved_settings(saved, cfg("wmrl"), out)
    r = runner.invoke(app, ["wm", "fit", "--kind", "generative", "--log", str(logp), "--out", str(tmp_path / "g"),
                            "--model", "tiny", "--residual-neighbours", "4"])
    assert r.exit_code != 0 and "generative world model has none" in _flat(r.output), r.output
    r = runner.invoke(app, ["wm", "fit", "--log", str(logp), "--out", str(tmp_path / "n"), "--model", "tiny",
                            "--neighbours-other-programs"])
    assert r.exit_code != 0 and "chooses which executions the residual neighbours use" in _flat(r.output), r.output


def test_wm_fit_missing_log_is_a_clear_error(tmp_path):
    r = runner.invoke(app,
                      ["wm", "fit", "--log", str(tmp_path / "nope.sqlite"), "--out", str(tmp_path / "o"),
                       "--model", "tiny"])
    assert r.exit_code != 0
    assert "wm warmup" in r.output


@pytest.mark.slow
def test_warmup_and_scaffolds_commands(small_suite, tmp_path):
    from wmrl.execution.log import ExecutionLog

    logp = tmp_path / "warm.sqlite"
    r = runner.invoke(app, ["wm", "warmup", "--log", str(logp), "--tasks-dir", str(small_suite), "--model", "tiny",
                            "--samples-per-task", "2", "--scaffold", "grammar"])
    assert r.exit_code == 0, r.output
    rows = ExecutionLog(logp).records()
    assert len(rows) == 4
    assert all(row["meta"]["stream"] == "warmup" and row["meta"]["completion"].startswith("make_pipeline(")
               for row in rows)
    assert all(row["status"] == "ok" for row in rows), [row["error"] for row in rows]
    js = tmp_path / "sc.json"
    r = runner.invoke(app, ["scaffolds", "--root", str(small_suite), "--model", "tiny", "--samples", "1",
                            "--scaffold", "grammar", "--scaffold", "function", "--max-new-tokens", "96",
                            "--json", str(js)])
    assert r.exit_code == 0, r.output
    res = json.loads(js.read_text())
    rates = {row["scaffold"]: row["valid_program_rate"] for row in res["rows"]}
    assert rates["grammar"] == 1.0 and rates["function"] == 0.0  # a random model writes no valid function


def _flat(text: str) -> str:
    """CLI output without rich's error box and line wrapping: the words only, single-spaced."""
    return " ".join(text.replace("│", " ").replace("╭", " ").replace("╰", " ").split())


def test_scaffolds_uniform_refuses_free_form_scaffolds(small_suite):
    r = runner.invoke(app, ["scaffolds", "--root", str(small_suite), "--uniform", "--scaffold", "function"])
    assert r.exit_code != 0 and "no grammar to draw from uniformly" in _flat(r.output), r.output
    r = runner.invoke(app, ["scaffolds", "--root", str(small_suite), "--uniform", "--scaffold", "essay"])
    assert r.exit_code != 0 and "unknown scaffold" in _flat(r.output), r.output


def test_scaffolds_refuses_a_token_budget_below_the_longest_sentence(small_suite):
    """A budget the grammar cannot finish in is a usage error naming the option and the budget to use, before any
    sampling (no traceback)."""
    r = runner.invoke(app, ["scaffolds", "--root", str(small_suite), "--model", "tiny", "--samples", "1",
                            "--scaffold", "grammar-dense", "--max-new-tokens", "40"])
    out = _flat(r.output)
    assert r.exit_code == 2 and "--max-new-tokens" in out and "raise it to at least 6" in out, r.output
    assert "Traceback" not in r.output


@pytest.mark.slow
def test_scaffolds_uniform_reports_status_shares(small_suite, tmp_path):
    """Uniform draws from the grammar (no LM), executed for real; the shares are those of the logged statuses."""
    import random

    from wmrl.execution.log import ExecutionLog
    from wmrl.models.fail_grammar import fail_grammar_sentences
    from wmrl.tasks.datasets import SMALL_BINARY_TASK, SMALL_REGRESSION_TASK

    js, logp = tmp_path / "u.json", tmp_path / "u.sqlite"
    args = ["scaffolds", "--root", str(small_suite), "--uniform", "--scaffold", "grammar-fail", "--samples", "3",
            "--seed", "4", "--json", str(js), "--log", str(logp)]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    res = json.loads(js.read_text())
    assert res["sampler"] == "uniform" and res["model"] is None and res["seed"] == 4
    row = res["rows"][0]
    rows = ExecutionLog(logp).records()
    assert row["samples"] == len(rows) == 6 and row["gen_s_per_sample"] is None
    for status, share in row["status_shares"].items():
        assert share == pytest.approx(sum(x["status"] == status for x in rows) / 6)
    assert sum(row["status_shares"].values()) == pytest.approx(1.0)  # no infra errors here
    # seeded: task t draws from random.Random(f"{seed}-{t}"), whatever the other tasks
    for tid, kind in ((SMALL_BINARY_TASK, "classifier"), (SMALL_REGRESSION_TASK, "regressor")):
        drawn = [x["meta"]["completion"] for x in sorted(rows, key=lambda x: x["request_id"]) if x["task_id"] == tid]
        assert drawn == random.Random(f"4-{tid}").choices(fail_grammar_sentences(kind), k=3)
    assert {x["meta"]["extra"]["sampler"] for x in rows} == {"uniform"}

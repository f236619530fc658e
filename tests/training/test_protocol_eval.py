"""`wmrl eval --protocol FILE.yaml` end to end: the tiny model's initial policy on two MLE-Dojo-layout competitions
(the benchmark fixtures) under a small protocol of 2 samples x 2 turns, every turn executed in the sandbox. A
competition of the split that is missing is refused by name, then evaluated around with --allow-missing; the
protocol's settings replace the run's; avg@k, category means and the overall mean follow from the samples."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from wmrl.cli import app
from wmrl.training.config import load_config, save_config
from wmrl.runs.rundir import RunDir, read_jsonl

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
runner = CliRunner()

PROTOCOL = """\
description: two small MLE-Dojo competitions, 2 samples of 2 turns
split: [dojo-titanicp, dojo-houseprices, dojo-absent]
categories: {dojo-titanicp: classification, dojo-houseprices: regression, dojo-absent: regression}
samples_per_task: 2
max_turns: 2
temperature: 0.8
time_limit_s: 45
episode_score: best_turn
score: percentile
overall: category_mean
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from wmrl.tasks.fixtures import build_benchmark_fixtures

    base = tmp_path_factory.mktemp("proto")
    build_benchmark_fixtures(base / "bench", ("mledojo",))
    run = base / "run"
    run.mkdir()
    # A run directory as `wmrl train` leaves its config; `--checkpoint initial` rebuilds the policy from it.
    cfg = load_config(ROOT / "configs" / "tiny.yaml", [f"tasks.root={base / 'bench'}", f"run_dir={run}",
                                                       "tasks.train=[dojo-titanicp, dojo-houseprices]"])
    assert cfg.episode.max_turns == 1 and cfg.eval.samples_per_task == 1 and cfg.eval.temperature == 1.0
    save_config(cfg, RunDir(run).config)
    proto = base / "small.yaml"
    proto.write_text(PROTOCOL)
    return run, proto, base / "bench"


def _eval(run: Path, proto: Path, *extra: str):
    return runner.invoke(app, ["eval", str(run), "--checkpoint", "initial", "--protocol", str(proto), *extra])


def test_a_missing_competition_is_refused_by_name(setup):
    run, proto, _ = setup
    r = _eval(run, proto, "--json")
    out = " ".join(r.output.split())
    assert r.exit_code == 2, r.output
    assert "1 of the 3 competitions of protocol 'small' are missing" in out and "dojo-absent: not found under" in out
    assert "--allow-missing" in out
    assert not (run / "eval_cli.jsonl").exists()


def test_protocol_eval_scores_avg_at_k_with_failures_and_category_means(setup, monkeypatch):
    run, proto, bench = setup
    monkeypatch.setenv("WMRL_HOME", str(run.parent / "home"))
    r = _eval(run, proto, "--allow-missing", "--root", str(bench), "--json")
    assert r.exit_code == 0, r.output
    (rec,) = [json.loads(line) for line in r.output.splitlines() if line.startswith("{")]
    assert "not comparable with protocol 'small'" in r.output
    assert read_jsonl(run / "eval_cli.jsonl") == [rec]
    # the protocol's settings, not the run's (1 sample, 1 turn)
    assert rec["split"] == "protocol" and rec["step"] == 0 and rec["checkpoint"] == "initial"
    assert rec["max_turns"] == 2 and rec["n_samples"] == 4 and rec["protocol"]["name"] == "small"
    res = rec["protocol_result"]
    assert res["k"] == 2 and res["n_samples"] == 4 and res["missing"] == ["dojo-absent"]
    assert not res["comparable"] and "dojo-absent" in res["not_comparable"][0]
    assert list(res["per_task"]) == ["dojo-titanicp", "dojo-houseprices"]
    for tid, v in res["per_task"].items():
        o = rec["sample_outcomes"][tid]
        assert len(o["status"]) == 2  # every sample is in the denominator
        want = [b if b is not None else 0.0 for b in o["best_valid_reward"]]  # best graded turn, else 0
        assert v["scores"] == pytest.approx(want) and v["avg_at_k"] == pytest.approx(sum(want) / 2)
        assert v["n_failed"] == sum(b is None for b in o["best_valid_reward"])
    assert res["categories"] == {
        "classification": {"mean": res["per_task"]["dojo-titanicp"]["avg_at_k"], "n_tasks": 1,
                           "tasks": ["dojo-titanicp"]},
        "regression": {"mean": res["per_task"]["dojo-houseprices"]["avg_at_k"], "n_tasks": 1,
                       "tasks": ["dojo-houseprices"]}}
    assert res["overall"] == pytest.approx((res["categories"]["classification"]["mean"]
                                            + res["categories"]["regression"]["mean"]) / 2)
    # every turn ran for real, under the protocol's time limit
    from wmrl.execution.log import ExecutionLog

    ex = [e for e in ExecutionLog(RunDir(run).executions).records() if e["request_id"].startswith("eval-protocol")]
    assert 4 <= len(ex) <= 8 and {e["time_limit_s"] for e in ex} == {45.0}
    assert len(ex) == sum(rec["exec_count_turn"])


def test_protocol_options_that_contradict_it_are_refused(setup):
    run, proto, _ = setup
    for extra, msg in ((["--tasks", "dojo-titanicp"], "fixes the tasks"), (["--samples", "3"], "contradicts"),
                       (["--protocol", "nope"], "unknown protocol 'nope'")):
        args = ["eval", str(run), "--checkpoint", "initial", "--protocol", str(proto), "--allow-missing", *extra]
        r = runner.invoke(app, args)
        assert r.exit_code == 2 and msg in " ".join(r.output.split()), r.output

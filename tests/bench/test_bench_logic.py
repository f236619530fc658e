"""Bench planning, resume and table logic with a stand-in trainer that writes run directories in the
documented format (fast); the end-to-end miniature with the real trainer is test_bench_mini.py."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.support.fake_run import write_fake_run
from wmrl.bench.corpus import corpus_log, ensure_corpus
from wmrl.bench.plan import plan
from wmrl.bench.presets import METHODS, BenchError, list_presets, load_preset, method_config
from wmrl.bench.run import run_bench
from wmrl.report import bench_page, bench_results, bench_stats
from wmrl.training.config import save_config


@pytest.fixture()
def preset(tmp_path):
    p = tmp_path / "mini.yaml"
    p.write_text(yaml.safe_dump({
        "preset": "mini", "description": "test preset", "backbone_note": "tiny model", "seeds": 2,
        "methods": ["grpo", "wm", "wmrl", "wmrl-ppi"],
        "config": {"model": {"name": "tiny"}, "optim": {"steps": 3}},
    }))
    return load_preset(p)


def fake_train(calls):
    def train(cfg, resume):
        calls.append((cfg.name, resume))
        label = cfg.method
        rd = Path(cfg.run_dir)
        write_fake_run(rd, label, steps=cfg.optim.steps, seed=cfg.seed * 7 + len(label))
        save_config(cfg, rd / "config.yaml")  # the real trainer writes the resolved config
    return train


def test_preset_validation(tmp_path):
    with pytest.raises(BenchError, match="unknown bench preset"):
        load_preset("no-such-preset")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"config": {"optim": {"stepz": 3}}}))
    with pytest.raises(BenchError, match="stepz"):
        load_preset(bad)
    bad.write_text(yaml.safe_dump({"config": {}, "methods": ["grpo", "sft"]}))
    with pytest.raises(BenchError, match="unknown methods"):
        load_preset(bad)


def test_plan_same_tasks_seeds_steps(preset, tmp_path):
    runs = plan(preset, tmp_path / "out", steps=5)
    assert [(r.method, r.seed) for r in runs[:4]] == [("grpo", 0), ("wm", 0), ("wmrl", 0), ("wmrl-ppi", 0)]
    assert len(runs) == 8
    assert {r.config.optim.steps for r in runs} == {5}
    assert runs[3].config.method == "wmrl-ppi" and runs[1].config.method == "wm"
    assert runs[5].run_dir == tmp_path / "out" / "wm" / "seed1"


def test_bench_runs_skips_and_writes_table(preset, tmp_path):
    calls, logged = [], []
    out = tmp_path / "out"
    paths = run_bench(preset, out, train_fn=fake_train(calls), command="wmrl bench --preset mini",
                            log=logged.append)
    assert any("seed 0 done" in m for m in logged)  # a table after every complete seed
    assert len(calls) == 8 and not any(r for _, r in calls)
    table = (out / "table.csv").read_text()
    assert "held-out percentile" in table and "compute vs grpo" in table
    md = paths["markdown"].read_text()
    assert "wmrl bench --preset mini" in md and "Machine." in md and "tiny model" in md
    assert "OVERLAP" in md or "do not overlap" in md
    # second run: everything finished -> nothing trained
    calls.clear()
    logged.clear()
    run_bench(preset, out, train_fn=fake_train(calls), log=logged.append)
    assert calls == [] and any("seed 0 done" in m for m in logged)
    # a partial run (no complete checkpoint) restarts; a checkpointed one resumes, also when `latest`
    # names a folder that is gone (the trainer then falls back to the newest complete checkpoint)
    (out / "wm" / "seed1" / "summary.json").unlink()
    (out / "wmrl" / "seed1" / "summary.json").unlink()
    (out / "wmrl-ppi" / "seed1" / "summary.json").unlink()
    ck = out / "wmrl" / "seed1" / "checkpoints"
    (ck / "step_000002").mkdir(parents=True)
    (ck / "step_000002" / "trainer_state.json").write_text("{}")
    (ck / "latest").write_text("step_000002")
    ck2 = out / "wmrl-ppi" / "seed1" / "checkpoints"
    (ck2 / "step_000001").mkdir(parents=True)
    (ck2 / "step_000001" / "trainer_state.json").write_text("{}")
    (ck2 / "latest").write_text("step_000002")
    (out / "wm" / "seed1" / "checkpoints" / "step_000001").mkdir(parents=True)  # incomplete: no trainer_state
    run_bench(preset, out, train_fn=fake_train(calls), log=lambda s: None)
    assert sorted(calls) == [("wm-seed1", False), ("wmrl-ppi-seed1", True), ("wmrl-seed1", True)]


def test_bench_records_the_code_of_each_invocation(preset, tmp_path, monkeypatch):
    out = tmp_path / "out"
    versions = iter([{"wmrl": "0.1.0", "commit": "a" * 40, "dirty": False}] * 2
                    + [{"wmrl": "0.1.0", "commit": "b" * 40, "dirty": True}])
    monkeypatch.setattr("wmrl.bench.run.code_version", lambda: next(versions))
    run_bench(preset, out, seeds=1, methods=["grpo"], train_fn=fake_train([]), log=lambda s: None)
    md = run_bench(preset, out, seeds=1, methods=["grpo"], train_fn=fake_train([]), log=lambda s: None)["markdown"]
    assert json.loads((out / "bench.json").read_text())["code_versions"] == [{"wmrl": "0.1.0", "commit": "a" * 40,
                                                                              "dirty": False}]
    assert f"**Code.** {'a' * 40}\n" in md.read_text()
    # a resume from other code: both are recorded, and the page says the results mix them
    md = run_bench(preset, out, seeds=1, methods=["grpo"], train_fn=fake_train([]), log=lambda s: None)["markdown"]
    assert len(json.loads((out / "bench.json").read_text())["code_versions"]) == 2
    assert "2 code versions (the runs are not all from one commit)" in md.read_text()
    assert f"{'b' * 40} with uncommitted changes" in md.read_text()


def test_code_version_reads_the_checkout_holding_the_package():
    from wmrl.runs.provenance import code_version

    v = code_version()
    root = Path(__file__).resolve().parents[2]
    if (root / ".git").exists():
        import subprocess

        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
        assert v["commit"] == head and isinstance(v["dirty"], bool)
    else:
        assert v["commit"] is None


def test_bench_refuses_other_settings(preset, tmp_path):
    out = tmp_path / "out"
    run_bench(preset, out, seeds=1, methods=["grpo"], train_fn=fake_train([]), log=lambda s: None)
    with pytest.raises(BenchError, match="other settings"):
        run_bench(preset, out, seeds=1, steps=9, methods=["grpo"], train_fn=fake_train([]), log=lambda s: None)


def test_aggregate_numbers(preset, tmp_path):
    out = tmp_path / "out"
    run_bench(preset, out, train_fn=fake_train([]), log=lambda s: None)
    res = bench_results.collect(out)
    assert len(res) == 8 and set(res["method"]) == {"grpo", "wm", "wmrl", "wmrl-ppi"}
    rows = {r.method: r for r in bench_stats.aggregate(res)}
    assert rows["grpo"].compute_ratio == pytest.approx(1.0)
    assert 0 < rows["wmrl"].compute_ratio < 1
    assert rows["wm"].executions < rows["wmrl"].executions < rows["grpo"].executions
    assert rows["wmrl"].paired.n == 2 and rows["grpo"].paired is None
    assert 0 <= rows["wmrl"].percentile.mean <= 1
    meta = json.loads((out / "bench.json").read_text())
    assert meta["machine"]["cpu_count"] >= 1


def test_cli_dry_run_and_table_only(preset, tmp_path):
    from typer.testing import CliRunner

    from wmrl.cli import app

    out = tmp_path / "out"
    runner = CliRunner()
    res = runner.invoke(app, ["bench", "--preset", str(preset.path), "--out", str(out), "--dry-run",
                              "--seeds", "1", "--methods", "grpo,wmrl"])
    assert res.exit_code == 0, res.output
    assert "grpo" in res.output and "new" in res.output and not out.exists()
    res = runner.invoke(app, ["bench", "--preset", str(preset.path), "--out", str(out), "--table-only"])
    assert res.exit_code == 2 and "no finished bench run" in res.output
    run_bench(preset, out, seeds=1, train_fn=fake_train([]), log=lambda s: None)
    (out / "table.csv").unlink()
    res = runner.invoke(app, ["bench", "--preset", str(preset.path), "--out", str(out), "--table-only"])
    assert res.exit_code == 0, res.output
    assert (out / "table.csv").is_file() and "held-out percentile" in res.output
    res = runner.invoke(app, ["bench", "--preset", "nope"])
    assert res.exit_code == 2 and "unknown bench preset" in res.output


def test_shipped_presets_validate():
    names = list_presets()
    assert {"cpu-small", "cpu-lm", "gpu-paper"} <= set(names)
    for n in names:
        p = load_preset(n)  # builds every method's config with the trainer's loader
        assert p.backbone_note and p.description
        assert {"grpo", "wm", "wmrl-raw", "wmrl"} <= set(p.methods)  # at least the paper's four arms
        assert set(p.methods) <= set(METHODS)
    small = load_preset("cpu-small")
    runs = plan(small, Path("/tmp/unused"))
    # the paper's four arms and more
    assert len(runs) == small.seeds * len(small.methods) and "wmrl-raw" in small.methods
    assert {r.config.model.name for r in runs} == {"tiny"} and {r.config.scaffold.name for r in runs} == {"grammar"}
    assert [r.config.eval.at_start for r in runs[:2]] == [True, False]  # step-0 eval once per seed (grpo)
    gpu = load_preset("gpu-paper")
    cfg = method_config(gpu, "wmrl", 0, Path("/tmp/unused"))
    assert cfg.executor.kind == "ray" and "/" in cfg.model.name


def test_recorded_command_repeats_the_run(monkeypatch):
    from wmrl.report.cli import command_line as _command

    monkeypatch.setenv("WMRL_TASKS_DIR", "/data/my tasks")
    for var in ("WMRL_HOME", "OMP_NUM_THREADS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # what `wmrl bench` sets before torch loads
    cmd = _command(["bench"], {"--preset": "cpu-small", "--out": None, "--seeds": 2, "--steps": 5},
                   [("--set", "optim.lr=0.01")])
    assert cmd == ("WMRL_TASKS_DIR='/data/my tasks' OMP_WAIT_POLICY=PASSIVE wmrl bench --preset cpu-small --seeds 2 "
                   "--steps 5 --set optim.lr=0.01")


def test_world_model_quality_on_anchors_by_hand(tmp_path):
    from wmrl.report.runs import load_run

    rd = tmp_path / "wmrl" / "seed0"
    rd.mkdir(parents=True)
    (rd / "config.yaml").write_text("method: wmrl\n")

    def line(step, group, stream, r, r_hat):
        return json.dumps({"step": step, "group": group, "stream": stream, "reward_true": r, "reward_wm": r_hat})

    samples = [
        line(1, 0, "anchor", 0.1, 0.2), line(1, 0, "anchor", 0.5, 0.4), line(1, 0, "anchor", 0.9, 0.3),  # 2 of 3 pairs
        line(2, 0, "anchor", 0.2, 0.1), line(2, 0, "anchor", 0.6, 0.6),                             # 1 of 1 pair
        line(2, 0, "anchor", None, 0.9),   # infrastructure failure: no pair
        line(2, 1, "wm", None, 0.5),       # world-model group: not executed
    ]
    (rd / "samples.jsonl").write_text("\n".join(samples) + "\n")
    cal = [
        {"step": 1, "mode": "identity", "anchor_wm": [0.2, 0.4, 0.3], "anchor_wm_calibrated": [0.2, 0.4, 0.3],
         "anchor_true": [0.1, 0.5, 0.9]},
        {"step": 2, "mode": "isotonic", "anchor_wm": [0.1, 0.6], "anchor_wm_calibrated": [0.25, 0.5],
         "anchor_true": [0.2, 0.6]},
    ]
    (rd / "calibration.jsonl").write_text("\n".join(json.dumps(c) for c in cal) + "\n")
    (rd / "metrics.jsonl").write_text("\n".join(json.dumps({"step": s, "alpha": a}) for s, a in ((1, 0.2),
                                                                                                 (2, 0.6))) + "\n")

    q = bench_results.world_model_quality(load_run(rd))
    assert all(q[f"wm_{k}"] != q[f"wm_{k}"] for k in bench_results.FIDELITY_COLUMNS)  # no fidelity.json: NaN
    card = {"figures": {"status_acc1": {"value": 0.75, "lo": 0.5, "hi": 1.0}, "failure_auc": {"value": None},
                        "ece": {"value": 0.04}, "mae": {"value": 0.12}}}
    (rd / "fidelity.json").write_text(json.dumps(card))
    q = bench_results.world_model_quality(load_run(rd))
    assert (q["wm_status_acc1"], q["wm_ece"], q["wm_mae"]) == (0.75, 0.04, 0.12)
    assert q["wm_failure_auc"] != q["wm_failure_auc"]  # undefined in the card (one class only): NaN, shown n/a
    assert q["wm_anchor_pairs"] == 5
    assert q["wm_pairwise_accuracy"] == pytest.approx(3 / 4)
    # ranks of r_hat [0.2, 0.4, 0.3, 0.1, 0.6] = [2, 4, 3, 1, 5]; of r [0.1, 0.5, 0.9, 0.2, 0.6] = [1, 3, 5, 2, 4]
    d2 = (2 - 1) ** 2 + (4 - 3) ** 2 + (3 - 5) ** 2 + (1 - 2) ** 2 + (5 - 4) ** 2
    assert q["wm_spearman"] == pytest.approx(1 - 6 * d2 / (5 * (25 - 1)))
    # only the isotonic step counts: (0.05^2 + 0.1^2) / (0.1^2 + 0.0^2) = 1.25
    assert q["debias_sq_err_ratio"] == pytest.approx(1.25)
    assert q["alpha_mean"] == pytest.approx(0.4)

    # grpo: no world model, nothing to report
    g = tmp_path / "grpo" / "seed0"
    g.mkdir(parents=True)
    (g / "config.yaml").write_text("method: grpo\n")
    (g / "samples.jsonl").write_text(line(1, 0, "anchor", 0.3, None) + "\n")
    (g / "metrics.jsonl").write_text(json.dumps({"step": 1, "alpha": 1.0}) + "\n")
    qg = bench_results.world_model_quality(load_run(g))
    assert qg["wm_anchor_pairs"] == 0 and all(qg[k] != qg[k] for k in bench_results.WM_QUALITY_COLUMNS[1:])  # NaN


def test_run_dynamics_by_hand(tmp_path):
    from wmrl.report.runs import load_run

    rd = tmp_path / "wmrl" / "seed0"
    rd.mkdir(parents=True)
    (rd / "config.yaml").write_text("method: wmrl\n")
    steps = [
        {"step": 1, "wm_kendall_tau": None, "wm_favourite_regret": None, "n_recalled": 0, "n_wm_samples": 16,
         "calibrator_mode": "identity", "policy_distinct_programs": 4.0, "policy_entropy": 6.0},
        {"step": 2, "wm_kendall_tau": 0.5, "wm_favourite_regret": 0.2, "n_recalled": 3, "n_wm_samples": 12,
         "calibrator_mode": "isotonic", "policy_distinct_programs": 2.0, "policy_entropy": 3.0},
        {"step": 3, "wm_kendall_tau": -0.1, "wm_favourite_regret": 0.0, "n_recalled": 5, "n_wm_samples": 12,
         "calibrator_mode": "isotonic", "policy_distinct_programs": 1.0, "policy_entropy": 1.0},
    ]
    (rd / "metrics.jsonl").write_text("\n".join(json.dumps(s) for s in steps) + "\n")
    d = bench_results.run_dynamics(load_run(rd))
    assert d["wm_kendall_tau"] == pytest.approx(0.2) and d["wm_favourite_regret"] == pytest.approx(0.1)
    assert d["recall_hit_rate"] == pytest.approx(8 / 40)
    assert d["calibrator_fitted_steps"] == pytest.approx(2 / 3)
    assert d["final_distinct_programs"] == pytest.approx(7 / 3) and d["final_policy_entropy"] == pytest.approx(10 / 3)
    g = tmp_path / "grpo" / "seed0"
    g.mkdir(parents=True)
    (g / "config.yaml").write_text("method: grpo\n")
    (g / "metrics.jsonl").write_text(json.dumps({"step": 1, "alpha": 1.0, "n_wm_samples": 0}) + "\n")
    dg = bench_results.run_dynamics(load_run(g))
    assert all(dg[k] != dg[k] for k in bench_results.DYNAMICS_COLUMNS)  # NaN: nothing logged


def test_train_task_evaluations_from_wmrl_eval_enter_the_table(preset, tmp_path):
    """Runs that did not evaluate their train tasks get them from `wmrl eval --train-tasks` (eval_cli.jsonl,
    `--checkpoint initial` for step 0): the table gains a train-task column and the learning notes a
    train-task line, with the direction of the change."""
    out = tmp_path / "out"
    run_bench(preset, out, methods=["grpo", "wmrl"], train_fn=fake_train([]), log=lambda s: None)
    table = bench_page.bench_table(bench_stats.aggregate(bench_results.collect(out)))
    assert "train-task percentile" not in table.columns
    finals = {("grpo", 0): 0.70, ("grpo", 1): 0.74, ("wmrl", 0): 0.60, ("wmrl", 1): 0.66}
    for (method, seed), pct in finals.items():
        recs = [{"step": 3, "split": "train", "checkpoint": "step_000003", "mean_percentile": pct}]
        if method == "grpo":
            recs.insert(0, {"step": 0, "split": "train", "checkpoint": "initial", "mean_percentile": 0.5 + 0.02 * seed})
        recs.append({"step": 3, "split": "custom", "checkpoint": "step_000003", "mean_percentile": 0.0})  # not train
        (out / method / f"seed{seed}" / "eval_cli.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    res = bench_results.collect(out).set_index(["method", "seed"])
    assert res.loc[("wmrl", 1), "train_percentile"] == pytest.approx(0.66)
    assert res.loc[("grpo", 1), "initial_train_percentile"] == pytest.approx(0.52)
    assert pd.isna(res.loc[("wmrl", 1), "initial_train_percentile"])
    results = bench_results.collect(out)
    rows = bench_stats.aggregate(results) + [bench_stats.initial_row(results)]
    table = bench_page.bench_table(rows).to_frame().set_index("method")
    assert table.loc["grpo", "train-task percentile"] == "0.720 ± 0.020"
    assert table.loc["wmrl", "train-task percentile"] == "0.630 ± 0.030"
    assert table.loc[bench_stats.INITIAL, "train-task percentile"] == "0.510 ± 0.010"
    notes = [n for n in bench_stats.learning_notes(results) if "train-task" in n]
    # grpo: +0.20 and +0.22 over the initial 0.50, 0.52 -> 0.210 ± 0.010, better; wmrl: +0.10, +0.14
    assert notes[0] == ("grpo vs the initial policy: train-task change 0.210 ± 0.010 over 2 seed(s), more than "
                        "2 SE above zero: the policy got better.")
    assert notes[1].startswith("wmrl vs the initial policy: train-task change 0.120 ± 0.020 over 2 seed(s), more")


@pytest.mark.parametrize("corpus, match", [
    ([1, 2], "must be a mapping"),
    ({"samples": 4}, "unknown corpus keys"),
    ({"samples_per_task": 6, "group_size": 4}, "must divide"),
    ({"seed": -1}, "corpus.seed must be an integer >= 0"),
    ({"group_size": True}, "corpus.group_size must be an integer >= 1"),
])
def test_preset_corpus_is_validated(tmp_path, corpus, match):
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({"config": {}, "methods": ["grpo", "wmrl"], "corpus": corpus}))
    with pytest.raises(BenchError, match=match):
        load_preset(p)


def test_shared_corpus_goes_to_the_world_model_runs_only(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({"config": {}, "methods": ["grpo", "wm", "wmrl"], "corpus": {"samples_per_task": 8}}))
    preset = load_preset(p)
    assert preset.corpus == {"samples_per_task": 8, "group_size": 4, "seed": 0}
    runs = {r.method: r.config for r in plan(preset, tmp_path / "out", seeds=1)}
    assert runs["grpo"].world_model.warmup_corpus is None
    for m in ("wm", "wmrl"):
        assert runs[m].world_model.warmup_corpus == str(corpus_log(tmp_path / "out"))


def test_shared_corpus_follows_the_bench_overrides_and_refuses_a_stale_one(tmp_path, monkeypatch):
    from wmrl.training import parts

    made = []

    def fake_collect(cfg, log_path, *, samples_per_task, group_size, seed):
        made.append((list(cfg.tasks.train), cfg.rollout.temperature))
        return {"executions": 2, "compute_cpu_s": 1.0, "wall_s": 1.0}

    monkeypatch.setattr(parts, "collect_corpus", fake_collect)
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({"config": {"tasks": {"train": ["a", "b"]}}, "methods": ["wm"],
                                 "corpus": {"samples_per_task": 2, "group_size": 2}}))
    preset = load_preset(p)
    out = tmp_path / "out"
    rec = ensure_corpus(preset, out, log=lambda s: None, overrides=["tasks.train=[b]", "rollout.temperature=0.7"])
    assert made == [(["b"], 0.7)] and rec["settings"]["tasks"]["train"] == ["b"]
    # the same settings: reused as it is; other settings: refused by name, nothing collected
    assert ensure_corpus(preset, out, log=lambda s: None,
                         overrides=["tasks.train=[b]", "rollout.temperature=0.7"]) == rec
    with pytest.raises(BenchError, match="other settings.*rollout.*tasks"):
        ensure_corpus(preset, out, log=lambda s: None)
    assert len(made) == 1


@pytest.mark.parametrize("extra, match", [
    ({"seeds": "abc"}, "seeds must be an integer"), ({"seeds": None}, "seeds must be an integer"),
    ({"seeds": 1.7}, "seeds must be an integer"), ({"eval_initial": "false"}, "eval_initial must be true or false"),
    ({"expected_hours": "lots"}, "expected_hours"), ({"methods": "grpo"}, "methods must be a list"),
])
def test_preset_top_level_fields_are_validated(tmp_path, extra, match):
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump({"config": {}, **extra}))
    with pytest.raises(BenchError, match=match):
        load_preset(p)


def test_a_bench_whose_every_run_fails_says_so(preset, tmp_path):
    def broken(cfg, resume):
        raise RuntimeError("no model here")

    with pytest.raises(BenchError,
                       match=r"all 2 planned runs failed \(the first: grpo seed 0: RuntimeError: no model here\)"):
        run_bench(preset, tmp_path / "out", seeds=1, methods=["grpo", "wmrl"], train_fn=broken, log=lambda s: None)


def test_two_invocations_at_once_share_a_folder_without_touching_each_others_runs(preset, tmp_path):
    """A second bench on the same folder skips the run the first one is training (a run that has not
    checkpointed yet would otherwise look abandoned and be removed), and bench.json keeps both plans."""
    import threading

    out = tmp_path / "out"
    started, release = threading.Event(), threading.Event()
    first_calls: list = []
    inner = fake_train(first_calls)

    def slow_train(cfg, resume):  # the first invocation: grpo seed 0 stays "partial" until released
        Path(cfg.run_dir).mkdir(parents=True, exist_ok=True)
        (Path(cfg.run_dir) / "train.log").write_text("started\n")
        started.set()
        assert release.wait(30)
        inner(cfg, resume)

    first = threading.Thread(target=run_bench, args=(preset, out), kwargs=dict(
        seeds=1, methods=["grpo"], train_fn=slow_train, log=lambda s: None, command="first"))
    first.start()
    assert started.wait(30)
    second_calls: list = []
    logged: list[str] = []
    run_bench(preset, out, seeds=1, methods=["grpo", "wmrl"], train_fn=fake_train(second_calls),
              log=logged.append, command="second")
    assert (out / "grpo" / "seed0" / "train.log").read_text() == "started\n"  # left to its trainer
    assert len(second_calls) == 1 and "grpo" not in second_calls[0][0]  # only wmrl seed 0 trained there
    assert any("grpo seed 0: being trained by another bench invocation" in m for m in logged), logged
    release.set()
    first.join(30)
    assert len(first_calls) == 1 and (out / "grpo" / "seed0" / "summary.json").is_file()
    meta = json.loads((out / "bench.json").read_text())
    assert meta["commands"] == ["first", "second"]
    assert {(r["method"], r["seed"]) for r in meta["runs"]} == {("grpo", 0), ("wmrl", 0)}
    assert meta["methods"] == ["grpo", "wmrl"]


def test_a_second_invocation_waits_for_the_corpus_being_collected(tmp_path, monkeypatch):
    import threading

    from wmrl.training import parts

    collecting, release = threading.Event(), threading.Event()
    made = []

    def fake_collect(cfg, log_path, *, samples_per_task, group_size, seed):
        made.append(seed)
        collecting.set()
        assert release.wait(30)
        return {"executions": 2, "compute_cpu_s": 1.0, "wall_s": 1.0}

    monkeypatch.setattr(parts, "collect_corpus", fake_collect)
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({"config": {}, "methods": ["wm"], "corpus": {"samples_per_task": 4}}))
    preset = load_preset(p)
    out = tmp_path / "out"
    records: dict[str, object] = {}
    first = threading.Thread(target=lambda: records.update(first=ensure_corpus(preset, out, log=lambda s: None)))
    first.start()
    assert collecting.wait(30)
    logged: list[str] = []
    second = threading.Thread(target=lambda: records.update(second=ensure_corpus(preset, out, log=logged.append)))
    second.start()
    second.join(1.0)
    assert second.is_alive() and "second" not in records  # waiting, not collecting again or removing the folder
    release.set()
    first.join(30)
    second.join(30)
    assert made == [0] and records["first"] == records["second"]
    assert any("being collected by another bench invocation" in m for m in logged)

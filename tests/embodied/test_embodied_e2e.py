"""End to end on one task with a tiny policy (the ``tiny`` preset, seconds): only anchors' success enters
the gradient, the progress predictor scores every episode, resume continues exactly, the CLI and the bench
run and read back."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("metaworld")

from wmrl.embodied import environment as E
from wmrl.embodied import trainer as T
from wmrl.embodied.config import load_config
from wmrl.runs.rundir import read_jsonl


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("wmrl-home")


@pytest.fixture(autouse=True)
def _home(home, monkeypatch) -> None:
    monkeypatch.setenv("WMRL_HOME", str(home))


def _cfg(run_dir: Path, *extra: str):
    return load_config(preset="tiny", overrides=[f"run_dir={run_dir}", "eval.at_start=false", *extra])


def _policy(run_dir: Path) -> dict[str, torch.Tensor]:
    ck = (run_dir / "checkpoints" / (run_dir / "checkpoints" / "latest").read_text().strip())
    return torch.load(ck / "policy" / "policy.pt", weights_only=False)["state_dict"]


def _same_policy(a: Path, b: Path) -> bool:
    pa, pb = _policy(a), _policy(b)
    return all(torch.equal(pa[k], pb[k]) for k in pa)


def _flipping_rollout(monkeypatch, which: dict[int, set[int]]) -> None:
    """Make training roll-out number s (1-based; the environment's, not the evaluation's) report the opposite
    success for the episode indices in which[s]."""
    real = E.rollout
    calls = {"n": 0}

    def fake(pool, states, act, instr, rng=None):
        eb = real(pool, states, act, instr, rng)
        calls["n"] += 1
        for i in which.get(calls["n"], ()):
            eb.success[i] = 1.0 - eb.success[i]
        return eb

    monkeypatch.setattr(E, "rollout", fake)


def _streams(run_dir: Path) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for r in read_jsonl(run_dir / "samples.jsonl"):
        out.setdefault(r["step"], []).append(r["stream"])
    return out


def test_only_anchor_success_enters_the_gradient(tmp_path, monkeypatch) -> None:
    base = tmp_path / "base"
    T.run_embodied(_cfg(base), progress=False)
    streams = _streams(base)
    G = 2
    assert set(streams) == {1, 2, 3}
    assert all("anchor" in s and "wm" in s for s in streams.values())  # both streams every step
    # the first episode of every world-model group reports the opposite success: nothing may change
    wm_first = {s: {i for i, k in enumerate(v) if k == "wm" and i % G == 0} for s, v in streams.items()}
    _flipping_rollout(monkeypatch, wm_first)
    flipped_wm = tmp_path / "flipped_wm"
    T.run_embodied(_cfg(flipped_wm), progress=False)
    assert _same_policy(base, flipped_wm)
    a, b = read_jsonl(base / "samples.jsonl"), read_jsonl(flipped_wm / "samples.jsonl")
    assert [x["advantage"] for x in a] == [x["advantage"] for x in b]
    assert all(x["success_observed"] is None for x in a if x["stream"] == "wm")
    assert all(x["success_observed"] is not None for x in a if x["stream"] == "anchor")
    # the same flip on anchor episodes changes the update (so the check above can fail)
    anc_first = {s: {i for i, k in enumerate(v) if k == "anchor" and i % G == 0} for s, v in streams.items()}
    _flipping_rollout(monkeypatch, anc_first)
    flipped_anchor = tmp_path / "flipped_anchor"
    T.run_embodied(_cfg(flipped_anchor), progress=False)
    assert not _same_policy(base, flipped_anchor)


@pytest.mark.parametrize("recipe", ["wmrl", "grpo", "wm"])
def test_progress_predictor_scores_every_episode(tmp_path, recipe) -> None:
    d = tmp_path / recipe
    T.run_embodied(_cfg(d, f"method={recipe}"), progress=False)
    samples = read_jsonl(d / "samples.jsonl")
    for m in read_jsonl(d / "metrics.jsonl"):
        mine = [s for s in samples if s["step"] == m["step"]]
        assert m["wm_episodes_scored"] == m["n_episodes"] == len(mine) == 8
        assert m["wm_states_scored"] == sum(s["length"] + 1 for s in mine)  # every visited state
        assert all(np.isfinite(s["reward_wm"]) and 0.0 <= s["reward_wm"] <= 1.0 for s in mine)
    n_anchor = {"wmrl": None, "grpo": 8, "wm": 0}[recipe]
    if n_anchor is not None:
        assert all(m["n_anchor_episodes"] == n_anchor for m in read_jsonl(d / "metrics.jsonl"))


def test_resume_continues_exactly_and_cli(tmp_path) -> None:
    from typer.testing import CliRunner

    from wmrl.cli import app

    full = tmp_path / "full"
    r = CliRunner().invoke(app, ["embodied", "train", "--preset", "tiny", "--no-progress", "--set", f"run_dir={full}",
                                 "--set", "optim.steps=4", "--set", "checkpoint_every=2",
                                 "--set", "eval.at_start=false"])
    assert r.exit_code == 0, r.output
    cut = tmp_path / "cut"
    out = T.run_embodied(_cfg(cut, "optim.steps=4", "checkpoint_every=2"), stop_after_step=3, progress=False)
    assert out["stopped_at"] == 3
    # a torn line after the checkpoint, as a kill mid-write leaves it, is dropped on resume
    with open(cut / "metrics.jsonl", "a") as fh:
        fh.write('{"step": 4, "torn"')
    with pytest.raises(T.RunDirError, match="already holds a run"):
        T.run_embodied(_cfg(cut, "optim.steps=4", "checkpoint_every=2"), progress=False)
    r = CliRunner().invoke(app, ["embodied", "train", "--resume", str(cut), "--no-progress"])
    assert r.exit_code == 0, r.output
    keys = ("step", "reward_wm_mean", "alpha", "loss", "n_anchor_groups", "cum_env_steps")
    ma, mb = read_jsonl(full / "metrics.jsonl"), read_jsonl(cut / "metrics.jsonl")
    assert [m["step"] for m in mb] == [1, 2, 3, 4]
    assert [[m[k] for k in keys] for m in ma] == [[m[k] for k in keys] for m in mb]
    assert _same_policy(full, cut)
    sa, sb = json.loads((full / "summary.json").read_text()), json.loads((cut / "summary.json").read_text())
    assert sa["final"] == sb["final"] and sa["success_labels"] == sb["success_labels"]
    # an edited config is refused on resume
    (cut / "config.yaml").write_text((cut / "config.yaml").read_text().replace("steps: 4", "steps: 5"))
    r = CliRunner().invoke(app, ["embodied", "train", "--resume", str(cut), "--no-progress"])
    assert r.exit_code == 2 and "changed after the run saved it" in r.output


def test_bench_runs_and_reads_back(tmp_path) -> None:
    from wmrl.embodied.bench import run_bench

    out = tmp_path / "bench"
    res = run_bench(out, preset="tiny", recipes=["sft", "wmrl"], seeds=[0, 1])
    assert [r["method"] for r in res["table"]] == ["sft", "wmrl"] and not res["failed"]
    assert res["table"][0]["n_seeds"] == 2 and res["table"][1]["train_se"] is not None
    table = (out / "table.md").read_text()
    assert "WMRL (anchors + debias + denoise)" in table and "Ordering" in table
    stamp = (out / "wmrl-s0" / "summary.json").stat().st_mtime_ns
    again = run_bench(out, preset="tiny", recipes=["sft", "wmrl"], seeds=[0, 1])
    assert (out / "wmrl-s0" / "summary.json").stat().st_mtime_ns == stamp  # read back, not re-run
    assert again["table"] == res["table"]


def test_eval_cli_and_wm_report(tmp_path) -> None:
    from typer.testing import CliRunner

    from wmrl.cli import app
    from wmrl.embodied.bench import _auc, collapse_study

    d = tmp_path / "run"
    T.run_embodied(_cfg(d, "optim.steps=2", "checkpoint_every=1"), progress=False)
    r = CliRunner().invoke(app, ["embodied", "eval", str(d), "--checkpoint", "1", "--samples", "2"])
    assert r.exit_code == 0, r.output
    assert "train: success" in r.output and "heldout: success" in r.output
    recs = read_jsonl(d / "eval_cli.jsonl")
    assert [x["split"] for x in recs] == ["train", "heldout"] and recs[0]["n_episodes"] == 4  # 2 states x 2
    assert recs[0]["step"] == 1 and recs[0]["checkpoint"] == "1"
    r = CliRunner().invoke(app, ["embodied", "eval", str(d), "--checkpoint", "7"])
    assert r.exit_code == 2 and "not found" in r.output
    res = collapse_study(load_config(preset="tiny"), "train", 1)
    assert set(res["collapses"]) == {"shaping", "peak", "final"} and res["n_episodes"] == 2
    assert _auc(np.array([0.9, 0.1, 0.5]), np.array([1.0, 0.0, 0.0])) == 1.0
    assert _auc(np.array([0.5, 0.5]), np.array([1.0, 0.0])) == 0.5
    assert _auc(np.array([0.5]), np.array([1.0])) is None


def test_heldout_tasks_are_evaluated_never_trained(tmp_path) -> None:
    d = tmp_path / "ht"
    summ = T.run_embodied(_cfg(d, "optim.steps=1", "suite.heldout_tasks=[coffee-button-v3]"), progress=False)
    assert set(summ["final"]) == {"train", "heldout", "heldout_tasks"}
    assert all(s["state"].startswith("reach-v3#") for s in read_jsonl(d / "samples.jsonl"))
    ev = [r for r in read_jsonl(d / "eval.jsonl") if r["split"] == "heldout_tasks"]
    assert list(ev[0]["per_task"]) == ["coffee-button-v3"] and ev[0]["n_episodes"] == 2

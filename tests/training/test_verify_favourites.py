"""Favourite verification (wmrl.routing.verify_favourites, wmrl.step.verify): each world-model group's favourite is
executed unless the run executed it before, trains on its true reward, and is counted as training compute."""
from __future__ import annotations

import json
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np
import pytest
from tests.support.fakes import true_reward
from tests.training.test_loop_fakes import cfg_for, comps

from wmrl.runs.rundir import RunDir, read_jsonl
from wmrl.step.verify import favourites, verify_favourites
from wmrl.training.config import ConfigError, load_config
from wmrl.training.run import run_training
from wmrl.trajectory import Trajectory


@dataclass
class _Req:
    request_id: str
    program: str
    trajectory: Trajectory | None


@dataclass
class _Res:
    status: str
    reward: float | None


class _Executor:
    def __init__(self, fail: set[str] = frozenset()):
        self.seen: list[_Req] = []
        self.fail = fail

    def submit(self, req):
        self.seen.append(req)
        f: Future = Future()
        f.set_result(_Res("infra_error", None) if req.program in self.fail else _Res("ok", float(len(req.program))))
        return f


def _requests(completions):
    def make(idx):
        return [(int(i), _Req(f"s1-g0-i{i}", completions[i], Trajectory("anchor", "r", 1, 0, int(i), "t", "p",
                                                                        completions[i]))) for i in idx]
    return make


def test_favourites_are_the_top_scored_sample_of_each_group_ties_first():
    gid = np.array([0, 0, 0, 1, 1, 2, 2])
    r_hat = np.array([0.2, 0.9, 0.9, 0.5, 0.1, 0.3, 0.3])
    assert favourites(gid, r_hat, np.array([0, 1, 2])).tolist() == [1, 3, 5]
    assert favourites(gid, r_hat, np.array([2, 7])).tolist() == [5]  # a group without samples is skipped


def test_only_unexecuted_favourites_run_once_per_program_and_a_failure_stays_unverified():
    # groups 0 and 1 share task t and favourite program "bbb"; group 2's favourite "cc" was executed before
    # (recalled 0.7); group 3's favourite "dddd" fails for infrastructure reasons; group 4 is an anchor group.
    gid = np.array([0, 0, 1, 1, 2, 2, 3, 3, 4, 4])
    comp = ["a", "bbb", "bbb", "e", "cc", "f", "dddd", "g", "hhhhh", "i"]
    r_hat = np.array([0.1, 0.9, 0.8, 0.2, 0.9, 0.1, 0.9, 0.1, 0.9, 0.1])
    recalled = np.full(10, np.nan)
    recalled[4] = 0.7
    ex = _Executor(fail={"dddd"})
    v = verify_favourites(gid, r_hat, np.array([0, 1, 2, 3]), ["t"] * 10, comp, recalled, _requests(comp), ex)
    assert v.favourites.tolist() == [1, 2, 4, 6]
    assert [q.program for q in ex.seen] == ["bbb", "dddd"]  # "bbb" once for both groups, "cc" recalled
    assert all(q.trajectory.stream == "verify" and q.request_id.startswith("v") for q in ex.seen)
    assert v.executed.tolist() == [1, 6]
    expect = np.full(10, np.nan)
    expect[[1, 2]] = 3.0  # the measured reward of "bbb" in both of its groups
    expect[4] = 0.7
    np.testing.assert_array_equal(v.reward, expect)


def test_verified_favourites_train_on_their_true_reward_and_cost_training_compute(tmp_path):
    cfg = cfg_for(tmp_path, "wmrl-cv", 6, "eval.every_k=0", "eval.at_end=false", "wmrl.routing.verify_favourites=true")
    c = comps("wmrl-cv")
    ex = c.executor
    c.executed_records = ex.executed_records
    run_training(cfg, components=c)
    rd = RunDir(cfg.run_dir)
    m, samples = read_jsonl(rd.metrics), read_jsonl(rd.samples)
    verify_reqs = [q for q in ex.requests if q.trajectory.stream == "verify"]
    assert verify_reqs and sum(r["verify_executed"] for r in m) == len(verify_reqs)
    assert all(r["verify_favourites"] == r["n_wm_groups"] for r in m)
    for step in range(1, 7):  # every world-model group's top-scored sample trains on its true reward
        rows = [s for s in samples if s["step"] == step and s["stream"] == "wm"]
        for g in {s["group"] for s in rows}:
            grp = [s for s in rows if s["group"] == g]
            top = max(grp, key=lambda s: s["reward_wm"])
            assert top["recalled"] and top["reward_used"] == pytest.approx(true_reward(top["completion"])), top
    ledger = json.loads(rd.ledger.read_text())
    assert ledger["executions"]["verify"]["count"] == len(verify_reqs)
    assert m[-1]["cum_exec_count"] == len([q for q in ex.requests if q.trajectory.stream in ("anchor", "verify")])


@pytest.mark.parametrize("overrides", [["method=grpo"], ["method=wmrl-no-recall"], ["episode.max_turns=2"]])
def test_verification_without_recall_or_with_several_turns_is_refused_in_one_line(overrides):
    with pytest.raises(ConfigError, match="verify_favourites"):
        load_config(None, ["wmrl.routing.verify_favourites=true", *overrides])

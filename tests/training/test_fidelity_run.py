"""The run's fidelity card on its anchors: cumulative figures in metrics.jsonl, fidelity.json with intervals at the
end, kept across a resume (the training loop on the small fakes of tests.support.fakes)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from tests.support.fakes import FakeExecutor, FakePolicy, FakeScaffold, FakeWorldModel, fake_task

from wmrl.execution.types import ExecutionResult, ExecutionStatus, program_hash
from wmrl.training.components import Components
from wmrl.training.config import load_config
from wmrl.runs.rundir import RunDir, read_jsonl
from wmrl.training.run import resume_training, run_training
from wmrl.world_model.fidelity import FIGURES, fidelity_card
from wmrl.world_model.outcome import STATUS_CLASSES, OutcomePrediction, outcome_class, status_index


def outcome_of(completion: str) -> str:
    """The fake programs' outcome: a completion starting with token 4 renders to code that does not compile, one
    holding a token 0 crashes, the others run."""
    toks = completion.split()
    return "syntax_error" if toks[:1] == ["4"] else "runtime_error" if "0" in toks else "valid"


class PythonScaffold(FakeScaffold):
    """FakeScaffold whose programs are Python: the tokens as a sum, a trailing '+' (no operand) after a first 4."""

    def render(self, task, completion):
        toks = completion.split()
        return f"# {task.id}\n" + " + ".join(toks) + (" +" if toks[:1] == ["4"] else "")


class CrashingExecutor(FakeExecutor):
    """FakeExecutor whose programs that do not compile or hold a token 0 end in a runtime error (the failure reward
    0; the sandbox has no syntax-error status: the gate on the executed program tells it apart)."""

    def _run(self, req):
        try:
            compile(req.program, "<program>", "exec")
            runs = "0" not in req.program.splitlines()[-1].split()
        except SyntaxError:
            runs = False
        if runs:
            return super()._run(req)
        self.n += 1
        return ExecutionResult(req.request_id, req.task.id, ExecutionStatus.RUNTIME_ERROR, None, 0.0, 0.05, 0.02,
                               1000, "", "Traceback", program_hash(req.program), error="crashed")


class RewardOnlyWorldModel:
    """A world model with ``predict`` only (as a user's or the simulation's): FakeWorldModel without outcomes."""

    def __init__(self):
        self._wm = FakeWorldModel()

    def predict(self, prompts, completions):
        return self._wm.predict(prompts, completions)

    def fit(self, records, **kwargs):
        return self._wm.fit(records, **kwargs)

    def state_dict(self):
        return self._wm.state_dict()

    def save(self, d):
        return self._wm.save(d)

    def load(self, d):
        return self._wm.load(d)


class OutcomeWorldModel(FakeWorldModel):
    """FakeWorldModel with an outcome distribution that puts 0.7 on the completion's true outcome class."""

    def predict_outcome(self, prompts, completions):
        probs = np.full((len(completions), len(STATUS_CLASSES)), 0.1)
        probs[np.arange(len(completions)), [status_index(outcome_of(c)) for c in completions]] = 0.7
        return OutcomePrediction(self.predict(prompts, completions), probs, np.full(len(completions), 0.1))


def _comps(wm) -> Components:
    return Components(train_tasks=[fake_task(i) for i in range(3)], heldout_tasks=[], scaffold=PythonScaffold(),
                      policy=FakePolicy(0), executor=CrashingExecutor(), world_model=wm)


def _cfg(tmp_path, name: str, steps: int = 4):
    return load_config(None, ["method=wmrl", f"run_dir={tmp_path / name}", f"optim.steps={steps}",
                              "rollout.tasks_per_step=4", "rollout.group_size=4", "optim.lr=0.05",
                              "wmrl.routing.anchor_fraction=0.5", "wmrl.calibration.min_anchors=4", "progress=false",
                              "eval.every_k=0", "eval.at_end=false"])


def _anchor_rows(rd: RunDir) -> list[dict]:
    return [s for s in read_jsonl(rd.samples) if s["stream"] == "anchor"]


def test_a_run_logs_its_anchors_fidelity_and_writes_the_card(tmp_path):
    cfg = _cfg(tmp_path, "run")
    run_training(cfg, components=_comps(OutcomeWorldModel()))
    rd = RunDir(cfg.run_dir)
    anchors = _anchor_rows(rd)
    assert 8 <= len(anchors) and {s["status"] for s in anchors} == {"ok", "runtime_error"}
    assert {outcome_of(s["completion"]) for s in anchors} == {"syntax_error", "runtime_error", "valid"}
    m = read_jsonl(rd.metrics)
    n_so_far = [sum(1 for s in anchors if s["step"] <= r["step"]) for r in m]
    assert [r["wm_fidelity.n"] for r in m] == n_so_far  # cumulative over the anchors so far
    # the point values of a step recomputed from samples.jsonl: the world model's outcome distribution is a
    # function of the completion, the true class that of the execution's status
    last = m[-1]
    comps = [s["completion"] for s in anchors]
    tasks = [fake_task(int(s["task_id"].removeprefix("task"))) for s in anchors]
    programs = [PythonScaffold().render(t, c) for t, c in zip(tasks, comps)]
    truth = fidelity_card(OutcomeWorldModel().predict_outcome([PythonScaffold().prompt(t) for t in tasks], comps),
                          [s["reward_true"] for s in anchors], [outcome_class(p, s["status"]) for p, s in
                                                                zip(programs, anchors)],
                          [(s["step"], s["group"]) for s in anchors], n_boot=0)
    for f in FIGURES:
        assert last[f"wm_fidelity.{f}"] == pytest.approx(truth.figure(f).value), f
    # the fake puts its mode on the true class (syntax errors told from crashes by the gate on the program)
    assert last["wm_fidelity.status_acc1"] == 1.0 and last["wm_fidelity.failure_auc"] == 1.0
    card = json.loads(rd.fidelity.read_text())
    assert card["n"] == len(anchors) and card["n_boot"] == 1000 and card["status_available"]
    for f in ("mae", "spearman", "pairwise_acc"):
        fig = card["figures"][f]
        assert fig["lo"] <= fig["value"] <= fig["hi"], f
    assert card["figures"]["mae"]["value"] == pytest.approx(np.mean([abs(s["reward_wm"] - s["reward_true"])
                                                                     for s in anchors]))


def test_a_world_model_without_outcomes_gets_the_reward_figures_and_a_resume_keeps_the_rows(tmp_path):
    full = _cfg(tmp_path, "full", 5)
    run_training(full, components=_comps(RewardOnlyWorldModel()))
    part = _cfg(tmp_path, "part", 5)
    run_training(part, components=_comps(RewardOnlyWorldModel()), stop_after_step=2)
    assert not RunDir(part.run_dir).fidelity.exists()  # written when the run ends
    resume_training(part.run_dir, components=_comps(RewardOnlyWorldModel()))
    a, b = (json.loads(RunDir(c.run_dir).fidelity.read_text()) for c in (full, part))
    assert a == b and a["n"] == len(_anchor_rows(RunDir(full.run_dir)))
    assert not a["status_available"] and a["figures"]["status_acc1"]["value"] is None
    assert a["figures"]["mae"]["value"] is not None
    last = read_jsonl(RunDir(part.run_dir).metrics)[-1]
    assert last["wm_fidelity.status_acc1"] is None and last["wm_fidelity.n"] == a["n"]


def test_runs_without_scored_anchors_write_no_card(tmp_path):
    for method, wm in (("grpo", None), ("wm", FakeWorldModel())):
        cfg = load_config(None, [f"method={method}", f"run_dir={tmp_path / method}", "optim.steps=2",
                                 "rollout.tasks_per_step=2", "rollout.group_size=2", "progress=false",
                                 "eval.every_k=0", "eval.at_end=false"])
        run_training(cfg, components=_comps(wm))
        rd = RunDir(cfg.run_dir)
        assert not rd.fidelity.exists(), method
        assert not any(k.startswith("wm_fidelity.") for r in read_jsonl(rd.metrics) for k in r), method

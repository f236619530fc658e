"""The integrations' driver recalls the measured rewards of its own anchors for recipes with recall."""
from concurrent.futures import Future
from types import SimpleNamespace

import numpy as np

from wmrl.execution.types import ExecutionResult, ExecutionStatus, program_hash
from wmrl.integrations.driver import WMRLDriver


class _Scaffold:
    name = "fake"

    def prompt(self, task):
        return f"solve {task.id}"

    def render(self, task, completion):
        return completion


class _Executor:
    def submit(self, req):
        r = (sum(map(ord, req.program)) % 10) / 10
        f = Future()
        f.set_result(ExecutionResult(req.request_id, req.task.id, ExecutionStatus.OK, r, r, 0.01, 0.01, 0, "", "",
                                     program_hash(req.program)))
        return f


class _WorldModel:
    def predict(self, prompts, completions):
        return np.full(len(completions), 0.5)


def test_world_model_samples_of_programs_the_driver_executed_train_on_the_measurement():
    tasks = [SimpleNamespace(id=f"t{i}") for i in range(4)]
    comps = ["aa", "ab", "ac", "ad"]
    for method, recalls in (("wmrl", True), ("wmrl-no-recall", False)):
        d = WMRLDriver(tasks, _Scaffold(), _WorldModel(), _Executor(), method=method, anchor_fraction=0.5, seed=0)
        task_ids = [t.id for t in tasks for _ in comps]
        gid = np.repeat(np.arange(4), 4)
        measured = {}
        n = 0
        for step in (1, 2, 3):
            rec = d.step(step, task_ids, ["p"] * 16, comps * 4, gid)
            x, out = rec.inputs, rec.outputs
            for i in np.flatnonzero(~x.is_anchor):
                key = (task_ids[i], comps[i % 4])
                if recalls and key in measured:
                    assert out.reward_used[i] == measured[key]
                    n += 1
                else:
                    assert out.reward_used[i] == out.reward_wm_calibrated[i]
            measured.update({(task_ids[i], comps[i % 4]): x.reward_true[i] for i in np.flatnonzero(x.is_anchor)})
        assert (n > 0) == recalls

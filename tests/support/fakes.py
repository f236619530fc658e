"""Small fakes of the trainer's parts (tests only): a categorical 'policy' over a 5-token vocabulary,
an executor whose reward is a deterministic function of the program, a biased noisy world model."""
from __future__ import annotations

import hashlib
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import torch

from wmrl.execution.types import ExecutionResult, ExecutionStatus, program_hash
from wmrl.models.types import RolloutBatch
from wmrl.tasks.spec import Task

VOCAB = 5
PROMPT_LEN = 2
COMP_LEN = 4


def fake_task(i: int, split: str = "train") -> Task:
    p = Path(f"/nonexistent/task{i}")
    return Task(id=f"task{i}", type="binary", metric="roc_auc", lower_is_better=False, target="y", id_column="id",
                root=p, public_dir=p, answers_path=p / "a.csv", leaderboard_paths=(), time_limit_s=10.0,
                split=split, description="fake")


class FakeScaffold:
    name = "fake"
    response_prefix = ""
    default_max_new_tokens = 4

    def stop_at(self, text: str) -> int | None:
        return None

    def is_valid(self, task: Task, completion: str) -> bool:
        return True

    def grammar_key(self, task: Task) -> str | None:
        return None

    def grammar_sentences(self, key: str):
        raise ValueError("the fake scaffold has no grammar")

    def prompt(self, task: Task) -> str:
        return f"solve {task.id}"

    def render(self, task: Task, completion: str) -> str:
        return f"# {task.id}\n{completion}"


class FakePolicy:
    """pi(token) = softmax(theta + bias_task); completions are COMP_LEN i.i.d. tokens."""

    def __init__(self, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.theta = torch.nn.Parameter(0.1 * torch.randn(VOCAB, generator=g))

    def sample(self, tasks, scaffold, group_size, max_new_tokens=None, temperature=1.0, top_p=1.0,
               generator_seed=None, prompts=None):
        g = torch.Generator().manual_seed(int(generator_seed) % (2**63) if generator_seed is not None else 0)
        B = len(tasks) * group_size
        probs = torch.softmax(self.theta.detach() / temperature, -1)
        comp = torch.multinomial(probs.expand(B, VOCAB), COMP_LEN, replacement=True, generator=g)
        ids = torch.cat([torch.zeros(B, PROMPT_LEN, dtype=torch.long), comp], 1)
        cm = torch.zeros(B, PROMPT_LEN + COMP_LEN, dtype=torch.bool)
        cm[:, PROMPT_LEN:] = True
        lp = torch.zeros(B, PROMPT_LEN + COMP_LEN)
        lp[:, PROMPT_LEN:] = torch.log_softmax(self.theta.detach() / temperature, -1)[comp]
        task_ids = [t.id for t in tasks for _ in range(group_size)]
        comps = [" ".join(str(int(x)) for x in row) for row in comp]
        return RolloutBatch(input_ids=ids, attention_mask=torch.ones_like(ids), completion_mask=cm, old_logprobs=lp,
                            prompts=[scaffold.prompt(t) if prompts is None else prompts[i]
                                     for i, t in enumerate(tasks) for _ in range(group_size)],
                            completions=comps, task_ids=task_ids,
                            group_ids=[gi for gi in range(len(tasks)) for _ in range(group_size)],
                            programs=[scaffold.render(t, c)
                                      for t, c in zip([t for t in tasks for _ in range(group_size)], comps)],
                            prompt_len=PROMPT_LEN, temperature=temperature)

    def logprobs(self, batch):
        lsm = torch.log_softmax(self.theta / batch.temperature, -1)
        out = lsm[batch.input_ids]
        return out.masked_fill(~batch.completion_mask, 0.0)

    def ref_logprobs(self, batch):
        lsm = torch.log_softmax(torch.zeros(VOCAB), -1)
        return lsm[batch.input_ids].masked_fill(~batch.completion_mask, 0.0)

    def trainable_parameters(self):
        return [self.theta]

    def save(self, d):
        Path(d).mkdir(parents=True, exist_ok=True)
        torch.save(self.theta.detach().clone(), Path(d) / "theta.pt")
        return Path(d)

    def load(self, d):
        with torch.no_grad():
            self.theta.copy_(torch.load(Path(d) / "theta.pt"))


def true_reward(program: str) -> float:
    """Fraction of '3' tokens in the completion (the last line of the program)."""
    toks = program.splitlines()[-1].split()
    return sum(t == "3" for t in toks) / max(len(toks), 1)


class FakeExecutor:
    """Resolves futures immediately; ``infra_every`` makes every k-th execution an infrastructure failure."""

    def __init__(self, infra_every: int = 0):
        self.n = 0
        self.infra_every = infra_every
        self.requests = []

    def _run(self, req):
        self.n += 1
        self.requests.append(req)
        if self.infra_every and self.n % self.infra_every == 0:
            return ExecutionResult(req.request_id, req.task.id, ExecutionStatus.INFRA_ERROR, None, None, 0.01, 0.0, 0,
                                   "", "", program_hash(req.program), error="fake infra")
        r = true_reward(req.program)
        return ExecutionResult(req.request_id, req.task.id, ExecutionStatus.OK, r, r, 0.05, 0.02, 1000, "", "",
                               program_hash(req.program), medal="gold" if r >= 0.75 else None, above_median=r > 0.5)

    def submit(self, req):
        f: Future = Future()
        f.set_result(self._run(req))
        return f

    def run_batch(self, reqs):
        return [self._run(r) for r in reqs]

    def close(self):
        pass

    def executed_records(self) -> list[dict]:
        """The execution log as the trainer's recall reads it (``Components.executed_records``): every request's
        trajectory with its true reward, infrastructure failures included as executed."""
        return [{"trajectory": q.trajectory, "reward": true_reward(q.program)} for q in self.requests]


class FakeWorldModel:
    """r_hat = 0.5 * r + 0.3 + hash noise (a biased, compressed, noisy predictor)."""

    def predict(self, prompts, completions):
        out = []
        for p, c in zip(prompts, completions):
            h = int(hashlib.sha256((p + c).encode()).hexdigest()[:8], 16) / 2**32
            out.append(0.5 * true_reward(c) + 0.3 + 0.1 * (h - 0.5))
        return np.asarray(out)

    def predict_outcome(self, prompts, completions):
        """``predict`` as the reward, every program valid, a constant std of 0.1."""
        from wmrl.world_model.outcome import OutcomePrediction

        r = self.predict(prompts, completions)
        return OutcomePrediction(r, np.tile([0.0, 0.0, 0.0, 1.0], (len(r), 1)), np.full(len(r), 0.1))

    def state_dict(self):
        return {"offset": getattr(self, "offset", 0.0)}

    def fit(self, records, **kwargs):
        """Nothing to learn: the predictor is fixed; reports how many records it was given."""
        return {"n_records": len(records)}

    def save(self, d):
        Path(d).mkdir(parents=True, exist_ok=True)
        (Path(d) / "wm.txt").write_text(str(getattr(self, "offset", 0.0)))

    def load(self, d):
        self.offset = float((Path(d) / "wm.txt").read_text())

"""What a world model predicts about one program: its outcome status, its reward, and how sure it is.

Every world-model kind answers :meth:`predict_outcome` with an :class:`OutcomePrediction` of the same shape, so
the fidelity card (:mod:`wmrl.world_model.fidelity`), the router and the run's logs treat the kinds alike:

- ``status_probs`` [N, 4]: a distribution over the outcome classes of the WMRL paper's judge,
  :data:`STATUS_CLASSES` = syntax error (the response holds no code, or code that does not compile),
  runtime error (a crash, a timeout, a memory limit), ran without a valid submission, valid;
- ``reward`` [N]: the predicted reward on the scale of the executed reward (leaderboard percentile in [0, 1]
  for a valid program, the task's failure reward, 0 by default, otherwise);
- ``reward_std`` [N]: the predictive standard deviation of that reward (the kind's own uncertainty).

:func:`gate_status` is the WMRL paper's deterministic gate, run before any model: no code or a compile error is a
syntax error with certainty. :func:`status_class` maps an execution's status (:class:`wmrl.execution.types.
ExecutionStatus` values) to the outcome classes. :class:`RewardLadder` holds the rewards of the outcomes:
``percentile`` is wmrl's executed reward; ``paper`` is the WMRL paper's ladder (syntax error 0,
runtime error 0.1, no submission 0.2, valid 0.5 + 0.5 x leaderboard position), read from its public
reference implementation.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["STATUS_CLASSES", "FAILURE_CLASSES", "OutcomePrediction", "RewardLadder", "LADDERS", "gate_status",
           "gated", "outcome_class", "predicted_outcome_fields", "status_class", "status_index"]

#: the outcome classes, in the order of ``OutcomePrediction.status_probs``' columns
STATUS_CLASSES: tuple[str, ...] = ("syntax_error", "runtime_error", "no_submission", "valid")
#: the classes that are failures (every class but ``valid``)
FAILURE_CLASSES: tuple[str, ...] = STATUS_CLASSES[:-1]

_FENCE = re.compile(r"```(?:[A-Za-z0-9_+-]*)\n(.*?)(?:```|\Z)", re.S)


def status_index(cls: str) -> int:
    """The column of outcome class ``cls`` in ``status_probs``.

    Raises:
        ValueError: an unknown class (the message lists the known ones).
    """
    try:
        return STATUS_CLASSES.index(cls)
    except ValueError:
        raise ValueError(f"unknown outcome class {cls!r}; known: {', '.join(STATUS_CLASSES)}") from None


def status_class(status: str | None) -> str | None:
    """The outcome class of an executed program from its execution status.

    ``ok`` -> ``valid``; ``invalid_submission`` (it ran, but wrote no gradable submission) -> ``no_submission``;
    ``runtime_error``, ``timeout`` and ``memory_exceeded`` -> ``runtime_error``; ``syntax_error`` stays; an
    ``infra_error`` (not the program's doing) or no status -> None (no class: such rows are not the program's
    outcome and are left out of fits and fidelity figures).

    Raises:
        ValueError: a status that is none of these.
    """
    status = getattr(status, "value", status)
    if status is None or status == "infra_error":
        return None
    table = {"ok": "valid", "invalid_submission": "no_submission", "runtime_error": "runtime_error",
             "timeout": "runtime_error", "memory_exceeded": "runtime_error", "syntax_error": "syntax_error",
             "valid": "valid", "no_submission": "no_submission"}
    try:
        return table[status]
    except KeyError:
        known = ", ".join(sorted(table))
        raise ValueError(f"unknown execution status {status!r}; known: {known}, infra_error") from None


def gate_status(completion: str) -> str | None:
    """The WMRL paper's deterministic gate on a policy completion: ``"syntax_error"`` or None (no verdict).

    The code is the first fenced code block of ``completion`` when it has one, else the whole completion (the
    grammar and function scaffolds write bare code). Empty code, or code that Python can compile neither as a
    module nor as the body of a function (the function scaffold's completions are bodies), is a syntax error for
    certain; anything else goes to the model. Compiling runs nothing; code too deeply nested for the compiler
    (a RecursionError or MemoryError there) is a syntax error too, never an exception out of the gate.
    """
    m = _FENCE.search(completion)
    code = m.group(1) if m else completion
    if not code.strip():
        return "syntax_error"
    # as a module, or as a function's body (the function scaffold's completions are bodies: ``return ...``)
    for source in (code, "def _body():\n" + "".join(f"    {line}\n" for line in code.splitlines())):
        try:
            compile(source, "<completion>", "exec", dont_inherit=True)
            return None
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            # ValueError: a NUL byte; RecursionError / MemoryError: code too deeply nested for the compiler,
            # which the sandbox could not run either
            continue
    return "syntax_error"


def outcome_class(completion: str, status: str | None) -> str | None:
    """The true outcome class of an executed completion: ``"syntax_error"`` where :func:`gate_status` says so
    (whatever the sandbox reported: a program that cannot compile fails at once), else :func:`status_class` of
    the execution's status (None for an infrastructure error)."""
    cls = status_class(status)
    if cls is None:
        return None
    return gate_status(completion) or cls


def predicted_outcome_fields(pred: OutcomePrediction | None, n: int) -> list[dict[str, Any]]:
    """What a run logs of a world model's outcome prediction per sample (samples.jsonl): ``status_wm`` (the most
    probable class of :data:`STATUS_CLASSES`), ``failure_prob_wm`` (P(not ``valid``), in [0, 1]) and
    ``reward_wm_std`` (the predictive standard deviation, reward units); all None when ``pred`` is None (no world
    model, or one without ``predict_outcome``).

    Args:
        pred: the prediction of the ``n`` samples, or None.
        n: the number of samples.

    Raises:
        ValueError: ``pred`` holds other than ``n`` predictions.
    """
    if pred is None:
        return [{"status_wm": None, "failure_prob_wm": None, "reward_wm_std": None} for _ in range(n)]
    if len(pred) != n:
        raise ValueError(f"the outcome prediction holds {len(pred)} samples, expected {n}")
    cls = np.argmax(pred.status_probs, axis=1)
    fail = pred.failure_prob
    return [{"status_wm": STATUS_CLASSES[int(cls[i])], "failure_prob_wm": float(fail[i]),
             "reward_wm_std": float(pred.reward_std[i])} for i in range(n)]


@dataclass(frozen=True)
class RewardLadder:
    """The reward of each outcome: failures get their class's constant, a valid program
    ``valid_offset + valid_scale * position`` (position = leaderboard percentile in [0, 1]).

    Raises:
        ValueError: a non-finite constant, or ``valid_scale <= 0``.
    """

    name: str
    syntax_error: float
    runtime_error: float
    no_submission: float
    valid_offset: float
    valid_scale: float

    def __post_init__(self) -> None:
        vals = (self.syntax_error, self.runtime_error, self.no_submission, self.valid_offset, self.valid_scale)
        if not all(np.isfinite(v) for v in vals) or self.valid_scale <= 0:
            raise ValueError(f"reward ladder {self.name!r}: constants must be finite and valid_scale > 0, got {vals}")

    def failure_rewards(self) -> np.ndarray:
        """[3] float64: the rewards of syntax error, runtime error and no submission (STATUS_CLASSES order)."""
        return np.array([self.syntax_error, self.runtime_error, self.no_submission], dtype=np.float64)

    def valid_reward(self, position: np.ndarray | float) -> np.ndarray:
        """The reward of a valid program at leaderboard ``position`` (array or float in [0, 1]), float64."""
        return self.valid_offset + self.valid_scale * np.asarray(position, dtype=np.float64)


#: ``percentile``: wmrl's executed reward (failures 0, a valid program its leaderboard percentile);
#: ``paper``: the WMRL paper's ladder, from its public reference implementation.
LADDERS: dict[str, RewardLadder] = {
    "percentile": RewardLadder("percentile", 0.0, 0.0, 0.0, 0.0, 1.0),
    "paper": RewardLadder("paper", 0.0, 0.1, 0.2, 0.5, 0.5),
}


@dataclass(frozen=True)
class OutcomePrediction:
    """A world model's prediction for N programs (see the module docstring).

    Attributes:
        reward: [N] float64, the predicted reward (what ``predict`` returns).
        status_probs: [N, 4] float64, rows sum to 1, columns in :data:`STATUS_CLASSES` order.
        reward_std: [N] float64 >= 0, the predictive standard deviation of the reward.

    Raises:
        ValueError: shapes that disagree, non-finite values, negative probabilities or std, rows that do not
            sum to 1 (tolerance 1e-6).
    """

    reward: np.ndarray
    status_probs: np.ndarray
    reward_std: np.ndarray

    def __post_init__(self) -> None:
        r = np.asarray(self.reward, dtype=np.float64)
        p = np.asarray(self.status_probs, dtype=np.float64)
        s = np.asarray(self.reward_std, dtype=np.float64)
        object.__setattr__(self, "reward", r)
        object.__setattr__(self, "status_probs", p)
        object.__setattr__(self, "reward_std", s)
        n = r.shape[0] if r.ndim == 1 else -1
        if r.ndim != 1 or p.shape != (n, len(STATUS_CLASSES)) or s.shape != (n,):
            raise ValueError(f"an outcome prediction needs reward [N], status_probs [N, {len(STATUS_CLASSES)}] and "
                             f"reward_std [N]; got {r.shape}, {p.shape}, {s.shape}")
        if not (np.isfinite(r).all() and np.isfinite(p).all() and np.isfinite(s).all()):
            raise ValueError("an outcome prediction must be finite")
        if (p < -1e-12).any() or (s < 0).any() or (n and np.abs(p.sum(1) - 1.0).max() > 1e-6):
            raise ValueError("status_probs rows must be probability distributions and reward_std >= 0")

    def __len__(self) -> int:
        return int(self.reward.shape[0])

    @property
    def failure_prob(self) -> np.ndarray:
        """[N] float64: P(the program fails) = 1 - P(valid)."""
        return 1.0 - self.status_probs[:, status_index("valid")]

    @property
    def status(self) -> list[str]:
        """The most likely outcome class of each program (ties: the first in :data:`STATUS_CLASSES`)."""
        return [STATUS_CLASSES[i] for i in self.status_probs.argmax(1)]

    @classmethod
    def concat(cls, parts: list[OutcomePrediction]) -> OutcomePrediction:
        """One prediction of the parts' rows, in order (an empty list gives N = 0)."""
        if not parts:
            return cls(np.zeros(0), np.zeros((0, len(STATUS_CLASSES))), np.zeros(0))
        return cls(np.concatenate([p.reward for p in parts]), np.concatenate([p.status_probs for p in parts]),
                   np.concatenate([p.reward_std for p in parts]))

    def take(self, index: np.ndarray | list[int]) -> OutcomePrediction:
        """The rows ``index`` (an int array or list), in that order."""
        i = np.asarray(index, dtype=np.int64)
        return OutcomePrediction(self.reward[i], self.status_probs[i], self.reward_std[i])


def gated(completions: list[str], predict_rest) -> OutcomePrediction:
    """Apply :func:`gate_status` first: gated completions get a certain syntax error (reward 0, std 0), the
    others ``predict_rest(indices)`` (an :class:`OutcomePrediction` of those rows, in order). Used by every kind.
    """
    n = len(completions)
    gate = [gate_status(c) for c in completions]
    rest = [i for i in range(n) if gate[i] is None]
    reward = np.zeros(n)
    probs = np.zeros((n, len(STATUS_CLASSES)))
    std = np.zeros(n)
    probs[[i for i in range(n) if gate[i] is not None], status_index("syntax_error")] = 1.0
    if rest:
        pr = predict_rest(rest)
        reward[rest], probs[rest], std[rest] = pr.reward, pr.status_probs, pr.reward_std
    return OutcomePrediction(reward, probs, std)


def predict_rewards(world_model: Any, prompts: Sequence[str], completions: Sequence[str]
                    ) -> tuple[np.ndarray, Any]:
    """r_hat [N] float64 and the world model's :class:`~wmrl.world_model.outcome.OutcomePrediction` of N (prompt,
    completion) pairs from one ``predict_outcome`` call (r_hat = its ``reward``); a world model without
    ``predict_outcome`` gives ``predict``'s r_hat and None. Runs without gradients.

    Raises:
        RuntimeError: a prediction of the wrong shape, or a non-finite one.
    """
    import torch  # noqa: PLC0415 - heavy

    N = len(completions)
    with torch.no_grad():
        outcome = (world_model.predict_outcome(list(prompts), list(completions))
                   if hasattr(world_model, "predict_outcome") else None)
        r_hat = np.asarray(outcome.reward if outcome is not None else
                           world_model.predict(list(prompts), list(completions)), dtype=np.float64)
    if r_hat.shape != (N,):
        raise RuntimeError(f"world model returned shape {r_hat.shape}, expected ({N},)")
    if not np.all(np.isfinite(r_hat)):
        raise RuntimeError(f"world model returned {int((~np.isfinite(r_hat)).sum())} non-finite "
                           f"predictions of {N}: was it fitted on rewards (see world_model_fit.json)?")
    return r_hat, outcome

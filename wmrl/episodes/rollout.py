"""Multi-turn research episodes: sample, get feedback, revise, up to K turns (docs/multiturn.md).

One episode (MLE-Dojo's interactive loop, the WMRL paper's up-to-4-turn trajectories)::

    turn 1      the policy writes a program for the task (the single-turn prompt)
    feedback    the caller's FeedbackFn: a real execution on the harness's validation view (anchors,
                evaluation) or the world model's prediction rendered the same way (world-model groups)
    turn j > 1  the prompt holds the task and every earlier program with its observation
                (:func:`wmrl.episodes.prompt.episode_prompt`); the policy writes a revised program, or
                submits its previous one by repeating it unchanged
    end         after K turns, on a submission, or on an infrastructure failure (the episode is dropped)

The episode's reward is the grade of its final submission: the program of :attr:`Episodes.final_turn`.
Every turn's program is graded where it is executed (the validation view grades the test rows of the same
run), so the best of its turns is known too. The group structure is that of turn 1: episode e belongs to
group ``group_ids[e]`` (one task, G episodes), so the step recipe (:mod:`wmrl.core.recipe`) runs on episodes
unchanged, and the update trains each turn's tokens with its episode's advantage
(:func:`wmrl.core.episodes.turn_row_weights`).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wmrl.episodes.observation import Observation
from wmrl.episodes.prompt import episode_prompt


@dataclass
class TurnFeedback:
    """What one turn's program got from the environment.

    Attributes:
        observation: what the agent sees next turn (validation score, run time, error tail); never test-set
            information. None: no feedback exists (an episode of a recipe without a world model that is not
            executed, e.g. ``anchor-only``'s world-model groups): the episode ends with this turn's program.
        reward_true: the executed program's grade (leaderboard percentile of its test rows), NaN when it was
            not executed.
        reward_wm: the world model's raw prediction r_hat for the program, NaN when it was not scored.
        status: the execution status (``ok``, ``runtime_error``, ...) or the world model's ``ok``/``runtime_error``.
        error: the execution's error message (None when none).
        valid: False on an infrastructure failure (not the program's doing): the episode ends and is dropped.
        executed: whether the program ran in the sandbox.
        result: the :class:`~wmrl.execution.types.ExecutionResult` when executed.
    """

    observation: Observation | None
    reward_true: float = math.nan
    reward_wm: float = math.nan
    status: str | None = None
    error: str | None = None
    valid: bool = True
    executed: bool = False
    result: Any = None


#: ``feedback(turn, episode indices [R], the turn's RolloutBatch of R rows) -> R TurnFeedback``.
FeedbackFn = Callable[[int, Sequence[int], Any], list[TurnFeedback]]


def turn_seed(seed: int | None, turn: int) -> int | None:
    """The sampling seed of turn ``turn`` (1-based): turn 1 uses ``seed`` itself, so a one-turn episode draws
    exactly what single-turn sampling draws."""
    if seed is None or turn == 1:
        return seed
    return (int(seed) * 1_000_003 + 7919 * turn) % (2**31 - 1)


def is_submit(completion: str, previous: str) -> bool:
    """Whether a turn's completion is the submit action: the previous turn's completion repeated unchanged
    (whitespace at the ends ignored)."""
    return completion.strip() == previous.strip()


@dataclass
class Episodes:
    """B = M * G episodes of up to K turns (arrays [B] unless said otherwise).

    Attributes:
        tasks: [M] the tasks (one group each, in turn 1's order).
        group_size: G.
        max_turns: K.
        task_index: [B] int64 index into ``tasks`` of each episode (its group).
        turns: K' <= K turn batches: ``turns[j]`` is the ``RolloutBatch`` of turn j+1, one row per episode
            still running at that turn (token ids, masks, sampling log-probs; prompts with the history).
        rows: ``rows[j]`` [R_j] int64 the episode of each row of ``turns[j]``.
        feedback: [B][K] the :class:`TurnFeedback` of each turn's program (None: no program that turn, because
            the episode had ended or the turn was the submit action).
        n_turns: [B] int64 turns sampled (a submit action counts: its tokens are in the loss).
        final_turn: [B] int64 the 1-based turn whose program is the final submission.
        submitted: [B] bool the episode ended by the submit action before turn K.
        valid: [B] bool False after an infrastructure failure (left out of the loss and the baselines).
    """

    tasks: list[Any]
    group_size: int
    max_turns: int
    task_index: np.ndarray
    turns: list[Any] = field(default_factory=list)
    rows: list[np.ndarray] = field(default_factory=list)
    feedback: list[list[TurnFeedback | None]] = field(default_factory=list)
    n_turns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    final_turn: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    submitted: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    valid: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    @property
    def B(self) -> int:
        return int(self.task_index.size)

    def final(self, e: int) -> TurnFeedback:
        """The feedback of episode ``e``'s final submission.

        Raises:
            ValueError: the episode has no graded turn.
        """
        fb = self.feedback[e][int(self.final_turn[e]) - 1] if self.final_turn[e] >= 1 else None
        if fb is None:
            raise ValueError(f"episode {e} has no graded turn")
        return fb

    def final_array(self, attr: str) -> np.ndarray:
        """[B] float64 attribute ``attr`` (``reward_true``, ``reward_wm``) of each final submission."""
        return np.array([float(getattr(self.final(e), attr)) for e in range(self.B)], dtype=np.float64)

    def turn_array(self, attr: str) -> np.ndarray:
        """[B, K] float64 attribute ``attr`` of each turn's program (NaN where the turn has none)."""
        out = np.full((self.B, self.max_turns), np.nan)
        for e, fbs in enumerate(self.feedback):
            for j, fb in enumerate(fbs):
                v = None if fb is None else getattr(fb, attr)
                if v is not None:
                    out[e, j] = float(v)
        return out

    def completion(self, e: int, turn: int) -> str:
        """Episode ``e``'s completion at 1-based ``turn``."""
        j = turn - 1
        row = int(np.flatnonzero(self.rows[j] == e)[0])
        return self.turns[j].completions[row]

    def prompt(self, e: int, turn: int) -> str:
        """Episode ``e``'s prompt at 1-based ``turn`` (the task and the history so far)."""
        j = turn - 1
        return self.turns[j].prompts[int(np.flatnonzero(self.rows[j] == e)[0])]

    def logprobs(self, e: int, turn: int) -> list[float]:
        """Episode ``e``'s sampling log-probabilities of its completion tokens at 1-based ``turn``."""
        j = turn - 1
        return self.turns[j].token_logprobs(int(np.flatnonzero(self.rows[j] == e)[0]))

    def program(self, e: int, turn: int) -> str:
        """Episode ``e``'s program at 1-based ``turn`` (the turn batch's rendering of its completion)."""
        j = turn - 1
        row = int(np.flatnonzero(self.rows[j] == e)[0])
        return self.turns[j].programs[row]

    def tokens(self) -> np.ndarray:
        """[B] int64 policy tokens of each episode, over its turns (completion tokens, not observations)."""
        out = np.zeros(self.B, dtype=np.int64)
        for b, r in zip(self.turns, self.rows):
            np.add.at(out, r, b.completion_mask.sum(dim=1).cpu().numpy().astype(np.int64))
        return out


def run_episodes(policy: Any, scaffold: Any, tasks: Sequence[Any], group_size: int, max_turns: int,
                 feedback: FeedbackFn, *, max_new_tokens: int | None = None, temperature: float = 1.0,
                 top_p: float = 1.0, seed: int | None = None, first_turn: Any = None) -> Episodes:
    """Roll out G episodes per task for up to ``max_turns`` turns (module docstring).

    Args:
        policy: a :class:`wmrl.interfaces.Policy` (``sample`` with ``prompts`` for the later turns).
        scaffold: the :class:`wmrl.interfaces.Scaffold`.
        tasks: M tasks, one group of ``group_size`` episodes each.
        group_size: G >= 1.
        max_turns: K >= 1.
        feedback: the :data:`FeedbackFn` called once per turn with the rows that need a program graded.
        max_new_tokens, temperature, top_p: sampling settings of every turn.
        seed: turn 1's sampling seed (later turns: :func:`turn_seed`).
        first_turn: turn 1's ``RolloutBatch`` when the caller sampled it already (M * G rows, task by task).

    Returns:
        :class:`Episodes`.

    Raises:
        ValueError: ``max_turns < 1``, or a feedback function that returns another number of feedbacks than rows.
    """
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    tasks = list(tasks)
    kw = dict(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p)
    batch = first_turn if first_turn is not None else policy.sample(tasks, scaffold, group_size=group_size,
                                                                     generator_seed=seed, **kw)
    B = len(batch.completions)
    ep = Episodes(tasks=tasks, group_size=group_size, max_turns=max_turns,
                  task_index=np.asarray(batch.group_ids, dtype=np.int64),
                  feedback=[[None] * max_turns for _ in range(B)], n_turns=np.zeros(B, dtype=np.int64),
                  final_turn=np.zeros(B, dtype=np.int64), submitted=np.zeros(B, dtype=bool),
                  valid=np.ones(B, dtype=bool))
    history: list[list[tuple[str, Observation]]] = [[] for _ in range(B)]
    active = np.arange(B, dtype=np.int64)
    for turn in range(1, max_turns + 1):
        if turn > 1:
            prompts = [episode_prompt(scaffold, tasks[ep.task_index[e]], history[e]) for e in active]
            batch = policy.sample([tasks[ep.task_index[e]] for e in active], scaffold, group_size=1,
                                  generator_seed=turn_seed(seed, turn), prompts=prompts, **kw)
            batch.group_ids = [int(ep.task_index[e]) for e in active]  # the episode's group, for shared prompts
        ep.turns.append(batch)
        ep.rows.append(active.copy())
        ep.n_turns[active] = turn
        graded = []
        for r, e in enumerate(active.tolist()):
            if turn > 1 and is_submit(batch.completions[r], history[e][-1][0]):
                ep.submitted[e] = True  # the submit action: the previous program is final, nothing runs
            else:
                graded.append(r)
        fbs = feedback(turn, [int(active[r]) for r in graded], batch.slice(graded)) if graded else []
        if len(fbs) != len(graded):
            raise ValueError(f"the feedback function returned {len(fbs)} feedbacks for {len(graded)} programs")
        still = []
        for r, fb in zip(graded, fbs):
            e = int(active[r])
            ep.feedback[e][turn - 1] = fb
            ep.final_turn[e] = turn
            if not fb.valid:
                ep.valid[e] = False
                continue
            if fb.observation is None:  # nothing to show: the episode ends here, its program is the submission
                continue
            history[e].append((batch.completions[r], fb.observation))
            still.append(e)
        active = np.asarray(still, dtype=np.int64)
        if not active.size:
            break
    return ep

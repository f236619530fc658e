"""Multi-turn episodes in the GRPO loss: one episode's turns as rows of the batch (docs/multiturn.md).

An episode of n_e turns is ``prompt, a_1, o_1, a_2, o_2, ..., a_n`` where the a_j are the policy's tokens and
the o_j the observations (feedback of a real execution or of the world model). Standard multi-turn GRPO
(e.g. verl's multi-turn rollouts, SkyRL's ``loss_mask``) trains on the concatenated sequence with the
observation tokens masked out of the loss and gives every policy token the episode's group-relative
advantage A_e.

wmrl stores turn j as its own row: prompt_j = the task and the history ``a_1, o_1, ..., a_{j-1}, o_{j-1}``,
completion = a_j. The observations are prompt tokens, so they are outside every row's loss mask by
construction, and ``log pi(a_j | prompt_j)`` equals the concatenated sequence's log-probs of a_j when the
history is rendered the same way. The loss of :func:`wmrl.core.losses.grpo_loss` is then the episode loss
exactly, with the row weights of :func:`turn_row_weights`:

    token_mean:  l_e = S_e / nbar_E     (S_e = sum over the episode's loss tokens, nbar_E = tokens / episode)
                 rows: l_r = S_r / nbar_R with nbar_R = tokens / row = nbar_E * B / R, so
                 w_r = w_e * B / R   gives   sum_r w_r l_r = sum_e w_e l_e
    seq_mean:    l_e = S_e / n_e;  rows: l_r = S_r / n_r, so  w_r = w_e * n_r / n_e

(B valid episodes, R their rows, n the loss-token counts). Rows carry the advantage A_e of their episode.
"""
from __future__ import annotations

import numpy as np


def turn_row_weights(episode_weights: np.ndarray, episode_of_row: np.ndarray, row_tokens: np.ndarray,
                     aggregation: str = "token_mean", row_valid: np.ndarray | None = None) -> np.ndarray:
    """Per-row loss weights that make the rows' GRPO loss equal the episodes' loss (module docstring).

    Args:
        episode_weights: [B] float64 the recipe's per-episode weights w_e (:meth:`wmrl.core.recipe.Recipe.step`).
        episode_of_row: [R] int64 the episode (0..B-1) of each row (turn).
        row_tokens: [R] loss tokens of each row (``RolloutBatch.loss_mask.sum(1)``).
        aggregation: ``token_mean`` or ``seq_mean`` (the config's ``optim.aggregation``).
        row_valid: [R] bool rows that enter the loss (default all); the others get weight 0 and do not
            count in R or in n_e.

    Returns:
        [R] float64 row weights.

    Raises:
        ValueError: an unknown aggregation, an episode index outside [0, B), or arrays of other lengths.
    """
    w = np.asarray(episode_weights, dtype=np.float64).reshape(-1)
    ep = np.asarray(episode_of_row, dtype=np.int64).reshape(-1)
    tok = np.asarray(row_tokens, dtype=np.float64).reshape(-1)
    ok = np.ones(ep.size, dtype=bool) if row_valid is None else np.asarray(row_valid, dtype=bool).reshape(-1)
    if aggregation not in ("token_mean", "seq_mean"):
        raise ValueError(f"aggregation must be 'token_mean' or 'seq_mean', got {aggregation!r}")
    if tok.size != ep.size or ok.size != ep.size:
        raise ValueError(f"episode_of_row, row_tokens and row_valid must have one entry per row; got {ep.size}, "
                         f"{tok.size}, {ok.size}")
    if ep.size and (ep.min() < 0 or ep.max() >= w.size):
        raise ValueError(f"episode_of_row must index the {w.size} episodes, got values in [{ep.min()}, {ep.max()}]")
    out = np.zeros(ep.size, dtype=np.float64)
    if not ok.any():
        return out
    if aggregation == "token_mean":
        n_rows, n_eps = int(ok.sum()), int(np.unique(ep[ok]).size)
        out[ok] = w[ep[ok]] * (n_eps / n_rows)
        return out
    n_ep = np.bincount(ep[ok], weights=tok[ok], minlength=w.size)
    out[ok] = w[ep[ok]] * np.divide(tok[ok], n_ep[ep[ok]], out=np.zeros(int(ok.sum())), where=n_ep[ep[ok]] > 0)
    return out


def best_turn(turn_rewards: np.ndarray) -> np.ndarray:
    """[B] float64 the best reward over each episode's graded turns (``turn_rewards`` [B, K], NaN where a turn has
    none); NaN for an episode without any."""
    r = np.asarray(turn_rewards, dtype=np.float64)
    out = np.full(r.shape[0], np.nan)
    some = np.isfinite(r).any(axis=1)
    out[some] = np.nanmax(r[some], axis=1)
    return out


def finite_mean(x: np.ndarray) -> float | None:
    """The mean of the finite entries of ``x``, None when there are none."""
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else None


def reward_after_turn(turn_rewards: np.ndarray, n_turns: np.ndarray) -> np.ndarray:
    """The grade of each episode's current submission after each turn: ``[B, K]``.

    Turn j's entry is the reward of the latest program the episode had after j turns; an episode that
    submitted early (n_e < K turns with a program) keeps its last reward in the later columns, so column K-1 is
    the episode's reward (the grade of its final submission).

    Args:
        turn_rewards: [B, K] float64 reward of the program written at each turn (NaN where none: after the
            episode ended, or where the turn was not graded).
        n_turns: [B] int64 turns with a graded program (1..K).

    Returns:
        [B, K] float64.
    """
    r = np.array(turn_rewards, dtype=np.float64, copy=True)
    n = np.asarray(n_turns, dtype=np.int64).reshape(-1)
    for e in range(r.shape[0]):
        last = max(int(n[e]), 1) - 1
        r[e, last + 1:] = r[e, last]
    return r

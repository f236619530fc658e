"""Multi-turn episodes in the loss (wmrl.core.episodes): the turn rows with their row weights give exactly the
loss and the gradient of the concatenated episodes with the observation tokens masked out."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from wmrl.core.episodes import reward_after_turn, turn_row_weights
from wmrl.core.losses import grpo_loss


def _episodes(seed: int = 0):
    """3 episodes: (prompt, a1, o1, a2) for episodes 0 and 2, (prompt, a1) for episode 1 (submitted after turn 1).
    Returns token log-prob leaves per action and the layout of both representations."""
    g = torch.Generator().manual_seed(seed)
    acts = {(0, 1): 3, (0, 2): 5, (1, 1): 4, (2, 1): 2, (2, 2): 6}  # (episode, turn) -> action tokens
    lps = {k: (-torch.rand(n, generator=g, dtype=torch.float64) - 0.1).requires_grad_() for k, n in acts.items()}
    return acts, lps


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean"])
def test_turn_rows_equal_the_masked_concatenated_episode(aggregation):
    acts, lps = _episodes()
    adv = np.array([0.7, -1.2, 0.4])
    w_ep = np.array([0.5, 0.3, 0.2])
    OBS = 4  # observation tokens between the turns: in the sequence, masked out of the loss
    # the concatenated episodes: one row each, [a1, o1, a2] with the o1 positions masked
    T = max(acts[(e, 1)] + (OBS + acts[(e, 2)] if (e, 2) in acts else 0) for e in range(3))
    seq_lp = torch.zeros(3, T, dtype=torch.float64)
    seq_mask = torch.zeros(3, T, dtype=torch.bool)
    rows_seq = []
    for e in range(3):
        parts, pos = [], 0
        for turn in (1, 2):
            if (e, turn) not in acts:
                break
            n = acts[(e, turn)]
            parts.append((pos, lps[(e, turn)]))
            seq_mask[e, pos:pos + n] = True
            pos += n + OBS
        rows_seq.append(parts)
    seq_lp = torch.stack([_place(T, parts) for parts in rows_seq])
    loss_seq, _ = grpo_loss(seq_lp, seq_lp.detach(), torch.tensor(adv), seq_mask,
                            sample_weights=torch.tensor(w_ep), aggregation=aggregation)
    # the turn rows: one row per (episode, turn), completion only
    keys = sorted(acts)
    ep_of_row = np.array([e for e, _ in keys])
    Tr = max(acts.values())
    row_lp = torch.stack([_place(Tr, [(0, lps[k])]) for k in keys])
    row_mask = torch.zeros(len(keys), Tr, dtype=torch.bool)
    for i, k in enumerate(keys):
        row_mask[i, :acts[k]] = True
    w_rows = turn_row_weights(w_ep, ep_of_row, row_mask.sum(1).numpy(), aggregation)
    loss_rows, _ = grpo_loss(row_lp, row_lp.detach(), torch.tensor(adv[ep_of_row]), row_mask,
                             sample_weights=torch.tensor(w_rows), aggregation=aggregation)
    assert loss_rows.item() == pytest.approx(loss_seq.item(), rel=1e-12)
    g_seq = torch.autograd.grad(loss_seq, list(lps.values()), retain_graph=True)
    g_rows = torch.autograd.grad(loss_rows, list(lps.values()))
    for a, b in zip(g_seq, g_rows):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-15)
    # every policy token has its episode's advantage: the gradient of a token is -w_e' * A_e (sign by advantage)
    for (e, _), gr in zip(lps, g_rows):
        assert np.all(np.sign(gr.numpy()) == -np.sign(adv[e]))


def _place(T: int, parts) -> torch.Tensor:
    out = torch.zeros(T, dtype=torch.float64)
    for pos, lp in parts:
        out = out.index_put((torch.arange(pos, pos + lp.numel()),), lp, accumulate=True)
    return out


def test_invalid_rows_get_no_weight_and_do_not_count():
    w = turn_row_weights(np.array([0.5, 0.5]), np.array([0, 0, 1, 1]), np.array([3, 3, 2, 2]), "token_mean",
                         row_valid=np.array([True, True, True, False]))
    assert w[3] == 0.0
    assert w[:3] == pytest.approx([0.5 * 2 / 3] * 2 + [0.5 * 2 / 3])
    ws = turn_row_weights(np.array([0.5, 0.5]), np.array([0, 0, 1, 1]), np.array([1, 3, 2, 2]), "seq_mean")
    assert ws == pytest.approx([0.125, 0.375, 0.25, 0.25])


def test_turn_row_weights_refuse_bad_input():
    with pytest.raises(ValueError, match="aggregation"):
        turn_row_weights(np.ones(2), np.zeros(2, int), np.ones(2), "sum")
    with pytest.raises(ValueError, match="index the 2 episodes"):
        turn_row_weights(np.ones(2), np.array([0, 2]), np.ones(2))
    with pytest.raises(ValueError, match="one entry per row"):
        turn_row_weights(np.ones(2), np.array([0, 1]), np.ones(3))


def test_reward_after_turn_carries_a_submission_forward():
    r = np.array([[0.2, 0.6, np.nan], [0.5, np.nan, np.nan], [0.1, 0.3, 0.9]])
    out = reward_after_turn(r, np.array([2, 1, 3]))
    np.testing.assert_array_equal(out, [[0.2, 0.6, 0.6], [0.5, 0.5, 0.5], [0.1, 0.3, 0.9]])


def test_best_turn_and_finite_mean():
    from wmrl.core.episodes import best_turn, finite_mean

    b = best_turn(np.array([[0.2, 0.6], [np.nan, np.nan], [0.5, np.nan]]))
    np.testing.assert_array_equal(b, [0.6, np.nan, 0.5])
    assert finite_mean(b) == pytest.approx(0.55) and finite_mean(np.array([np.nan])) is None

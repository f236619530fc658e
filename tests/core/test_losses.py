"""GRPO loss pieces against hand-computed values (PPO clip, k3 KL, TRL/verl aggregation)."""
import math

import pytest
import torch

from wmrl.core.fusion import fusion_weights
from wmrl.core.losses import clipped_surrogate, grpo_loss, kl_k3

LN = math.log


def _batch():
    # two trajectories, two token slots; row 1 has one masked token
    old = torch.log(torch.tensor([[0.2, 0.4], [0.2, 0.3]]))
    ratio = torch.tensor([[1.5, 0.5], [1.5, 1.0]])
    lp = (old + torch.log(ratio)).requires_grad_(True)
    adv = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[True, True], [True, False]])
    return lp, old, adv, mask


def test_clipped_surrogate_hand_values():
    lp, old, adv, mask = _batch()
    loss, clipped = clipped_surrogate(lp, old, adv, mask, 0.2, 0.2)
    # (0,0): A=+1, ratio=1.5 -> min(1.5, 1.2) = 1.2 (clipped); (0,1): ratio=.5 -> min(.5, .8)=.5
    # (1,0): A=-1, ratio=1.5 -> min(-1.5, -1.2) = -1.5 (not clipped); (1,1) masked -> 0
    torch.testing.assert_close(loss, torch.tensor([[-1.2, -0.5], [1.5, 0.0]]))
    assert clipped.tolist() == [[True, False], [False, False]]


def test_clip_high_dapo():
    lp, old, adv, mask = _batch()
    loss, _ = clipped_surrogate(lp, old, adv, mask, clip_low=0.2, clip_high=0.28)
    assert loss[0, 0].item() == pytest.approx(-1.28)


def test_negative_advantage_low_clip():
    old = torch.zeros(1, 1)
    lp = torch.log(torch.tensor([[0.5]]))  # ratio = 0.5 < 1 - 0.2
    loss, clipped = clipped_surrogate(lp, old, torch.tensor([-2.0]), None, 0.2, 0.2)
    # min(0.5 * -2, 0.8 * -2) = -1.6 -> loss 1.6, clip active
    assert loss.item() == pytest.approx(1.6)
    assert clipped.item()


def test_kl_k3_hand_value():
    lp = torch.log(torch.tensor([[0.5, 0.3]]))
    ref = torch.log(torch.tensor([[0.25, 0.3]]))
    kl = kl_k3(lp, ref)
    # d = ln(.25/.5) = -ln 2: exp(d) - d - 1 = 0.5 + ln2 - 1
    assert kl[0, 0].item() == pytest.approx(0.5 + LN(2) - 1, rel=1e-6)
    assert kl[0, 1].item() == pytest.approx(0.0, abs=1e-7)


def test_grpo_loss_token_and_seq_mean_hand_values():
    lp, old, adv, mask = _batch()
    tok, stats = grpo_loss(lp, old, adv, mask, aggregation="token_mean")
    seq, _ = grpo_loss(lp, old, adv, mask, aggregation="seq_mean")
    # S_0 = -1.7 (2 tokens), S_1 = 1.5 (1 token)
    assert tok.item() == pytest.approx((-1.7 + 1.5) / 3)
    assert seq.item() == pytest.approx((-1.7 / 2 + 1.5 / 1) / 2)
    assert stats["clip_frac"] == pytest.approx(1 / 3)
    assert stats["n_tokens"] == 3
    assert math.isnan(stats["kl_mean"])


def test_grpo_loss_with_kl_beta():
    lp, old, adv, mask = _batch()
    ref = lp.detach() + LN(0.5)  # ref = lp + ln .5 -> d = -ln2 everywhere
    k = 0.5 + LN(2) - 1
    loss, stats = grpo_loss(lp, old, adv, mask, ref_logprobs=ref, beta=0.1, aggregation="token_mean")
    assert loss.item() == pytest.approx((-1.7 + 1.5 + 0.1 * 3 * k) / 3, rel=1e-5)
    assert stats["kl_mean"] == pytest.approx(k, rel=1e-5)
    with pytest.raises(ValueError, match="ref_logprobs"):
        grpo_loss(lp, old, adv, mask, beta=0.1)


def test_sample_weights_semantics():
    lp, old, adv, mask = _batch()
    # w = 1/B reproduces the unweighted loss; weights are used as given
    base, _ = grpo_loss(lp, old, adv, mask, aggregation="token_mean")
    same, _ = grpo_loss(lp, old, adv, mask, sample_weights=torch.tensor([0.5, 0.5]))
    assert same.item() == pytest.approx(base.item())
    w, _ = grpo_loss(lp, old, adv, mask, sample_weights=torch.tensor([0.2, 0.8]), aggregation="seq_mean")
    assert w.item() == pytest.approx(0.2 * (-0.85) + 0.8 * 1.5)
    # token_mean: l_i = S_i / nbar, nbar = 3/2
    w2, _ = grpo_loss(lp, old, adv, mask, sample_weights=torch.tensor([0.2, 0.8]), aggregation="token_mean")
    assert w2.item() == pytest.approx(0.2 * (-1.7 / 1.5) + 0.8 * (1.5 / 1.5))


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean"])
def test_fused_gradient_is_alpha_mix_of_stream_gradients(aggregation):
    torch.manual_seed(0)
    B, T = 6, 5
    logits = torch.randn(B, T, requires_grad=True)
    old = torch.nn.functional.logsigmoid(logits).detach()
    mask = torch.rand(B, T) > 0.3
    mask[:, 0] = True
    adv = torch.randn(B)
    is_anchor = torch.tensor([True, True, False, False, False, False])
    alpha = 0.3

    def grad_of(weights):
        logits.grad = None
        lp = torch.nn.functional.logsigmoid(logits)
        loss, _ = grpo_loss(lp, old, adv, mask, sample_weights=weights, aggregation=aggregation)
        loss.backward()
        return logits.grad.clone()

    w = torch.tensor(fusion_weights(is_anchor.numpy(), alpha), dtype=torch.float32)
    g = grad_of(w)
    g_a = grad_of(torch.where(is_anchor, 1 / 2, 0.0))  # mean over anchor samples
    g_w = grad_of(torch.where(is_anchor, 0.0, 1 / 4))  # mean over world-model samples
    torch.testing.assert_close(g, alpha * g_a + (1 - alpha) * g_w)


def test_minus_inf_in_masked_positions_gives_finite_loss_and_grad():
    lp = torch.tensor([[-0.5, float("-inf")], [-1.0, -0.2]], requires_grad=True)
    old = torch.tensor([[-0.4, float("-inf")], [-1.0, float("-inf")]])
    ref = torch.tensor([[-0.6, float("-inf")], [-1.1, -0.3]])
    mask = torch.tensor([[True, False], [True, False]])
    loss, stats = grpo_loss(lp, old, torch.tensor([1.0, -1.0]), mask, ref_logprobs=ref, beta=0.04)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.all(torch.isfinite(lp.grad))
    assert lp.grad[0, 1] == 0 and lp.grad[1, 1] == 0
    assert math.isfinite(stats["kl_mean"])


def test_on_policy_gradient_equals_reinforce():
    # ratio = 1: d loss / d lp_{i,t} = -w_i * A_i / n_i (seq_mean)
    lp = torch.log(torch.tensor([[0.3, 0.6], [0.5, 0.5]])).requires_grad_(True)
    mask = torch.tensor([[True, True], [True, False]])
    loss, _ = grpo_loss(lp, lp.detach(), torch.tensor([2.0, -1.0]), mask, aggregation="seq_mean")
    loss.backward()
    torch.testing.assert_close(lp.grad, torch.tensor([[-0.5, -0.5], [0.5, 0.0]]))


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        (dict(mask=torch.ones(2, 2, dtype=torch.int64)), "bool"),
        (dict(aggregation="sum"), "aggregation"),
        (dict(sample_weights=torch.ones(3)), "sample_weights"),
        (dict(beta=-1.0), "beta"),
        (dict(clip_low=1.5), "clip_low"),
        (dict(advantages=torch.ones(3)), "advantages"),
    ],
)
def test_bad_inputs(kwargs, msg):
    base = dict(
        logprobs=torch.zeros(2, 2), old_logprobs=torch.zeros(2, 2), advantages=torch.ones(2),
        mask=torch.ones(2, 2, dtype=torch.bool),
    )
    base.update(kwargs)
    with pytest.raises(ValueError, match=msg):
        grpo_loss(**base)

"""A fourth environment in one file: a contextual bandit, registered, trained two steps with every recipe through the
step engine (the same engine the text, embodied and integration trainers run on).

The toy: T contexts ("tasks"), K arms each; a trajectory is one arm drawn from the policy's softmax for its context;
the real reward of an arm is its true value (deterministic), and the world model predicts a monotone, biased
version of it (0.3 + 0.5 * value), which the isotonic calibration can correct from anchors.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from wmrl.core.losses import grpo_loss
from wmrl.core.recipe import RecipeSettings, get_recipe, recipe_names
from wmrl.runs.ledger import Ledger
from wmrl.step import Environment, Outcome, Predictions, Rollouts, StepEngine, done, environment_names, \
    make_environment, register_environment

T, K = 3, 5
VALUES = np.linspace(0.0, 1.0, T * K).reshape(T, K)[:, np.random.default_rng(0).permutation(K)]


class BanditPolicy(torch.nn.Module):
    """Logits [T, K] float32, one softmax per context."""

    def __init__(self) -> None:
        super().__init__()
        self.logits = torch.nn.Parameter(torch.zeros(T, K))

    def logprob(self, ctx: torch.Tensor, arm: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.logits[ctx], dim=-1).gather(1, arm[:, None])  # [B, 1]


@register_environment("toy-bandit")
class BanditEnvironment:
    """M contexts per step (cycled), G arms drawn per context; real reward = the arm's value."""

    name = "toy-bandit"

    def __init__(self, groups_per_step: int = 3, group_size: int = 4, seed: int = 0) -> None:
        self.M, self.G, self.seed = groups_per_step, group_size, seed
        self.executed = 0

    def sample(self, policy: BanditPolicy, step: int) -> Rollouts:
        ctx = np.array([(step * self.M + j) % T for j in range(self.M)])
        gen = torch.Generator().manual_seed(int(np.random.SeedSequence([self.seed, step]).generate_state(1)[0]))
        c = torch.as_tensor(np.repeat(ctx, self.G))
        with torch.no_grad():
            probs = torch.softmax(policy.logits[c], dim=-1)
            arm = torch.multinomial(probs, 1, generator=gen)[:, 0]
            old = policy.logprob(c, arm)
        return Rollouts(step=step, group_keys=[f"context-{x}" for x in ctx],
                        group_ids=np.repeat(np.arange(self.M), self.G),
                        data={"ctx": c, "arm": arm, "old_logprobs": old})

    def submit(self, rollouts: Rollouts, idx: np.ndarray) -> list:
        d = rollouts.data
        self.executed += len(idx)
        r = VALUES[d["ctx"].numpy()[idx], d["arm"].numpy()[idx]]
        return done([Outcome(status="ok", reward=float(x), cpu_s=0.001, wall_s=0.001) for x in r])

    def predict(self, rollouts: Rollouts) -> Predictions:
        d = rollouts.data
        return Predictions(reward_wm=0.3 + 0.5 * VALUES[d["ctx"].numpy(), d["arm"].numpy()])


def _update(policy: BanditPolicy, opt: torch.optim.Optimizer, ro_data: dict, adv: np.ndarray, w: np.ndarray) -> float:
    lp = policy.logprob(ro_data["ctx"], ro_data["arm"])
    loss, _ = grpo_loss(lp, ro_data["old_logprobs"], torch.as_tensor(np.nan_to_num(adv), dtype=torch.float32),
                        torch.ones_like(lp, dtype=torch.bool), sample_weights=torch.as_tensor(w, dtype=torch.float32),
                        aggregation="seq_mean")
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.detach())


def test_the_toy_environment_is_registered_and_satisfies_the_protocol() -> None:
    assert "toy-bandit" in environment_names()
    env = make_environment("toy-bandit", group_size=2)
    assert isinstance(env, Environment) and env.G == 2
    with pytest.raises(KeyError, match="unknown environment 'nope'.*toy-bandit"):
        make_environment("nope")


@pytest.mark.parametrize("method", recipe_names())
def test_every_recipe_trains_the_toy_environment_for_two_steps(method: str) -> None:
    torch.manual_seed(0)
    policy = BanditPolicy()
    opt = torch.optim.Adam(policy.parameters(), lr=0.1)
    env = make_environment("toy-bandit", seed=1)
    engine = StepEngine(method, RecipeSettings(calibrator_min_anchors=2, fusion_min_pairs=2), anchor_fraction=0.5,
                        min_anchor_every=1, seed=0)
    ledger = Ledger(method=method, anchor_fraction_configured=engine.anchor_fraction)
    recipe = get_recipe(method)
    for step in (1, 2):
        ledger.begin_step()
        sb = engine.step(env, policy, step, ledger)
        before = policy.logits.detach().clone()
        loss = _update(policy, opt, sb.batch, sb.out.advantages, sb.out.weights)
        times = ledger.end_step()
        assert sb.B == 12 and sb.M == 3 and np.isfinite(loss)
        # route: grpo executes every group, wm none, the fraction recipes half of them
        expected = {"all": 3, "none": 0}.get(recipe.anchors, None)
        n_anchor = int(sb.anchor_groups.sum())
        assert n_anchor == expected if expected is not None else 1 <= n_anchor <= 2
        # execute: true rewards on anchors only; predict: every trajectory when the recipe reads the world model
        assert np.isfinite(sb.reward_true[sb.is_anchor]).all() and np.isnan(sb.reward_true[~sb.is_anchor]).all()
        assert np.isfinite(sb.reward_wm).all() == recipe.uses_world_model
        # recipe: finite weights, summing to one over the trained samples (PPI++: over the anchors, its world-model
        # samples adding lambda); the update moved the policy
        w = sb.out.weights
        total = w[sb.is_anchor].sum() if sb.out.stats.get("ppi_lambda") is not None else w.sum()
        assert np.isfinite(w).all() and (w >= 0).all() and total == pytest.approx(1.0)
        assert not torch.equal(before, policy.logits.detach())
        assert {"wall_s.route", "wall_s.execute", "wall_s.recipe"} <= set(times)  # each stage timed in the ledger
    assert env.executed == ledger.executions["anchor"].count


def test_the_worked_example_of_the_architecture_doc_runs(capsys) -> None:
    """docs/architecture.md, "Adding an environment": the example registers an environment and runs one step."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text(encoding="utf-8")
    code = doc.split("### Adding an environment", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    exec(compile(code, "docs/architecture.md", "exec"), {})  # noqa: S102 - the documentation's example, run as written
    assert "bandit" in environment_names()
    printed = capsys.readouterr().out
    assert "True" in printed and "False" in printed  # the anchor mask of a wmrl step at rho 0.5

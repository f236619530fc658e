"""WMRL inside TRL's GRPOTrainer (trl 1.16.0): the advantages TRL's loss reads are the registered recipe's,
folded with its weights; end to end on the tiny model, two real small tasks, two steps, real sandboxed
anchors (docs/integrations.md)."""
from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch

from wmrl.core.losses import grpo_loss
from wmrl.core.recipe import RecipeSettings, StepInputs, get_recipe
from wmrl.integrations.driver import WMRLDriver, loss_advantages, replay

TASKS = ["vcdextra-titanicp", "aer-houseprices"]
SETTINGS = RecipeSettings(calibrator_min_anchors=2, fusion_min_pairs=2)


@pytest.mark.parametrize("aggregation, seed", [("seq_mean", 0), ("token_mean", 1)])
def test_weights_fold_into_advantages_exactly_under_clipping(aggregation, seed):
    """sum_i w_i l_i(A_i) == mean_i l_i(B w_i A_i) with ratios far outside the clip range (min is
    positively homogeneous), for the weights of the wmrl and PPI++ recipes."""
    g = torch.Generator().manual_seed(seed)
    B, T = 8, 5
    lp = torch.randn(B, T, generator=g, dtype=torch.float64, requires_grad=True)
    old = (lp + 0.8 * torch.randn(B, T, generator=g, dtype=torch.float64)).detach()  # ratios e^{+-0.8}
    mask = torch.rand(B, T, generator=g) > 0.2
    mask[:, 0] = True
    rng = np.random.default_rng(seed)
    for method in ("wmrl", "wmrl-ppi", "grpo"):
        recipe = get_recipe(method)
        state = recipe.init_state(SETTINGS)
        for step in (1, 2, 3):  # later steps have a window: IVW alpha / PPI++ lambda away from the pooled value
            gid = np.repeat(np.arange(4), 2)
            anc = np.isin(gid, [0, 1]) if method != "grpo" else np.ones(B, bool)
            rt = np.where(anc, rng.uniform(size=B), np.nan)
            rw = np.clip(np.nan_to_num(rt, nan=0.5) + rng.normal(0, 0.2, B), 0, 1)
            out = recipe.step(StepInputs(step, gid, anc, np.ones(B, bool), rt, rw), state, SETTINGS)
        assert (out.weights >= 0).all()
        w = torch.tensor(out.weights)
        ref, _ = grpo_loss(lp, old, torch.tensor(out.advantages), mask, sample_weights=w, aggregation=aggregation)
        folded, _ = grpo_loss(lp, old, torch.tensor(loss_advantages(out)), mask, aggregation=aggregation)
        g_ref = torch.autograd.grad(ref, lp)[0]
        g_fold = torch.autograd.grad(folded, lp)[0]
        assert float(ref.detach()) == pytest.approx(float(folded.detach()), rel=1e-12, abs=1e-12), method
        assert torch.allclose(g_ref, g_fold, rtol=1e-10, atol=1e-12), method
    if out.stats["fusion_mode"] == "ppi":
        assert out.stats["ppi_lambda"] is not None


def test_negative_weight_is_refused():
    from wmrl.core.recipe import StepOutputs

    out = StepOutputs(np.zeros(2), np.zeros(2), np.array([1.0, -1.0]), np.array([0.5, -0.5]))
    with pytest.raises(ValueError, match=">= 0"):
        loss_advantages(out)


class SentenceScaffold:
    """A real scaffold for a random model: the completion picks one sentence of the grammar scaffold's
    scikit-learn grammar (crc32 of its text), rendered by the grammar scaffold into a full program."""

    name = "grammar-by-hash"
    response_prefix = ""
    default_max_new_tokens = 16

    def __init__(self):
        from wmrl.models.scaffolds import GrammarScaffold

        self.inner = GrammarScaffold()

    def prompt(self, task):
        return self.inner.prompt(task)

    def sentence(self, task, completion: str) -> str:
        options = self.inner.grammar_sentences(self.inner.grammar_key(task))
        return options[zlib.crc32(completion.encode()) % len(options)]

    def render(self, task, completion: str) -> str:
        return self.inner.render(task, self.sentence(task, completion))

    def stop_at(self, text: str) -> None:
        return None  # free text: the whole completion picks the sentence

    def is_valid(self, task, completion: str) -> bool:
        return True  # every completion maps to a sentence of the grammar

    def grammar_key(self, task) -> None:
        return None  # sampled as free text

    def grammar_sentences(self, key: str):
        raise ValueError("sampled as free text: no grammar")


@pytest.mark.slow
def test_trl_grpo_trains_on_the_recipe(small_suite, tmp_path):
    pytest.importorskip("trl", reason="the TRL integration test needs the 'trl' extra (scripts/install.sh installs it)")
    from trl import GRPOConfig

    from wmrl.execution.pool import LocalExecutor
    from wmrl.integrations.trl import WMRLRewardFunction, trl_dataset, wmrl_grpo_trainer_class
    from wmrl.models.backbone import tiny_backbone
    from wmrl.tasks.loader import TaskSuite
    from wmrl.world_model.data import WorldModelExample
    from wmrl.world_model.regression import RegressionWorldModel

    torch.manual_seed(0)
    suite = TaskSuite(small_suite)
    tasks = [suite.get(t) for t in TASKS]
    scaffold = SentenceScaffold()
    model, tok = tiny_backbone(seed=0)
    wm_backbone, _ = tiny_backbone(seed=0)  # the world model's own frozen copy (docs/models.md: never shared weights)
    with LocalExecutor(max_workers=2) as ex:
        # The world model's warm-up: 3 programs per task, executed for real.
        from wmrl.execution.types import ExecutionRequest

        warm = [(t, f"warm {k}") for t in tasks for k in range(3)]
        res = ex.run_batch([ExecutionRequest(task=t, program=scaffold.render(t, c)) for t, c in warm])
        assert all(r.reward is not None for r in res)
        wm = RegressionWorldModel(wm_backbone, tok, lora=None)
        wm.fit([WorldModelExample(prompt=scaffold.prompt(t), completion=c, reward=r.reward, group=t.id)
                for (t, c), r in zip(warm, res)], heldout_fraction=0.0, seed=0)

        driver = WMRLDriver(tasks, scaffold, wm, ex, method="wmrl", anchor_fraction=0.5, min_anchor_every=1,
                            settings=SETTINGS, seed=0, run="trl-test")
        reward = WMRLRewardFunction(driver, num_generations=2)
        generated: list[list[tuple]] = []  # per step: (prompt ids, completion ids) in generation order
        seen: list[tuple[tuple, float]] = []  # per loss row: (ids, advantage TRL's loss read)

        def rows(batch):
            return [(tuple(p[m.bool()].tolist()), tuple(c[k.bool()].tolist())) for p, m, c, k in
                    zip(batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], batch["completion_mask"])]

        class Capturing(wmrl_grpo_trainer_class()):
            def _generate_and_score_completions(self, inputs):
                out = super()._generate_and_score_completions(inputs)
                generated.append(rows(out))
                return out

            def _compute_loss(self, model, inputs):  # TRL shuffles the generation batch before its loss
                seen.extend(zip(rows(inputs), inputs["advantages"].detach().double().tolist()))
                return super()._compute_loss(model, inputs)

        args = GRPOConfig(output_dir=str(tmp_path / "trl"), per_device_train_batch_size=4, num_generations=2,
                          max_completion_length=8, max_steps=2, learning_rate=1e-3, logging_steps=1, report_to=[],
                          save_strategy="no", use_cpu=True, seed=0, loss_type="grpo", beta=0.0,
                          dataloader_num_workers=0, bf16=False)
        before = [p.detach().clone() for p in model.parameters()]
        trainer = Capturing(model=model, args=args, train_dataset=trl_dataset(tasks, scaffold, repeat=4),
                            processing_class=tok, wmrl_reward=reward)
        trainer.train()

    hist = driver.history
    assert [h.step for h in hist] == [1, 2]
    assert len(generated) == 2 and len(seen) == 8
    for h in hist:
        x = h.inputs
        assert x.B == 4 and np.all(np.isfinite(x.reward_wm))  # the world model scored every completion
        assert x.is_anchor.any() and not x.is_anchor.all()
        for i in np.flatnonzero(x.is_anchor):  # anchors ran for real in the sandbox
            r = h.results[int(i)]
            assert h.statuses[i] == "ok" and r.wall_s > 0 and 0.0 <= r.reward <= 1.0
    # The recipe, replayed from a fresh state on the same inputs, gives what the integration used...
    outs = replay("wmrl", [h.inputs for h in hist], SETTINGS)
    for h, o in zip(hist, outs):
        np.testing.assert_array_equal(h.outputs.advantages, o.advantages)
        np.testing.assert_array_equal(h.outputs.weights, o.weights)
    # ...and TRL's loss read exactly B * w * A of it.
    expected = {}
    for gen, o in zip(generated, outs):
        assert len(set(gen)) == 4  # distinct samples, so each loss row is matched to one generated row
        expected.update(zip(gen, 4 * o.weights * o.advantages))
    assert sorted(ids for ids, _ in seen) == sorted(expected)  # every sample reached the loss once
    for ids, adv in seen:
        assert adv == pytest.approx(expected[ids], rel=1e-6, abs=1e-7)
    # Step 2 fuses: alpha from step 1's anchor pairs, so the two streams carry different weights.
    st = outs[1].stats
    assert st["fusion_mode"] not in ("equal", "pooled") and st["weight_anchor"] != st["weight_wm"]
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, model.parameters()))  # TRL updated the policy
    assert "wmrl/alpha" in trainer._metrics["train"] or any("wmrl/alpha" in r for r in trainer.state.log_history)

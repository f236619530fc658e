"""WMRL in verl 0.9.1: the ``wmrl`` reward manager and advantage estimator, through verl's own registries,
``DataProto`` and ``compute_advantage``, with real sandboxed anchors (docs/integrations.md).

verl 0.9.1 needs transformers >=5.5.3,<5.11 and wmrl's environment has a later one, so these tests run in
the separate environment ``.venv-verl`` (scripts/verl-env.sh) and are skipped where verl is not installed.
The parts that need no verl (the stateless router, the estimator on plain tensors) run everywhere.
"""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from wmrl.core.recipe import RecipeSettings, StepInputs
from wmrl.integrations.driver import loss_advantages, replay
from wmrl.integrations.verl import ESTIMATOR_STATE, INFRA_SCORE, anchor_groups, compute_wmrl_advantage

TASKS = ["vcdextra-titanicp", "aer-houseprices"]


def test_anchor_groups_is_seeded_and_hits_rho():
    uids = [f"uid-{k}" for k in range(4000)]
    a = anchor_groups(uids, 0.25, seed=3)
    assert np.array_equal(a, anchor_groups(uids, 0.25, seed=3))
    assert not np.array_equal(a, anchor_groups(uids, 0.25, seed=4))
    assert abs(a.mean() - 0.25) < 0.03
    assert anchor_groups(uids, 1.0).all() and not anchor_groups(uids, 0.0).any()


def _uids(rho: float, seed: int) -> tuple[str, str]:
    """The first uid drawn as an anchor and the first that is not (deterministic)."""
    cands = [f"group-{k}" for k in range(64)]
    a = anchor_groups(cands, rho, seed)
    return cands[int(np.flatnonzero(a)[0])], cands[int(np.flatnonzero(~a)[0])]


def test_estimator_is_the_recipe_on_plain_tensors(monkeypatch):
    monkeypatch.setenv("WMRL_METHOD", "wmrl")
    monkeypatch.setenv("WMRL_ANCHOR_FRACTION", "0.5")
    ESTIMATOR_STATE.reset()
    ua, uw = _uids(0.5, 0)
    index = np.array([ua, ua, ua, uw, uw, uw], dtype=object)
    scores = [0.9, 0.1, INFRA_SCORE, 0.4, 0.6, 0.5]  # third anchor: an infrastructure failure
    L = 4
    mask = torch.ones(6, L)
    mask[1, 2:] = 0
    tlr = torch.zeros(6, L)
    last = mask.sum(-1).long() - 1
    tlr[torch.arange(6), last] = torch.tensor(scores)
    anc = np.array([1, 1, 1, 0, 0, 0], bool)
    r_wm = np.array([0.7, 0.3, 0.5, 0.4, 0.6, 0.5])
    r_true = np.array([0.9, 0.1, np.nan] + [np.nan] * 3)
    ntb = {"uid": index, "wmrl_is_anchor": anc, "wmrl_reward_true": r_true, "wmrl_reward_wm": r_wm}
    adv, ret = compute_wmrl_advantage(tlr, mask, index, non_tensor_batch=ntb)
    x = StepInputs(1, np.array([0, 0, 0, 1, 1, 1]), anc, np.array([1, 1, 0, 1, 1, 1], bool), r_true, r_wm)
    (out,) = replay("wmrl", [x], RecipeSettings())
    want = torch.tensor(loss_advantages(out), dtype=torch.float32).unsqueeze(-1) * mask
    assert torch.allclose(adv, want) and torch.equal(adv, ret)
    assert float(adv[2].abs().sum()) == 0.0 and float(adv[0, 0]) > 0 > float(adv[1, 0])
    with pytest.raises(ValueError, match="uid"):
        compute_wmrl_advantage(tlr, mask, None, non_tensor_batch=ntb)
    with pytest.raises(ValueError, match="gdpo"):  # what verl 0.9.1's compute_advantage would do
        compute_wmrl_advantage(tlr, mask, index)
    with pytest.raises(ValueError, match="use_kl_in_reward"):
        compute_wmrl_advantage(tlr + 0.01 * mask, mask, index, non_tensor_batch=ntb)


@pytest.mark.slow
def test_verl_registries_batch_and_compute_advantage(small_suite, monkeypatch):
    pytest.importorskip("verl", reason="verl 0.9.1 needs transformers<5.11: run in .venv-verl (scripts/verl-env.sh)")
    from verl import DataProto
    from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn
    from verl.trainer.ppo.ray_trainer import compute_advantage

    from wmrl.execution.pool import LocalExecutor
    from wmrl.integrations.verl import register_verl, wmrl_compute_advantage
    from wmrl.models.backbone import smollm2_tokenizer
    from wmrl.models.scaffolds import GrammarScaffold
    from wmrl.tasks.loader import TaskSuite

    monkeypatch.setenv("WMRL_METHOD", "wmrl")
    monkeypatch.setenv("WMRL_ANCHOR_FRACTION", "0.5")
    ESTIMATOR_STATE.reset()
    reg = register_verl()
    assert get_adv_estimator_fn("wmrl") is compute_wmrl_advantage
    assert get_reward_manager_cls("wmrl") is reg["reward_manager"]

    class LengthWorldModel:  # a deterministic world model: shorter pipelines score higher
        def predict(self, prompts, completions):
            return np.array([1.0 / (1.0 + len(c) / 100.0) for c in completions])

    suite = TaskSuite(small_suite)
    tasks = {t: suite.get(t) for t in TASKS}
    scaffold, tok = GrammarScaffold(), smollm2_tokenizer()
    ua, uw = _uids(0.5, 0)
    rows = []  # (uid, task id, response text): 2 groups x 3 samples, one anchor group, one world-model group
    for uid, tid in ((ua, TASKS[0]), (uw, TASKS[1])):
        sentences = scaffold.grammar_sentences(scaffold.grammar_key(tasks[tid]))
        rows += [(uid, tid, sentences[k * 7 % len(sentences)]) for k in range(3)]
    P, R = 6, 80
    prompts = torch.full((6, P), tok.pad_token_id)
    responses = torch.full((6, R), tok.pad_token_id)
    attn = torch.zeros(6, P + R, dtype=torch.long)
    for i, (_, _, text) in enumerate(rows):
        ids = tok(text, add_special_tokens=False)["input_ids"][:R]
        prompts[i, -1], responses[i, :len(ids)] = 1, torch.tensor(ids)
        attn[i, P - 1], attn[i, P:P + len(ids)] = 1, 1
    data = DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "attention_mask": attn,
                 "response_mask": attn[:, P:].clone()},
        non_tensors={"uid": np.array([r[0] for r in rows], dtype=object),
                     "extra_info": np.array([{"task_id": r[1]} for r in rows], dtype=object)})
    with LocalExecutor(max_workers=2) as ex:
        mgr = reg["reward_manager"](config=None, tokenizer=tok, compute_score=None,
                                    parts={"tasks": tasks, "scaffold": scaffold, "world_model": LengthWorldModel(),
                                           "executor": ex})

        async def score_all():
            return await asyncio.gather(*(mgr.run_single(data[i:i + 1]) for i in range(len(data))))

        outs = asyncio.run(score_all())
    # As verl does: rm_scores from the per-sample scores, the extra info into non_tensor_batch.
    data.batch["token_level_rewards"] = mgr.assemble_rm_scores(data, [o["reward_score"] for o in outs])
    for key in ("wmrl_is_anchor", "wmrl_reward_true", "wmrl_reward_wm"):
        data.non_tensor_batch[key] = np.array([o["reward_extra_info"][key] for o in outs], dtype=object)
    is_anchor = data.non_tensor_batch["wmrl_is_anchor"].astype(bool)
    assert is_anchor.tolist() == [True] * 3 + [False] * 3
    r_true = data.non_tensor_batch["wmrl_reward_true"].astype(float)
    assert np.all((r_true[:3] >= 0) & (r_true[:3] <= 1)) and np.isnan(r_true[3:]).all()  # executed for real
    with pytest.raises(ValueError, match="gdpo"):  # verl's own compute_advantage passes no non_tensor_batch
        compute_advantage(data, adv_estimator="wmrl")
    data = wmrl_compute_advantage(data)
    assert np.isfinite(data.non_tensor_batch["wmrl_reward_wm"].astype(float)).all()  # r_hat on anchors too
    # The recipe, from a fresh state, on the flags and scores carried in the batch:
    x = StepInputs(1, np.array([0] * 3 + [1] * 3), is_anchor, np.ones(6, bool), r_true,
                   data.non_tensor_batch["wmrl_reward_wm"].astype(float))
    (out,) = replay("wmrl", [x], RecipeSettings())
    want = torch.tensor(loss_advantages(out), dtype=torch.float32).unsqueeze(-1) * data.batch["response_mask"]
    assert torch.allclose(data.batch["advantages"], want, atol=1e-6)
    assert float(data.batch["advantages"].abs().sum()) > 0

"""The trainer hook of WMRL in verl 0.9.1 (wmrl/integrations/verl_trainer.py, docs/integrations.md): verl's own
V1 trainer method ``_compute_advantage``, run on a real TransferQueue (on a local Ray) filled the way verl's
agent loop fills it, gives the ``wmrl`` estimator's advantages for ``adv_estimator=wmrl`` and verl's own for
``grpo`` / ``gae``; verl's ``main_ppo`` config is prepared for it; the task runner registers wmrl's parts in
its own Ray actor.

Needs verl 0.9.1 with TransferQueue (scripts/verl-env.sh builds ``.venv-verl``); skipped elsewhere, because
verl 0.9.1 needs transformers <5.11 and wmrl's environment has a later one. No fit() step runs here: verl's
rollout needs a vLLM/SGLang server (GPU) and its actor an FSDP/Megatron worker group.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("verl", reason="verl 0.9.1 needs transformers<5.11: run in .venv-verl (scripts/verl-env.sh)")
pytest.importorskip("transfer_queue", reason="verl 0.9.1's V1 trainer needs TransferQueue (scripts/verl-env.sh)")

import ray
import transfer_queue as tq
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.v1 import PPOTrainerSync, get_trainer_cls
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

from wmrl.core.recipe import RecipeSettings, StepInputs
from wmrl.integrations.driver import loss_advantages, replay
from wmrl.integrations.verl import ESTIMATOR_STATE, INFRA_SCORE, anchor_groups, wmrl_compute_advantage
from wmrl.integrations.verl_trainer import TRAINER_MODE, WMRLPPOTrainerSync, register_all

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def transfer_queue():
    """A local Ray and verl's TransferQueue (SimpleStorage), as verl's TaskRunnerV1 starts it. Ray's CPUs are
    logical: the controller, the two storage units and the task runner actor each hold one."""
    ray.init(num_cpus=6, include_dashboard=False, log_to_driver=False)
    try:
        tq.init()
        yield tq
        tq.close()
    finally:
        ray.shutdown()


def _uids(rho: float, seed: int, n: int) -> tuple[list[str], list[str]]:
    cands = [f"g{k}" for k in range(64)]
    a = anchor_groups(cands, rho, seed)
    return [c for c, x in zip(cands, a) if x][:n], [c for c, x in zip(cands, a) if not x][:n]


def _samples(seed: int = 0) -> list[dict]:
    """2 anchor groups and 2 world-model groups of 3 sessions: what verl's agent loop puts per output
    (``AgentLoopOutput.as_dict``: response_mask, rm_scores with the score on the last response token,
    extra_fields with the reward manager's reward_extra_info; uid from the prompt)."""
    rng = np.random.default_rng(seed)
    anc, wm = _uids(0.5, 0, 2)
    out = []
    for uid in anc + wm:
        is_anchor = uid in anc
        for s in range(3):
            n = int(rng.integers(3, 9))
            r_wm = float(rng.uniform(0.1, 0.9))
            r_true = float(rng.uniform(0, 1)) if is_anchor else float("nan")
            if is_anchor and uid == anc[0] and s == 2:
                r_true = float("nan")  # an infrastructure failure
            score = (INFRA_SCORE if np.isnan(r_true) else r_true) if is_anchor else r_wm
            rm = torch.zeros(n, dtype=torch.float32)
            rm[-1] = score
            out.append({"key": f"{uid}_{s}_0", "uid": uid, "response_mask": torch.ones(n, dtype=torch.int64),
                        "rm_scores": rm, "values": torch.linspace(0.0, 0.5, n),
                        "extra_fields": {"reward_extra_info": {"wmrl_is_anchor": is_anchor, "wmrl_reward_true": r_true,
                                                               "wmrl_reward_wm": r_wm}}})
    return out


def _put(samples: list[dict], partition: str, drop: tuple[str, ...] = ()):
    fields = [{k: v for k, v in s.items() if k != "key" and k not in drop} for s in samples]
    return tq.kv_batch_put(keys=[s["key"] for s in samples], partition_id=partition,
                           fields=list_of_dict_to_tensordict(fields), tags=[{"status": "success"} for _ in samples])


def _trainer(cls, estimator: str, **algo):
    """A verl V1 trainer with the config its ``_compute_advantage`` reads (no workers: nothing else runs)."""
    t = object.__new__(cls)
    t.config = OmegaConf.create({"algorithm": {"adv_estimator": estimator, "use_kl_in_reward": False, "gamma": 1.0,
                                               "lam": 0.95, "norm_adv_by_std_in_grpo": True, **algo},
                                 "actor_rollout_ref": {"rollout": {"n": 3}}})
    return t


def _advantages(batch) -> tuple[torch.Tensor, torch.Tensor]:
    got = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["advantages", "returns"])
    return got["advantages"].to_padded_tensor(0.0), got["returns"].to_padded_tensor(0.0)


def _padded(samples: list[dict], key: str) -> torch.Tensor:
    return torch.nn.utils.rnn.pad_sequence([s[key] for s in samples], batch_first=True).to(
        torch.float32 if key != "response_mask" else torch.int64)


def test_wmrl_sync_is_registered_and_the_registries_agree():
    reg = register_all()
    assert get_trainer_cls(TRAINER_MODE) is WMRLPPOTrainerSync and issubclass(WMRLPPOTrainerSync, PPOTrainerSync)
    assert core_algos.get_adv_estimator_fn("wmrl") is reg["adv_estimator"]
    # the hook overrides one method of verl's trainer, nothing else
    own = {k for k, v in vars(WMRLPPOTrainerSync).items() if callable(v) and not k.startswith("__")}
    assert own == {"_compute_advantage"}


def test_wmrl_advantage_step_through_transfer_queue(transfer_queue, monkeypatch):
    monkeypatch.setenv("WMRL_METHOD", "wmrl")
    monkeypatch.setenv("WMRL_ANCHOR_FRACTION", "0.5")
    register_all()
    samples = _samples()
    batch = _put(samples, "train")
    ESTIMATOR_STATE.reset()
    metrics: dict = {}
    _trainer(WMRLPPOTrainerSync, "wmrl")._compute_advantage(batch, metrics)
    adv, ret = _advantages(batch)
    assert metrics["wmrl/anchor_fraction"] == 0.5 and metrics["wmrl/valid_fraction"] == pytest.approx(11 / 12)

    # the same samples as a DataProto straight into wmrl_compute_advantage, from a fresh state
    ESTIMATOR_STATE.reset()
    mask = _padded(samples, "response_mask")
    infos = [s["extra_fields"]["reward_extra_info"] for s in samples]
    data = DataProto.from_dict(
        tensors={"token_level_rewards": _padded(samples, "rm_scores"), "response_mask": mask},
        non_tensors={"uid": np.array([s["uid"] for s in samples], dtype=object),
                     **{k: np.array([i[k] for i in infos], dtype=object) for k in infos[0]}})
    want = wmrl_compute_advantage(data).batch["advantages"]
    assert torch.equal(adv, want) and torch.equal(ret, want)

    # and the recipe itself, replayed on the flags the reward manager reported
    is_anchor = np.array([i["wmrl_is_anchor"] for i in infos])
    r_true = np.array([i["wmrl_reward_true"] for i in infos])
    _, gid = np.unique([s["uid"] for s in samples], return_inverse=True)
    x = StepInputs(1, gid, is_anchor, ~(is_anchor & np.isnan(r_true)), r_true,
                   np.array([i["wmrl_reward_wm"] for i in infos]))
    (out,) = replay("wmrl", [x], RecipeSettings())
    assert torch.allclose(adv, torch.tensor(loss_advantages(out), dtype=torch.float32).unsqueeze(-1) * mask, atol=1e-6)
    assert float(adv[2].abs().sum()) == 0.0 and float(adv.abs().sum()) > 0  # the infra failure is out of the loss

    # verl's own trainer method on the same batch: the estimator gets no non_tensor_batch
    with pytest.raises(ValueError, match="gdpo"):
        _trainer(PPOTrainerSync, "wmrl")._compute_advantage(batch, {})


@pytest.mark.parametrize("estimator", ["grpo", "gae"])
def test_other_estimators_go_through_verls_code(transfer_queue, estimator):
    samples = _samples(seed=1)
    for s in samples:  # verl's own partition keys and rewards in [0, 1]
        s["rm_scores"] = s["rm_scores"].clamp(min=0.0)
    ours, stock = _put(samples, f"{estimator}-wmrl"), _put(samples, f"{estimator}-verl")
    _trainer(WMRLPPOTrainerSync, estimator)._compute_advantage(ours, {})
    _trainer(PPOTrainerSync, estimator)._compute_advantage(stock, {})
    (a1, r1), (a2, r2) = _advantages(ours), _advantages(stock)
    assert torch.equal(a1, a2) and torch.equal(r1, r2) and float(a1.abs().sum()) > 0
    mask, tlr = _padded(samples, "response_mask"), _padded(samples, "rm_scores")
    if estimator == "grpo":
        want, _ = core_algos.compute_grpo_outcome_advantage(tlr, mask, np.array([s["uid"] for s in samples], object))
    else:
        want, _ = core_algos.compute_gae_advantage_return(tlr, _padded(samples, "values"), mask, 1.0, 0.95)
    assert torch.allclose(a1, want * mask, atol=1e-6)  # verl keeps response tokens only (nested write-back)


def test_wmrl_advantage_step_refuses(transfer_queue, monkeypatch):
    monkeypatch.setenv("WMRL_METHOD", "wmrl")
    register_all()
    samples = _samples(seed=2)
    with pytest.raises(ValueError, match="use_kl_in_reward"):
        _trainer(WMRLPPOTrainerSync, "wmrl", use_kl_in_reward=True)._compute_advantage(_put(samples, "kl"), {})
    with pytest.raises(ValueError, match="WMRLRewardManager"):  # another reward manager: no wmrl extra info
        for s in samples:
            s["extra_fields"] = {"reward_extra_info": {"acc": 1.0}}
        _trainer(WMRLPPOTrainerSync, "wmrl")._compute_advantage(_put(samples, "other-rm"), {})
    multi = _samples(seed=3)
    multi[0]["key"] = multi[0]["key"][:-2] + "_1"  # a second output of a session (multi-turn agent loop)
    with pytest.raises(ValueError, match="one output per session"):
        _trainer(WMRLPPOTrainerSync, "wmrl")._compute_advantage(_put(multi, "multi"), {})


def test_task_runner_registers_in_its_ray_actor(transfer_queue):
    from verl.trainer.main_ppo import TaskRunnerV1

    from wmrl.integrations.verl_trainer import WMRLTaskRunner, _verl_task_runner, wmrl_task_runner_class

    base = _verl_task_runner()
    assert base.run.__qualname__ == "TaskRunnerV1.run" and TaskRunnerV1.__ray_metadata__.modified_class is base
    actor = wmrl_task_runner_class().remote()
    got = ray.get(actor.registered.remote(), timeout=300)
    assert got == {"trainer": "WMRLPPOTrainerSync", "adv_estimator": "compute_wmrl_advantage",
                   "reward_manager": "register_verl.<locals>.WMRLRewardManager"}
    assert WMRLTaskRunner.run is not base.run
    ray.kill(actor)


def test_main_ppo_config_for_wmrl():
    from hydra import compose, initialize_config_dir

    from wmrl.integrations.verl_main import VERL_CONFIG_DIR, prepare_config

    def cfg(*overrides):
        with initialize_config_dir(config_dir=VERL_CONFIG_DIR, version_base=None):
            return compose(config_name="ppo_trainer", overrides=list(overrides))

    c = prepare_config(cfg("algorithm.adv_estimator=wmrl", "algorithm.use_kl_in_reward=False"))
    assert c.trainer.use_v1 and c.trainer.v1.trainer_mode == TRAINER_MODE
    assert prepare_config(cfg("algorithm.adv_estimator=grpo")).trainer.v1.trainer_mode == "sync"
    with pytest.raises(ValueError, match="use_v1"):
        prepare_config(cfg("algorithm.adv_estimator=wmrl", "trainer.use_v1=False"))
    with pytest.raises(ValueError, match="colocate_async"):
        prepare_config(cfg("algorithm.adv_estimator=wmrl", "trainer.v1.trainer_mode=colocate_async"))
    with pytest.raises(ValueError, match="use_kl_in_reward"):
        prepare_config(cfg("algorithm.adv_estimator=wmrl", "algorithm.use_kl_in_reward=True"))

"""WMRL in verl (written against verl 0.9.1; docs/integrations.md): a reward manager and an advantage
estimator in verl's own registries, the anchor flag and world-model scores carried in verl's batch.

verl 0.9.1's seams and what they see:

* **reward manager** (``verl.experimental.reward_loop.reward_manager.register``, the registry
  ``reward.reward_manager.name`` resolves; ``reward.reward_manager.source=register``). verl calls
  ``async run_single(data)`` once per sample, on its reward-loop workers. :class:`WMRLRewardManager`
  (name ``wmrl``) decides from the sample's ``uid`` whether its group is an anchor (:func:`anchor_groups`,
  a stateless seeded draw, so every worker agrees without talking), then executes the program for real
  through a wmrl executor (sandboxed; local pool or Ray) or scores it with the world model. It returns
  ``reward_score`` (r on anchors, r_hat elsewhere; the world model scores anchors too, :data:`INFRA_SCORE` for an
  infrastructure failure) and
  ``reward_extra_info`` ``wmrl_is_anchor`` / ``wmrl_reward_true`` / ``wmrl_reward_wm``, which verl stores
  per sample in ``DataProto.non_tensor_batch`` (its ``reward_extra_keys``).
* **advantage estimator** (``verl.trainer.ppo.core_algos.register_adv_est``; ``algorithm.adv_estimator=wmrl``).
  verl's ``compute_advantage`` calls it on the driver with the whole batch, but passes only
  ``token_level_rewards`` [bs, L], ``response_mask`` [bs, L], ``index`` (the ``uid`` array) and ``config``
  (``non_tensor_batch`` goes to ``gdpo`` only). The recipe needs the anchor flags and r_hat on anchors too
  (the calibrator's pairs), which only ``non_tensor_batch`` carries, so the estimator takes
  ``non_tensor_batch`` and refuses to run without it; :func:`wmrl_compute_advantage` calls it through
  verl's registry with it. verl's trainer calls that function through
  :mod:`wmrl.integrations.verl_trainer` (trainer mode ``wmrl_sync``: verl's sync trainer with its
  ``_compute_advantage`` overridden; ``python -m wmrl.integrations.verl_main``).
  :func:`compute_wmrl_advantage` builds the recipe's :class:`StepInputs`, calls
  ``get_recipe(method).step`` (the one stateful call per step, state kept in this process) and returns
  ``B * w_i * A_i`` on every response token (:func:`wmrl.integrations.driver.loss_advantages`; verl's
  ``token-mean``/``seq-mean-token-mean`` losses are means over the mini-batch, so this is the recipe's
  weighted loss when one mini-batch is the whole batch). Set ``algorithm.use_kl_in_reward=False``: a KL
  penalty folded into ``token_level_rewards`` would change the scores the recipe reads.

Configuration (environment variables, read where the objects are built, so verl's typed configs stay
untouched): ``WMRL_METHOD`` (recipe, default ``wmrl``), ``WMRL_ANCHOR_FRACTION`` (rho, 0.25), ``WMRL_SEED``
(0), ``WMRL_TASKS_ROOT`` (task folders, e.g. MLE-Dojo's prepared competitions, ``os.pathsep``-separated),
``WMRL_SCAFFOLD`` (``script``), ``WMRL_WORLD_MODEL`` (``module:function`` returning a ``WorldModel``),
``WMRL_EXECUTOR`` (``local`` or ``ray``), ``WMRL_EXEC_WORKERS``. Each dataset row's ``extra_info`` must
hold ``task_id``.
"""
from __future__ import annotations

import importlib
import os
from dataclasses import replace
from typing import Any

import numpy as np

from wmrl.core.recipe import RecipeSettings, StepInputs, get_recipe
from wmrl.core.routing import make_router
from wmrl.integrations.driver import loss_advantages
from wmrl.execution.types import ExecutionRequest
from wmrl.execution.pool import result_or_infra
import asyncio
from wmrl.core.recall import MeasuredRewards
from wmrl.execution.pool import LocalExecutor
from wmrl.execution.ray_pool import RayExecutor
from wmrl.tasks.loader import TaskSuite
from wmrl.models.scaffolds import get_scaffold

#: reward_score of an infrastructure failure (rewards are percentiles in [0, 1]; the recipe drops the sample).
INFRA_SCORE = -1.0
TESTED_VERL_VERSION = "0.9.1"


def settings_from_env() -> dict[str, Any]:
    """``method``, ``anchor_fraction`` (rho of the recipe: 1 for ``grpo``, 0 for ``wm``) and ``seed`` from the
    environment (module docstring)."""
    method = os.environ.get("WMRL_METHOD", "wmrl")
    rho = get_recipe(method).anchor_fraction(float(os.environ.get("WMRL_ANCHOR_FRACTION", "0.25")))
    return {"method": method, "anchor_fraction": rho, "seed": int(os.environ.get("WMRL_SEED", "0"))}


def anchor_groups(uids: Any, anchor_fraction: float, seed: int = 0) -> np.ndarray:
    """[N] bool: whether each uid's group is an anchor (:class:`wmrl.core.routing.HashRouter`:
    ``crc32(seed, uid) / 2**32 < rho``).

    Stateless and seeded, so verl's reward workers and its driver agree on every sample without sharing
    state; verl draws a fresh uid per prompt per step, so each group is a fresh Bernoulli(rho) draw (unlike
    wmrl's :class:`~wmrl.core.routing.FractionRouter` there is no exact count and no min-every guarantee).
    """
    keys = [str(x) for x in np.asarray(uids, dtype=object)]
    return make_router("hash", fraction=float(anchor_fraction), min_every=None, seed=int(seed)).route(keys, 0)


class _EstimatorState:
    """The recipe's state in the driver process (one per method), and the step counter."""

    def __init__(self) -> None:
        self.states: dict[str, Any] = {}
        self.steps: dict[str, int] = {}
        self.last: dict[str, Any] = {}

    def reset(self) -> None:
        self.states.clear()
        self.steps.clear()
        self.last.clear()


ESTIMATOR_STATE = _EstimatorState()


def compute_wmrl_advantage(token_level_rewards: Any, response_mask: Any, index: Any = None, config: Any = None,
                           non_tensor_batch: Any = None, settings: RecipeSettings | None = None,
                           **kwargs: Any) -> tuple[Any, Any]:
    """verl advantage estimator ``wmrl``: one recipe step on the batch (module docstring).

    Args:
        token_level_rewards: [bs, L] float tensor; row sums are the reward manager's scores.
        response_mask: [bs, L] {0, 1} tensor of response tokens.
        index: [bs] object array of uids (verl's ``non_tensor_batch["uid"]``; one uid = one group).
        config: verl's ``AlgoConfig`` (``norm_adv_by_std_in_grpo`` is honoured when present).
        non_tensor_batch: verl's ``DataProto.non_tensor_batch`` with the reward manager's ``wmrl_is_anchor``,
            ``wmrl_reward_true``, ``wmrl_reward_wm`` ([bs] each; the world model scores anchors too: the
            calibrator learns from their (r_hat, r) pairs) and ``wmrl_reward_recalled`` ([bs], the measured reward of
            a world-model sample whose program the reward manager executed before, NaN elsewhere; optional).
        settings: :class:`RecipeSettings` (default: the defaults, with ``config``'s std normalisation).

    Returns:
        ``(advantages, returns)``: [bs, L] float tensors, both ``B * w_i * A_i`` on response tokens, 0 elsewhere.

    Raises:
        ValueError: no ``index`` (set ``uid`` in the batch), no ``non_tensor_batch`` (see
            :func:`wmrl_compute_advantage`), or scores that are not the reward manager's.
    """
    import torch  # noqa: PLC0415 - heavy

    if index is None:
        raise ValueError("the wmrl estimator groups by verl's uid: the batch needs non_tensor_batch['uid']")
    if non_tensor_batch is None or "wmrl_is_anchor" not in non_tensor_batch:
        raise ValueError("the wmrl estimator reads the anchor flags and world-model scores from "
                         "non_tensor_batch (wmrl_is_anchor, wmrl_reward_true, wmrl_reward_wm); verl 0.9.1's "
                         "compute_advantage passes non_tensor_batch to 'gdpo' only: call "
                         "wmrl.integrations.verl.wmrl_compute_advantage(data)")
    env = settings_from_env()
    method, recipe = env["method"], get_recipe(env["method"])
    if settings is None:
        norm = True if config is None else bool(getattr(config, "norm_adv_by_std_in_grpo", True))
        settings = RecipeSettings(normalize_std=norm)
    if recipe.fuses and env["anchor_fraction"] > 0:  # the cv fusion's inclusion probability: the hash router's rho
        settings = replace(settings, anchor_fraction=env["anchor_fraction"])
    scores = (token_level_rewards * response_mask).sum(-1).detach().double().cpu().numpy()
    valid = scores != INFRA_SCORE
    if np.any((scores[valid] < -1e-6) | (scores[valid] > 1 + 1e-6)):
        raise ValueError("wmrl scores must be rewards in [0, 1] (or INFRA_SCORE); was use_kl_in_reward left on?")
    uids = np.asarray(index, dtype=object)
    _, gid = np.unique(uids.astype(str), return_inverse=True)
    is_anchor = np.asarray(non_tensor_batch["wmrl_is_anchor"]).astype(bool)
    r_true = np.asarray(non_tensor_batch["wmrl_reward_true"]).astype(np.float64)
    r_wm = np.asarray(non_tensor_batch["wmrl_reward_wm"]).astype(np.float64)
    valid &= ~(is_anchor & np.isnan(r_true))
    carried = np.where(is_anchor, r_true, r_wm)
    if np.any(np.abs(carried[valid] - scores[valid]) > 1e-5):
        raise ValueError("token_level_rewards differ from the wmrl scores in non_tensor_batch "
                         "(use_kl_in_reward must be False)")
    st = ESTIMATOR_STATE
    if method not in st.states:
        st.states[method] = recipe.init_state(settings)
    st.steps[method] = step = st.steps.get(method, 0) + 1
    rec = non_tensor_batch.get("wmrl_reward_recalled")  # absent from reward managers before recall
    x = StepInputs(step=step, group_ids=gid.astype(np.int64), is_anchor=is_anchor, valid=valid,
                   reward_true=np.where(is_anchor & valid, r_true, np.nan), reward_wm=r_wm,
                   reward_recalled=None if rec is None else np.asarray(rec).astype(np.float64))
    out = recipe.step(x, st.states[method], settings)
    st.last[method] = (x, out)
    adv = torch.as_tensor(loss_advantages(out), dtype=token_level_rewards.dtype,
                          device=token_level_rewards.device).unsqueeze(-1) * response_mask
    return adv, adv.clone()


def wmrl_compute_advantage(data: Any, config: Any = None) -> Any:
    """``data.batch["advantages"]`` and ``["returns"]`` from the ``wmrl`` estimator, looked up in verl's
    registry and given ``non_tensor_batch`` (which verl 0.9.1's ``compute_advantage`` passes to ``gdpo``
    only). ``data`` is a verl ``DataProto`` with ``token_level_rewards``, ``response_mask``, ``uid`` and the
    reward manager's extra info; ``config`` is verl's ``algorithm`` config (``norm_adv_by_std_in_grpo``);
    returns ``data``. :mod:`wmrl.integrations.verl_trainer` calls it from verl's trainer."""
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn  # noqa: PLC0415 - optional dependency

    adv, ret = get_adv_estimator_fn("wmrl")(
        token_level_rewards=data.batch["token_level_rewards"], response_mask=data.batch["response_mask"],
        index=data.non_tensor_batch.get("uid"), config=config, non_tensor_batch=data.non_tensor_batch)
    data.batch["advantages"], data.batch["returns"] = adv, ret
    return data


def _load_object(spec: str) -> Any:
    """``module:attribute`` -> the attribute (``WMRL_WORLD_MODEL``)."""
    mod, _, attr = spec.partition(":")
    if not attr:
        raise ValueError(f"expected 'module:function', got {spec!r}")
    return getattr(importlib.import_module(mod), attr)


def build_parts_from_env() -> dict[str, Any]:
    """The reward manager's parts from the environment: ``tasks`` (id -> Task), ``scaffold``,
    ``world_model`` (None when the recipe needs none; ``WMRL_WORLD_MODEL_URL``: a served one), ``executor``
    (``WMRL_EXECUTOR`` = ``local``, ``ray`` or ``remote`` with ``WMRL_EXECUTOR_URL``; services' token in
    ``WMRL_SERVE_TOKEN``).

    Raises:
        ValueError: ``WMRL_TASKS_ROOT`` unset, ``WMRL_WORLD_MODEL`` and ``WMRL_WORLD_MODEL_URL`` unset for a recipe
            with a world model, or ``WMRL_EXECUTOR=remote`` without ``WMRL_EXECUTOR_URL``.
    """

    root = os.environ.get("WMRL_TASKS_ROOT")
    if not root:
        raise ValueError("set WMRL_TASKS_ROOT to the task folders (e.g. MLE-Dojo's prepared competitions)")
    tasks = {t.id: t for t in TaskSuite(root.split(os.pathsep)).tasks()}
    recipe = get_recipe(settings_from_env()["method"])
    wm = None
    if recipe.uses_world_model:
        spec = os.environ.get("WMRL_WORLD_MODEL")
        if os.environ.get("WMRL_WORLD_MODEL_URL"):  # a `wmrl serve world-model` service (docs/services.md)
            from wmrl.serve.client import RemoteWorldModel, token_from_env  # noqa: PLC0415 - optional (httpx)

            wm = RemoteWorldModel(os.environ["WMRL_WORLD_MODEL_URL"], token_from_env("WMRL_SERVE_TOKEN"))
        elif not spec:
            raise ValueError(f"recipe {recipe.name!r} needs WMRL_WORLD_MODEL='module:function' returning a WorldModel, "
                             "or WMRL_WORLD_MODEL_URL, the URL of a `wmrl serve world-model` service")
        else:
            wm = _load_object(spec)()
    workers = int(os.environ.get("WMRL_EXEC_WORKERS", "4"))
    executor: Any
    kind = os.environ.get("WMRL_EXECUTOR", "local")
    if kind == "remote":  # a `wmrl serve sandbox` service (docs/services.md)
        from wmrl.serve.client import RemoteExecutor, token_from_env  # noqa: PLC0415 - optional (httpx)

        url = os.environ.get("WMRL_EXECUTOR_URL")
        if not url:
            raise ValueError("WMRL_EXECUTOR=remote needs WMRL_EXECUTOR_URL, the `wmrl serve sandbox` service's URL")
        executor = RemoteExecutor(url, token_from_env("WMRL_SERVE_TOKEN"), max_workers=workers)
    elif kind == "ray":
        executor = RayExecutor(max_concurrency=workers)
    else:
        executor = LocalExecutor(max_workers=workers)
    return {"tasks": tasks, "scaffold": get_scaffold(os.environ.get("WMRL_SCAFFOLD", "script")),
            "world_model": wm, "executor": executor}


def register_verl() -> dict[str, Any]:
    """Register the ``wmrl`` reward manager and advantage estimator in verl's registries (idempotent).

    Returns:
        ``{"reward_manager": cls, "adv_estimator": fn}``.

    Raises:
        ImportError: verl is not installed (it needs an environment of its own: docs/integrations.md).
    """
    try:
        from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls, register  # noqa: PLC0415 - optional dependency
        from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase  # noqa: PLC0415 - optional dependency
        from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est  # noqa: PLC0415 - optional dependency
    except ImportError as exc:
        raise ImportError(f"the verl integration needs verl (tested {TESTED_VERL_VERSION}) in its own environment: "
                          "docs/integrations.md") from exc
    if ADV_ESTIMATOR_REGISTRY.get("wmrl") is not compute_wmrl_advantage:
        register_adv_est("wmrl")(compute_wmrl_advantage)
    try:
        return {"reward_manager": get_reward_manager_cls("wmrl"), "adv_estimator": compute_wmrl_advantage}
    except ValueError:
        pass

    class WMRLRewardManager(RewardManagerBase):
        """verl reward manager ``wmrl``: a real execution on anchor groups, the world model elsewhere.

        ``parts`` (tests, or a caller that builds them itself): ``tasks``, ``scaffold``, ``world_model``,
        ``executor``; default :func:`build_parts_from_env`.
        """

        def __init__(self, config: Any, tokenizer: Any, compute_score: Any = None, parts: dict[str, Any] | None = None,
                     **kwargs: Any) -> None:
            super().__init__(config, tokenizer, compute_score)
            self.parts = parts if parts is not None else build_parts_from_env()
            self.env = settings_from_env()

            self.measured = MeasuredRewards()  # this process's anchors, recalled by recipes with ``recall``

        async def run_single(self, data: Any) -> dict[str, Any]:


            item = data[-1:][0]
            plen = item.batch["prompts"].shape[-1]
            n_resp = int(item.batch["attention_mask"][plen:].sum())
            response = self.tokenizer.decode(item.batch["responses"][:n_resp], skip_special_tokens=True)
            info = item.non_tensor_batch.get("extra_info") or {}
            if "task_id" not in info:
                raise ValueError("each verl dataset row needs extra_info['task_id'] (the wmrl task of the prompt)")
            task = self.parts["tasks"][str(info["task_id"])]
            uid = item.non_tensor_batch["uid"]
            anchor = bool(anchor_groups([uid], self.env["anchor_fraction"], self.env["seed"])[0])
            prompt = self.parts["scaffold"].prompt(task)
            r_true, r_wm, score = float("nan"), float("nan"), INFRA_SCORE
            if self.parts["world_model"] is not None:  # every sample, anchors too (the calibrator's pairs)
                r_wm = float(np.asarray(self.parts["world_model"].predict([prompt], [response]))[0])
            if anchor:
                req = ExecutionRequest(task=task, program=self.parts["scaffold"].render(task, response),
                                       request_id=f"verl-{uid}")
                fut = self.parts["executor"].submit(req)
                res = await asyncio.get_running_loop().run_in_executor(None, result_or_infra, fut, req)
                if res.reward is not None and getattr(res.status, "value", res.status) != "infra_error":
                    r_true = score = float(res.reward)
                    self.measured.add([task.id], [response], [r_true])
            else:  # anchor-only has no world model: its world-model samples are out of the loss (weight 0)
                score = r_wm if self.parts["world_model"] is not None else 0.0
            r_rec = float("nan") if anchor else float(self.measured.lookup([task.id], [response])[0])
            return {"reward_score": score, "reward_extra_info": {
                "wmrl_is_anchor": anchor, "wmrl_reward_true": r_true, "wmrl_reward_wm": r_wm,
                "wmrl_reward_recalled": r_rec}}

    register("wmrl")(WMRLRewardManager)
    return {"reward_manager": WMRLRewardManager, "adv_estimator": compute_wmrl_advantage}


def __getattr__(name: str) -> Any:
    """``WMRLRewardManager`` for verl's ``reward.reward_manager.source=importlib`` (it loads the class by name
    from this file); loading it registers the ``wmrl`` estimator in the same process."""
    if name == "WMRLRewardManager":
        return register_verl()["reward_manager"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

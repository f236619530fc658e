"""WMRL in TRL's ``GRPOTrainer`` (tested with trl 1.16.0; docs/integrations.md).

Three TRL extension points, nothing patched:

* for grammar scaffolds, TRL's ``rollout_func``: wmrl's constrained decoder samples the completions
  (:mod:`wmrl.integrations.trl_rollout`), since TRL's free-text sampling almost never writes a grammar sentence;
* a **reward function** (:class:`WMRLRewardFunction`, TRL's first reward function): TRL calls it once per
  generation batch with every completion and the dataset's columns (``task_id``). It runs one
  :class:`wmrl.integrations.driver.WMRLDriver` step: routes the groups, executes the anchor groups for
  real through the wmrl executor (sandboxed), scores every completion with the world model, and calls
  ``get_recipe(method).step``. It returns ``reward_used`` (r on anchors, f_hat(r_hat) elsewhere), which
  TRL logs as the reward.
* a **GRPOTrainer subclass** (:func:`wmrl_grpo_trainer_class`, also importable as ``WMRLGRPOTrainer``)
  overriding ``_generate_and_score_completions``, the seam where TRL turns rewards into the
  ``advantages`` its loss reads (``inputs["advantages"]`` in ``_compute_loss``; the method's own comment
  names subclasses that provide their own advantages). The override replaces TRL's group-normalised
  advantages by the recipe's, folded with the recipe's weights: ``B * w_i * A_i``
  (:func:`wmrl.integrations.driver.loss_advantages`, exact because ``min`` is positively homogeneous and
  every registered recipe's weights are >= 0, PPI++ included: its anchor rows are merged).

Which TRL losses match which wmrl aggregation exactly (B = generation batch over all processes, with
``steps_per_generation == gradient_accumulation_steps``, TRL's default): ``loss_type="grpo"`` is wmrl's
``seq_mean`` (``mean_i`` of per-sequence token means); ``"dapo"`` (TRL's default) and ``"bnpo"`` (one
micro-batch per generation batch) are wmrl's ``token_mean``; ``"dr_grpo"`` divides by B * max length, a
constant, so it is ``token_mean`` up to that constant. Other loss types are refused (not checked).
TRL's KL term (``beta``, default 0) is added unweighted, per token; wmrl weights it by w_i too: with
``beta > 0`` the surrogate is the recipe's and the KL penalty is TRL's.

Groups: TRL's ``RepeatSampler`` puts the ``num_generations`` completions of one prompt next to each other,
so sample j of the generation batch belongs to group ``j // num_generations``; the reward function checks
that each block has one ``task_id``. With several processes each one sees its slice of the batch: the
function gathers the task ids and measurements with ``accelerate.utils.gather_object`` so that every
process routes, runs the recipe on the whole batch (the same seeded state on each) and keeps its own
slice (written for multi-process, tested with one process).
"""
from __future__ import annotations

from typing import Any
from collections.abc import Sequence

import numpy as np

from wmrl.integrations.driver import StepRecord, WMRLDriver, loss_advantages
from wmrl.integrations.driver import StepRecord as Rec
from wmrl.core.recipe import StepInputs

#: TRL loss types whose aggregation the recipe's weights map onto exactly (module docstring).
SUPPORTED_LOSS_TYPES = ("grpo", "dapo", "bnpo", "dr_grpo")
TESTED_TRL_VERSION = "1.16.0"


def _text(x: Any) -> str:
    """A completion or prompt as text: a string, or the content of the last message of a conversation."""
    if isinstance(x, str):
        return x
    if isinstance(x, (list, tuple)) and x and isinstance(x[-1], dict):
        return str(x[-1].get("content", ""))
    raise TypeError(f"expected a string or a list of chat messages, got {type(x).__name__}")


def trl_dataset(tasks: Sequence[Any], scaffold: Any, repeat: int = 1) -> Any:
    """A ``datasets.Dataset`` with the columns TRL and :class:`WMRLRewardFunction` read.

    Args:
        tasks: the train tasks (``wmrl.tasks.spec.Task``).
        scaffold: gives each task's prompt (``scaffold.prompt(task)``).
        repeat: rows per task (TRL samples prompts from the rows; generations per prompt are TRL's
            ``num_generations``).

    Returns:
        a ``Dataset`` with ``prompt`` (str, standard format) and ``task_id`` (str), ``len(tasks) * repeat`` rows.
    """
    from datasets import Dataset  # noqa: PLC0415 - optional dependency

    rows = [t for t in tasks for _ in range(int(repeat))]
    return Dataset.from_dict({"prompt": [scaffold.prompt(t) for t in rows], "task_id": [t.id for t in rows]})


class WMRLRewardFunction:
    """TRL reward function: one recipe step per generation batch (module docstring).

    Args:
        driver: the :class:`WMRLDriver` (recipe, router, world model, executor, scaffold, tasks).
        num_generations: TRL's ``num_generations`` (G, completions per prompt).

    Called by TRL as ``f(prompts=..., completions=..., completion_ids=..., task_id=[...], trainer_state=...,
    **other columns)``; returns one float (``reward_used``) per completion, None for an infrastructure
    failure (TRL turns it into NaN). :attr:`last` is the last step's :class:`StepRecord`, which
    :func:`wmrl_grpo_trainer_class`'s trainer turns into advantages.
    """

    def __init__(self, driver: WMRLDriver, num_generations: int) -> None:
        if int(num_generations) < 2:
            raise ValueError(f"num_generations must be >= 2 (group-relative advantages), got {num_generations}")
        self.driver, self.num_generations = driver, int(num_generations)
        self.__name__ = f"wmrl_{driver.recipe.name}"  # TRL names the reward's metrics after it
        self.last: StepRecord | None = None
        self.local_slice = slice(0, 0)
        #: False during TRL's evaluation passes (set by ``WMRLGRPOTrainer``): every completion is executed for
        #: real and scored by its true reward; no routing, no recipe step, no calibrator update
        self.training = True

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], task_id: Sequence[str] | None = None,
                 trainer_state: Any = None, **kwargs: Any) -> list[float | None]:
        if task_id is None:
            raise ValueError("the dataset needs a 'task_id' column (wmrl.integrations.trl.trl_dataset builds one)")
        from accelerate import PartialState  # noqa: PLC0415 - optional dependency
        from accelerate.utils import gather_object  # noqa: PLC0415 - optional dependency

        ps = PartialState()
        n_local = len(completions)
        step = int(getattr(trainer_state, "global_step", len(self.driver.history))) + 1
        comp = [_text(c) for c in completions]
        # The world model reads the task's scaffold prompt (as in wmrl's trainer), not a chat rendering.
        wm_prompts = [self.driver.scaffold.prompt(self.driver.task(t)) for t in task_id]
        if not self.training:
            return self._evaluate(step, list(task_id), wm_prompts, comp)
        all_tasks = list(gather_object(list(task_id)))
        B, G = len(all_tasks), self.num_generations
        if B % G:
            raise ValueError(f"generation batch of {B} completions is not a multiple of num_generations={G}")
        gid = np.arange(B, dtype=np.int64) // G
        lo = ps.process_index * n_local
        self.local_slice = slice(lo, lo + n_local)
        if ps.num_processes == 1:
            self.last = self.driver.step(step, all_tasks, wm_prompts, comp, gid)
        else:
            self.last = self._step_gathered(step, all_tasks, wm_prompts, comp, gid, lo, gather_object)
        used = self.last.outputs.reward_used[self.local_slice]
        return [None if not np.isfinite(u) else float(u) for u in used]

    def _evaluate(self, step: int, task_ids: list[str], wm_prompts: list[str], comp: list[str]) -> list[float | None]:
        """An evaluation batch: every completion executed for real (this process's slice), its true reward
        returned (None for an infrastructure failure); the recipe's state is left alone."""
        n = len(comp)
        rt, _, valid, _, _, _ = self.driver.measure(step, task_ids, wm_prompts, comp, np.arange(n, dtype=np.int64),
                                                    np.ones(n, dtype=bool))
        return [float(r) if v and np.isfinite(r) else None for r, v in zip(rt, valid)]

    def _step_gathered(self, step: int, all_tasks: list[str], wm_prompts: list[str], comp: list[str], gid: np.ndarray,
                       lo: int, gather_object: Any) -> StepRecord:
        """The multi-process path: route on the whole batch, measure the local slice, gather, run the recipe."""

        d, n = self.driver, len(comp)
        groups = np.unique(gid)
        is_anchor = d.route([all_tasks[g * self.num_generations] for g in groups], step)[gid]
        sl = slice(lo, lo + n)
        rt, rw, valid, statuses, wall, _ = d.measure(step, all_tasks[sl], wm_prompts, comp, gid[sl], is_anchor[sl])
        # recall: each process looks its own slice up in the store of the anchors it executed itself
        rc = d.recall(all_tasks[sl], comp, is_anchor[sl] & valid, rt)
        rc = np.full(n, np.nan) if rc is None else rc
        rows = list(gather_object([(float(a), float(b), bool(c), s, float(e))
                                   for a, b, c, s, e in zip(rt, rw, valid, statuses, rc)]))
        x = StepInputs(step=step, group_ids=gid, is_anchor=is_anchor, valid=np.array([r[2] for r in rows]),
                       reward_true=np.array([r[0] for r in rows]), reward_wm=np.array([r[1] for r in rows]),
                       reward_recalled=np.array([r[4] for r in rows]))
        rec = Rec(x, d.recipe.step(x, d.state, d.settings), all_tasks, [r[3] for r in rows], wall)
        d.history.append(rec)
        return rec


def extra_advantages(rewards: np.ndarray, weights: np.ndarray, num_generations: int, scale: bool) -> np.ndarray:
    """The advantage the extra reward functions add beside the recipe's: each one's group-relative advantage,
    weighted and summed.

    Args:
        rewards: [B, K] float rewards of the K extra functions (NaN where a function returned None).
        weights: [K] their ``reward_weights``.
        num_generations: G; rows ``g*G .. g*G+G-1`` are one group.
        scale: divide by each group's standard deviation (+1e-4), as TRL does unless ``scale_rewards="none"``.

    Returns:
        [B] float64 ``sum_k weights[k] * (r_k - mean_group(r_k)) [/ (std_group(r_k) + 1e-4)]``, a missing
        reward counting 0.

    Raises:
        ValueError: B not a multiple of G, or ``weights`` not of length K.
    """
    r = np.asarray(rewards, dtype=np.float64)
    B, K = r.shape
    if B % int(num_generations) or np.asarray(weights).shape != (K,):
        raise ValueError(f"rewards of shape {r.shape} do not split into groups of {num_generations} with {K} weights")
    if K == 0:
        return np.zeros(B)
    g = r.reshape(-1, int(num_generations), K)
    with np.errstate(all="ignore"):
        mean = np.nanmean(g, axis=1, keepdims=True)
        adv = g - mean
        if scale:
            adv = adv / (np.nanstd(g, axis=1, ddof=1, keepdims=True) + 1e-4)
    adv = np.nan_to_num(adv.reshape(B, K), nan=0.0)
    return adv @ np.asarray(weights, dtype=np.float64)


_CLASS: type | None = None


def wmrl_grpo_trainer_class() -> type:
    """``WMRLGRPOTrainer``, a ``trl.GRPOTrainer`` subclass built on first use (TRL imported here).

    ``WMRLGRPOTrainer(model=..., args=GRPOConfig(...), train_dataset=trl_dataset(...),
    processing_class=tokenizer, wmrl_reward=WMRLRewardFunction(driver, num_generations), reward_funcs=[...])``:

    * **Sampling.** With a grammar scaffold the trainer samples with wmrl's constrained decoder
      (:class:`wmrl.integrations.trl_rollout.GrammarRollout` as TRL's ``rollout_func``), so every completion is
      a program of the grammar; pass ``rollout_func`` to replace it. A free-text scaffold uses TRL's sampling.
    * **Rewards.** ``wmrl_reward`` is TRL's first reward function; ``reward_funcs`` (optional, TRL's
      callables) follow it, weighted by ``GRPOConfig.reward_weights`` (one weight per function, the wmrl
      reward's first; default all 1). After TRL's ``_generate_and_score_completions`` the batch's
      ``advantages`` are ``w_0 * loss_advantages(recipe outputs) + sum_k w_k * A_k``, ``A_k`` the
      group-relative advantage of extra function k alone (:func:`extra_advantages`; scaled by the group's
      standard deviation unless ``scale_rewards="none"``). The recipe's advantage is of its own calibrated
      reward, so the rewards are not pooled before it. ``wmrl/alpha``, ``wmrl/ppi_lambda``,
      ``wmrl/n_anchor_samples`` go into TRL's metrics.
    * **Evaluation.** Any ``eval_strategy``: during TRL's evaluation passes the wmrl reward executes every
      completion for real and returns its true reward (no routing, no recipe step), and TRL's own advantages
      are kept.

    Raises:
        ImportError: TRL is not installed (``pip install 'wmrl[trl]'``).
    """
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    try:
        import torch  # noqa: PLC0415 - heavy
        from trl import GRPOTrainer  # noqa: PLC0415 - optional dependency
    except ImportError as exc:
        raise ImportError(f"the TRL integration needs trl (tested {TESTED_TRL_VERSION}): "
                          "pip install 'wmrl[trl]'") from exc
    from wmrl.integrations.trl_rollout import GrammarRollout, is_constrained  # noqa: PLC0415 - imports torch

    class WMRLGRPOTrainer(GRPOTrainer):
        """``GRPOTrainer`` training on the advantages and weights of a registered wmrl recipe."""

        def __init__(self, *args: Any, wmrl_reward: WMRLRewardFunction, reward_funcs: Any = None,
                     **kwargs: Any) -> None:
            extra = [] if reward_funcs is None else list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) \
                else [reward_funcs]
            if any(f is wmrl_reward for f in extra):
                raise ValueError("reward_funcs holds wmrl_reward: pass it once, as wmrl_reward")
            driver = wmrl_reward.driver
            rollout = None
            if kwargs.get("rollout_func") is None and is_constrained(driver.scaffold, list(driver.tasks.values())):
                rollout = GrammarRollout(list(driver.tasks.values()), driver.scaffold)
                kwargs["rollout_func"] = rollout
            kwargs["reward_funcs"] = [wmrl_reward, *extra]
            super().__init__(*args, **kwargs)
            a: Any = self.args  # trl's GRPOConfig (typed as transformers' TrainingArguments)
            if a.loss_type not in SUPPORTED_LOSS_TYPES:
                raise ValueError(f"loss_type={a.loss_type!r}: the recipe's weights map exactly onto "
                                 f"{SUPPORTED_LOSS_TYPES} only (wmrl.integrations.trl docstring)")
            if a.num_generations != wmrl_reward.num_generations:
                raise ValueError(f"GRPOConfig.num_generations={a.num_generations} but the reward function groups "
                                 f"by {wmrl_reward.num_generations}")
            if rollout is not None:
                rollout.check(self)
            self.wmrl_reward = wmrl_reward
            self._wmrl_rewards: Any = None  # [B, K] rewards of every function, this generation batch

        def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
            out = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            self._wmrl_rewards = out
            return out

        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            training = bool(getattr(self.model, "training", False))
            self.wmrl_reward.training = training
            try:
                out = super()._generate_and_score_completions(inputs)
            finally:
                self.wmrl_reward.training = True
            if not training:
                return out  # evaluation: TRL's advantages of the true rewards (and the extra functions')
            rec = self.wmrl_reward.last
            adv_trl = out["advantages"]
            if rec is None:
                raise RuntimeError("the wmrl reward function did not run for this generation batch")
            sl = self.wmrl_reward.local_slice
            w = self.reward_weights.detach().cpu().double().numpy()
            adv = float(w[0]) * loss_advantages(rec.outputs)
            if len(w) > 1:
                rewards = self._wmrl_rewards.detach().cpu().double().numpy()[:, 1:]
                adv = adv + extra_advantages(rewards, w[1:], int(self.num_generations or 1),
                                             scale=self.scale_rewards != "none")
            local = adv[sl]
            if local.shape != tuple(adv_trl.shape[:1]):
                raise RuntimeError(f"recipe gave {local.shape[0]} advantages for {adv_trl.shape[0]} completions")
            out["advantages"] = torch.as_tensor(local, dtype=adv_trl.dtype, device=adv_trl.device)
            st, m = rec.outputs.stats, self._metrics["train"]
            for key in ("alpha", "ppi_lambda", "n_anchor_samples", "weight_anchor", "weight_wm"):
                if st.get(key) is not None:
                    m[f"wmrl/{key}"].append(float(st[key]))
            return out

    _CLASS = WMRLGRPOTrainer
    return _CLASS


def __getattr__(name: str) -> Any:
    if name == "WMRLGRPOTrainer":
        return wmrl_grpo_trainer_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

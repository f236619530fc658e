"""WMRL in TRL's ``GRPOTrainer`` (tested with trl 1.16.0; docs/integrations.md).

Two TRL extension points, nothing patched:

* a **reward function** (:class:`WMRLRewardFunction`, passed as ``reward_funcs``): TRL calls it once per
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


_CLASS: type | None = None


def wmrl_grpo_trainer_class() -> type:
    """``WMRLGRPOTrainer``, a ``trl.GRPOTrainer`` subclass built on first use (TRL imported here).

    ``WMRLGRPOTrainer(model=..., args=GRPOConfig(...), train_dataset=trl_dataset(...),
    processing_class=tokenizer, wmrl_reward=WMRLRewardFunction(driver, num_generations))``: the reward
    function is the only reward function; after TRL's ``_generate_and_score_completions`` the batch's
    ``advantages`` are replaced by ``loss_advantages(recipe outputs)`` (this process's slice, float32),
    and ``wmrl/alpha``, ``wmrl/ppi_lambda``, ``wmrl/n_anchor_samples`` go into TRL's metrics.

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

    class WMRLGRPOTrainer(GRPOTrainer):
        """``GRPOTrainer`` training on the advantages and weights of a registered wmrl recipe."""

        def __init__(self, *args: Any, wmrl_reward: WMRLRewardFunction, **kwargs: Any) -> None:
            if kwargs.get("reward_funcs") is not None:
                raise ValueError("WMRLGRPOTrainer takes its reward from wmrl_reward; do not pass reward_funcs")
            kwargs["reward_funcs"] = [wmrl_reward]
            super().__init__(*args, **kwargs)
            a: Any = self.args  # trl's GRPOConfig (typed as transformers' TrainingArguments)
            if a.loss_type not in SUPPORTED_LOSS_TYPES:
                raise ValueError(f"loss_type={a.loss_type!r}: the recipe's weights map exactly onto "
                                 f"{SUPPORTED_LOSS_TYPES} only (wmrl.integrations.trl docstring)")
            if a.num_generations != wmrl_reward.num_generations:
                raise ValueError(f"GRPOConfig.num_generations={a.num_generations} but the reward function groups "
                                 f"by {wmrl_reward.num_generations}")
            if str(getattr(a, "eval_strategy", "no")) not in ("no", "IntervalStrategy.NO"):
                raise ValueError("set eval_strategy='no': an evaluation pass would call the reward function and "
                                 "step the recipe's calibrator on evaluation completions")
            self.wmrl_reward = wmrl_reward

        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            out = super()._generate_and_score_completions(inputs)
            rec = self.wmrl_reward.last
            adv_trl = out["advantages"]
            if rec is None:
                raise RuntimeError("the wmrl reward function did not run for this generation batch")
            local = loss_advantages(rec.outputs)[self.wmrl_reward.local_slice]
            if local.shape != tuple(adv_trl.shape[:1]):
                raise RuntimeError(f"recipe gave {local.shape[0]} advantages for {adv_trl.shape[0]} completions")
            out["advantages"] = torch.as_tensor(local, dtype=adv_trl.dtype, device=adv_trl.device)
            st, m = rec.outputs.stats, self._metrics["train" if getattr(self.model, "training", False) else "eval"]
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

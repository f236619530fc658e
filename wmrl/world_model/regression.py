"""The regression world model: the agent's backbone + its own LoRA adapter + a scalar reward head.

``r_hat = clip(w . (f - mu) / sd + b, 0, 1)`` with ``f = [h_last ; h_mean]``: ``h_last`` is the
final-layer hidden state (after the final norm) of the last token of the world model's input text
(prompt, a separator, completion) and ``h_mean`` the mean over its tokens; ``mu``/``sd`` standardise
the features with training-split statistics. The target is the executed reward (leaderboard
percentile, DESIGN.md §5); the loss is the mean squared error (unclipped output). Fitting first
solves the head in closed form (ridge regression, penalty chosen by group K-fold), then, with an
adapter, fine-tunes LoRA and head jointly by AdamW. The backbone is the same base model object as
the policy's: the world model adds a second named LoRA adapter (``"world_model"``) to the shared
peft wrapper (see :mod:`wmrl.models.adapters`), so no second copy of the weights is held. With
``lora=None`` the backbone stays frozen and only the head is trained (fast on CPU: features are
computed once).

Records for :meth:`RegressionWorldModel.fit` are execution-log rows (dicts) with ``reward``,
``status`` and ``meta`` holding ``prompt``, ``completion``, ``group_id`` (and ``task_id``,
``step``); ``infra_error`` rows and rows without a reward are skipped.

What every world model on the shared backbone needs (adapter on the shared peft model, input text,
tokenisation and truncation, the shared-prompt KV-cache pass, batch planning, settings and adapter
persistence) is in :class:`BackboneWorldModel`; the data split and the report metrics of a fit in
:func:`fit_split` and :func:`fit_metrics`. The generative variant
(:mod:`wmrl.world_model.generative`) builds on them.

Why one long file (about 820 lines): the shared backbone base class (adapters, encoding, the shared-
prompt cache pass, persistence) and the regression model that most users need are read together.
"""
from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from wmrl.trajectory import trajectory_of

from wmrl.models import adapters
from wmrl.models.types import LoraSettings
from wmrl.world_model.metrics import calibration_plot, world_model_metrics

__all__ = [
    "BackboneWorldModel",
    "RegressionWorldModel",
    "WorldModelExample",
    "examples_from_records",
    "world_model_metrics",
    "calibration_plot",
    "split_by_group",
    "fit_split",
    "fit_metrics",
]

_LORA_DEFAULT = LoraSettings(r=8, alpha=16)


class WorldModelExample(dict):
    """One training example: ``prompt``, ``completion``, ``reward`` (float), ``group`` (hashable)."""


def _field(rec: Any, key: str, default: Any = None) -> Any:
    """``rec[key]`` for a mapping, ``rec.key`` for a record object (e.g. an execution-log row)."""
    if isinstance(rec, dict):
        return rec.get(key, default)
    return getattr(rec, key, default)


class _hybridmethod:
    """A method that is a classmethod on the class and an instance method on instances.

    Built from the two methods' names, looked up when accessed, so subclasses' overrides apply.
    """

    def __init__(self, class_name: str, instance_name: str):
        self.class_name, self.instance_name = class_name, instance_name

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return getattr(objtype, self.class_name)
        return getattr(obj, self.instance_name)


def examples_from_records(records: Sequence[Any]) -> tuple[list[WorldModelExample], dict[str, int]]:
    """Turn execution-log records (dicts or record objects) into world-model examples.

    Rows with status ``infra_error``, a missing or non-finite reward (e.g. a task without a
    leaderboard), or no trajectory (:func:`wmrl.trajectory.trajectory_of`: no prompt or completion) are
    skipped (counted in the returned dict: ``used``, ``skipped_infra``, ``skipped_no_reward``,
    ``skipped_no_text``). The group of a row is the trajectory's ``(run, step, task id, group_id)``.
    """
    out: list[WorldModelExample] = []
    counts = {"used": 0, "skipped_infra": 0, "skipped_no_reward": 0, "skipped_no_text": 0}
    for r in records:
        status = _field(r, "status")
        status = getattr(status, "value", status)
        if status == "infra_error":
            counts["skipped_infra"] += 1
            continue
        reward = _field(r, "reward")
        if reward is None or not math.isfinite(float(reward)):
            counts["skipped_no_reward"] += 1
            continue
        traj = trajectory_of(r)
        if traj is None:
            counts["skipped_no_text"] += 1
            continue
        task_id = traj.task_id or _field(r, "task_id", "")
        out.append(WorldModelExample(prompt=str(traj.prompt), completion=str(traj.completion), reward=float(reward),
                                     group=(traj.run, traj.step, task_id, traj.group_id), task_id=task_id))
        counts["used"] += 1
    return out, counts


def split_by_group(groups: Sequence[Hashable], heldout_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Split row indices into (train, held-out) by whole groups, seeded.

    At least one group goes to each side when there are two or more groups.

    Raises:
        ValueError: ``heldout_fraction`` outside [0, 1).
    """
    if not 0.0 <= heldout_fraction < 1.0:
        raise ValueError(f"heldout_fraction must be in [0, 1), got {heldout_fraction}")
    keys = sorted(set(groups), key=repr)
    rng = random.Random(seed)
    rng.shuffle(keys)
    n_held = int(round(heldout_fraction * len(keys)))
    if heldout_fraction > 0 and len(keys) >= 2:
        n_held = min(max(n_held, 1), len(keys) - 1)
    held = set(keys[:n_held])
    train_idx = [i for i, g in enumerate(groups) if g not in held]
    held_idx = [i for i, g in enumerate(groups) if g in held]
    return train_idx, held_idx


def check_fit_settings(epochs: int, lr: float, batch_size: int) -> None:
    """Raise ``ValueError`` unless ``epochs >= 1``, ``batch_size >= 1`` and ``lr > 0`` (finite)."""
    if epochs < 1 or batch_size < 1 or not (lr > 0 and math.isfinite(lr)):
        raise ValueError(f"need epochs >= 1, batch_size >= 1 and lr > 0, got {epochs}, {batch_size}, {lr}")


def fit_split(records: Sequence[Any], heldout_fraction: float, seed: int
              ) -> tuple[list[WorldModelExample], list[WorldModelExample], dict[str, int]]:
    """The training and held-out examples of a fit: :func:`examples_from_records` (or the
    :class:`WorldModelExample` dicts as given), split by whole groups with :func:`split_by_group`.

    Returns:
        ``(train, held_out, counts)`` (``counts`` as in :func:`examples_from_records`).

    Raises:
        ValueError: fewer than 2 usable records, or ``heldout_fraction`` outside [0, 1).
    """
    if records and isinstance(records[0], WorldModelExample):
        examples, counts = list(records), {"used": len(records), "skipped_infra": 0, "skipped_no_reward": 0,
                                           "skipped_no_text": 0}
    else:
        examples, counts = examples_from_records(records)
    if len(examples) < 2:
        raise ValueError(
            f"the world model needs at least 2 executed trajectories with prompt and completion in "
            f"their meta, got {len(examples)} ({counts}); collect some with 'wmrl wm warmup'"
        )
    groups = [e["group"] for e in examples]
    train_idx, held_idx = split_by_group(groups, heldout_fraction, seed)
    return [examples[i] for i in train_idx], [examples[i] for i in held_idx], counts


def fit_metrics(wm: Any, train: Sequence[dict[str, Any]], held: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The metrics part of a fit report: ``wm.predict`` on both splits.

    Returns:
        dict with ``train`` and ``heldout`` metrics (:func:`world_model_metrics`; ``heldout`` and the
        held-out ``heldout_pred`` / ``heldout_true`` lists only when something is held out),
        ``predict_seconds`` (wall seconds of those predictions) and ``predictions_per_s``
        (trajectories per wall second over both splits).
    """
    t0 = time.perf_counter()
    tr_pred = wm.predict([e["prompt"] for e in train], [e["completion"] for e in train])
    out: dict[str, Any] = {"train": world_model_metrics(tr_pred, np.array([e["reward"] for e in train], dtype=np.float64),
                                                        [e["group"] for e in train])}
    if held:
        h_pred = wm.predict([e["prompt"] for e in held], [e["completion"] for e in held])
        h_true = np.array([e["reward"] for e in held], dtype=np.float64)
        out["heldout"] = world_model_metrics(h_pred, h_true, [e["group"] for e in held])
        out["heldout_pred"] = h_pred.tolist()
        out["heldout_true"] = h_true.tolist()
    dt = time.perf_counter() - t0
    out["predict_seconds"] = dt
    out["predictions_per_s"] = (len(train) + len(held)) / dt if dt > 0 else float("nan")
    return out


class RewardHead(torch.nn.Module):
    """Linear reward head on standardised features: ``w . (f - mu) / sd + b`` (unclipped).

    ``mu`` and ``sd`` ([D] float32 buffers) are set from the training features at the first fit
    (``sd`` floored at 1e-6), so the head sees unit-scale inputs whatever the backbone's hidden
    state magnitudes (SmolLM2's reach |h| ~ 37). Predictions are clipped to [0, 1] by the world
    model, not here, so that the training loss keeps its gradient outside the range.
    """

    def __init__(self, dim: int):
        super().__init__()
        self.linear = torch.nn.Linear(dim, 1)
        torch.nn.init.zeros_(self.linear.weight)
        torch.nn.init.zeros_(self.linear.bias)
        self.register_buffer("mu", torch.zeros(dim))
        self.register_buffer("sd", torch.ones(dim))

    def standardise(self, feats: torch.Tensor) -> torch.Tensor:
        """[B, D] -> [B, D] standardised features."""
        return (feats - self.mu) / self.sd

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        """[B, D] features -> [B] unclipped reward predictions."""
        return self.linear(self.standardise(feats)).squeeze(-1)


def ridge_fit(Z: np.ndarray, y: np.ndarray, groups: Sequence[Hashable], alphas: Sequence[float] = (1.0, 10.0, 100.0, 1000.0),
              seed: int = 0) -> tuple[np.ndarray, float, float]:
    """Closed-form ridge regression of ``y`` on standardised features ``Z``, alpha by group K-fold.

    Args:
        Z: [N, D] standardised features; y: [N] rewards; groups: N group keys (folds never split a
            group, so the chosen alpha is the one that generalises to unseen groups).
        alphas: candidate L2 penalties (sklearn ``Ridge`` convention: ``||y - Zw - b||^2 + alpha ||w||^2``).

    Returns:
        ``(w [D], b, alpha)``.
    """
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import GroupKFold

    keys = [repr(g) for g in groups]
    n_groups = len(set(keys))
    best = (float("inf"), alphas[0])
    if n_groups >= 3 and len(alphas) > 1:
        cv = GroupKFold(n_splits=min(5, n_groups))
        for a in alphas:
            err = 0.0
            for tr, te in cv.split(Z, y, keys):
                r = Ridge(alpha=a).fit(Z[tr], y[tr])
                err += float(((r.predict(Z[te]) - y[te]) ** 2).sum())
            if err < best[0]:
                best = (err, a)
    alpha = best[1]
    r = Ridge(alpha=alpha).fit(Z, y)
    return np.asarray(r.coef_, dtype=np.float64), float(r.intercept_), float(alpha)


class BackboneWorldModel:
    """What every world model on the shared backbone has in common (not used on its own).

    Holds the tokenizer and the world model's named LoRA adapter on the policy's ``PeftModel`` (or,
    with ``lora=None``, the frozen base model), builds the input text, tokenises, left-truncates and
    pads, runs the decoder with this world model's adapter active, runs a prompt shared by several
    trajectories once (KV cache), plans prediction batches, and saves / loads the settings and
    adapter. Subclasses (:class:`RegressionWorldModel`, :class:`wmrl.world_model.generative.GenerativeWorldModel`)
    set :attr:`kind` and add prediction, fitting and their own weights.

    Args:
        model: the backbone (a transformers causal LM) or the policy's ``PeftModel`` (shared).
        tokenizer: its tokenizer.
        lora: adapter settings; ``None`` = frozen backbone.
        adapter_name: name of the world model's adapter on the shared peft model.
        max_length: tokens per input; longer inputs lose their beginning (left truncation keeps the
            program and the end of the prompt; a subclass's fixed suffix is never truncated).
        batch_size: rows per forward pass in ``predict``.
    """

    #: what ``world_model.json`` records as ``kind`` (see :mod:`wmrl.world_model.factory`)
    kind: str = ""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        lora: LoraSettings | None,
        *,
        adapter_name: str = "world_model",
        max_length: int = 320,
        batch_size: int = 16,
    ):
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.tokenizer = tokenizer
        self.lora = lora
        self.adapter_name = adapter_name
        self.max_length = int(max_length)
        self.batch_size = int(batch_size)
        from peft import PeftModel

        if lora is not None:
            self.peft_model = adapters.attach_lora(model, adapter_name, lora)
            self._base = self.peft_model.get_base_model()
        else:
            self.peft_model = model if isinstance(model, PeftModel) else adapters._WRAPPERS.get(model)
            self._base = model.get_base_model() if isinstance(model, PeftModel) else model
            for p in self._base.parameters():
                p.requires_grad_(False)
        self.history: list[dict[str, float]] = []

    # ---------------------------------------------------------------- text and tokens
    @property
    def device(self) -> torch.device:
        """Device of the backbone."""
        return next(self._base.parameters()).device

    @staticmethod
    def input_text(prompt: str, completion: str) -> str:
        """The text the world model reads for one trajectory."""
        return f"{prompt}\n### Solution\n{completion}"

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _prompt_ids(self, prompt: str) -> list[int]:
        return self._ids(self.input_text(prompt, ""))

    @staticmethod
    def _check_inputs(prompts: Sequence[str], completions: Sequence[str]) -> None:
        """Raise ``TypeError`` unless both are sequences of strings (not one string), ``ValueError``
        when their lengths differ."""
        for name, xs in (("prompts", prompts), ("completions", completions)):
            if isinstance(xs, (str, bytes)) or not hasattr(xs, "__len__") or not hasattr(xs, "__getitem__"):
                raise TypeError(f"{name} must be a list of strings, got {type(xs).__name__}")
            bad = next((i for i, x in enumerate(xs) if not isinstance(x, str)), None)
            if bad is not None:
                raise TypeError(f"{name}[{bad}] is a {type(xs[bad]).__name__}, not a string")
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")

    def _encode(self, prompts: Sequence[str], completions: Sequence[str],
                suffixes: Sequence[list[int]] | None = None) -> dict[str, torch.Tensor]:
        """Left-padded ``input_ids`` / ``attention_mask`` [B, T] of prompt part + completion part (+ suffix).

        The two parts are tokenised separately and concatenated (so a shared prompt can be cached
        in ``predict`` with identical tokens), then left-truncated to ``max_length`` minus the row's
        suffix length; the suffix token ids (``suffixes[i]``, e.g. a score cue) are appended after
        truncation, so they are never cut.
        """
        suffixes = suffixes if suffixes is not None else [[] for _ in prompts]
        rows = [(self._prompt_ids(p) + self._ids(c))[-(self.max_length - len(s)):] + list(s)
                for p, c, s in zip(prompts, completions, suffixes)]
        T = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.full((len(rows), T), pad, dtype=torch.long)
        am = torch.zeros((len(rows), T), dtype=torch.long)
        for i, r in enumerate(rows):
            if r:
                ids[i, T - len(r):] = torch.tensor(r, dtype=torch.long)
                am[i, T - len(r):] = 1
        return {"input_ids": ids.to(self.device), "attention_mask": am.to(self.device)}

    # ---------------------------------------------------------------- forward passes
    def _decoder(self, **kwargs: Any) -> Any:
        """Run the backbone's decoder (no LM head: the vocabulary projection is skipped) with this
        world model's adapter active (or all adapters disabled when it has none)."""
        decoder = self._base.base_model  # e.g. LlamaModel
        if self.lora is not None:
            adapters.activate(self.peft_model, self.adapter_name)
            return decoder(**kwargs)
        if self.peft_model is not None:
            with self.peft_model.disable_adapter():
                return decoder(**kwargs)
        return decoder(**kwargs)

    @torch.no_grad()
    def _shared_prompt_forward(self, p_ids: list[int], comp_ids: list[list[int]]) -> dict[str, Any]:
        """Run one prompt once and G continuations after it from its KV cache (no grad).

        Args:
            p_ids: the prompt part's P token ids.
            comp_ids: G continuations (completion, plus any suffix), each non-empty.

        Returns:
            dict with ``hp`` [1, P, H] and ``hc`` [G, C, H] float32 final-layer hidden states of the
            prompt and of the right-padded continuations, ``cm`` [G, C] int64 continuation mask,
            ``lens`` [G] continuation lengths, ``attention_mask`` [G, P + C] and ``cache`` (the KV
            cache of all P + C positions, batch G, for a further decoding step at position
            ``P + lens``). Identical to separate passes over the concatenated sequences (the
            prompt's hidden states and keys/values do not depend on what follows), at the cost of
            P + sum(C_i) tokens instead of G * P + sum(C_i).
        """
        dev = self.device
        P = len(p_ids)
        out = self._decoder(input_ids=torch.tensor([p_ids], device=dev), use_cache=True)
        cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
        hp = out.last_hidden_state.float()  # [1, P, H]
        G = len(comp_ids)
        C = max(len(c) for c in comp_ids)
        lens = torch.tensor([len(c) for c in comp_ids], device=dev)
        ids = torch.zeros((G, C), dtype=torch.long, device=dev)
        for i, c in enumerate(comp_ids):
            ids[i, :len(c)] = torch.tensor(c, dtype=torch.long, device=dev)
        cm = (torch.arange(C, device=dev)[None, :] < lens[:, None]).long()
        am = torch.cat([torch.ones((G, P), dtype=torch.long, device=dev), cm], dim=1)
        pos = P + torch.arange(C, device=dev)[None, :].expand(G, -1)
        cache.batch_repeat_interleave(G)
        out = self._decoder(input_ids=ids, attention_mask=am, position_ids=pos, cache=cache, use_cache=True)
        cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
        return {"hp": hp, "hc": out.last_hidden_state.float(), "cm": cm, "lens": lens, "attention_mask": am,
                "cache": cache}

    def _plan(self, prompts: Sequence[str], completions: Sequence[str], suffix: Sequence[int] = (),
              share_prompts: bool = True) -> tuple[list[tuple[list[int], list[int], list[list[int]]]], list[list[int]]]:
        """Group the rows of a prediction into forward passes.

        Rows that share a prompt (a GRPO group, two or more rows) and fit into ``max_length`` with
        ``suffix`` appended go to the shared-prompt path in chunks of ``batch_size``: entries
        ``(prompt ids, row indices, continuation ids = completion ids + suffix)``. The other rows
        (``share_prompts=False``, single rows, truncated or empty continuations) go ``batch_size``
        rows per plain left-padded pass, sorted by text length: a list of row-index lists.
        """
        shared: list[tuple[list[int], list[int], list[list[int]]]] = []
        rest: list[int] = []
        by_prompt: dict[str, list[int]] = {}
        for i, p in enumerate(prompts):
            by_prompt.setdefault(p, []).append(i)
        for p, idx in by_prompt.items():
            if not share_prompts or len(idx) < 2:
                rest += idx
                continue
            p_ids = self._prompt_ids(p)
            c_ids = [self._ids(completions[i]) + list(suffix) for i in idx]
            if not c_ids or min(len(c) for c in c_ids) == 0 or len(p_ids) + max(len(c) for c in c_ids) > self.max_length:
                rest += idx  # truncation or empty completions: the plain path handles them
                continue
            for s in range(0, len(idx), self.batch_size):
                shared.append((p_ids, idx[s:s + self.batch_size], c_ids[s:s + self.batch_size]))
        rest.sort(key=lambda i: len(prompts[i]) + len(completions[i]))
        return shared, [rest[s:s + self.batch_size] for s in range(0, len(rest), self.batch_size)]

    # ---------------------------------------------------------------- persistence
    def config(self) -> dict[str, Any]:
        """The settings needed to rebuild this world model (JSON-serialisable); ``kind`` first."""
        return {
            "kind": self.kind,
            "adapter_name": self.adapter_name,
            "max_length": self.max_length,
            "batch_size": self.batch_size,
            "lora": None if self.lora is None else {
                "r": self.lora.r, "alpha": self.lora.alpha, "dropout": self.lora.dropout,
                "target_modules": list(self.lora.target_modules),
            },
            "hidden_size": int(self._base.config.hidden_size),
            "base_model": getattr(self._base.config, "_name_or_path", ""),
        }

    def _adapter_state(self) -> dict[str, torch.Tensor]:
        """This world model's LoRA tensors (CPU), or {} without an adapter."""
        if self.lora is None:
            return {}
        from peft import get_peft_model_state_dict

        return {k: v.detach().cpu() for k, v in get_peft_model_state_dict(self.peft_model, adapter_name=self.adapter_name).items()}

    @staticmethod
    def read_saved_config(directory: str | Path) -> dict[str, Any]:
        """The ``world_model.json`` of a saved world model; ``kind`` defaults to ``"regression"``.

        Raises:
            FileNotFoundError: ``world_model.json`` missing (not a saved world model).
        """
        d = Path(directory)
        p = d / "world_model.json"
        if not p.is_file():
            raise FileNotFoundError(f"{p} is missing: {d} is not a world model folder written by save()")
        cfg = json.loads(p.read_text())
        cfg.setdefault("kind", "regression")
        return cfg

    def _check_saved_kind(self, directory: str | Path) -> None:
        """Raise ``ValueError`` when ``directory`` holds a world model of another kind than this one."""
        p = Path(directory) / "world_model.json"
        if p.is_file():
            saved = self.read_saved_config(directory)["kind"]
            if saved != self.kind:
                raise ValueError(f"{directory} holds a {saved!r} world model, this one is {self.kind!r}; load it "
                                 "with wmrl.world_model.factory.load_world_model")

    def _load_into(self, directory: str | Path) -> "BackboneWorldModel":  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def _load_new(cls, directory: str | Path, model: Any, tokenizer: Any, *, adapter_name: str | None = None) -> Any:
        """Rebuild a world model saved by ``save`` on ``model`` (the same backbone it was fitted on).

        Args:
            adapter_name: override the stored adapter name (e.g. to load two world models on one
                base model).

        Raises:
            FileNotFoundError: ``world_model.json`` missing.
            ValueError: the folder holds another kind of world model (use
                :func:`wmrl.world_model.factory.load_world_model`), or the backbone's hidden size
                differs from the saved one.
        """
        d = Path(directory)
        cfg = cls.read_saved_config(d)
        if cfg["kind"] != cls.kind:
            raise ValueError(f"{d} holds a {cfg['kind']!r} world model, not a {cls.kind!r} one; load it with "
                             "wmrl.world_model.factory.load_world_model")
        lora = None if cfg["lora"] is None else LoraSettings(
            r=cfg["lora"]["r"], alpha=cfg["lora"]["alpha"], dropout=cfg["lora"]["dropout"],
            target_modules=tuple(cfg["lora"]["target_modules"]),
        )
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        if int(base.config.hidden_size) != int(cfg["hidden_size"]):
            raise ValueError(
                f"world model in {d} was fitted on a backbone with hidden size {cfg['hidden_size']}, "
                f"this one has {base.config.hidden_size} ({cfg.get('base_model')!r} expected)"
            )
        wm = cls(model, tokenizer, lora=lora, adapter_name=adapter_name or cfg["adapter_name"],
                 max_length=cfg["max_length"], batch_size=cfg["batch_size"])
        return wm._load_into(d)

    #: ``Cls.load(dir, model, tokenizer)`` builds a new world model from a folder;
    #: ``wm.load(dir)`` on an instance loads the saved weights into it (e.g. a checkpoint).
    load = _hybridmethod("_load_new", "_load_into")


class RegressionWorldModel(BackboneWorldModel):
    """Predicts the reward of a (prompt, completion) trajectory without executing it.

    Args:
        model: the backbone (a transformers causal LM) or the policy's ``PeftModel`` (shared).
        tokenizer: its tokenizer.
        lora: adapter settings; ``None`` = frozen backbone, only the head is trained.
        adapter_name: name of the world model's adapter on the shared peft model.
        max_length: tokens per input; longer inputs lose their beginning (left truncation keeps the
            program and the end of the prompt).
        batch_size: rows per forward pass in :meth:`predict`.

    The head is linear and unconstrained for training; :meth:`predict` clips to [0, 1].
    """

    kind = "regression"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        lora: LoraSettings | None = _LORA_DEFAULT,
        *,
        adapter_name: str = "world_model",
        max_length: int = 320,
        batch_size: int = 16,
    ):
        super().__init__(model, tokenizer, lora, adapter_name=adapter_name, max_length=max_length,
                         batch_size=batch_size)
        hidden = int(self._base.config.hidden_size)
        self.head = RewardHead(2 * hidden).to(self.device)

    # ---------------------------------------------------------------- forward
    def _features(self, enc: dict[str, torch.Tensor]) -> torch.Tensor:
        """[B, 2H] float32: last-token and mean hidden states of the final layer."""
        am = enc["attention_mask"]
        pos = (am.cumsum(-1) - 1).clamp(min=0)
        h = self._decoder(input_ids=enc["input_ids"], attention_mask=am, position_ids=pos, use_cache=False).last_hidden_state
        h = h.float()
        last = h[:, -1, :]  # left padding: the last column is every row's last real token
        m = am.unsqueeze(-1).to(h.dtype)
        mean = (h * m).sum(1) / m.sum(1).clamp(min=1.0)
        return torch.cat([last, mean], dim=-1)

    @torch.no_grad()
    def _shared_prompt_features(self, p_ids: list[int], comp_ids: list[list[int]]) -> torch.Tensor:
        """[G, 2H] features of G completions of one prompt, running the prompt once (KV cache).

        Identical to :meth:`_features` on the concatenated sequences (see
        :meth:`BackboneWorldModel._shared_prompt_forward`).
        """
        o = self._shared_prompt_forward(p_ids, comp_ids)
        hp, hc, cm, lens = o["hp"], o["hc"], o["cm"], o["lens"]
        G = len(comp_ids)
        P = len(p_ids)
        last = hc[torch.arange(G, device=hc.device), lens - 1]
        total = hp.sum(1) + (hc * cm.unsqueeze(-1)).sum(1)
        mean = total / (P + lens).unsqueeze(-1).to(total.dtype)
        return torch.cat([last, mean], dim=-1)

    def forward(self, prompts: Sequence[str], completions: Sequence[str]) -> torch.Tensor:
        """[B] float32 unclipped reward predictions, with grad (for training)."""
        return self.head(self._features(self._encode(prompts, completions)))

    @torch.no_grad()
    def features(self, prompts: Sequence[str], completions: Sequence[str], share_prompts: bool = True) -> torch.Tensor:
        """[N, 2H] float32 pooled features (no grad).

        Trajectories that share a prompt (a GRPO group) run the prompt once and only their
        completions after it (``share_prompts``; same values as separate passes); the rest go
        ``batch_size`` rows per forward pass, sorted by length.
        """
        n = len(prompts)
        if len(completions) != n:
            raise ValueError(f"{n} prompts but {len(completions)} completions")
        D = self.head.mu.shape[0]
        out = torch.zeros((n, D), dtype=torch.float32, device=self.device)
        if n == 0:
            return out
        shared, rest = self._plan(prompts, completions, share_prompts=share_prompts)
        for p_ids, sub, c_ids in shared:
            out[sub] = self._shared_prompt_features(p_ids, c_ids)
        for sub in rest:
            out[sub] = self._features(self._encode([prompts[i] for i in sub], [completions[i] for i in sub]))
        return out

    @torch.no_grad()
    def predict(self, prompts: Sequence[str], completions: Sequence[str]) -> np.ndarray:
        """Predicted rewards for N trajectories, float64 array [N] clipped to [0, 1]; batched, no grad.

        Trajectories sharing a prompt run it once (see :meth:`features`).

        Raises:
            TypeError: ``prompts`` / ``completions`` are not sequences of strings.
            ValueError: ``prompts`` and ``completions`` differ in length.
        """
        self._check_inputs(prompts, completions)
        if len(prompts) == 0:
            return np.zeros(0, dtype=np.float64)
        r = self.head(self.features(list(prompts), list(completions)))
        return np.clip(r.detach().cpu().double().numpy(), 0.0, 1.0)

    # ---------------------------------------------------------------- training
    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """The head's parameters, plus this world model's LoRA weights when it has an adapter."""
        params = list(self.head.linear.parameters())
        if self.lora is not None:
            adapters.activate(self.peft_model, self.adapter_name)
            params += adapters.adapter_parameters(self.peft_model, self.adapter_name)
        return params

    def _solve_head(self, train: list[dict[str, Any]], rewards: np.ndarray, seed: int, *,
                    set_standardisation: bool) -> tuple[float, float]:
        """Set the head to the closed-form ridge solution on the current backbone's features.

        With ``set_standardisation`` the feature mean and population std (correction=0: finite even
        for one training example) are first taken from ``train``. Returns ``(ridge alpha, train MSE)``.
        """
        import torch

        X = self.features([e["prompt"] for e in train], [e["completion"] for e in train])
        if set_standardisation:
            with torch.no_grad():
                self.head.mu.copy_(X.mean(0))
                self.head.sd.copy_(X.std(0, correction=0).clamp(min=1e-6))
        Z = self.head.standardise(X).cpu().double().numpy()
        w, b, alpha = ridge_fit(Z, rewards, [e["group"] for e in train], seed=seed)
        with torch.no_grad():
            self.head.linear.weight.copy_(torch.as_tensor(w, dtype=torch.float32).view(1, -1))
            self.head.linear.bias.fill_(b)
        return alpha, float(((Z @ w + b - rewards) ** 2).mean())

    def fit(
        self,
        records: Sequence[dict[str, Any]],
        epochs: int = 3,
        lr: float = 3e-4,
        batch_size: int = 8,
        heldout_fraction: float = 0.2,
        seed: int = 0,
        *,
        head_lr: float = 1e-5,
        log_every: int = 0,
        time_budget_s: float | None = None,
    ) -> dict[str, Any]:
        """Fit the head (ridge, closed form) and then adapter + head (AdamW) by mean squared error.

        Step 1 computes the pooled features of the training split (no grad), sets the
        standardisation statistics on the first fit, and solves the head by ridge regression with
        the penalty chosen by group K-fold among 1, 10, 100, 1000. Step 2 (only with a LoRA adapter)
        runs ``epochs`` passes of AdamW over adapter and head, keeping the ridge penalty on ``w``
        (``head_lr`` must stay small: Adam moves each of the 2H weights by about ``head_lr`` per
        step, i.e. the prediction by about ``head_lr * 2H``); step 3 recomputes the features under the
        trained adapter and solves the head by ridge again.

        Args:
            records: execution-log rows (see the module docstring) or :class:`WorldModelExample`
                dicts (``prompt``, ``completion``, ``reward``, ``group``).
            epochs: passes over the training split in step 2 (ignored without an adapter).
            lr: AdamW learning rate of the LoRA weights; ``head_lr`` that of the head.
            batch_size: trajectories per gradient step.
            heldout_fraction: fraction of *groups* held out for the metrics (0 = none).
            seed: split, shuffling and head initialisation.
            log_every: print the running loss every this many steps (0 = silent).
            time_budget_s: stop training after this many wall seconds (the metrics are still
                computed), for CPU budgets.

        Returns:
            dict with ``n_train``, ``n_heldout``, ``skipped`` counts, ``train_seconds``,
            ``steps``, ``train_loss`` (last epoch mean MSE), ``ridge_alpha``, ``ridge_train_mse``,
            and the entries of :func:`fit_metrics` (``train`` / ``heldout`` metrics, the held-out
            ``heldout_pred`` / ``heldout_true`` lists for the calibration plot, ``predict_seconds``,
            ``predictions_per_s``).

        Raises:
            ValueError: fewer than 2 usable records, or bad hyperparameters.
        """
        check_fit_settings(epochs, lr, batch_size)
        train, held, counts = fit_split(records, heldout_fraction, seed)
        rewards = np.array([e["reward"] for e in train], dtype=np.float64)
        rng = random.Random(seed)
        t0 = time.perf_counter()
        step = 0
        last_epoch_loss = float("nan")
        stopped = False
        # 1) features of the training split under the current backbone/adapter; standardisation
        #    statistics (first fit only) and a closed-form ridge warm start of the head.
        alpha, ridge_mse = self._solve_head(train, rewards, seed, set_standardisation=not self.history)
        # 2) with an adapter: fine-tune LoRA and head jointly by MSE; the head keeps the ridge
        #    penalty (alpha / N per example, as weight decay on w in the loss).
        if self.lora is not None:
            lora_params = adapters.adapter_parameters(self.peft_model, self.adapter_name)
            opt = torch.optim.AdamW(
                [{"params": lora_params, "lr": lr}, {"params": self.head.linear.parameters(), "lr": head_lr}],
                weight_decay=0.0,
            )
            l2 = alpha / max(len(train), 1)
            for ep in range(epochs):
                order = list(range(len(train)))
                rng.shuffle(order)
                losses = []
                for s in range(0, len(order), batch_size):
                    bt = [train[i] for i in order[s:s + batch_size]]
                    pred = self.forward([e["prompt"] for e in bt], [e["completion"] for e in bt])
                    y = torch.tensor([e["reward"] for e in bt], dtype=pred.dtype, device=pred.device)
                    mse = torch.nn.functional.mse_loss(pred, y)
                    loss = mse + l2 * self.head.linear.weight.pow(2).sum()
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(lora_params + list(self.head.linear.parameters()), 1.0)
                    opt.step()
                    losses.append(float(mse.detach()))
                    step += 1
                    if log_every and step % log_every == 0:
                        print(f"  world model step {step}: mse {np.mean(losses[-log_every:]):.4f}", flush=True)
                    if time_budget_s is not None and time.perf_counter() - t0 > time_budget_s:
                        stopped = True
                        break
                last_epoch_loss = float(np.mean(losses)) if losses else float("nan")
                self.history.append({"epoch": ep, "loss": last_epoch_loss})
                if stopped:
                    break
            # 3) re-solve the head in closed form on the adapted features (same standardisation),
            #    so the final head is the ridge optimum for the final backbone.
            if step:
                alpha, ridge_mse = self._solve_head(train, rewards, seed, set_standardisation=False)
        else:
            last_epoch_loss = ridge_mse
            self.history.append({"epoch": 0, "loss": ridge_mse})
        train_seconds = time.perf_counter() - t0
        result: dict[str, Any] = {
            "n_train": len(train),
            "n_heldout": len(held),
            "skipped": counts,
            "steps": step,
            "train_seconds": train_seconds,
            "train_loss": last_epoch_loss,
            "stopped_by_time_budget": stopped,
            "ridge_alpha": alpha,
            "ridge_train_mse": ridge_mse,
        }
        result.update(fit_metrics(self, train, held))
        return result

    # ---------------------------------------------------------------- persistence
    def state_dict(self) -> dict[str, Any]:
        """``{"config": ..., "head": head state, "adapter": LoRA tensors (or {})}`` (tensors on CPU)."""
        return {"config": self.config(), "head": {k: v.detach().cpu() for k, v in self.head.state_dict().items()},
                "adapter": self._adapter_state()}

    def save(self, directory: str | Path) -> Path:
        """Write ``world_model.json``, ``head.safetensors`` and the adapter (LoRA) to ``directory``."""
        from safetensors.torch import save_file

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        (d / "world_model.json").write_text(json.dumps(self.config(), indent=2))
        save_file({k: v.detach().cpu().contiguous() for k, v in self.head.state_dict().items()}, str(d / "head.safetensors"))
        if self.lora is not None:
            adapters.save_adapter(self.peft_model, self.adapter_name, d, self.lora)
        return d

    def _load_into(self, directory: str | Path) -> "RegressionWorldModel":
        """Instance form of :meth:`load`: ``wm.load(dir)`` loads saved weights into this world model.

        Raises:
            FileNotFoundError: nothing saved there.
            ValueError: the folder holds another kind of world model, or the saved head or adapter
                does not fit (other backbone or LoRA rank).
        """
        from safetensors.torch import load_file

        d = Path(directory)
        self._check_saved_kind(d)
        if not (d / "head.safetensors").is_file():
            raise FileNotFoundError(f"{d / 'head.safetensors'} is missing: save the world model there first")
        try:
            self.head.load_state_dict({k: v.to(self.device) for k, v in load_file(str(d / "head.safetensors")).items()})
        except RuntimeError as e:
            raise ValueError(f"the world model head in {d} does not fit this backbone: {e}") from e
        if self.lora is not None:
            adapters.load_adapter(self.peft_model, self.adapter_name, d)
        return self

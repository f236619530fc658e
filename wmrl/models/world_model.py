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

from wmrl.models import adapters
from wmrl.models.types import LoraSettings
from wmrl.models.wm_metrics import calibration_plot, world_model_metrics

__all__ = [
    "RegressionWorldModel",
    "WorldModelExample",
    "examples_from_records",
    "world_model_metrics",
    "calibration_plot",
    "split_by_group",
]

_LORA_DEFAULT = LoraSettings(r=8, alpha=16)


class WorldModelExample(dict):
    """One training example: ``prompt``, ``completion``, ``reward`` (float), ``group`` (hashable)."""


def _field(rec: Any, key: str, default: Any = None) -> Any:
    """``rec[key]`` for a mapping, ``rec.key`` for a record object (e.g. an execution-log row)."""
    if isinstance(rec, dict):
        return rec.get(key, default)
    return getattr(rec, key, default)


def _group_key(rec: Any) -> Hashable:
    meta = _field(rec, "meta") or {}
    return (meta.get("run", ""), meta.get("step", -1), meta.get("task_id", _field(rec, "task_id", "")),
            meta.get("group_id", -1))


class _hybridmethod:
    """A method that is a classmethod on the class and an instance method on instances."""

    def __init__(self, fclass: Any, finstance: Any):
        self.fclass, self.finstance = fclass, finstance

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self.fclass.__get__(None, objtype)
        return self.finstance.__get__(obj, objtype)


def examples_from_records(records: Sequence[Any]) -> tuple[list[WorldModelExample], dict[str, int]]:
    """Turn execution-log records (dicts or record objects) into world-model examples.

    Rows with status ``infra_error``, a missing or non-finite reward (e.g. a task without a
    leaderboard), or no ``meta.prompt`` / ``meta.completion`` are skipped (counted in the returned
    dict: ``used``, ``skipped_infra``, ``skipped_no_reward``, ``skipped_no_text``).
    The group of a row is ``(meta.run, meta.step, task id, meta.group_id)``.
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
        meta = _field(r, "meta") or {}
        if "prompt" not in meta or "completion" not in meta:
            counts["skipped_no_text"] += 1
            continue
        out.append(
            WorldModelExample(
                prompt=str(meta["prompt"]),
                completion=str(meta["completion"]),
                reward=float(reward),
                group=_group_key(r),
                task_id=meta.get("task_id", _field(r, "task_id", "")),
            )
        )
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


class RegressionWorldModel:
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
        hidden = int(self._base.config.hidden_size)
        dev = next(self._base.parameters()).device
        self.head = RewardHead(2 * hidden).to(dev)
        self.history: list[dict[str, float]] = []

    # ---------------------------------------------------------------- forward
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

    def _encode(self, prompts: Sequence[str], completions: Sequence[str]) -> dict[str, torch.Tensor]:
        """Left-padded ``input_ids`` / ``attention_mask`` [B, T] of prompt part + completion part.

        The two parts are tokenised separately and concatenated (so a shared prompt can be cached
        in :meth:`predict` with identical tokens), then left-truncated to ``max_length``.
        """
        rows = [(self._prompt_ids(p) + self._ids(c))[-self.max_length:] for p, c in zip(prompts, completions)]
        T = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.full((len(rows), T), pad, dtype=torch.long)
        am = torch.zeros((len(rows), T), dtype=torch.long)
        for i, r in enumerate(rows):
            if r:
                ids[i, T - len(r):] = torch.tensor(r, dtype=torch.long)
                am[i, T - len(r):] = 1
        return {"input_ids": ids.to(self.device), "attention_mask": am.to(self.device)}

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

        Identical to :meth:`_features` on the concatenated sequences (the prompt's hidden states and
        keys/values do not depend on what follows), at the cost of P + sum(C_i) tokens instead of
        G * P + sum(C_i).
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
        hc = self._decoder(input_ids=ids, attention_mask=am, position_ids=pos, cache=cache, use_cache=True).last_hidden_state.float()
        last = hc[torch.arange(G, device=dev), lens - 1]
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
        rest: list[int] = []
        by_prompt: dict[str, list[int]] = {}
        for i, p in enumerate(prompts):
            by_prompt.setdefault(p, []).append(i)
        for p, idx in by_prompt.items():
            if not share_prompts or len(idx) < 2:
                rest += idx
                continue
            p_ids = self._prompt_ids(p)
            c_ids = [self._ids(completions[i]) for i in idx]
            if not c_ids or min(len(c) for c in c_ids) == 0 or len(p_ids) + max(len(c) for c in c_ids) > self.max_length:
                rest += idx  # truncation or empty completions: the plain path handles them
                continue
            for s in range(0, len(idx), self.batch_size):
                sub = idx[s:s + self.batch_size]
                out[sub] = self._shared_prompt_features(p_ids, c_ids[s:s + self.batch_size])
        rest.sort(key=lambda i: len(prompts[i]) + len(completions[i]))
        for s in range(0, len(rest), self.batch_size):
            sub = rest[s:s + self.batch_size]
            out[sub] = self._features(self._encode([prompts[i] for i in sub], [completions[i] for i in sub]))
        return out

    @torch.no_grad()
    def predict(self, prompts: Sequence[str], completions: Sequence[str]) -> np.ndarray:
        """Predicted rewards for N trajectories, float64 array [N] clipped to [0, 1]; batched, no grad.

        Trajectories sharing a prompt run it once (see :meth:`features`).

        Raises:
            ValueError: ``prompts`` and ``completions`` differ in length.
        """
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions")
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
            ``train`` metrics and ``heldout``
            metrics (:func:`world_model_metrics`; absent when nothing is held out), and the held-out
            ``heldout_pred`` / ``heldout_true`` lists (for the calibration plot).

        Raises:
            ValueError: fewer than 2 usable records, or bad hyperparameters.
        """
        if epochs < 1 or batch_size < 1 or lr <= 0:
            raise ValueError(f"need epochs >= 1, batch_size >= 1 and lr > 0, got {epochs}, {batch_size}, {lr}")
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
        train = [examples[i] for i in train_idx]
        held = [examples[i] for i in held_idx]
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
                    losses.append(float(mse))
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
        tr_pred = self.predict([e["prompt"] for e in train], [e["completion"] for e in train])
        result["train"] = world_model_metrics(tr_pred, rewards, [e["group"] for e in train])
        if held:
            h_pred = self.predict([e["prompt"] for e in held], [e["completion"] for e in held])
            h_true = np.array([e["reward"] for e in held], dtype=np.float64)
            result["heldout"] = world_model_metrics(h_pred, h_true, [e["group"] for e in held])
            result["heldout_pred"] = h_pred.tolist()
            result["heldout_true"] = h_true.tolist()
        return result

    # ---------------------------------------------------------------- persistence
    def config(self) -> dict[str, Any]:
        """The settings needed to rebuild this world model (JSON-serialisable)."""
        return {
            "kind": "regression",
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

    def state_dict(self) -> dict[str, Any]:
        """``{"config": ..., "head": head state, "adapter": LoRA tensors (or {})}`` (tensors on CPU)."""
        sd: dict[str, Any] = {"config": self.config(), "head": {k: v.detach().cpu() for k, v in self.head.state_dict().items()}}
        if self.lora is not None:
            from peft import get_peft_model_state_dict

            sd["adapter"] = {k: v.detach().cpu() for k, v in get_peft_model_state_dict(self.peft_model, adapter_name=self.adapter_name).items()}
        else:
            sd["adapter"] = {}
        return sd

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
            ValueError: the saved head or adapter does not fit (other backbone or LoRA rank).
        """
        from safetensors.torch import load_file

        d = Path(directory)
        if not (d / "head.safetensors").is_file():
            raise FileNotFoundError(f"{d / 'head.safetensors'} is missing: save the world model there first")
        try:
            self.head.load_state_dict({k: v.to(self.device) for k, v in load_file(str(d / "head.safetensors")).items()})
        except RuntimeError as e:
            raise ValueError(f"the world model head in {d} does not fit this backbone: {e}") from e
        if self.lora is not None:
            adapters.load_adapter(self.peft_model, self.adapter_name, d)
        return self

    @classmethod
    def _load_new(cls, directory: str | Path, model: Any, tokenizer: Any, *, adapter_name: str | None = None) -> "RegressionWorldModel":
        """Rebuild a world model saved by :meth:`save` on ``model`` (the same backbone it was fitted on).

        Args:
            adapter_name: override the stored adapter name (e.g. to load two world models on one
                base model).

        Raises:
            FileNotFoundError: ``world_model.json`` missing.
            ValueError: the backbone's hidden size differs from the saved head's.
        """
        d = Path(directory)
        p = d / "world_model.json"
        if not p.is_file():
            raise FileNotFoundError(f"{p} is missing: {d} is not a world model saved by RegressionWorldModel.save")
        cfg = json.loads(p.read_text())
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

    #: ``RegressionWorldModel.load(dir, model, tokenizer)`` builds a new world model from a folder;
    #: ``wm.load(dir)`` on an instance loads the saved weights into it (e.g. a checkpoint).
    load = _hybridmethod(_load_new, _load_into)

"""The generative world model: the agent's backbone + its own LoRA adapter, writing the score as text.

The world model reads the same input text as the regression variant (prompt, a separator, the
completion; :meth:`BackboneWorldModel.input_text`, left-truncated to ``max_length``), followed by a
fixed score cue (:data:`SCORE_CUE`) and the answer ``0.DD``: the reward (leaderboard percentile,
docs/tasks.md) clipped to [0, 0.99] and rounded to two decimals (:func:`score_digits`), so 1.0 is
written ``0.99``. Its LoRA adapter is fine-tuned with next-token cross-entropy (full vocabulary,
teacher forcing) on the two answer digits only; the cue and ``0.`` are given, not learned.

Prediction does not sample. With ``0.`` teacher-forced, it reads the distribution of the first
decimal over the ten digit tokens (softmax of their logits, i.e. the next-token distribution
conditioned on the answer being a digit), takes its expected value, then feeds the most likely first
digit ``d1*`` (one more decoding step from the KV cache) and takes the expected value of the second
decimal::

    r_hat = 0.1 * sum_k k * p1(k)  +  0.01 * sum_k k * p2(k | d1*),     p1, p2 over k = 0..9

a deterministic float in [0, 0.99], continuous in the logits (the expected value of a categorical
score distribution, as in distributional value heads; e.g. Bellemare et al. 2017, Farebrother et
al. 2024 "Stop regressing"). Cost: one forward pass over the input plus one single-token step per
trajectory; trajectories sharing a prompt (a GRPO group) run the prompt once from its KV cache
(:meth:`BackboneWorldModel._shared_prompt_forward`), as the regression variant does.

The backbone is the same base model object as the policy's: the world model's adapter is a second
named adapter on the shared peft wrapper (:mod:`wmrl.models.adapters`). There is no head: the
vocabulary projection is the backbone's own (``get_output_embeddings()``; models that transform the
logits after it, e.g. Gemma-2's soft-capping, are not supported). Every digit 0-9 must be one token of
the tokenizer (:func:`digit_token_ids`; true for SmolLM2's, where ``0.73`` is ``0`` ``.`` ``7`` ``3``).
"""
from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from wmrl.models import adapters
from wmrl.models.types import LoraSettings
from wmrl.world_model.base import BackboneWorldModel
from wmrl.world_model.data import check_fit_settings, fit_metrics, fit_split

__all__ = ["GenerativeWorldModel", "digit_token_ids", "score_digits", "score_text", "SCORE_CUE", "ANSWER_PREFIX"]

#: the text between the program and the answer
SCORE_CUE = "\n### Score\n"
#: the teacher-forced start of every answer
ANSWER_PREFIX = "0."
#: largest score the answer format can write (rewards above are written as this)
MAX_SCORE = 0.99
_DIGITS = "0123456789"
_LORA_DEFAULT = LoraSettings(r=8, alpha=16)


def _tokenizer_name(tokenizer: Any) -> str:
    return str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)


def digit_token_ids(tokenizer: Any) -> list[int]:
    """The token ids of the digits ``0`` .. ``9`` (index = digit).

    Raises:
        ValueError: a digit is not exactly one token, decodes to another text, or two digits share
            a token; the message names the tokenizer and the digit.
    """
    ids: list[int] = []
    for d in _DIGITS:
        enc = list(tokenizer(d, add_special_tokens=False)["input_ids"])
        if len(enc) != 1:
            raise ValueError(
                f"tokenizer {_tokenizer_name(tokenizer)!r} encodes the digit {d!r} as {len(enc)} tokens {enc}; the "
                "generative world model needs every digit 0-9 to be a single token (use world_model.kind "
                "'regression' with this backbone)")
        text = tokenizer.decode(enc)
        if text != d:
            raise ValueError(f"tokenizer {_tokenizer_name(tokenizer)!r}: the token {enc[0]} of digit {d!r} decodes "
                             f"to {text!r}")
        ids.append(int(enc[0]))
    if len(set(ids)) != len(ids):
        raise ValueError(f"tokenizer {_tokenizer_name(tokenizer)!r} maps two digits to one token: {ids}")
    return ids


def score_digits(reward: float) -> tuple[int, int]:
    """The two decimals ``(d1, d2)`` of the answer ``0.d1d2`` for a reward.

    ``100 * min(max(reward, 0), 0.99)`` rounded to the nearest integer (Python's ``round``), split
    into tens and units: 0.734 -> (7, 3), 1.0 -> (9, 9), -0.2 -> (0, 0).

    Raises:
        ValueError: ``reward`` is not a finite number.
    """
    r = float(reward)
    if not math.isfinite(r):
        raise ValueError(f"a reward must be a finite number, got {reward!r}")
    c = int(round(100.0 * min(max(r, 0.0), MAX_SCORE)))
    return c // 10, c % 10


def score_text(reward: float) -> str:
    """The answer text the world model is trained to write for ``reward``, e.g. ``"0.73"``."""
    d1, d2 = score_digits(reward)
    return f"{ANSWER_PREFIX}{d1}{d2}"


class GenerativeWorldModel(BackboneWorldModel):
    """Predicts the reward of a (prompt, completion) trajectory by reading the score it would write.

    Args:
        model: the backbone (a transformers causal LM) or the policy's ``PeftModel`` (shared).
        tokenizer: its tokenizer (every digit must be one token).
        lora: adapter settings (required: the adapter is all this world model learns).
        adapter_name: name of the world model's adapter on the shared peft model.
        max_length: tokens per input including the score cue and the answer; longer inputs lose
            their beginning (the cue and the answer are never cut).
        batch_size: rows per forward pass in :meth:`predict`.

    Raises:
        ValueError: ``lora`` is None, a digit is not a single token (:func:`digit_token_ids`),
            ``max_length`` leaves no room for the input besides the cue and answer, or the adapter
            name is taken on the shared model.
    """

    kind = "generative"

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
        if lora is None:
            raise ValueError("the generative world model learns only through its LoRA adapter: give it lora "
                             "settings (a frozen backbone with a trained head is RegressionWorldModel(lora=None))")
        # checked before the adapter is attached, so a refused tokenizer leaves the shared model unchanged
        digits = digit_token_ids(tokenizer)
        cue = list(tokenizer(SCORE_CUE, add_special_tokens=False)["input_ids"]) + \
            list(tokenizer(ANSWER_PREFIX, add_special_tokens=False)["input_ids"])
        if int(max_length) < len(cue) + 2 + 1:
            raise ValueError(f"max_length={max_length} leaves no room for the input: the score cue and answer take "
                             f"{len(cue) + 2} tokens")
        super().__init__(model, tokenizer, lora, adapter_name=adapter_name, max_length=max_length,
                         batch_size=batch_size)
        #: token ids of the digits 0..9 (index = digit)
        self.digit_ids = digits
        #: token ids of SCORE_CUE followed by ANSWER_PREFIX (teacher-forced before the two digits)
        self.cue_ids = cue
        self._digit_index = torch.tensor(digits, dtype=torch.long, device=self.device)
        self._k = torch.arange(10, dtype=torch.float64)

    # ---------------------------------------------------------------- forward
    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        """[..., H] final-layer hidden states -> [..., V] float32 next-token logits (the backbone's
        output embedding, with this world model's adapter active in the layers below)."""
        head = self._base.get_output_embeddings()
        return head(h).float()

    def _digit_probs(self, h: torch.Tensor) -> torch.Tensor:
        """[B, H] hidden states -> [B, 10] float32: softmax over the ten digit tokens' logits, i.e. the
        next-token distribution conditioned on the next token being a digit."""
        logits = self._logits(h)
        return torch.softmax(logits[:, self._digit_index.to(logits.device)], dim=-1)

    def loss(self, prompts: Sequence[str], completions: Sequence[str], rewards: Sequence[float]) -> torch.Tensor:
        """Mean next-token cross-entropy of the two answer digits (nats per digit token), with grad.

        Each row is the input (left-truncated) + :data:`SCORE_CUE` + ``0.`` + ``d1`` ``d2``
        (:func:`score_digits` of its reward); the logits at the positions of ``.`` and ``d1`` are
        scored against ``d1`` and ``d2`` with a softmax over the full vocabulary (teacher forcing).

        Args:
            prompts, completions: B texts each. rewards: B executed rewards (finite).

        Returns:
            scalar float32 tensor.

        Raises:
            TypeError / ValueError: bad or mismatched inputs, non-finite rewards, empty batch.
        """
        self._check_inputs(prompts, completions)
        if len(rewards) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(rewards)} rewards")
        if len(prompts) == 0:
            raise ValueError("loss() needs at least one trajectory")
        digits = [score_digits(r) for r in rewards]
        suffixes = [self.cue_ids + [self.digit_ids[a], self.digit_ids[b]] for a, b in digits]
        enc = self._encode(list(prompts), list(completions), suffixes)
        am = enc["attention_mask"]
        pos = (am.cumsum(-1) - 1).clamp(min=0)
        h = self._decoder(input_ids=enc["input_ids"], attention_mask=am, position_ids=pos,
                          use_cache=False).last_hidden_state
        # left padding: the last two columns are every row's d1, d2; positions -3 and -2 predict them
        logits = self._logits(h[:, -3:-1, :])  # [B, 2, V]
        target = enc["input_ids"][:, -2:]
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))

    def _two_digits(self, h_last: torch.Tensor, cache: Any, attention_mask: torch.Tensor,
                    next_pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """First-decimal distribution from ``h_last`` [B, H]; then one decoding step with the most likely
        first digit at positions ``next_pos`` [B] from ``cache`` (``attention_mask`` [B, S] covers
        its S positions) for the second decimal's distribution. Returns two [B, 10] float32."""
        p1 = self._digit_probs(h_last)
        d1 = p1.argmax(dim=-1)  # ties: the smallest digit
        B = h_last.shape[0]
        am = torch.cat([attention_mask, torch.ones((B, 1), dtype=attention_mask.dtype, device=attention_mask.device)], 1)
        out = self._decoder(input_ids=self._digit_index.to(d1.device)[d1].unsqueeze(1), attention_mask=am,
                            position_ids=next_pos.view(B, 1), cache=cache, use_cache=True)
        return p1, self._digit_probs(out.last_hidden_state[:, -1, :].float())

    @torch.no_grad()
    def digit_distributions(self, prompts: Sequence[str], completions: Sequence[str],
                            share_prompts: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """The answer's digit distributions for N trajectories (no grad, batched).

        Returns:
            ``(p1, p2)``, float64 arrays [N, 10] whose rows sum to 1: ``p1[i, k]`` = P(first decimal
            = k | input, ``0.``), ``p2[i, k]`` = P(second decimal = k | input, ``0.``, d1*) with
            ``d1* = argmax_k p1[i, k]``. Trajectories that share a prompt run it once
            (``share_prompts``; same values as separate passes up to float rounding).

        Raises:
            TypeError / ValueError: see :meth:`predict`.
        """
        self._check_inputs(prompts, completions)
        n = len(prompts)
        p1 = torch.zeros((n, 10), dtype=torch.float32)
        p2 = torch.zeros((n, 10), dtype=torch.float32)
        if n == 0:
            return p1.double().numpy(), p2.double().numpy()
        shared, rest = self._plan(prompts, completions, self.cue_ids, share_prompts)
        for p_ids, sub, c_ids in shared:
            o = self._shared_prompt_forward(p_ids, c_ids)
            rows = torch.arange(len(sub), device=o["hc"].device)
            a, b = self._two_digits(o["hc"][rows, o["lens"] - 1], o["cache"], o["attention_mask"],
                                    len(p_ids) + o["lens"])
            p1[sub], p2[sub] = a.cpu(), b.cpu()
        for sub in rest:
            enc = self._encode([prompts[i] for i in sub], [completions[i] for i in sub], [self.cue_ids] * len(sub))
            am = enc["attention_mask"]
            pos = (am.cumsum(-1) - 1).clamp(min=0)
            out = self._decoder(input_ids=enc["input_ids"], attention_mask=am, position_ids=pos, use_cache=True)
            cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
            a, b = self._two_digits(out.last_hidden_state[:, -1, :].float(), cache, am, am.sum(-1))
            p1[sub], p2[sub] = a.cpu(), b.cpu()
        return p1.double().numpy(), p2.double().numpy()

    @torch.no_grad()
    def predict(self, prompts: Sequence[str], completions: Sequence[str], share_prompts: bool = True) -> np.ndarray:
        """Predicted rewards for N trajectories: float64 array [N] in [0, 0.99]; deterministic, no grad.

        ``r_hat = 0.1 * E[d1] + 0.01 * E[d2 | d1*]`` over the digit distributions of
        :meth:`digit_distributions` (see the module docstring).

        Raises:
            TypeError: ``prompts`` / ``completions`` are not sequences of strings.
            ValueError: they differ in length.
        """
        p1, p2 = self.digit_distributions(prompts, completions, share_prompts=share_prompts)
        k = self._k.numpy()
        return np.clip(0.1 * (p1 @ k) + 0.01 * (p2 @ k), 0.0, MAX_SCORE)

    # ---------------------------------------------------------------- training
    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """This world model's LoRA weights (the only weights it trains)."""
        adapters.activate(self.peft_model, self.adapter_name)
        return adapters.adapter_parameters(self.peft_model, self.adapter_name)

    def fit(
        self,
        records: Sequence[Any],
        epochs: int = 3,
        lr: float = 3e-4,
        batch_size: int = 8,
        heldout_fraction: float = 0.2,
        seed: int = 0,
        *,
        log_every: int = 0,
        time_budget_s: float | None = None,
    ) -> dict[str, Any]:
        """Fine-tune the adapter by next-token cross-entropy on the answer digits (:meth:`loss`), AdamW.

        Args:
            records: execution-log rows (see :mod:`wmrl.world_model.regression`) or
                :class:`~wmrl.world_model.data.WorldModelExample` dicts.
            epochs: passes over the training split.
            lr: AdamW learning rate of the LoRA weights (no weight decay; gradient norm clipped at 1).
            batch_size: trajectories per gradient step.
            heldout_fraction: fraction of *groups* held out for the metrics (0 = none).
            seed: split and shuffling (the adapter's initialisation follows torch's global RNG).
            log_every: print the running loss every this many steps (0 = silent).
            time_budget_s: stop training after this many wall seconds (the metrics are still computed).

        Returns:
            dict with ``n_train``, ``n_heldout``, ``skipped`` counts, ``steps``, ``train_seconds``,
            ``train_loss`` (last epoch's mean cross-entropy, nats per answer digit),
            ``stopped_by_time_budget`` and the entries of
            :func:`~wmrl.world_model.data.fit_metrics` (train / held-out metrics, held-out
            predictions and truths, ``predict_seconds``, ``predictions_per_s``), as
            :meth:`RegressionWorldModel.fit <wmrl.world_model.regression.RegressionWorldModel.fit>`.

        Raises:
            ValueError: fewer than 2 usable records, or bad hyperparameters.
        """
        check_fit_settings(epochs, lr, batch_size)
        train, held, counts = fit_split(records, heldout_fraction, seed)
        params = self.trainable_parameters()
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
        rng = random.Random(seed)
        t0 = time.perf_counter()
        step = 0
        last_epoch_loss = float("nan")
        stopped = False
        for ep in range(epochs):
            order = list(range(len(train)))
            rng.shuffle(order)
            losses: list[float] = []
            for s in range(0, len(order), batch_size):
                bt = [train[i] for i in order[s:s + batch_size]]
                loss = self.loss([e["prompt"] for e in bt], [e["completion"] for e in bt], [e["reward"] for e in bt])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                opt.step()
                losses.append(float(loss.detach()))
                step += 1
                if log_every and step % log_every == 0:
                    print(f"  world model step {step}: cross-entropy {np.mean(losses[-log_every:]):.4f}", flush=True)
                if time_budget_s is not None and time.perf_counter() - t0 > time_budget_s:
                    stopped = True
                    break
            last_epoch_loss = float(np.mean(losses)) if losses else float("nan")
            self.history.append({"epoch": ep, "loss": last_epoch_loss})
            if stopped:
                break
        result: dict[str, Any] = {
            "n_train": len(train),
            "n_heldout": len(held),
            "skipped": counts,
            "steps": step,
            "train_seconds": time.perf_counter() - t0,
            "train_loss": last_epoch_loss,
            "stopped_by_time_budget": stopped,
        }
        result.update(fit_metrics(self, train, held))
        return result

    # ---------------------------------------------------------------- persistence
    def config(self) -> dict[str, Any]:
        """The settings needed to rebuild this world model (JSON-serialisable), with the answer format."""
        cfg = super().config()
        cfg["answer"] = {"cue": SCORE_CUE, "prefix": ANSWER_PREFIX, "decimals": 2, "max_score": MAX_SCORE,
                         "digit_token_ids": list(self.digit_ids), "cue_token_ids": list(self.cue_ids)}
        return cfg

    def state_dict(self) -> dict[str, Any]:
        """``{"config": ..., "adapter": LoRA tensors}`` (tensors on CPU)."""
        return {"config": self.config(), "adapter": self._adapter_state()}

    def save(self, directory: str | Path) -> Path:
        """Write ``world_model.json`` (kind ``generative``, answer format) and the adapter to ``directory``."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        (d / "world_model.json").write_text(json.dumps(self.config(), indent=2))
        adapters.save_adapter(self.peft_model, self.adapter_name, d, self.lora)
        return d

    def _load_into(self, directory: str | Path) -> "GenerativeWorldModel":
        """Instance form of :meth:`load`: ``wm.load(dir)`` loads the saved adapter into this world model.

        Raises:
            FileNotFoundError: nothing saved there.
            ValueError: the folder holds another kind of world model, it was fitted with a tokenizer
                whose digit or cue tokens differ from this one's, or the adapter does not fit.
        """
        d = Path(directory)
        self._check_saved_kind(d)
        if (d / "world_model.json").is_file():
            ans = self.read_saved_config(d).get("answer") or {}
            for key, mine in (("digit_token_ids", self.digit_ids), ("cue_token_ids", self.cue_ids)):
                if key in ans and list(ans[key]) != list(mine):
                    raise ValueError(f"the world model in {d} was fitted with {key} {ans[key]}, this tokenizer "
                                     f"({_tokenizer_name(self.tokenizer)!r}) gives {mine}: another tokenizer")
        adapters.load_adapter(self.peft_model, self.adapter_name, d)
        return self

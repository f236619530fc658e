"""What the policy returns (seed; the models package owns and extends it)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import torch


@dataclass(frozen=True)
class LoraSettings:
    """LoRA adapter hyperparameters (Hu et al. 2021, "LoRA", eq. 3: W + (alpha/r) * B A).

    Attributes:
        r: rank of the update.
        alpha: scaling numerator; the update is scaled by ``alpha / r``.
        dropout: dropout on the adapter input; keep 0.0 so that training-time log-probs equal the
            sampling-time ones (GRPO importance ratios are then exactly 1 on the first epoch).
        target_modules: names of the linear layers that get adapters (Llama/Qwen naming).
    """

    r: int = 8
    alpha: int = 16
    dropout: float = 0.0
    target_modules: tuple[str, ...] = (
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    )

    def __post_init__(self) -> None:
        if self.r <= 0:
            raise ValueError(f"LoRA rank r must be positive, got {self.r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"LoRA dropout must be in [0, 1), got {self.dropout}")


@dataclass
class RolloutBatch:
    """A batch of sampled trajectories, ready for the GRPO loss.

    Shapes: B = number of trajectories, T = longest prompt+completion (left-padded prompts).
    Every row has its prompt in columns ``[0, prompt_len)`` (left-padded) and its completion from
    column ``prompt_len`` on (right-padded), so the completion tokens of all rows start at the
    same column.

    Attributes:
        input_ids: [B, T] int64, prompt followed by completion tokens.
        attention_mask: [B, T] int64, 1 for real tokens.
        completion_mask: [B, T] bool, True on completion tokens (prompt and padding are False;
            the EOS token that ended a completion is True).
        choice_mask: [B, T] bool, True on the completion tokens that count in the loss and the KL:
            those sampled where more than one token was allowed. Under a grammar, forced tokens
            (one allowed token, log-prob exactly 0) are False; without one it equals
            ``completion_mask``. None (a batch built by hand) = ``completion_mask``.
        old_logprobs: [B, T] float32, log-probabilities of each token under the sampling policy
            (0 where ``completion_mask`` is False).
        prompts: B prompt strings (the scaffold's prompt text, before the chat template);
            completions: B completion strings (decoded, cut at the scaffold's stop point).
        task_ids: B task ids; group_ids: B group indices (one group = one task's G samples).
        programs: B runnable programs (``scaffold.render(task, completion)``).
        valid: B flags, True when the scaffold judges the completion well-formed without running
            it (grammar: the grammar was completed; function/script: the program parses), or
            None when not checked.
        scaffold: the scaffold's name.
        prompt_len: number of prompt columns (the completion starts at this column).
        temperature: sampling temperature; :meth:`Policy.logprobs` divides logits by it
            (1.0 for greedy decoding).
        grammar_keys: B keys of the grammar that constrained each row (None: unconstrained);
            the policy replays the grammar matcher with them to rebuild the token masks.
        stats: sampling statistics: ``gen_seconds`` (wall seconds of generation),
            ``new_tokens`` (completion tokens counted by ``completion_mask``), ``choice_tokens``
            (those of ``choice_mask``).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    completion_mask: torch.Tensor
    old_logprobs: torch.Tensor
    prompts: list[str]
    completions: list[str]
    task_ids: list[str]
    group_ids: list[int]
    programs: list[str] = field(default_factory=list)
    valid: list[bool] | None = None
    scaffold: str = ""
    prompt_len: int = 0
    temperature: float = 1.0
    grammar_keys: list[str | None] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    choice_mask: torch.Tensor | None = None

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def slice(self, indices: Sequence[int] | slice) -> RolloutBatch:
        """A new batch with the rows ``indices`` (e.g. a micro-batch for the loss).

        Tensors are indexed along dim 0 (views for a ``slice``), per-row lists are subset, scalars
        are kept. Columns are not trimmed, so ``prompt_len`` stays valid.

        Raises:
            IndexError: an index outside ``[0, B)``.
        """
        n = len(self)
        idx = list(range(n))[indices] if isinstance(indices, slice) else [int(i) for i in indices]
        for i in idx:
            if not -n <= i < n:
                raise IndexError(f"row {i} is outside a batch of {n} trajectories")
        t_idx = torch.as_tensor(idx, dtype=torch.long)
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, torch.Tensor):
                out[f.name] = v.index_select(0, t_idx.to(v.device))
            elif isinstance(v, list) and len(v) == n:
                out[f.name] = [v[i] for i in idx]
            elif isinstance(v, dict):
                out[f.name] = dict(v)
            else:
                out[f.name] = v
        return RolloutBatch(**out)

    @property
    def loss_mask(self) -> torch.Tensor:
        """[B, T] bool: the tokens the GRPO loss and KL are computed on (``choice_mask``, or
        ``completion_mask`` when the batch has no choice mask)."""
        return self.completion_mask if self.choice_mask is None else self.choice_mask

    def token_logprobs(self, i: int, digits: int = 6) -> list[float]:
        """Row ``i``'s sampling log-probabilities of its completion tokens, in order (``old_logprobs`` where
        ``completion_mask``; 0 for a token a grammar forces), rounded to ``digits`` decimals."""
        return [round(float(x), digits) for x in self.old_logprobs[i][self.completion_mask[i].bool()].tolist()]

    def completion_lengths(self) -> torch.Tensor:
        """[B] int64: number of completion tokens of each row (``completion_mask.sum(1)``)."""
        return self.completion_mask.sum(dim=1)

"""What the policy returns (seed; the models package owns and extends it)."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class RolloutBatch:
    """A batch of sampled trajectories, ready for the GRPO loss.

    Shapes: B = number of trajectories, T = longest prompt+completion (left-padded prompts).

    Attributes:
        input_ids: [B, T] int64, prompt followed by completion tokens.
        attention_mask: [B, T] int64, 1 for real tokens.
        completion_mask: [B, T] bool, True on completion tokens that count in the loss
            (prompt and padding are False).
        old_logprobs: [B, T] float32, log-probabilities of each token under the sampling policy
            (0 where ``completion_mask`` is False).
        prompts: B prompt strings; completions: B completion strings (decoded).
        task_ids: B task ids; group_ids: B group indices (one group = one task's G samples).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    completion_mask: torch.Tensor
    old_logprobs: torch.Tensor
    prompts: list[str]
    completions: list[str]
    task_ids: list[str]
    group_ids: list[int]

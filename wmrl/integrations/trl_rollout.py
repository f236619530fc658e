"""wmrl's constrained decoder as TRL's generation (``GRPOTrainer(rollout_func=...)``, trl 1.16.0).

TRL samples free text (transformers ``generate``; vLLM on a GPU). A grammar scaffold (``grammar``,
``grammar-fail``, ``grammar-fine``, ``grammar-dense``) turns a completion into a program only when the completion
is a sentence of its grammar, which free text almost never is (docs/integrations.md: 0 of 32 free samples of the
tiny backbone on the two small tasks), so every anchor is a runtime error and every reward 0. transformers'
``GenerationConfig`` refuses a ``logits_processor`` and TRL's ``generate`` call passes nothing else, so a logits
processor cannot reach TRL's own sampling; TRL's ``rollout_func`` replaces the sampling itself and is the hook
used here.

:class:`GrammarRollout` samples with :func:`wmrl.models.decoding.sample_shared` (wmrl's own decoder: each
prompt prefilled once, the grammar's masks, forced runs appended in one pass) on the trainer's model, so every
completion is a sentence of its task's grammar. It returns TRL's ``prompt_ids`` / ``completion_ids`` /
``logprobs`` (the sampling log-probs: the grammar-masked, temperature-scaled distribution) and ``env_mask``,
TRL's per-token loss mask, set to the grammar's real choices (more than one token allowed): the tokens the
grammar forces carry no gradient, as in wmrl's own trainer (``choice_mask``). TRL's loss recomputes each
choice token's log-prob from the unmasked softmax (wmrl's trainer uses the grammar-masked one); both are the
log-probability of the same sampled token, and the ratio is 1 on the first update of a batch either way.
"""
from __future__ import annotations

from typing import Any
from collections.abc import Sequence

import torch

#: TRL sampling settings :func:`wmrl.models.decoding.sample_shared` implements (temperature, top_p); the
#: others must stay at their neutral values.
_NEUTRAL = {"top_k": (0, None), "min_p": (None, 0, 0.0), "repetition_penalty": (1.0, None)}


def is_constrained(scaffold: Any, tasks: Sequence[Any]) -> bool:
    """True when ``scaffold`` decodes ``tasks`` under a grammar (``grammar_key(task)`` is not None)."""
    key = getattr(scaffold, "grammar_key", None)
    return key is not None and any(key(t) is not None for t in tasks)


class GrammarRollout:
    """TRL ``rollout_func``: one grammar-constrained completion per prompt, sampled by wmrl's decoder.

    Args:
        tasks: the tasks the dataset's prompts belong to (``Task`` objects); a prompt is matched to its task by
            ``scaffold.prompt(task)``, the text :func:`wmrl.integrations.trl.trl_dataset` writes.
        scaffold: a grammar scaffold (``grammar_key`` / ``grammar_sentences``).

    Called by TRL as ``rollout(prompts, trainer)`` with this process's prompts (each repeated
    ``num_generations`` times by TRL's sampler); samples with the trainer's model, ``temperature``,
    ``top_p`` and ``max_completion_length``, from torch's global RNG (TRL seeds it with ``args.seed``).

    Returns (per call):
        ``{"prompt_ids": [[int]], "completion_ids": [[int]], "logprobs": [[float]], "env_mask": [[int]]}``,
        one row per prompt; ``env_mask`` is 1 on the grammar's choices, 0 on forced tokens.

    Raises:
        ValueError: a prompt that is no task's scaffold prompt, a ``max_completion_length`` shorter than the
            grammar's longest sentence, or sampling settings the decoder does not implement (:meth:`check`).
    """

    def __init__(self, tasks: Sequence[Any], scaffold: Any) -> None:
        if not is_constrained(scaffold, tasks):
            raise ValueError(f"scaffold {getattr(scaffold, 'name', scaffold)!r} has no grammar for these tasks: "
                             "TRL's own sampling serves a free-text scaffold (function, script)")
        self.scaffold = scaffold
        self.tasks = list(tasks)
        self.by_prompt = {scaffold.prompt(t): t for t in self.tasks}
        self._cache: Any = None

    def _grammars(self, tokenizer: Any, eos_id: int) -> Any:
        from wmrl.models.policy import GrammarCache  # noqa: PLC0415 - heavy (torch, transformers)

        if self._cache is None or self._cache.tokenizer is not tokenizer:
            self._cache = GrammarCache(tokenizer, eos_id)
        return self._cache

    @staticmethod
    def _eos_id(trainer: Any) -> int:
        eos = getattr(trainer, "eos_token_ids", None) or [trainer.processing_class.eos_token_id]
        return int(eos[0])

    def check(self, trainer: Any) -> None:
        """Refuse, in one line, TRL settings this rollout cannot honour (called by ``WMRLGRPOTrainer``).

        Raises:
            ValueError: ``use_vllm`` (the decoder runs on the trainer's model), a sampling setting other than
                temperature / top_p at a non-neutral value, or ``max_completion_length`` below the longest
                sentence of the grammar in tokens (EOS included).
        """
        a = trainer.args
        if getattr(a, "use_vllm", False):
            raise ValueError("use_vllm=True with a grammar scaffold: wmrl's constrained decoder samples on the "
                             "trainer's model; set use_vllm=False or use a free-text scaffold (function)")
        for name, neutral in _NEUTRAL.items():
            if getattr(a, name, neutral[0]) not in neutral:
                raise ValueError(f"{name}={getattr(a, name)!r}: wmrl's constrained decoder implements temperature "
                                 f"and top_p only; leave {name} at {neutral[0]!r}")
        tok = trainer.processing_class
        cache = self._grammars(tok, self._eos_id(trainer))
        keys = {k for t in self.tasks if (k := self.scaffold.grammar_key(t)) is not None}
        longest = max(cache.get(self.scaffold, k).max_length for k in keys)
        if int(a.max_completion_length) < longest:
            raise ValueError(f"max_completion_length={a.max_completion_length} is shorter than the longest sentence "
                             f"of the {self.scaffold.name!r} grammar ({longest} tokens with EOS): set it to at least "
                             f"{longest}")

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        from wmrl.models import decoding  # noqa: PLC0415 - heavy (torch)

        texts = [p if isinstance(p, str) else None for p in prompts]
        if any(t is None or t not in self.by_prompt for t in texts):
            bad = next(p for p, t in zip(prompts, texts) if t is None or t not in self.by_prompt)
            raise ValueError(f"prompt {str(bad)[:60]!r}... is no task's scaffold prompt: build the dataset with "
                             "wmrl.integrations.trl.trl_dataset(tasks, scaffold)")
        tok = trainer.processing_class
        eos = list(getattr(trainer, "eos_token_ids", None) or [tok.eos_token_id])
        rows = [self.by_prompt[t] for t in texts]
        tables, roots = self._grammars(tok, int(eos[0])).tables(self.scaffold,
                                                                [self.scaffold.grammar_key(t) for t in rows])
        prompt_ids, _, _ = trainer._tokenize_prompts(list(prompts))  # TRL's own tokenization of these prompts
        distinct: dict[tuple[int, ...], int] = {}
        row_prompt = [distinct.setdefault(tuple(p), len(distinct)) for p in prompt_ids]
        model = trainer.accelerator.unwrap_model(trainer.model)
        was_training = model.training
        model.eval()
        try:
            d = decoding.sample_shared(
                model, [list(p) for p in distinct], row_prompt, roots, tables,
                max_new_tokens=int(trainer.args.max_completion_length), temperature=float(trainer.temperature),
                top_p=float(trainer.top_p if trainer.top_p is not None else 1.0), eos_ids=eos,
                pad_id=int(tok.pad_token_id))
        finally:
            model.train(was_training)
        n = [max(int(x), 1) for x in d.lengths]
        return {"prompt_ids": [list(p) for p in prompt_ids],
                "completion_ids": [d.tokens[i, :k].tolist() for i, k in enumerate(n)],
                "logprobs": [d.logprobs[i, :k].tolist() for i, k in enumerate(n)],
                "env_mask": [d.choices[i, :k].to(torch.int64).tolist() for i, k in enumerate(n)]}

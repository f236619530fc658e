"""The policy: a causal LM with a LoRA adapter that samples solution programs and scores tokens.

* Sampling (:meth:`Policy.sample`): one group of ``group_size`` trajectories per task, batched
  ``generate`` with temperature / top-p and a max-new-tokens budget; grammar scaffolds are decoded
  in the canonical tokenization of their sentences (a :class:`~wmrl.models.choice_trie.ChoiceTrie`
  applied by :class:`SamplingLogitsProcessor`), other scaffolds stop at their own stop point (end of
  the function, closing code fence) or EOS.
* Log-probabilities (:meth:`Policy.logprobs`, :meth:`Policy.ref_logprobs`): per-token
  ``log pi(y_t | x, y_<t)`` of the sampled completion tokens, under the temperature-scaled,
  grammar-masked distribution that was sampled from; prompt and padding positions are 0 and
  excluded by ``completion_mask``. The grammar masks are rebuilt by replaying the trie over the
  sampled tokens and applied with ``masked_fill(-inf)`` before ``log_softmax``. Forced tokens (one
  allowed token) have log-prob 0 and are left out of ``choice_mask``, the loss mask.
* Reference policy for the KL term: the same model with its adapters disabled (peft's
  ``disable_adapter``), so no second copy of the weights is held. With full fine-tuning
  (``lora=None``) a frozen copy of the initial weights is kept instead.

Top-p: the sampled distribution is truncated to the top-p nucleus, but the stored and recomputed
log-probs are those of the full temperature-scaled (grammar-masked) distribution, as in TRL's GRPO;
with ``top_p=1`` (default) both are exactly the sampling distribution.

Shared prompts: by default sampling prefills each group's prompt once and the log-probs
run each group's prompt once with gradients (:mod:`wmrl.models.decoding`); the per-row
implementations stay reachable (``sample(engine="generate")``, ``logprobs(mode="per_sample")``) as the
reference of the equality tests and the baseline of ``wmrl models bench``.

Why one long file (about 710 lines): sampling and the log-prob recomputation must apply exactly the
same masks and temperature, so they live together, with both engines and both scoring modes.
"""
from __future__ import annotations

import copy
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from wmrl.interfaces import Scaffold
from wmrl.models import adapters
from wmrl.models import decoding
from wmrl.models.choice_trie import DONE, ChoiceTrie, TrieMatcher, TrieTables, allowed_mask
from wmrl.models.scaffolds import get_scaffold
from wmrl.models.types import LoraSettings, RolloutBatch
from wmrl.tasks.spec import Task

DEFAULT_SYSTEM_PROMPT = "You are an expert data scientist who writes correct scikit-learn code."
_LORA_DEFAULT = LoraSettings()


class GrammarCache:
    """Builds the canonical-tokenization trie of each scaffold grammar once per (scaffold, key)."""

    def __init__(self, tokenizer: Any, stop_token_id: int):
        self.tokenizer = tokenizer
        self.stop_token_id = int(stop_token_id)
        self._tries: dict[tuple[str, str], ChoiceTrie] = {}
        self._tables: dict[tuple[str, tuple[str, ...]], TrieTables] = {}

    def get(self, scaffold: Scaffold, key: str) -> ChoiceTrie:
        """The :class:`ChoiceTrie` of ``scaffold.grammar_sentences(key)`` (cached)."""
        ck = (scaffold.name, key)
        if ck not in self._tries:
            self._tries[ck] = ChoiceTrie.from_sentences(self.tokenizer, scaffold.grammar_sentences(key),
                                                        self.stop_token_id)
        return self._tries[ck]

    def tables(self, scaffold: Scaffold, keys: Sequence[str | None]) -> tuple[TrieTables | None, torch.Tensor]:
        """The :class:`TrieTables` of the distinct grammar ``keys`` (None = unconstrained row) and
        [B] int64 each row's root node in them (-3 for unconstrained rows); cached per key set."""
        distinct = sorted({k for k in keys if k is not None})
        if not distinct:
            return None, torch.full((len(keys),), -3, dtype=torch.long)
        ck = (scaffold.name, tuple(distinct))
        if ck not in self._tables:
            self._tables[ck] = TrieTables.build([self.get(scaffold, k) for k in distinct])
        tab = self._tables[ck]
        roots = [int(tab.roots[distinct.index(k)]) if k is not None else -3 for k in keys]
        return tab, torch.tensor(roots, dtype=torch.long)


class SamplingLogitsProcessor:
    """A transformers logits processor that applies grammar masks and records sampling log-probs.

    One :class:`TrieMatcher` per row (None = unconstrained row). At each step it masks disallowed
    tokens with ``masked_fill(-inf)`` (never in place, so the caller's logits stay intact) and keeps
    ``log_softmax(masked_logits / temperature)`` of that step and the number of allowed tokens; at the
    next step it reads the token that was sampled (``input_ids[:, -1]``) and stores its log-prob and
    whether it was a real choice (more than one allowed token). Memory is O(B x V), not
    O(steps x B x V) as with ``generate(output_logits=True)``. Custom processors run before
    transformers' temperature / top-p warpers, so ``scores`` are the raw logits here. Call
    :meth:`finish` with the final sequences after ``generate`` for the last step's values.
    Use one instance per ``generate`` call.
    """

    def __init__(self, tries: Sequence[ChoiceTrie | None], temperature: float):
        self.matchers = [t.matcher() if t is not None else None for t in tries]
        self.constrained = any(m is not None for m in self.matchers)
        self.temperature = temperature
        self.token_logprobs: list[torch.Tensor] = []  # per step, [B] float32 (CPU)
        self.token_choices: list[torch.Tensor] = []  # per step, [B] bool: more than one token allowed
        self._prev: torch.Tensor | None = None  # [B, V] log-probs of the last step
        self._prev_choice: torch.Tensor | None = None  # [B] bool
        self.mask_seconds = 0.0  # wall seconds in the matchers, mask building and masked_fill

    def _record(self, tokens: torch.Tensor) -> None:
        assert self._prev is not None and self._prev_choice is not None
        self.token_logprobs.append(self._prev.gather(1,
                                                     tokens.view(-1, 1).to(self._prev.device)).squeeze(1).float().cpu())
        self.token_choices.append(self._prev_choice)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if input_ids.shape[0] != len(self.matchers):
            raise RuntimeError(f"batch of {input_ids.shape[0]} rows for {len(self.matchers)} matchers")
        t0 = time.perf_counter()
        if self._prev is not None:
            last = input_ids[:, -1]
            self._record(last)
            for i, m in enumerate(self.matchers):
                if m is not None and not m.is_terminated():
                    tok = int(last[i])
                    if not m.accept_token(tok):
                        raise RuntimeError(f"grammar matcher rejected sampled token {tok} in row {i}")
        out = scores
        n_allowed = torch.full((scores.shape[0],), scores.shape[1], dtype=torch.long)
        if self.constrained:
            allowed, n_allowed = allowed_mask(self.matchers, scores.shape[1])
            out = scores.masked_fill(~allowed.to(scores.device), float("-inf"))
        self.mask_seconds += time.perf_counter() - t0
        self._prev = torch.log_softmax(out.float() / self.temperature, dim=-1)
        self._prev_choice = n_allowed > 1
        return out

    def finish(self, new_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs and choice flags of the ``L`` generated tokens ``new_tokens`` ([B, L] int64):
        ([B, L] float32, [B, L] bool)."""
        L = new_tokens.shape[1]
        if len(self.token_logprobs) == L - 1 and self._prev is not None:
            self._record(new_tokens[:, -1])
        if len(self.token_logprobs) != L:
            raise RuntimeError(f"recorded {len(self.token_logprobs)} steps for {L} generated tokens")
        if not L:
            return torch.zeros(new_tokens.shape), torch.zeros(new_tokens.shape, dtype=torch.bool)
        return torch.stack(self.token_logprobs, dim=1), torch.stack(self.token_choices, dim=1)


class _StopAtScaffoldEnd:
    """Stopping criterion: a row is done once ``scaffold.stop_at(decoded completion)`` is not None."""

    def __init__(self, tokenizer: Any, prompt_len: int, stop_at: Any):
        self.tokenizer = tokenizer
        self.prompt_len = prompt_len
        self.stop_at = stop_at
        self.stop_len: dict[int, int] = {}

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        gen = input_ids[:, self.prompt_len:]
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        for i in range(input_ids.shape[0]):
            if i in self.stop_len:
                done[i] = True
                continue
            text = self.tokenizer.decode(gen[i], skip_special_tokens=True)
            if self.stop_at(text) is not None:
                self.stop_len[i] = gen.shape[1]
                done[i] = True
        return done


class Policy:
    """A causal-LM policy with a LoRA adapter (or full fine-tuning) for GRPO.

    Args:
        model: a transformers causal LM (e.g. from :func:`wmrl.models.backbone.load_backbone`),
            or a ``PeftModel`` wrapping one.
        tokenizer: its tokenizer (pad token set, left padding; see ``load_backbone``).
        lora: adapter settings; ``None`` = full fine-tuning (all weights trainable; the reference
            policy is then a frozen deep copy of the initial model).
        adapter_name: name of this policy's adapter on the shared peft model.
        max_batch_size: rows per ``generate`` call (larger batches are split), and default
            micro-batch size of :meth:`logprobs` / :meth:`ref_logprobs`.
        system_prompt: the chat system message; None = the tokenizer's default.

    The model stays in eval mode (no dropout) so that recomputed log-probs equal sampling ones.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        lora: LoraSettings | None = _LORA_DEFAULT,
        *,
        adapter_name: str = "policy",
        max_batch_size: int = 32,
        system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
    ):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.tokenizer = tokenizer
        self.lora = lora
        self.adapter_name = adapter_name
        self.max_batch_size = max_batch_size
        self.system_prompt = system_prompt
        #: the default ``engine`` of :meth:`sample` (``rollout.engine`` of the config)
        self.sampling_engine = "shared"
        if tokenizer.pad_token_id is None:
            raise ValueError("the tokenizer has no pad token: load it with wmrl.models.backbone.load_backbone")
        self.eos_token_ids = self._eos_ids(model, tokenizer)
        if lora is None:
            self.model = model
            self.peft_model = None
            for p in model.parameters():
                p.requires_grad_(True)
            self._reference = copy.deepcopy(model).eval()
            for p in self._reference.parameters():
                p.requires_grad_(False)
        else:
            self.peft_model = adapters.attach_lora(model, adapter_name, lora)
            self.model = self.peft_model
            self._reference = None
        self.model.eval()
        self.vocab_size = int(self._base().config.vocab_size)
        self._grammars: GrammarCache | None = None

    # ---------------------------------------------------------------- helpers
    @staticmethod
    def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
        ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        ids = [ids] if isinstance(ids, int) else list(ids or [])
        if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
            ids.insert(0, tokenizer.eos_token_id)
        if not ids:
            raise ValueError("neither the model nor the tokenizer defines an EOS token")
        return ids

    def _base(self) -> Any:
        return self.peft_model.get_base_model() if self.peft_model is not None else self.model

    @property
    def device(self) -> torch.device:
        """Device of the model's weights."""
        return next(self._base().parameters()).device

    def _activate(self) -> None:
        if self.peft_model is not None:
            adapters.activate(self.peft_model, self.adapter_name)

    def _grammar_cache(self) -> GrammarCache:
        if self._grammars is None:
            self._grammars = GrammarCache(self.tokenizer, self.eos_token_ids[0])
        return self._grammars

    def min_new_tokens(self, scaffold: Scaffold, tasks: Sequence[Task]) -> int:
        """The smallest ``max_new_tokens`` that lets every sentence of ``scaffold``'s grammar finish on
        ``tasks``: the longest sentence's canonical token count plus EOS (0 for an unconstrained scaffold)."""
        keys = {k for t in tasks if (k := scaffold.grammar_key(t)) is not None}
        cache = self._grammar_cache()
        return max((cache.get(scaffold, k).max_length for k in keys), default=0)

    def check_max_new_tokens(self, scaffold: Scaffold, tasks: Sequence[Task], max_new_tokens: int) -> None:
        """Refuse a token budget in which some sentence of ``scaffold``'s grammar cannot finish on ``tasks``.

        Raises:
            ValueError: ``max_new_tokens`` is below :meth:`min_new_tokens` (the message gives the budget to use).
        """
        longest = self.min_new_tokens(scaffold, tasks)
        if max_new_tokens < longest:
            raise ValueError(f"max_new_tokens={max_new_tokens} is shorter than the longest sentence of the "
                             f"{scaffold.name!r} grammar ({longest} tokens with EOS): raise it to at least {longest}")

    def chat_text(self, prompt: str, response_prefix: str = "") -> str:
        """The model input text: chat template (if the tokenizer has one) + ``response_prefix``."""
        if getattr(self.tokenizer, "chat_template", None):
            msgs = ([{"role": "system", "content": self.system_prompt}] if self.system_prompt else []) + [
                {"role": "user", "content": prompt}
            ]
            text = self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        else:
            text = prompt + "\n"
        return text + response_prefix

    # ---------------------------------------------------------------- sampling
    @torch.no_grad()
    def sample(
        self,
        tasks: Sequence[Task],
        scaffold: Scaffold | str,
        group_size: int,
        max_new_tokens: int | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        generator_seed: int | None = None,
        prompts: Sequence[str] | None = None,
        engine: str | None = None,
    ) -> RolloutBatch:
        """Sample ``group_size`` trajectories for each task (one group per task).

        Args:
            tasks: M tasks; rows are ordered task by task, ``group_ids`` = task index 0..M-1.
            scaffold: a :class:`wmrl.interfaces.Scaffold` (or its name): every attribute of the protocol is read.
            group_size: G >= 1 trajectories per task.
            max_new_tokens: completion budget in tokens; default ``scaffold.default_max_new_tokens``.
            temperature: > 0 samples from softmax(logits / temperature); 0 = greedy decoding.
            top_p: nucleus sampling threshold in (0, 1].
            generator_seed: seeds torch's RNG for this call (the global RNG is restored after).
            prompts: M prompt texts, one per task, instead of ``scaffold.prompt(task)`` (a later turn of a
                multi-turn episode: the task and its history, :func:`wmrl.episodes.prompt.episode_prompt`); the
                task still chooses the grammar and renders the program.
            engine: None: :attr:`sampling_engine` (``"shared"`` unless set). ``"shared"``:
                :func:`wmrl.models.decoding.sample_shared`, each group's
                prompt prefilled once, batched grammar masks, forced runs appended in one pass;
                ``"generate"``: transformers' ``generate`` with a per-row logits processor (every row
                prefills its own prompt; the measured baseline of ``wmrl models bench``). Both sample the same
                distribution, not the same draws.
            prompts: M prompt texts, one per task, instead of ``scaffold.prompt(task)`` (a later turn of a
                multi-turn episode: the task and its history, :func:`wmrl.episodes.prompt.episode_prompt`); the
                task still chooses the grammar and renders the program.

        Returns:
            A :class:`RolloutBatch` with B = M*G rows, ``old_logprobs`` filled from the
            generation-time logits, ``programs`` rendered by the scaffold, ``valid`` from
            ``scaffold.is_valid`` (or the grammar matcher) and ``stats`` with ``gen_seconds`` and
            ``new_tokens``.

        Raises:
            ValueError: no tasks, ``group_size < 1``, ``temperature < 0``, ``top_p`` outside (0, 1],
                an unknown ``engine``, or ``prompts`` of another length than ``tasks``.
        """
        if isinstance(scaffold, str):
            scaffold = get_scaffold(scaffold)
        if not tasks:
            raise ValueError("sample() needs at least one task")
        if prompts is not None and len(prompts) != len(tasks):
            raise ValueError(f"sample() got {len(prompts)} prompts for {len(tasks)} tasks; give one prompt per task")
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        if max_new_tokens is None:
            max_new_tokens = int(scaffold.default_max_new_tokens)
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        engine = self.sampling_engine if engine is None else engine
        if engine not in ("shared", "generate"):
            raise ValueError(f"engine must be 'shared' or 'generate', got {engine!r}")
        gen_chunk = self._generate_chunk_shared if engine == "shared" else self._generate_chunk

        self._activate()
        prefix = scaffold.response_prefix
        rows: list[tuple[Task, int, str, str, str | None]] = []
        for gi, task in enumerate(tasks):
            prompt = scaffold.prompt(task) if prompts is None else prompts[gi]
            text = self.chat_text(prompt, prefix)
            key = scaffold.grammar_key(task)
            rows.extend((task, gi, prompt, text, key) for _ in range(group_size))

        t0 = time.perf_counter()
        prompt_ids: list[list[int]] = []
        comp_ids: list[list[int]] = []
        comp_lps: list[list[float]] = []
        comp_choice: list[list[bool]] = []
        grammar_done: list[bool | None] = []
        dstats: dict[str, float] = {}
        with torch.random.fork_rng(devices=[]):
            if generator_seed is not None:
                torch.manual_seed(generator_seed)
            for start in range(0, len(rows), self.max_batch_size):
                chunk = rows[start:start + self.max_batch_size]
                p, c, lp, ch, gd, cs = gen_chunk(chunk, scaffold, max_new_tokens, temperature, top_p)
                for k, v in cs.items():
                    dstats[k] = dstats.get(k, 0) + v
                prompt_ids += p
                comp_ids += c
                comp_lps += lp
                comp_choice += ch
                grammar_done += gd
        gen_seconds = time.perf_counter() - t0

        batch = self._assemble(prompt_ids, comp_ids, comp_lps, comp_choice)
        completions = []
        for ids in comp_ids:
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            cut = scaffold.stop_at(text)
            completions.append(text if cut is None else text[:cut])
        programs = [scaffold.render(r[0], comp) for r, comp in zip(rows, completions)]
        valid: list[bool] | None
        if any(g is not None for g in grammar_done):
            valid = [bool(g) for g in grammar_done]
        else:
            valid = [bool(scaffold.is_valid(r[0], comp)) for r, comp in zip(rows, completions)]
        input_ids, attention_mask, completion_mask, choice_mask, old_lp, prompt_len = batch
        return RolloutBatch(
            input_ids=input_ids,
            attention_mask=attention_mask,
            completion_mask=completion_mask,
            choice_mask=choice_mask,
            old_logprobs=old_lp,
            prompts=[r[2] for r in rows],
            completions=completions,
            task_ids=[r[0].id for r in rows],
            group_ids=[r[1] for r in rows],
            programs=programs,
            valid=valid,
            scaffold=scaffold.name,
            prompt_len=prompt_len,
            temperature=float(temperature) if temperature > 0 else 1.0,
            grammar_keys=[r[4] for r in rows],
            stats={"gen_seconds": gen_seconds, "new_tokens": int(completion_mask.sum()),
                   "choice_tokens": int(choice_mask.sum()), "engine": engine, **dstats},
        )

    def _generate_chunk(
        self, chunk: list, scaffold: Scaffold, max_new_tokens: int, temperature: float, top_p: float
    ) -> tuple[list[list[int]], list[list[int]], list[list[float]], list[list[bool]], list[bool | None], dict]:
        from transformers import LogitsProcessorList, StoppingCriteriaList  # noqa: PLC0415 - heavy (transformers)

        enc = self.tokenizer([r[3] for r in chunk], return_tensors="pt", padding=True, add_special_tokens=False)
        input_ids = enc["input_ids"].to(self.device)
        attn = enc["attention_mask"].to(self.device)
        P = input_ids.shape[1]
        keys = [r[4] for r in chunk]
        tries: list[ChoiceTrie | None] = [None] * len(chunk)
        if any(k is not None for k in keys):
            cache = self._grammar_cache()
            tries = [cache.get(scaffold, k) if k is not None else None for k in keys]
            self.check_max_new_tokens(scaffold, [r[0] for r in chunk], max_new_tokens)
        temp = temperature if temperature > 0 else 1.0
        proc = SamplingLogitsProcessor(tries, temp)
        gproc = proc if proc.constrained else None
        stopping = StoppingCriteriaList()
        stopper = None
        if gproc is None:
            stopper = _StopAtScaffoldEnd(self.tokenizer, P, scaffold.stop_at)
            stopping.append(stopper)
        gen_kwargs: dict[str, Any] = dict(
            max_new_tokens=max_new_tokens,
            logits_processor=LogitsProcessorList([proc]),
            stopping_criteria=stopping,
            return_dict_in_generate=True,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=self.eos_token_ids,
        )
        if temperature > 0:
            gen_kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
        else:
            gen_kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        out = self.model.generate(input_ids=input_ids, attention_mask=attn, **gen_kwargs)
        seq = out.sequences[:, P:].cpu()
        L = seq.shape[1]
        # log-probs of the sampled tokens under softmax(mask(raw logits) / T), recorded step by step
        lps, choices = proc.finish(seq)
        prompts: list[list[int]] = []
        comps: list[list[int]] = []
        comp_lps: list[list[float]] = []
        comp_choice: list[list[bool]] = []
        gdone: list[bool | None] = []
        eos = torch.tensor(self.eos_token_ids)
        for i in range(seq.shape[0]):
            is_eos = torch.isin(seq[i], eos).nonzero()
            n = int(is_eos[0]) + 1 if len(is_eos) else L
            if stopper is not None and i in stopper.stop_len:
                n = min(n, stopper.stop_len[i])
            n = max(n, 1)
            prompts.append(input_ids[i][attn[i].bool()].cpu().tolist())
            comps.append(seq[i, :n].tolist())
            comp_lps.append(lps[i, :n].tolist())
            comp_choice.append(choices[i, :n].tolist())
            m = gproc.matchers[i] if gproc is not None else None
            if m is not None:
                gdone.append(bool(m.is_terminated()) or self._completes(m, seq[i, n - 1]))
            else:
                gdone.append(None)
        return prompts, comps, comp_lps, comp_choice, gdone, {"mask_seconds": proc.mask_seconds,
                                                              "prefill_tokens": int(attn.sum()), "steps": L}

    def _generate_chunk_shared(
        self, chunk: list, scaffold: Scaffold, max_new_tokens: int, temperature: float, top_p: float
    ) -> tuple[list[list[int]], list[list[int]], list[list[float]], list[list[bool]], list[bool | None], dict]:
        """One chunk of rows with :func:`wmrl.models.decoding.sample_shared` (each group's prompt once)."""
        keys = [r[4] for r in chunk]
        tables, roots = None, torch.full((len(chunk),), -3, dtype=torch.long)
        if any(k is not None for k in keys):
            self.check_max_new_tokens(scaffold, [r[0] for r in chunk], max_new_tokens)
            tables, roots = self._grammar_cache().tables(scaffold, keys)
        group_of: dict[int, int] = {}
        texts: list[str] = []
        row_prompt = []
        for r in chunk:
            if r[1] not in group_of:
                group_of[r[1]] = len(texts)
                texts.append(r[3])
            row_prompt.append(group_of[r[1]])
        p_ids = [list(x) for x in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]
        def stop_check(ids: list[int]) -> bool:
            return scaffold.stop_at(self.tokenizer.decode(ids, skip_special_tokens=True)) is not None
        d = decoding.sample_shared(
            self.model, p_ids, row_prompt, roots, tables, max_new_tokens=max_new_tokens, temperature=temperature,
            top_p=top_p, eos_ids=self.eos_token_ids, pad_id=self.tokenizer.pad_token_id, stop_check=stop_check)
        prompts, comps, lps, chs, gdone = [], [], [], [], []
        for i in range(len(chunk)):
            n = max(int(d.lengths[i]), 1)
            prompts.append(p_ids[row_prompt[i]])
            comps.append(d.tokens[i, :n].tolist())
            lps.append(d.logprobs[i, :n].tolist())
            chs.append(d.choices[i, :n].tolist())
            gdone.append(bool(d.complete[i]) if keys[i] is not None else None)
        return prompts, comps, lps, chs, gdone, d.stats

    @staticmethod
    def _completes(matcher: TrieMatcher, last_token: torch.Tensor) -> bool:
        # The matcher has not seen the last sampled token (generate stops before calling processors again).
        return bool(matcher.accept_token(int(last_token))) and bool(matcher.is_terminated())

    def _assemble(
        self, prompt_ids: list[list[int]], comp_ids: list[list[int]], comp_lps: list[list[float]],
        comp_choice: list[list[bool]],
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int]:
        """Left-pad prompts and right-pad completions into one [B, P+Tc] layout."""
        B = len(prompt_ids)
        P = max(len(p) for p in prompt_ids)
        Tc = max(len(c) for c in comp_ids)
        pad = self.tokenizer.pad_token_id
        ids = torch.full((B, P + Tc), pad, dtype=torch.long)
        am = torch.zeros((B, P + Tc), dtype=torch.long)
        cm = torch.zeros((B, P + Tc), dtype=torch.bool)
        ch = torch.zeros((B, P + Tc), dtype=torch.bool)
        lp = torch.zeros((B, P + Tc), dtype=torch.float32)
        for i, (p, c, c_lp, k) in enumerate(zip(prompt_ids, comp_ids, comp_lps, comp_choice)):
            ids[i, P - len(p):P] = torch.tensor(p, dtype=torch.long)
            am[i, P - len(p):P + len(c)] = 1
            ids[i, P:P + len(c)] = torch.tensor(c, dtype=torch.long)
            cm[i, P:P + len(c)] = True
            ch[i, P:P + len(c)] = torch.tensor(k, dtype=torch.bool)
            lp[i, P:P + len(c)] = torch.tensor(c_lp, dtype=torch.float32)
        return ids, am, cm, ch, lp, P

    # ---------------------------------------------------------------- log-probs
    def _grammar_masks(self, batch: RolloutBatch) -> torch.Tensor | None:
        """[B, Tc, V] bool allowed-token masks rebuilt by replaying each row's grammar trie."""
        keys = batch.grammar_keys or [None] * len(batch)
        if all(k is None for k in keys):
            return None

        scaffold = get_scaffold(batch.scaffold)
        cache = self._grammar_cache()
        P = batch.prompt_len
        Tc = batch.input_ids.shape[1] - P
        masks = torch.ones((len(batch), Tc, self.vocab_size), dtype=torch.bool)
        ids = batch.input_ids[:, P:].cpu()
        cm = batch.completion_mask[:, P:].cpu()
        for i, k in enumerate(keys):
            if k is None:
                continue
            m = cache.get(scaffold, k).matcher()
            for t in range(Tc):
                if not bool(cm[i, t]) or m.is_terminated():
                    break
                masks[i, t] = False
                masks[i, t, m.allowed()] = True
                if not m.accept_token(int(ids[i, t])):
                    raise ValueError(
                        f"row {i}: token {int(ids[i, t])} at completion position {t} is not allowed by "
                        f"grammar {k!r}; was this batch sampled with scaffold {batch.scaffold!r}?"
                    )
        return masks

    def _grammar_nodes(self, batch: RolloutBatch) -> tuple[torch.Tensor | None, TrieTables | None]:
        """[B, Tc] int64 grammar node before each completion token (-3: unconstrained row), replayed
        over the columns with :meth:`TrieTables.replay`, and the tables; (None, None) without grammar.

        Raises:
            ValueError: a completion token the row's grammar does not allow.
        """
        keys = batch.grammar_keys or [None] * len(batch)
        if all(k is None for k in keys):
            return None, None

        tables, roots = self._grammar_cache().tables(get_scaffold(batch.scaffold), keys)
        assert tables is not None  # some row has a grammar (checked above)
        P = batch.prompt_len
        ids = batch.input_ids[:, P:].cpu()
        lens = batch.completion_mask[:, P:].cpu().sum(1)
        nodes = tables.replay(roots, ids, lens)
        con = roots >= 0
        cols = torch.arange(ids.shape[1])[None, :]
        bad = con[:, None] & (cols < lens[:, None]) & (nodes < 0)
        bad |= con[:, None] & (cols == lens[:, None] - 1) & (nodes >= 0) & (
            tables.step(nodes.clamp(min=0), ids) == -2)  # the last token itself
        if bool(bad.any()):
            i, t = (int(x) for x in torch.nonzero(bad)[0])
            if nodes[i, t] == -2 or (t > 0 and nodes[i, t] == DONE):
                t = max(t - 1, 0)
            raise ValueError(
                f"row {i}: token {int(ids[i, t])} at completion position {t} is not allowed by "
                f"grammar {keys[i]!r}; was this batch sampled with scaffold {batch.scaffold!r}?")
        return nodes, tables

    def _token_logprobs_shared(self, model: Any, batch: RolloutBatch, share_prompts: bool = True) -> torch.Tensor:
        P, T = batch.prompt_len, batch.input_ids.shape[1]
        if not 0 < P < T:
            raise ValueError(f"batch has prompt_len={P} and {T} columns: not a batch from Policy.sample")
        nodes, tables = self._grammar_nodes(batch)
        return decoding.completion_logprobs(model, batch, nodes, tables, share_prompts=share_prompts)

    def _token_logprobs(self, model: Any, batch: RolloutBatch) -> torch.Tensor:
        P = batch.prompt_len
        T = batch.input_ids.shape[1]
        if not 0 < P < T:
            raise ValueError(f"batch has prompt_len={P} and {T} columns: not a batch from Policy.sample")
        dev = self.device
        ids = batch.input_ids.to(dev)
        am = batch.attention_mask.to(dev)
        cm = batch.completion_mask.to(dev)
        pos = (am.cumsum(-1) - 1).clamp(min=0)
        Tc = T - P
        out = model(input_ids=ids, attention_mask=am, position_ids=pos, logits_to_keep=Tc + 1, use_cache=False)
        logits = out.logits[:, :-1, :].float() / batch.temperature  # [B, Tc, V], predicts tokens P..T-1
        masks = self._grammar_masks(batch)
        if masks is not None:
            logits = logits.masked_fill(~masks.to(dev), float("-inf"))
        tok = ids[:, P:]
        lp = torch.log_softmax(logits, dim=-1).gather(-1, tok.unsqueeze(-1)).squeeze(-1)
        lp = lp.masked_fill(~cm[:, P:], 0.0)
        return torch.cat([torch.zeros((len(batch), P), dtype=lp.dtype, device=dev), lp], dim=1)

    def _micro(self, batch: RolloutBatch, fn: Any, micro_batch_size: int | None) -> torch.Tensor:
        mb = micro_batch_size or self.max_batch_size
        if len(batch) <= mb:
            return fn(batch)
        return torch.cat([fn(batch.slice(slice(s, s + mb))) for s in range(0, len(batch), mb)], dim=0)

    def _scorer(self, mode: str) -> Any:
        if mode == "shared":
            return self._token_logprobs_shared
        if mode == "separate":
            return lambda m, b: self._token_logprobs_shared(m, b, share_prompts=False)
        if mode == "per_sample":
            return self._token_logprobs
        raise ValueError(f"mode must be 'shared', 'separate' or 'per_sample', got {mode!r}")

    def logprobs(self, batch: RolloutBatch, micro_batch_size: int | None = None, *,
                 mode: str = "shared") -> torch.Tensor:
        """Per-token log-probs of the batch's completions under the current policy, with grad.

        Args:
            batch: from :meth:`sample` (or a :meth:`RolloutBatch.slice` of one).
            micro_batch_size: rows per forward pass (default ``max_batch_size``); the results are
                concatenated, so the graph of every micro-batch is kept until backward: for large
                batches call this per micro-batch and backward each loss instead.
            mode: ``"shared"`` (default): rows with the same group id and prompt (one GRPO group, or
                the part of it in a micro-batch) run their prompt once, with gradients, and their
                completions attend to its KV cache; the LM head runs only where more than one token
                was allowed (:func:`wmrl.models.decoding.completion_logprobs`). ``"separate"``: the
                same without prompt sharing. ``"per_sample"``: every row's whole sequence and the LM
                head at every completion position (tested equal in value and gradient to
                ``"shared"``; the baseline of ``wmrl models bench``).

        Returns:
            [B, T] float32 on the model's device: ``log softmax(mask(logits / temperature))`` of
            each completion token; 0 at prompt and padding positions (``~completion_mask``).

        Raises:
            ValueError: the batch was not produced by :meth:`sample` (bad layout or grammar tokens).
        """
        self._activate()
        fn = self._scorer(mode)
        return self._micro(batch, lambda b: fn(self.model, b), micro_batch_size)

    @torch.no_grad()
    def ref_logprobs(self, batch: RolloutBatch, micro_batch_size: int | None = None, *,
                     mode: str = "shared") -> torch.Tensor:
        """Per-token log-probs under the reference policy (adapters disabled), no grad.

        Same layout as :meth:`logprobs`. The reference is the base model itself (peft's
        ``disable_adapter``), or the frozen initial copy with full fine-tuning.
        """
        fn = self._scorer(mode)
        if self.peft_model is None:
            return self._micro(batch, lambda b: fn(self._reference, b), micro_batch_size)
        with self.peft_model.disable_adapter():
            return self._micro(batch, lambda b: fn(self.peft_model, b), micro_batch_size)

    # ---------------------------------------------------------------- parameters and checkpoints
    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """The parameters the optimiser updates: this policy's LoRA weights, or all weights."""
        if self.peft_model is None:
            return [p for p in self.model.parameters() if p.requires_grad]
        self._activate()
        return adapters.adapter_parameters(self.peft_model, self.adapter_name)

    def save(self, directory: str | Path) -> Path:
        """Write the adapter weights (LoRA) or the whole model (full fine-tuning) to ``directory``."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        if self.peft_model is not None:
            assert self.lora is not None  # an adapter is made from its settings
            adapters.save_adapter(self.peft_model, self.adapter_name, d, self.lora)
        else:
            self.model.save_pretrained(d / "model", safe_serialization=True)
            (d / "policy.json").write_text(json.dumps({"full_finetune": True}))
        return d

    def load(self, directory: str | Path) -> None:
        """Load weights written by :meth:`save` into this policy.

        Raises:
            FileNotFoundError: nothing saved there.
            ValueError: the saved adapter does not fit this model.
        """
        d = Path(directory)
        if self.peft_model is not None:
            adapters.load_adapter(self.peft_model, self.adapter_name, d)
            self._activate()
            return

        files = sorted((d / "model").glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"no model weights under {d / 'model'}: save the policy first")
        sd: dict[str, torch.Tensor] = {}
        for f in files:
            sd.update(load_file(str(f)))
        missing, unexpected = self.model.load_state_dict(sd, strict=False)
        bad = [k for k in missing if "lm_head" not in k]
        if bad or unexpected:
            raise ValueError(f"weights in {d} do not fit this model: missing {bad[:3]}, unexpected {unexpected[:3]}")

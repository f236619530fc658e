"""What every world model on the policy's backbone needs: its named LoRA adapter on the shared peft model, the
input text, tokenisation and truncation, the shared-prompt KV-cache pass, batch planning, settings and adapter
persistence (:class:`BackboneWorldModel`). :mod:`wmrl.world_model.regression` and
:mod:`wmrl.world_model.generative` build on it."""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from wmrl.models import adapters
from wmrl.models.types import LoraSettings


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
        from peft import PeftModel  # noqa: PLC0415 - heavy (peft)

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
            if (not c_ids or min(len(c) for c in c_ids) == 0
                    or len(p_ids) + max(len(c) for c in c_ids) > self.max_length):
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
            # the random backbone's initialisation seed (``tiny``), None for pretrained weights
            "base_seed": getattr(self._base.config, "wmrl_seed", None),
        }

    def _adapter_state(self) -> dict[str, torch.Tensor]:
        """This world model's LoRA tensors (CPU), or {} without an adapter."""
        if self.lora is None:
            return {}
        from peft import get_peft_model_state_dict  # noqa: PLC0415 - heavy (peft)

        return {k: v.detach().cpu() for k, v in get_peft_model_state_dict(self.peft_model,
                                                                          adapter_name=self.adapter_name).items()}

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

    def _load_into(self, directory: str | Path) -> BackboneWorldModel:  # pragma: no cover - abstract
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
                 max_length=cfg["max_length"], batch_size=cfg["batch_size"], **cls._saved_kwargs(cfg))
        return wm._load_into(d)

    @classmethod
    def _saved_kwargs(cls, cfg: dict[str, Any]) -> dict[str, Any]:
        """Constructor arguments of a subclass's own, read back from its saved ``world_model.json``."""
        return {}

    #: ``Cls.load(dir, model, tokenizer)`` builds a new world model from a folder;
    #: ``wm.load(dir)`` on an instance loads the saved weights into it (e.g. a checkpoint).
    load = _hybridmethod("_load_new", "_load_into")

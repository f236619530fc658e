"""Named LoRA adapters on one shared base model (peft), so policy and world model hold one backbone.

The policy and the world model each get their own named adapter (``"policy"``, ``"world_model"``)
on the *same* ``PeftModel`` wrapping the same base model object: one copy of the base weights in
memory. Before every forward pass the owner activates its adapter with :func:`activate`; peft then
routes the LoRA layers to that adapter and marks only its weights ``requires_grad``.
"""
from __future__ import annotations

import json
import weakref
from pathlib import Path
from typing import Any

from safetensors.torch import load_file, save_file

from wmrl.models.types import LoraSettings

# base model -> the PeftModel wrapping it (a weak map: no reference cycle, no nn.Module registration)
_WRAPPERS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _lora_config(settings: LoraSettings) -> Any:
    from peft import LoraConfig  # noqa: PLC0415 - heavy (peft)

    return LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=list(settings.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )


def attach_lora(model: Any, name: str, settings: LoraSettings) -> Any:
    """Add a LoRA adapter ``name`` to ``model`` and return the shared ``PeftModel``.

    Args:
        model: a ``transformers`` causal LM, or a ``PeftModel`` already wrapping one (from
            :func:`attach_lora` or loaded by the user).
        name: adapter name, unique per owner (e.g. ``"policy"``, ``"world_model"``).
        settings: rank, alpha, dropout and target modules.

    Returns:
        The ``PeftModel`` wrapping the base model; calling this again with the same base model and
        another name adds a second adapter to the same wrapper (no second copy of the weights).
        The base weights are frozen (``requires_grad=False``).

    Raises:
        ValueError: ``name`` already exists on this model (use another name, or load into it).
    """
    from peft import PeftModel, get_peft_model  # noqa: PLC0415 - heavy (peft)

    peft_model: PeftModel | None
    if isinstance(model, PeftModel):
        peft_model = model
    else:
        peft_model = _WRAPPERS.get(model)
    if peft_model is None:
        peft_model = get_peft_model(model, _lora_config(settings), adapter_name=name)
        _WRAPPERS[model] = peft_model
        _WRAPPERS[peft_model.get_base_model()] = peft_model
    else:
        if name in peft_model.peft_config:
            raise ValueError(
                f"the model already has an adapter named {name!r}; give each owner its own name"
            )
        peft_model.add_adapter(name, _lora_config(settings))
    activate(peft_model, name)
    return peft_model


def activate(peft_model: Any, name: str) -> None:
    """Make ``name`` the active adapter (only its LoRA weights get ``requires_grad=True``)."""
    if peft_model.active_adapter != name:
        peft_model.set_adapter(name)
    else:  # re-assert trainability: another owner may have toggled it through a shared layer
        peft_model.base_model.set_adapter(name)


def adapter_parameters(peft_model: Any, name: str) -> list[Any]:
    """The LoRA parameters of adapter ``name`` (``lora_A`` / ``lora_B`` weights), in module order."""
    key = f".{name}."
    return [p for n, p in peft_model.named_parameters() if "lora_" in n and key in n]


def save_adapter(peft_model: Any, name: str, directory: Path, settings: LoraSettings) -> None:
    """Write adapter ``name``'s weights (``adapter.safetensors``) and settings (``adapter.json``)."""
    from peft import get_peft_model_state_dict  # noqa: PLC0415 - heavy (peft)

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    sd = get_peft_model_state_dict(peft_model, adapter_name=name)
    save_file({k: v.detach().cpu().contiguous() for k, v in sd.items()}, str(directory / "adapter.safetensors"))
    meta = {
        "adapter_name": name,
        "lora": {
            "r": settings.r,
            "alpha": settings.alpha,
            "dropout": settings.dropout,
            "target_modules": list(settings.target_modules),
        },
        "base_model": getattr(peft_model.get_base_model().config, "_name_or_path", ""),
    }
    (directory / "adapter.json").write_text(json.dumps(meta, indent=2))


def load_adapter(peft_model: Any, name: str, directory: Path) -> None:
    """Load weights written by :func:`save_adapter` into the existing adapter ``name``.

    Raises:
        FileNotFoundError: ``adapter.safetensors`` is missing.
        ValueError: the stored tensors do not fit the adapter (another rank or base model).
    """
    from peft import set_peft_model_state_dict  # noqa: PLC0415 - heavy (peft)

    p = Path(directory) / "adapter.safetensors"
    if not p.is_file():
        raise FileNotFoundError(f"{p} is missing: save the adapter first")
    sd = load_file(str(p))
    try:
        res = set_peft_model_state_dict(peft_model, sd, adapter_name=name)
    except RuntimeError as e:
        raise ValueError(f"adapter in {directory} does not fit this model (rank or base model differ): {e}") from e
    unexpected = [k for k in getattr(res, "unexpected_keys", []) if "lora_" in k]
    if unexpected:
        raise ValueError(f"adapter in {directory} has tensors this model lacks, e.g. {unexpected[:3]}")

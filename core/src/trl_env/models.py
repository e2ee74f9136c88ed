"""Resolve ``--model`` (``tiny``, ``smollm2``, a ``.gguf`` file, a hub id or a local path) to a
model and tokenizer."""

from __future__ import annotations

from typing import Any

from .errors import TrlEnvError
from .gguf import GGUF_SUFFIX, SMOLLM2, gguf_model, smollm2_file
from .protocols import Processor
from .tiny import TINY, TinySpec, build_tiny


def model_path(model: str | None, processor: Processor) -> str:
    """``tiny`` (the default) builds the family's tiny model; ``smollm2`` and ``.gguf`` files are
    converted (once) to a model directory; anything else is passed on."""
    if model in (None, "", TINY):
        spec = getattr(processor, "tiny_spec", None)
        if not isinstance(spec, TinySpec):
            raise TrlEnvError(
                f"{type(processor).__name__} has no tiny_spec, so there is no built-in tiny model "
                "for it; pass --model with a model id or path."
            )
        return str(build_tiny(spec))
    return local_model(model)


def local_model(model: str) -> str:
    """The directory a GGUF file (or ``smollm2``) converts to; any other name as given."""
    from pathlib import Path

    if model == SMOLLM2 and not Path(model).exists():
        model = str(smollm2_file())
    if model.lower().endswith(GGUF_SUFFIX):
        return str(gguf_model(model))
    return model


def load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError, KeyError) as exc:  # what transformers raises for a bad id/dir
        raise TrlEnvError(f"Could not load a tokenizer from {path!r}: {exc}") from exc


def load_model(path: str, **kwargs: Any) -> Any:
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except (OSError, ValueError, KeyError) as exc:
        raise TrlEnvError(f"Could not load a model from {path!r}: {exc}") from exc

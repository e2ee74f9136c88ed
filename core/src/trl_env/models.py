"""Resolve ``--model`` (``tiny``, a hub id or a local path) to a model and tokenizer."""

from __future__ import annotations

from typing import Any

from .errors import TrlEnvError
from .protocols import Processor
from .tiny import TINY, TinySpec, build_tiny


def model_path(model: str | None, processor: Processor) -> str:
    """``tiny`` (the default) builds the family's tiny model; anything else is passed on."""
    if model in (None, "", TINY):
        spec = getattr(processor, "tiny_spec", None)
        if not isinstance(spec, TinySpec):
            raise TrlEnvError(
                f"{type(processor).__name__} has no tiny_spec, so there is no built-in tiny model "
                "for it; pass --model with a model id or path."
            )
        return str(build_tiny(spec))
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

"""Turn command-line names into a processor, tokenizer and model path that fit each other."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .models import load_tokenizer, model_path
from .protocols import Env, Processor, Tokenizer
from .registry import load_env, load_processor


@dataclass
class Stack:
    """A processor bound to the tokenizer of the model it will serve."""

    processor: Processor
    tokenizer: Tokenizer
    model_path: str


def resolve_stack(
    processor_name: str, processor_args: dict[str, Any], model: str | None, check: bool = True
) -> Stack:
    """Load the processor, the model's tokenizer, and refuse a processor that does not fit it."""
    unbound = load_processor(processor_name, **processor_args)
    path = model_path(model, unbound)
    tokenizer = load_tokenizer(path)
    processor = load_processor(processor_name, tokenizer=tokenizer, **processor_args)
    if check:
        from .checks import ensure_fits

        ensure_fits(processor, tokenizer)
    return Stack(processor, tokenizer, path)


def env_source(name: str, options: dict[str, Any]) -> Callable[[], Env]:
    """A factory of fresh ``name`` envs that pickles, so process isolation can send it to its
    workers (a closure cannot be); each worker resolves the name through the registry."""
    return functools.partial(load_env, name, **options)

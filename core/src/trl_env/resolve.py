"""Turn command-line names into a processor, tokenizer and model path that fit each other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .models import load_tokenizer, model_path
from .protocols import Processor, Tokenizer
from .registry import load_processor


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
    if check:  # processor code, run with a deadline and off this thread (trl_env.startup)
        from .startup import processor_fits

        processor_fits(processor, tokenizer, processor_name)
    return Stack(processor, tokenizer, path)

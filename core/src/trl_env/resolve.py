"""Turn command-line names into a processor, tokenizer and model path that fit each other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import TokenizerMismatchError
from .models import load_tokenizer, model_path
from .protocols import Processor, Tokenizer
from .registry import load_processor, processors

# The most the search for a processor that fits may spend on one candidate: its check renders
# a few sample conversations, well under a second for the built-in processors.
SUGGEST_SECONDS = 20.0


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

        try:
            processor_fits(processor, tokenizer, processor_name)
        except TokenizerMismatchError as exc:
            if exc.fits_with:  # the message names the option that fits: that is the advice
                raise
            raise TokenizerMismatchError(f"{exc} {suggestion(tokenizer, processor_name)}") from None
    return Stack(processor, tokenizer, path)


def fitting_processors(tokenizer: Tokenizer, exclude: str = "") -> list[str]:
    """The installed processors (all but ``exclude``) whose check passes on ``tokenizer``."""
    from .startup import processor_fits

    found = []
    for name in processors.names():
        if name == exclude:
            continue
        try:
            candidate = load_processor(name, tokenizer=tokenizer)
            processor_fits(candidate, tokenizer, name, timeout=SUGGEST_SECONDS)
        except (Exception, SystemExit):  # broken, refused or not fitting: no suggestion
            continue
        found.append(name)
    return found


def suggestion(tokenizer: Tokenizer, exclude: str) -> str:
    """The sentence naming the installed processors that fit ``tokenizer``, or saying none does."""
    fits = fitting_processors(tokenizer, exclude)
    if len(fits) == 1:
        return f"The installed processor {fits[0]} fits it: --processor {fits[0]}."
    if fits:
        return f"Installed processors that fit it: {', '.join(fits)} (--processor NAME)."
    return (
        "No installed processor fits it (`trl-env list` shows them; a package of another model "
        "family may have one)."
    )

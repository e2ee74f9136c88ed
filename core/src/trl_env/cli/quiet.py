"""Keep library chatter (deprecation notices, weight-loading bars) out of the CLI's own output."""

from __future__ import annotations

import os
import warnings


def quiet_libraries() -> None:
    """Call before importing transformers/trl in a command; TRL_ENV_VERBOSE=1 keeps everything."""
    if os.environ.get("TRL_ENV_VERBOSE"):
        return
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    for category in (FutureWarning, DeprecationWarning, UserWarning):
        warnings.filterwarnings(
            "ignore", category=category, module=r"(transformers|trl|peft|accelerate|torch)\b"
        )
    from huggingface_hub.utils import logging as hub_logging
    from transformers.utils import logging

    logging.disable_progress_bar()
    hub_logging.set_verbosity_error()  # the hub's retry notices; its final error still reaches us

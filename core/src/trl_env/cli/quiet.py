"""Keep library chatter (deprecation notices, weight-loading bars) out of the CLI's own output."""

from __future__ import annotations

import os
import sys
import warnings


def quiet_libraries() -> None:
    """Call before importing transformers/trl in a command; TRL_ENV_VERBOSE=1 keeps everything.

    It imports nothing: libraries not imported yet read the variables set here when they are
    (importing transformers to tell it would cost a command's first line seconds), and those
    already imported (the hub client of a model check, a command run in process) are told."""
    if os.environ.get("TRL_ENV_VERBOSE"):
        return
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    # the hub's retry notices; its final error still reaches us
    os.environ.setdefault("HF_HUB_VERBOSITY", "error")
    for category in (FutureWarning, DeprecationWarning, UserWarning):
        warnings.filterwarnings(
            "ignore", category=category, module=r"(transformers|trl|peft|accelerate|torch)\b"
        )
    if "huggingface_hub" in sys.modules:
        from huggingface_hub import utils as hub_utils
        from huggingface_hub.utils import logging as hub_logging

        hub_utils.disable_progress_bars()  # transformers reads it when it is imported
        hub_logging.set_verbosity_error()
    if "transformers.utils.logging" in sys.modules:
        from transformers.utils import logging

        logging.disable_progress_bar()

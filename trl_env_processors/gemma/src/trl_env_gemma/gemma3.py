"""Gemma 3 (template ``gemma3``), text only."""

from __future__ import annotations

from ._gemma import GemmaProcessor, gemma_tiny


class Gemma3Processor(GemmaProcessor):
    """Gemma 3: the template writes ``{system}\\n\\n`` (untrimmed) before the first user text,
    which is :meth:`~trl_env.chat_format.ChatFormat.merge_system` as it is."""

    name = "gemma3"
    chat_template = "gemma3"
    model_type = "gemma3_text"
    tiny = gemma_tiny("gemma3_text")

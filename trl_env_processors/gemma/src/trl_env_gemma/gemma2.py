"""Gemma 2 (template ``gemma``, shared with Gemma 1)."""

from __future__ import annotations

from ._gemma import GemmaProcessor, gemma_tiny


class Gemma2Processor(GemmaProcessor):
    """Gemma 2. Its template refuses a system role; the system text is merged into the first user
    message the way Gemma 3's template does it, and that message is trimmed as a whole."""

    name = "gemma2"
    chat_template = "gemma"
    model_type = "gemma2"
    tiny = gemma_tiny("gemma2")

    def merge_system(self, system: str, user: str) -> str:
        return f"{system}\n\n{user}".strip()

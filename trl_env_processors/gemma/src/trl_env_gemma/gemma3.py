"""Gemma 3 (template ``gemma3``), text only."""

from __future__ import annotations

from typing import ClassVar

from ._gemma import GemmaProcessor


class Gemma3Processor(GemmaProcessor):
    """Gemma 3: the template writes ``{system}\\n\\n`` (untrimmed) before the first user text."""

    name: ClassVar[str] = "gemma3"
    chat_template: ClassVar[str] = "gemma3"
    model_type: ClassVar[str] = "gemma3_text"

    def merge_system(self, system: str, user: str) -> str:
        return f"{system}\n\n{user.strip()}"

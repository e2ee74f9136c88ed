"""Qwen 2.5 Instruct (template ``qwen2_5``)."""

from __future__ import annotations

from typing import ClassVar

from ._chatml import ChatMLProcessor, turn

# Injected by the official template when a conversation has no system message.
DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


class Qwen25Processor(ChatMLProcessor):
    """Qwen 2.5: ChatML with a default system turn."""

    name: ClassVar[str] = "qwen2.5"
    chat_template: ClassVar[str] = "qwen2_5"
    model_type: ClassVar[str] = "qwen2"

    def init_system_input(self, prompt: str) -> str:
        return turn("system", prompt or DEFAULT_SYSTEM)

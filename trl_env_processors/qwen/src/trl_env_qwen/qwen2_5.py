"""Qwen 2.5 Instruct (template ``qwen2_5``)."""

from __future__ import annotations

from ._chatml import ChatMLProcessor, chatml_tiny


class Qwen25Processor(ChatMLProcessor):
    """Qwen 2.5: ChatML with a default system turn."""

    name = "qwen2.5"
    chat_template = "qwen2_5"
    model_type = "qwen2"
    # Injected by the official template when a conversation has no system message.
    default_system = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    tiny = chatml_tiny("qwen2")

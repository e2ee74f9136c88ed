"""Qwen 3 (template ``qwen3``), with thinking on (default) or off."""

from __future__ import annotations

from typing import Any

from trl_env.parsing import THINK_CLOSE, THINK_OPEN

from ._chatml import ChatMLProcessor, chatml_tiny

EMPTY_THINK = f"{THINK_OPEN}\n\n{THINK_CLOSE}\n\n"
# Qwen 3's added tokens (not special) after Qwen 2.5's, in the real vocabulary's order.
QWEN3_ADDED = ("<tool_response>", "</tool_response>", THINK_OPEN, THINK_CLOSE)


class Qwen3Processor(ChatMLProcessor):
    """Qwen 3. Earlier turns stay in context exactly as sampled, reasoning included.

    The official template drops the reasoning of assistant turns before the last user message
    when it re-renders a conversation; a token-in/token-out rollout cannot take tokens back, so it
    keeps them. Turns with a reasoning block, and every turn with thinking off (whose generation
    prompt holds an empty block), then equal trl's prefix-preserving ``qwen3_training`` template.
    :meth:`drop_reasoning` gives what the official template shows instead, for callers that
    re-render history.
    """

    name = "qwen3"
    chat_template = "qwen3"
    model_type = "qwen3"
    tiny = chatml_tiny("qwen3", QWEN3_ADDED)
    reasoning_tags = (THINK_OPEN, THINK_CLOSE)

    def __init__(self, tokenizer: Any = None, thinking: bool = True) -> None:
        super().__init__(tokenizer)
        if not isinstance(thinking, bool):
            raise TypeError(f"thinking must be true or false, not {thinking!r}")
        self.thinking = thinking

    @property
    def generation_prompt(self) -> str:
        # Like enable_thinking=False: the model starts after an empty reasoning block.
        return super().generation_prompt + ("" if self.thinking else EMPTY_THINK)

    @property
    def template_kwargs(self) -> dict[str, Any]:
        return {} if self.thinking else {"enable_thinking": False}

    @property
    def multi_turn_template(self) -> str | None:
        """The trl template ``trl-env check`` compares multi-turn text with, if not the official."""
        # Thinking on, a reply without reasoning renders as in the official template; thinking
        # off, the empty block of every generation prompt stays, as in qwen3_training.
        return None if self.thinking else "qwen3_training"

    @staticmethod
    def drop_reasoning(completion: str) -> str:
        """A finished turn as the official template re-renders it: reasoning removed."""
        if THINK_CLOSE not in completion:
            return completion
        return completion.split(THINK_CLOSE)[-1].lstrip("\n")

    def __repr__(self) -> str:
        return f"Qwen3Processor(thinking={self.thinking})"

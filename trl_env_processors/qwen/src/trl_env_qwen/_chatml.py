"""ChatML framing shared by Qwen 2.5 and Qwen 3: ``<|im_start|>{role}\\n{text}<|im_end|>\\n``."""

from __future__ import annotations

from typing import Any, ClassVar

from trl_env.parsing import function_of, parse_completion, to_json
from trl_env.tiny import QWEN_PATTERN, TinySpec

IM_START, IM_END, ENDOFTEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"


def turn(role: str, text: str) -> str:
    return f"{IM_START}{role}\n{text}{IM_END}\n"


def render_tool_call(call: dict[str, Any]) -> str:
    """One call as the Qwen templates render ``tool_calls`` (string arguments are kept raw)."""
    name, arguments = function_of(call)
    args = arguments if isinstance(arguments, str) else to_json(arguments)
    return f'{TOOL_CALL_OPEN}\n{{"name": "{name}", "arguments": {args}}}\n{TOOL_CALL_CLOSE}'


class ChatMLProcessor:
    """The parts of a Qwen processor that do not depend on the model generation."""

    name: ClassVar[str]
    chat_template: ClassVar[str]
    model_type: ClassVar[str]
    added_tokens: ClassVar[tuple[str, ...]] = (TOOL_CALL_OPEN, TOOL_CALL_CLOSE)

    stop_tokens: tuple[str, ...] = (IM_END,)
    turn_close = IM_END
    # The model stops at <|im_end|>; the newline the template writes after it is never sampled.
    turn_separator = "\n"

    def __init__(self, tokenizer: Any = None) -> None:
        self.tokenizer = tokenizer

    @property
    def generation_prompt(self) -> str:
        return f"{IM_START}assistant\n"

    @property
    def template_kwargs(self) -> dict[str, Any]:
        """Extra arguments that make ``apply_chat_template`` render what this processor renders."""
        return {}

    def init_system_input(self, prompt: str) -> str:
        """The system turn; an empty prompt means no system message."""
        return turn("system", prompt) if prompt else ""

    def append_user_input(self, prompt: str) -> str:
        return turn("user", prompt) + self.generation_prompt

    def parse_agent_output(self, completion: str) -> tuple[str, str]:
        return parse_completion(
            completion,
            ends=(*self.stop_tokens, ENDOFTEXT),
            tokenizer=self.tokenizer,
            prefix=self.generation_prompt,
            render_tool_call=render_tool_call,
        )

    @property
    def tiny_spec(self) -> TinySpec:
        return TinySpec(
            family=self.name,
            model_type=self.model_type,
            chat_template=self.chat_template,
            eos_token=IM_END,
            pad_token=ENDOFTEXT,
            special_tokens=(ENDOFTEXT, IM_START, IM_END),
            added_tokens=self.added_tokens,
            split_pattern=QWEN_PATTERN,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

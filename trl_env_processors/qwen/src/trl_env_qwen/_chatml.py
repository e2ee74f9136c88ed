"""ChatML framing shared by Qwen 2.5 and Qwen 3: ``<|im_start|>{role}\\n{text}<|im_end|>\\n``."""

from __future__ import annotations

from typing import Any, ClassVar

from trl_env.chat_format import ChatFormat
from trl_env.parsing import function_of, to_json
from trl_env.tiny import BPE_WHITESPACE_TOKENS, TinySpec

IM_START, IM_END, ENDOFTEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"

# Whitespace the real Qwen vocabulary writes as one token; a model turn that starts with a
# newline right after the "assistant\n" header merges with it when the text is re-tokenized.
SINGLE_TOKENS = BPE_WHITESPACE_TOKENS


# The special tokens of the real Qwen 2.5 and Qwen 3 vocabularies, in their order; all but
# <|endoftext|> are named in the tokenizer's extra special tokens (so in all_special_tokens).
NAMED_SPECIAL = (
    IM_START,
    IM_END,
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
# Added tokens that are not special, in the real order (Qwen 3 appends its own after them).
ADDED = (
    TOOL_CALL_OPEN,
    TOOL_CALL_CLOSE,
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
)


def chatml_tiny(
    model_type: str, added_tokens: tuple[str, ...] = (), config: dict[str, Any] | None = None
) -> TinySpec:
    """A Qwen tiny model: the real tokenizer class (its regex split and NFC), the real special
    and added tokens (``added_tokens``: the generation's own after the shared ones), no unknown
    token (byte-level BPE has none)."""
    return TinySpec(
        model_type=model_type,
        tokenizer_class="Qwen2Tokenizer",
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        special_tokens=(ENDOFTEXT, *NAMED_SPECIAL),
        named_special_tokens=NAMED_SPECIAL,
        added_tokens=(*ADDED, *added_tokens),
        single_tokens=SINGLE_TOKENS,
        words=("system", "user", "assistant"),
        # Qwen's generation_config ends a reply at either.
        eos_tokens=(IM_END, ENDOFTEXT),
        config=config or {},
    )


class ChatMLProcessor(ChatFormat):
    """The parts of a Qwen processor that do not depend on the model generation."""

    model_type: ClassVar[str]
    role_header = f"{IM_START}{{role}}\n"
    turn_end = IM_END
    stop_tokens = (IM_END,)
    # The model stops at <|im_end|>; the newline the template writes after it is never sampled.
    separator = "\n"
    extra_ends = (ENDOFTEXT,)

    def render_tool_call(self, call: dict[str, Any]) -> str:
        """One call as the Qwen templates render ``tool_calls`` (string arguments are kept raw)."""
        name, arguments = function_of(call)
        args = arguments if isinstance(arguments, str) else to_json(arguments)
        return f'{TOOL_CALL_OPEN}\n{{"name": "{name}", "arguments": {args}}}\n{TOOL_CALL_CLOSE}'

"""LiquidAI LFM2 and LFM2.5: ChatML turns after ``<|startoftext|>``.

``<|startoftext|><|im_start|>system\\n{system}<|im_end|>\\n<|im_start|>user\\n{text}<|im_end|>\\n``
``<|im_start|>assistant\\n``; no default system turn, nothing trimmed.
"""

from __future__ import annotations

from typing import Any

from trl_env.chat_format import ChatFormat
from trl_env.parsing import THINK_CLOSE, THINK_OPEN, function_of, to_json
from trl_env.tiny import BPE_WHITESPACE_TOKENS, TinySpec

PAD, BOS, END_OF_TEXT = "<|pad|>", "<|startoftext|>", "<|endoftext|>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<|tool_call_start|>", "<|tool_call_end|>"
# The special tokens, in the real vocabulary's order (ids 0-13, tool-call markers aside).
SPECIAL_TOKENS = (
    PAD,
    BOS,
    END_OF_TEXT,
    "<|fim_pre|>",
    "<|fim_mid|>",
    "<|fim_suf|>",
    IM_START,
    IM_END,
    "<|tool_list_start|>",
    "<|tool_list_end|>",
    "<|tool_response_start|>",
    "<|tool_response_end|>",
)
# Added but not special: the model writes them inside its text, and skip_special_tokens keeps them.
TOOL_CALL_TOKENS = (TOOL_CALL_OPEN, TOOL_CALL_CLOSE)

# A byte-level BPE split: words with one leading non-letter, digits in groups of up to three,
# punctuation runs, newline runs (GPT-4 style, as LFM2's byte-level tokenizer splits).
SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def lfm_tiny(model_type: str, added_tokens: tuple[str, ...]) -> TinySpec:
    return TinySpec(
        model_type=model_type,
        split_pattern=SPLIT_PATTERN,
        bos_token=BOS,
        eos_token=IM_END,
        pad_token=PAD,
        add_bos_token=True,
        special_tokens=SPECIAL_TOKENS,
        added_tokens=added_tokens,
        single_tokens=BPE_WHITESPACE_TOKENS,
        words=("system", "user", "assistant"),
        # The instruct models' generation_config ends a reply at <|im_end|>.
        eos_tokens=(IM_END,),
        # Attention blocks only: the transformers backend's slot cache holds keys and values, not
        # the state of LFM2's short-convolution blocks (a real checkpoint plays on vLLM).
        config={"layer_types": ["full_attention", "full_attention"], "full_attn_idxs": [0, 1]},
    )


def _argument(value: Any) -> str:
    """One argument as the LFM templates' ``format_arg_value`` writes it."""
    if isinstance(value, str):
        return f"'{value}'"
    if isinstance(value, dict):
        return to_json(value)
    return str(value)


class LFM2Processor(ChatFormat):
    """LFM2 (template ``lfm2_v2``, rendered alike by the first ``lfm2``): no reasoning format."""

    name = "lfm2"
    chat_template = "lfm2_v2"
    role_header = f"{IM_START}{{role}}\n"
    turn_end = IM_END
    stop_tokens = (IM_END,)
    # The model stops at <|im_end|>; the newline the template writes after it is never sampled.
    separator = "\n"
    extra_ends = (END_OF_TEXT,)
    bos = BOS
    tiny = lfm_tiny("lfm2", TOOL_CALL_TOKENS)

    def render_tool_call(self, call: dict[str, Any]) -> str:
        """A call as the templates render ``tool_calls``: ``[name(key='value', ...)]``."""
        name, arguments = function_of(call)
        items = arguments.items() if isinstance(arguments, dict) else ()
        args = ", ".join(f"{key}={_argument(value)}" for key, value in items)
        return f"{TOOL_CALL_OPEN}[{name}({args})]{TOOL_CALL_CLOSE}"


class LFM25Processor(LFM2Processor):
    """LFM2.5 (template ``lfm2_2_5_v2``). A thinking checkpoint writes ``<think>...</think>``
    before its answer, parsed as the reasoning.

    Earlier turns stay in context as sampled, reasoning included: the official template with its
    own ``preserve_thinking=True``. By default the template drops the reasoning of turns before
    the last user message and trims what is left; :meth:`drop_reasoning` gives that view.
    """

    name = "lfm2.5"
    chat_template = "lfm2_2_5_v2"
    reasoning_tags = (THINK_OPEN, THINK_CLOSE)
    tiny = lfm_tiny("lfm2", (*TOOL_CALL_TOKENS, THINK_OPEN, THINK_CLOSE))

    @property
    def template_kwargs(self) -> dict[str, Any]:
        return {"preserve_thinking": True}

    @staticmethod
    def drop_reasoning(completion: str) -> str:
        """A finished turn as the template re-renders history by default: reasoning removed."""
        if THINK_CLOSE not in completion:
            return completion
        return completion.split(THINK_CLOSE)[-1].strip()

"""DeepSeek-R1-Distill (template ``deepseek_r1_distill``): reasoning opened by the prompt.

``<｜begin▁of▁sentence｜>{system}<｜User｜>{u}<｜Assistant｜><think>\\n`` is the first prompt;
the model writes its reasoning, ``</think>``, the answer and ``<｜end▁of▁sentence｜>``, and the
next user turn follows at once (no separator, no trimming, the system text has no header).
"""

from __future__ import annotations

import re
from typing import Any

from trl_env.chat_format import ChatFormat
from trl_env.parsing import THINK_CLOSE, THINK_OPEN
from trl_env.tiny import BPE_WHITESPACE_TOKENS, TinySpec

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
USER, ASSISTANT = "<｜User｜>", "<｜Assistant｜>"

# The distilled Qwen models keep Qwen 2.5's pre-tokenizer split (digits one by one).
QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# The distill tokenizers' added tokens: special ones, then those that are not special (the turn
# markers and the reasoning tags among them, so only the control-token rule keeps env text
# that spells them as text).
SPECIAL = (
    EOS,
    BOS,
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
ADDED = (
    USER,
    ASSISTANT,
    "<|EOT|>",
    THINK_OPEN,
    THINK_CLOSE,
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
)

TINY = TinySpec(
    model_type="qwen2",  # the distilled Qwen 2.5 models
    split_pattern=QWEN_PATTERN,
    bos_token=BOS,
    eos_token=EOS,
    pad_token=EOS,
    add_bos_token=True,
    special_tokens=SPECIAL,
    added_tokens=ADDED,
    single_tokens=BPE_WHITESPACE_TOKENS,
    words=("User", "Assistant", "think", "Okay", "so", "Let", "me", "Wait"),
)

# A finished assistant turn: its header, its text, its end.
_PAST_TURN = re.compile(
    rf"({re.escape(ASSISTANT)})((?:(?!{re.escape(EOS)}).)*)(?={re.escape(EOS)})", re.DOTALL
)


class DeepSeekR1Processor(ChatFormat):
    """DeepSeek-R1-Distill-Qwen and -Llama: every turn starts inside the reasoning block.

    Earlier turns stay in context exactly as sampled, reasoning included; the official template
    re-renders them as the text after their last ``</think>`` (see :meth:`history_view`), trl's
    ``deepseek_r1_distill_training`` template keeps them as the rollout does.
    """

    name = "deepseek-r1"
    chat_template = "deepseek_r1_distill"
    role_header = "<｜{role}｜>"
    assistant_role = "Assistant"
    turn_end = EOS
    stop_tokens = (EOS,)
    bos = BOS
    generation_suffix = f"{THINK_OPEN}\n"
    reasoning_tags = (THINK_OPEN, THINK_CLOSE)
    tiny = TINY

    def __init__(self, tokenizer: Any = None) -> None:
        super().__init__(tokenizer)

    def header(self, role: str) -> str:
        return ASSISTANT if role == "assistant" else USER

    def init_system_input(self, prompt: str) -> str:
        """The system text follows the BOS as it is: the template gives it no header."""
        return self.bos + prompt

    def append_user_input(self, prompt: str) -> str:
        """User turns have no end token: the assistant header follows the text at once."""
        return self.header("user") + prompt + self.generation_prompt

    def sampled_reply(self, content: str) -> str:
        """What the model samples for an assistant message the template renders with
        ``content``: the block the prompt opened, closed (with ``content``'s own reasoning when
        it holds ``<think>...</think>``, else at once), then the answer."""
        if THINK_CLOSE in content:
            return content.removeprefix(self.generation_suffix)
        return THINK_CLOSE + content

    def history_view(self, text: str) -> str:
        """``text`` as the official template re-renders the history: each finished assistant
        turn is the text after its last ``</think>`` (the rollout keeps all of it)."""
        return _PAST_TURN.sub(lambda m: m.group(1) + m.group(2).split(THINK_CLOSE)[-1], text)

    def __repr__(self) -> str:
        return "DeepSeekR1Processor()"

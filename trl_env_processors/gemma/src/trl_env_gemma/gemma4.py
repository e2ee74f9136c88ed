"""Gemma 4 (template ``gemma4_v5``, the revision the E2B/E4B checkpoints ship now), text only.

``<bos><|turn>system\\n{system|trim}<turn|>\\n<|turn>user\\n{text|trim}<turn|>\\n<|turn>model\\n``;
the model thinks in a channel, ``<|channel>thought\\n...<channel|>``, before its answer.
"""

from __future__ import annotations

from typing import Any

from trl_env.chat_format import ChatFormat

from ._gemma import BOS, EOS, MASK, PAD, UNK, gemma_tiny

TURN_OPEN, TURN_CLOSE = "<|turn>", "<turn|>"
THINK = "<|think|>"  # at the top of the system turn: thinking on
CHANNEL_OPEN, CHANNEL_CLOSE = "<|channel>", "<channel|>"
THOUGHT = f"{CHANNEL_OPEN}thought"
# An empty thought channel, closed at once: the 26B-A4B and 31B templates' non-thinking turns.
EMPTY_THOUGHT = f"{THOUGHT}\n{CHANNEL_CLOSE}"
TOOL_RESPONSE_OPEN = "<|tool_response>"
# The control tokens of the text model, as its tokenizer marks them special.
CONTROL_TOKENS = (
    '<|"|>',
    "<|tool>",
    "<tool|>",
    "<|tool_call>",
    "<tool_call|>",
    TOOL_RESPONSE_OPEN,
    "<tool_response|>",
    CHANNEL_OPEN,
    CHANNEL_CLOSE,
    THINK,
    TURN_OPEN,
    TURN_CLOSE,
    "<|image|>",
    "<|audio|>",
    "<|video|>",
)

TINY = gemma_tiny(
    "gemma4_text",
    special_tokens=(PAD, EOS, BOS, UNK, MASK, *CONTROL_TOKENS),
    # generation_config ends a reply at EOS, at the end of turn, and where a tool call waits for
    # its response.
    eos_tokens=(EOS, TURN_CLOSE, TOOL_RESPONSE_OPEN),
    words=("system", "user", "model", "thought"),
    # Per-layer embeddings sized for the tiny vocabulary; one sliding and one global layer.
    config={
        "vocab_size_per_layer_input": 4096,
        "hidden_size_per_layer_input": 16,
        "layer_types": ["sliding_attention", "full_attention"],
        "sliding_window": 64,
    },
)


class Gemma4Processor(ChatFormat):
    """Gemma 4, thinking off (the template's default) or on (``thinking=True``); with
    ``empty_thought=True`` a non-thinking turn opens on an empty, closed thought channel, as the
    26B-A4B and 31B checkpoints' template writes it.

    With thinking on, the system turn opens with ``<|think|>`` (a system turn is written even
    without a system prompt) and the model writes its reasoning in the thought channel, which
    :meth:`parse_agent_output` returns as the reasoning. Earlier turns stay in context as sampled,
    thought channel included; the official template drops it when it re-renders history
    (:meth:`drop_reasoning` gives that view). The template trims message text; user and system
    text are trimmed here too, the model's own turns are kept as sampled.
    """

    name = "gemma4"
    chat_template = "gemma4_v5"
    role_header = f"{TURN_OPEN}{{role}}\n"
    assistant_role = "model"
    turn_end = TURN_CLOSE
    # Generation stops at <turn|>, not at the tokenizer's eos_token (<eos>).
    stop_tokens = (TURN_CLOSE,)
    separator = "\n"
    # A reply that called a tool ends where the tool's response would start.
    extra_ends = (EOS, TOOL_RESPONSE_OPEN)
    bos = BOS
    trim = True
    reasoning_tags = (THOUGHT, CHANNEL_CLOSE)
    tiny = TINY

    def __init__(
        self, tokenizer: Any = None, thinking: bool = False, empty_thought: bool = False
    ) -> None:
        super().__init__(tokenizer)
        for name, value in (("thinking", thinking), ("empty_thought", empty_thought)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be true or false, not {value!r}")
        if thinking and empty_thought:
            raise ValueError(
                "empty_thought closes the thought channel of a turn without thinking; "
                "it cannot be combined with thinking=true"
            )
        self.thinking = thinking
        self.empty_thought = empty_thought

    @property
    def generation_prompt(self) -> str:
        return super().generation_prompt + (EMPTY_THOUGHT if self.empty_thought else "")

    @property
    def template_kwargs(self) -> dict[str, Any]:
        return {"enable_thinking": True} if self.thinking else {}

    def history_view(self, text: str) -> str:
        """``text`` as the official template re-renders it: with ``empty_thought`` the 26B/31B
        template writes the empty channel only in the generation prompt, never in history."""
        if not self.empty_thought:
            return text
        prompt = self.generation_prompt
        head, last, tail = text.rpartition(prompt)
        return head.replace(prompt, self.header("assistant")) + last + tail

    def option_variants(self) -> dict[str, Gemma4Processor]:
        """The other template revision's generation prompt, for ``trl-env check`` to name."""
        if self.thinking:
            return {}
        flipped = not self.empty_thought
        return {
            f"empty_thought={str(flipped).lower()}": Gemma4Processor(self.tokenizer, False, flipped)
        }

    def system_text(self, prompt: str) -> str:
        return (f"{THINK}\n" if self.thinking else "") + self.clean(prompt)

    def init_system_input(self, prompt: str) -> str:
        # Thinking on, the template writes a system turn for <|think|> even without a prompt.
        if not (prompt or self.thinking):
            return self.bos
        return self.bos + self.message("system", self.system_text(prompt))

    @staticmethod
    def drop_reasoning(completion: str) -> str:
        """A finished turn as the official template re-renders it: thought channels removed."""
        kept = [part.split(CHANNEL_OPEN)[0] for part in completion.split(CHANNEL_CLOSE)]
        return "".join(kept).strip()

    def __repr__(self) -> str:
        return f"Gemma4Processor(thinking={self.thinking}, empty_thought={self.empty_thought})"

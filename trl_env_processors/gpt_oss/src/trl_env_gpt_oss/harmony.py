"""gpt-oss (template ``gptoss``): OpenAI's harmony format.

Every message is ``<|start|>{role}<|message|>{text}<|end|>``, with no separator. The first prompt
is a system message the template writes itself (model identity, knowledge cutoff, today's date,
reasoning effort, the valid channels), then the system prompt as a developer message
(``# Instructions\\n\\n{prompt}``, as openai-harmony renders it; the HF template adds ``\\n\\n``).
The generation prompt is ``<|start|>assistant``: the model
chooses a channel, thinks in ``analysis``, and answers in ``final``::

    <|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final<|message|>...<|return|>
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from trl_env.chat_format import ChatFormat
from trl_env.parsing import clean, cut_turn, function_of, to_json
from trl_env.tiny import BPE_WHITESPACE_TOKENS, TinySpec

START, END, MESSAGE, CHANNEL = "<|start|>", "<|end|>", "<|message|>", "<|channel|>"
RETURN, CALL, CONSTRAIN = "<|return|>", "<|call|>", "<|constrain|>"
START_OF_TEXT, END_OF_TEXT = "<|startoftext|>", "<|endoftext|>"
ASSISTANT = f"{START}assistant"
FINAL = f"{CHANNEL}final{MESSAGE}"
DEFAULT_IDENTITY = "You are ChatGPT, a large language model trained by OpenAI."
EFFORTS = ("low", "medium", "high")
# Whose text the developer message follows: openai-harmony's (what vLLM serves gpt-oss with) or
# the HF chat template's, which ends it with "\n\n".
RENDERERS = ("harmony", "template")
INSTRUCTIONS = "# Instructions\n\n"
DATE_FORMAT = "%Y-%m-%d"  # the template's strftime_now format
# The harmony tokens, in the real vocabulary's order (ids 199998-200012; reserved ones left out).
SPECIAL_TOKENS = (START_OF_TEXT, END_OF_TEXT, RETURN, CONSTRAIN, CHANNEL, START, END, MESSAGE, CALL)

# o200k's pre-tokenizer split: cased words with their contraction, digits 1-3 at a time,
# punctuation runs with the newlines or slashes after them, newline runs.
O200K_PATTERN = "|".join(
    [
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"\p{N}{1,3}",
        r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
        r"\s*[\r\n]+",
        r"\s+(?!\S)",
        r"\s+",
    ]
)

TINY = TinySpec(
    model_type="gpt_oss",
    split_pattern=O200K_PATTERN,
    bos_token=START_OF_TEXT,
    eos_token=RETURN,
    pad_token=END_OF_TEXT,
    special_tokens=SPECIAL_TOKENS,
    single_tokens=BPE_WHITESPACE_TOKENS,
    words=("system", "developer", "user", "assistant", "analysis", "final", "commentary"),
    # The generation config ends a reply at <|return|>, <|endoftext|> and <|call|>.
    eos_tokens=(RETURN, END_OF_TEXT, CALL),
    # A few small experts; one sliding and one full layer (attention sinks included); the real
    # rope scaling's ratio (32) to the original 4096 positions.
    config={
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "layer_types": ["sliding_attention", "full_attention"],
        "sliding_window": 64,
        "max_position_embeddings": 131072,
    },
)

# One sampled turn inside the engine's text: from the generation prompt to its <|return|>.
_SAMPLED_TURN = re.compile(re.escape(ASSISTANT) + r"(.*?)" + re.escape(RETURN), re.DOTALL)
# The developer message's text, up to its end.
_DEVELOPER = re.compile(
    re.escape(f"{START}developer{MESSAGE}{INSTRUCTIONS}") + r"(.*?)" + re.escape(END), re.DOTALL
)


def split_messages(text: str) -> list[tuple[str, str]]:
    """``(header, body)`` of each harmony message of a turn sampled after ``<|start|>assistant``.

    The header holds the channel and any recipient (``<|channel|>commentary to=functions.f``);
    text without ``<|message|>`` is a body without a header (a model that writes plain text).
    """
    out = []
    for k, raw in enumerate(text.split(START)):
        if k:  # a later message names its role again
            raw = raw.removeprefix("assistant")
        header, sep, body = raw.partition(MESSAGE)
        if not sep:
            header, body = "", raw
        out.append((header, body.split(END)[0]))
    return out


def finals_only(text: str) -> str:
    """The engine's text with each earlier turn as its final message closed by ``<|end|>``, as
    harmony and the HF template both render history (a turn without one is left as it is)."""

    def final_only(match: re.Match[str]) -> str:
        finals = [b for h, b in split_messages(match.group(1)) if channel(h) == "final"]
        return f"{ASSISTANT}{FINAL}{finals[-1]}{END}" if finals else match.group(0)

    return _SAMPLED_TURN.sub(final_only, text)


def channel(header: str) -> str:
    """The channel a message header names ("" when none)."""
    if CHANNEL not in header:
        return ""
    words = header.split(CHANNEL)[-1].split()
    return words[0] if words else ""


class GptOssProcessor(ChatFormat):
    """gpt-oss. Options: ``reasoning_effort`` (low, medium, high: the system message's
    ``Reasoning:``) and ``model_identity`` (its first line), both the template's own; and
    ``renderer``: ``harmony`` (default) writes the developer message as openai-harmony does,
    ``template`` as the HF chat template does (with ``\\n\\n`` before its ``<|end|>``).

    The analysis channel is the reasoning, the final channel the action. Earlier turns stay in
    context as sampled: their analysis, and the ``<|return|>`` that ended them, where the official
    template re-renders history with the final message only, closed by ``<|end|>``
    (:meth:`history_view` gives that view; ``trl-env check`` compares through it). The system
    message carries today's date, as the template's does.
    """

    name = "gpt-oss"
    chat_template = "gptoss"
    role_header = f"{START}{{role}}{MESSAGE}"
    turn_end = END
    # A final answer ends at <|return|>, a tool call at <|call|>; <|end|> only ends a message
    # inside the turn (after the analysis), so generation must not stop there.
    stop_tokens = (RETURN, CALL)
    extra_ends = (END_OF_TEXT,)
    # The reasoning is a channel, read here by hand (no pair of tags).
    parser_reasoning = True
    tiny = TINY

    def __init__(
        self,
        tokenizer: Any = None,
        reasoning_effort: str = "medium",
        model_identity: str = DEFAULT_IDENTITY,
        renderer: str = "harmony",
    ) -> None:
        super().__init__(tokenizer)
        if reasoning_effort not in EFFORTS:
            raise ValueError(
                f"reasoning_effort must be one of {', '.join(EFFORTS)}, not {reasoning_effort!r}"
            )
        if not isinstance(model_identity, str):
            raise TypeError(f"model_identity must be text, not {model_identity!r}")
        if renderer not in RENDERERS:
            raise ValueError(f"renderer must be one of {', '.join(RENDERERS)}, not {renderer!r}")
        self.reasoning_effort = reasoning_effort
        self.model_identity = model_identity
        self.renderer = renderer

    # -- rendering -----------------------------------------------------------------------------

    @property
    def generation_prompt(self) -> str:
        return ASSISTANT  # the model writes the channel

    @property
    def turn_close(self) -> str:
        """What closes a turn cut at the token limit: the end of a reply."""
        return RETURN

    @property
    def template_kwargs(self) -> dict[str, Any]:
        return {"reasoning_effort": self.reasoning_effort, "model_identity": self.model_identity}

    def system_text(self, prompt: str) -> str:
        """The system message the template writes (the prompt itself goes to the developer)."""
        today = datetime.now().strftime(DATE_FORMAT)
        return (
            f"{self.model_identity}\nKnowledge cutoff: 2024-06\nCurrent date: {today}\n\n"
            f"Reasoning: {self.reasoning_effort}\n\n# Valid channels: analysis, commentary, final. "
            "Channel must be included for every message."
        )

    def init_system_input(self, prompt: str) -> str:
        system = self.message("system", self.system_text(prompt))
        if not prompt:
            return system
        tail = "\n\n" if self.renderer == "template" else ""
        return system + self.message("developer", f"{INSTRUCTIONS}{prompt}{tail}")

    # -- what the official template shows for the same conversation ----------------------------

    @staticmethod
    def sampled_reply(content: str) -> str:
        """What the model samples (before ``<|return|>``) for a reply whose final is ``content``."""
        return FINAL + content

    def history_view(self, text: str) -> str:
        """The engine's text as the official HF template renders it: each earlier turn is its
        final message only, closed by ``<|end|>`` (a turn without one is left as it is), and,
        following harmony, the developer message gets the template's ``\\n\\n`` back."""

        text = finals_only(text)
        if self.renderer == "harmony":
            text = _DEVELOPER.sub(lambda m: m.group(0)[: -len(END)] + "\n\n" + END, text, count=1)
        return text

    # -- parsing -------------------------------------------------------------------------------

    def parse_agent_output(self, completion: str) -> tuple[str, str]:
        """``(analysis, final)``; a tool call (a commentary message to a recipient) without a
        final message is the action as written. Text outside any channel is the action."""
        text = completion if isinstance(completion, str) else str(completion)
        turn, _ = cut_turn(text, (*self.stop_tokens, *self.extra_ends))
        reasoning, finals, calls, plain = [], [], [], []
        for header, body in split_messages(turn):
            kind = channel(header)
            if kind == "final":
                finals.append(body)
            elif kind == "commentary" and "to=" in header:
                calls.append(f"{header.strip()}{MESSAGE}{body}")
            elif kind:
                reasoning.append(body)
            else:
                plain.append(body)
        action = finals[-1] if finals else (calls[-1] if calls else "".join(plain))
        return _clean("\n".join(reasoning)), _clean(action)

    def render_tool_call(self, call: dict[str, Any]) -> str:
        """A call as the template renders ``tool_calls``: a commentary message to the function."""
        name, arguments = function_of(call)
        args = arguments if isinstance(arguments, str) else to_json(arguments)
        return f"to=functions.{name}{CHANNEL}commentary json{MESSAGE}{args}"

    def __repr__(self) -> str:
        return (
            f"GptOssProcessor(reasoning_effort={self.reasoning_effort!r}, "
            f"model_identity={self.model_identity!r}, renderer={self.renderer!r})"
        )


def _clean(text: str) -> str:
    """``text`` without harmony's end tokens, stripped."""
    return clean(text, (RETURN, CALL, END_OF_TEXT, END))

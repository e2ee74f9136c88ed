"""Qwen 3.5 (templates ``qwen3_5_think`` / ``qwen3_5_nothink``), Qwen 3.6 and Qwen 3.8.

The three share Qwen 3's framing and tokens; their templates trim every message, open the
reasoning block in the generation prompt (``<think>\\n``) when thinking is on, and write tool calls
as ``<function=...>`` / ``<parameter=...>`` blocks. 3.6 adds ``preserve_thinking`` (earlier
reasoning kept when re-rendering: what a token-in/token-out rollout does); 3.8 turns it on by
default and adds ``reasoning_effort``, an instruction written at the top of the system turn.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

from trl_env.parsing import THINK_CLOSE, THINK_OPEN, function_of

from ._chatml import IM_END, IM_START, TOOL_CALL_CLOSE, TOOL_CALL_OPEN, chatml_tiny
from .qwen3 import EMPTY_THINK, QWEN3_ADDED, Qwen3Processor

# A finished assistant turn: its header, its text, its end.
_PAST_TURN = re.compile(
    rf"({re.escape(IM_START)}assistant\n)((?:(?!{re.escape(IM_END)}).)*)(?={re.escape(IM_END)})",
    re.DOTALL,
)


def template_reading(turn: str, keep_reasoning: bool) -> str:
    """A finished turn's text as the 3.5+ templates re-render it: the reasoning trimmed and
    written ``<think>\nR\n</think>\n\n`` (or dropped), the text after the last ``</think>``
    without its leading newlines."""
    if THINK_CLOSE not in turn:
        return turn
    reasoning = turn.split(THINK_CLOSE)[0].split(THINK_OPEN)[-1].strip()
    content = turn.split(THINK_CLOSE)[-1].lstrip("\n")
    return f"{THINK_OPEN}\n{reasoning}\n{THINK_CLOSE}\n\n{content}" if keep_reasoning else content


class Qwen35Processor(Qwen3Processor):
    """Qwen 3.5, thinking on by default; ``thinking=false`` is the no-think template (the one
    Qwen3.5-2B and smaller ship, whose default is off).

    Earlier turns stay in context exactly as sampled, reasoning included; the official template
    re-renders them without it (see :meth:`history_view`).
    """

    name = "qwen3.5"
    chat_template = "qwen3_5_think"
    trim = True
    # A Qwen3.5 text model with full-attention layers only: the real ones mix in linear
    # attention, which trl-env's transformers backend refuses (its KV slots hold attention
    # caches); vLLM serves them.
    tiny = chatml_tiny(
        "qwen3_5_text", QWEN3_ADDED, config={"layer_types": ["full_attention", "full_attention"]}
    )
    # What a tool call's argument value is written as (3.5: JSON for objects and lists only).
    json_scalars: ClassVar[bool] = False
    tool_call_joiners = ("\n\n", "\n")

    def __init__(self, tokenizer: Any = None, thinking: bool = True) -> None:
        super().__init__(tokenizer, thinking=thinking)
        if not thinking and type(self).chat_template == "qwen3_5_think":
            self.chat_template = "qwen3_5_nothink"

    @property
    def generation_prompt(self) -> str:
        # The template opens the reasoning block itself; thinking off, it is written empty.
        return self.header("assistant") + (THINK_OPEN + "\n" if self.thinking else EMPTY_THINK)

    @property
    def template_kwargs(self) -> dict[str, Any]:
        # Explicit either way: each of the two 3.5 templates defaults to one of them.
        return {"enable_thinking": self.thinking}

    @property
    def multi_turn_template(self) -> str | None:
        return None  # compared with the official template through history_view

    def sampled_reply(self, content: str) -> str:
        """What the model samples for an assistant message the template renders with
        ``content``: thinking on, the model closes the block the generation prompt opened
        (``content`` holding ``<think>...</think>`` gives that reasoning, else an empty block)."""
        if not self.thinking:
            return content
        if THINK_CLOSE in content:
            return content.removeprefix(THINK_OPEN + "\n")
        # The template writes the empty block "<think>\n\n</think>"; a model closing it at once
        # samples "</think>" (a sampled "\n" would merge with the prompt's on re-tokenizing).
        return f"{THINK_CLOSE}\n\n{content}"

    # Whether the official template re-renders earlier reasoning (3.6 and 3.8 asked to).
    keeps_reasoning: ClassVar[bool] = False

    def history_view(self, text: str) -> str:
        """``text`` as the official template re-renders the history: 3.5 drops the reasoning of
        every finished assistant turn, and every template trims it (the rollout keeps the turn
        token for token)."""
        return _PAST_TURN.sub(
            lambda m: m.group(1) + template_reading(m.group(2), self.keeps_reasoning), text
        )

    def render_tool_call(self, call: dict[str, Any]) -> str:
        """One call as the 3.5+ templates write it: a function block of parameter blocks."""
        name, arguments = function_of(call)
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                arguments = {}
        params = "".join(
            f"<parameter={key}>\n{self._value(value)}\n</parameter>\n"
            for key, value in (arguments.items() if isinstance(arguments, dict) else ())
        )
        return f"{TOOL_CALL_OPEN}\n<function={name}>\n{params}</function>\n{TOOL_CALL_CLOSE}"

    def _value(self, value: Any) -> str:
        if isinstance(value, str):
            return value
        if self.json_scalars or isinstance(value, dict | list | tuple):
            return json.dumps(value, ensure_ascii=False)
        return str(value)  # Jinja's ``string`` filter: True, None, 1.5

    def __repr__(self) -> str:
        return f"{type(self).__name__}(thinking={self.thinking})"


class Qwen36Processor(Qwen35Processor):
    """Qwen 3.6: the 3.5 format; ``preserve_thinking`` makes its template keep earlier
    reasoning, so the rollout's context equals the official rendering turn for turn."""

    name = "qwen3.6"
    chat_template = "qwen3_6"
    json_scalars = True

    keeps_reasoning = True

    @property
    def template_kwargs(self) -> dict[str, Any]:
        return {"enable_thinking": self.thinking, "preserve_thinking": True}


EFFORTS = {
    "xhigh": (
        "Reasoning effort is set to xhigh. Please think carefully through the task, validate key "
        "assumptions, consider plausible alternatives, and prioritize correctness, consistency, "
        "and clarity in the final answer."
    ),
    "medium": "",
    "low": (
        "Reasoning effort is set to low. Keep your thinking brief and focused, moving directly "
        "to the conclusion without unnecessary elaboration."
    ),
}


class Qwen38Processor(Qwen36Processor):
    """Qwen 3.8: the 3.6 format, earlier reasoning kept by default, and option
    ``reasoning_effort`` (``xhigh``, the default, ``medium`` or ``low``): with thinking on, its
    instruction opens the system turn (a system turn of its own when there is no prompt)."""

    name = "qwen3.8"
    chat_template = "qwen3_8"

    def __init__(
        self, tokenizer: Any = None, thinking: bool = True, reasoning_effort: str = "xhigh"
    ) -> None:
        super().__init__(tokenizer, thinking=thinking)
        if reasoning_effort not in EFFORTS:
            raise ValueError(
                f"reasoning_effort must be one of {', '.join(EFFORTS)}, not {reasoning_effort!r}"
            )
        self.reasoning_effort = reasoning_effort

    @property
    def instruction(self) -> str:
        return EFFORTS[self.reasoning_effort] if self.thinking else ""

    @property
    def template_kwargs(self) -> dict[str, Any]:
        return {**super().template_kwargs, "reasoning_effort": self.reasoning_effort}

    def init_system_input(self, prompt: str) -> str:
        text = "\n\n".join(part for part in (self.instruction, self.clean(prompt)) if part)
        return self.message("system", text) if text else ""

    def __repr__(self) -> str:
        return (
            f"Qwen38Processor(thinking={self.thinking}, reasoning_effort={self.reasoning_effort})"
        )

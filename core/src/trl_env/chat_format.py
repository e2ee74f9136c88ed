"""A processor written as data: one chat wire format declared by its headers, closer and tokens.

Most chat formats frame every message the same way (a role header, the text, a closing token,
maybe a separator) and differ only in a few facts. :class:`ChatFormat` implements the
:class:`~trl_env.protocols.Processor` protocol and its optional extras from those facts, so a
model family is a handful of class attributes plus a small override where its template is odd::

    class Phi35Processor(ChatFormat):
        name = "phi3.5"
        chat_template = "phi3_5"
        role_header = "<|{role}|>\\n"
        turn_end = "<|end|>"
        separator = "\\n"
        stop_tokens = ("<|end|>",)
        extra_ends = ("<|endoftext|>",)
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

from .parsing import function_of, parse_completion, to_json
from .protocols import Tokenizer
from .tiny import TinySpec


class ChatFormat:
    """A processor declared by its wire facts; subclasses set the class attributes below."""

    name: ClassVar[str]
    # The official template in trl/chat_templates it equals (an option may pick another).
    chat_template: str

    role_header: ClassVar[str]  # text before a message, with ``{role}``: "<|im_start|>{role}\n"
    turn_end: ClassVar[str]  # closes every message, and a turn cut at the token limit
    stop_tokens: ClassVar[tuple[str, ...]]  # tokens generation stops on
    # Written after ``turn_end`` before the next message; the model never samples it.
    separator: ClassVar[str] = ""
    # More tokens that end a completion when parsing one (the tokenizer's end of text).
    extra_ends: ClassVar[tuple[str, ...]] = ()
    bos: ClassVar[str] = ""  # written once, at the very start of the first prompt
    assistant_role: ClassVar[str] = "assistant"  # the model's role name in headers (Gemma: model)
    # No system role: the system text goes into the first user message (see merge_system).
    merge_system_into_user: ClassVar[bool] = False
    default_system: ClassVar[str] = ""  # written when there is no system prompt
    always_system: ClassVar[bool] = False  # a system message even when its text is empty
    trim: ClassVar[bool] = False  # the template strips message text
    generation_suffix: ClassVar[str] = ""  # written after the assistant header
    # The family's reasoning block, split off by parsing; None: the format has none, and a
    # "<think>" the model writes is part of its action.
    reasoning_tags: ClassVar[tuple[str, str] | None] = None
    # Without reasoning_tags: the reasoning the tokenizer's response parser reads is the family's
    # (a format whose reasoning is no pair of tags); otherwise a parse that finds some is unused.
    parser_reasoning: ClassVar[bool] = False
    # What the template writes between a message's text and its first tool call, and between
    # calls: the parser's calls are joined so, as the model wrote them.
    tool_call_joiners: ClassVar[tuple[str, str]] = ("\n", "\n")
    tiny: ClassVar[TinySpec | None] = None  # the family's tiny model (family and template filled)

    def __init__(self, tokenizer: Tokenizer | None = None) -> None:
        self.tokenizer = tokenizer

    # -- rendering -----------------------------------------------------------------------------

    def header(self, role: str) -> str:
        return self.role_header.format(role=self.assistant_role if role == "assistant" else role)

    def message(self, role: str, text: str) -> str:
        """One whole message as the template writes it, separator included."""
        return self.header(role) + text + self.turn_end + self.separator

    def clean(self, text: str) -> str:
        return text.strip() if self.trim else text

    @property
    def generation_prompt(self) -> str:
        return self.header("assistant") + self.generation_suffix

    @property
    def template_kwargs(self) -> dict[str, Any]:
        """Extra arguments that make ``apply_chat_template`` render what this processor renders."""
        return {}

    def system_text(self, prompt: str) -> str:
        """The system message's text for ``prompt`` (some templates add a preamble)."""
        return self.clean(prompt or self.default_system)

    def merge_system(self, system: str, user: str) -> str:
        """The first user message's text when the format has no system role."""
        return f"{system}\n\n{self.clean(user)}"

    def init_system_input(self, prompt: str) -> str:
        """The start of the conversation; an empty prompt means no system message."""
        if self.merge_system_into_user or not (prompt or self.default_system or self.always_system):
            return self.bos
        return self.bos + self.message("system", self.system_text(prompt))

    def append_user_input(self, prompt: str) -> str:
        return self.message("user", self.clean(prompt)) + self.generation_prompt

    def init_conversation(self, system: str, user: str) -> str:
        """The first prompt; without a system role the system text opens the first user message."""
        if not (self.merge_system_into_user and system):
            return self.init_system_input(system) + self.append_user_input(user)
        return (
            self.bos
            + self.message("user", self.merge_system(system, user))
            + (self.generation_prompt)
        )

    # -- parsing -------------------------------------------------------------------------------

    def render_tool_call(self, call: dict[str, Any]) -> str:
        """A call parsed by the tokenizer's response template, written back as text (JSON here)."""
        name, arguments = function_of(call)
        return to_json({"name": name, "arguments": arguments})

    def parse_agent_output(self, completion: str) -> tuple[str, str]:
        return parse_completion(
            completion,
            ends=(*self.stop_tokens, *self.extra_ends),
            tokenizer=self.tokenizer,
            prefix=self.generation_prompt,
            render_tool_call=self.render_tool_call,
            reasoning_tags=self.reasoning_tags,
            parser_reasoning=self.parser_reasoning,
            joiner=self.tool_call_joiners,
        )

    # -- the offline tiny model ----------------------------------------------------------------

    @property
    def tiny_spec(self) -> TinySpec | None:
        if self.tiny is None:
            return None
        return replace(
            self.tiny,
            family=self.tiny.family or self.name,
            chat_template=self.tiny.chat_template or self.chat_template,
        )

    # The protocol's extras, derived from the declaration.

    @property
    def turn_close(self) -> str:
        return self.turn_end

    @property
    def turn_separator(self) -> str:
        return self.separator

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

"""Turns shared by Gemma 2 and 3: ``<start_of_turn>{role}\\n{text|trim}<end_of_turn>\\n``."""

from __future__ import annotations

from typing import Any, ClassVar

from trl_env.parsing import function_of, parse_completion, to_json
from trl_env.tiny import TinySpec

BOS, EOS, PAD = "<bos>", "<eos>", "<pad>"
START_OF_TURN, END_OF_TURN = "<start_of_turn>", "<end_of_turn>"

# The real tokenizer is SentencePiece without pre-tokenization; for the tiny byte-level one, split
# like it tends to: words with their leading space, single digits, newline runs apart.
GEMMA_PATTERN = r" ?[^\s\p{N}]+|\p{N}|\n+|[^\S\n]+(?!\S)|[^\S\n]+"


def turn(role: str, text: str) -> str:
    return f"{START_OF_TURN}{role}\n{text}{END_OF_TURN}\n"


def render_tool_call(call: dict[str, Any]) -> str:
    """Gemma has no tool-call syntax; a call parsed by a model's own template is kept as JSON."""
    name, arguments = function_of(call)
    return to_json({"name": name, "arguments": arguments})


class GemmaProcessor:
    """Gemma: user and model turns only; the system text goes into the first user turn.

    The templates trim message text; user text is trimmed here too, the model's own turns are kept
    as sampled.
    """

    name: ClassVar[str]
    chat_template: ClassVar[str]
    model_type: ClassVar[str]

    # Generation stops at <end_of_turn>, not at the tokenizer's eos_token (<eos>).
    stop_tokens: tuple[str, ...] = (END_OF_TURN,)
    turn_close = END_OF_TURN
    turn_separator = "\n"
    generation_prompt = f"{START_OF_TURN}model\n"

    def __init__(self, tokenizer: Any = None) -> None:
        self.tokenizer = tokenizer

    def merge_system(self, system: str, user: str) -> str:
        """The first user turn's text, with the system text at its start."""
        raise NotImplementedError

    def init_system_input(self, prompt: str) -> str:
        """Only the BOS: Gemma has no system turn (see :meth:`init_conversation`)."""
        return BOS

    def init_conversation(self, system: str, user: str) -> str:
        text = self.merge_system(system, user) if system else user.strip()
        return BOS + turn("user", text) + self.generation_prompt

    def append_user_input(self, prompt: str) -> str:
        return turn("user", prompt.strip()) + self.generation_prompt

    def parse_agent_output(self, completion: str) -> tuple[str, str]:
        return parse_completion(
            completion,
            ends=(*self.stop_tokens, EOS),
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
            bos_token=BOS,
            eos_token=EOS,
            pad_token=PAD,
            add_bos_token=True,
            special_tokens=(PAD, EOS, BOS, START_OF_TURN, END_OF_TURN),
            split_pattern=GEMMA_PATTERN,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

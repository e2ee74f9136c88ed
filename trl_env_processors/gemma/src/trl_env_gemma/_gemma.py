"""Turns shared by Gemma 2 and 3: ``<start_of_turn>{role}\\n{text|trim}<end_of_turn>\\n``."""

from __future__ import annotations

from typing import Any, ClassVar

from trl_env.chat_format import ChatFormat
from trl_env.tiny import TinySpec

BOS, EOS, PAD, UNK, MASK = "<bos>", "<eos>", "<pad>", "<unk>", "<mask>"
START_OF_TURN, END_OF_TURN = "<start_of_turn>", "<end_of_turn>"

# The real tokenizer is SentencePiece-like: spaces become "▁", no pre-tokenizer, merges over the
# whole text, bytes for unknown characters. While training the tiny one, pieces end like
# SentencePiece's: a word with at most one leading "▁", single digits, runs of "▁" or newlines.
PIECE_PATTERN = r"▁?[^▁\s\p{N}]+|\p{N}|▁+(?![^▁\s\p{N}])|▁|\n+|\s+"
# Whitespace runs the real vocabulary has as one token.
SINGLE_TOKENS = ("\n\n", "\n\n\n", "\n\n\n\n", "  ", "   ", "    ", "        ")


def gemma_tiny(
    model_type: str,
    *,
    special_tokens: tuple[str, ...] = (PAD, EOS, BOS, UNK, MASK, START_OF_TURN, END_OF_TURN),
    eos_tokens: tuple[str, ...] = (EOS, END_OF_TURN),
    words: tuple[str, ...] = ("user", "model"),
    config: dict[str, Any] | None = None,
) -> TinySpec:
    """A Gemma tiny model; Gemma 4 passes its own control tokens, end ids and layer options."""
    return TinySpec(
        model_type=model_type,
        tokenizer_class="GemmaTokenizer",
        split_pattern=PIECE_PATTERN,
        byte_fallback=True,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        add_bos_token=True,
        # In the real vocabulary's order.
        special_tokens=special_tokens,
        single_tokens=SINGLE_TOKENS,
        words=words,
        # generation_config ends a reply at the tokenizer's EOS and at the end of turn.
        eos_tokens=eos_tokens,
        config=config or {},
    )


class GemmaProcessor(ChatFormat):
    """Gemma: user and model turns only; the system text goes into the first user turn.

    The templates trim message text; user text is trimmed here too, the model's own turns are kept
    as sampled.
    """

    model_type: ClassVar[str]

    role_header = f"{START_OF_TURN}{{role}}\n"
    assistant_role = "model"
    turn_end = END_OF_TURN
    # Generation stops at <end_of_turn>, not at the tokenizer's eos_token (<eos>).
    stop_tokens = (END_OF_TURN,)
    separator = "\n"
    extra_ends = (EOS,)
    bos = BOS
    merge_system_into_user = True
    trim = True

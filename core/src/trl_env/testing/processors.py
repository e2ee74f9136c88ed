"""Checks for processor authors: prove a processor equal to its model's chat template.

Use them with the official template and a tokenizer built offline (``trl_env.tiny``)::

    from trl_env.testing.processors import assert_matches_template, conversations
    from hypothesis import given

    @given(conversations())
    def test_matches(conv):
        assert_matches_template(processor, tokenizer, [conv])

The hypothesis strategies import hypothesis when called, so importing this module stays light.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .. import extras
from ..checks import (
    Conversation,
    encode,
    first_difference,
    processor_text,
    segment_mismatch,
    segments,
    template_kwargs,
    template_text,
)
from ..protocols import Processor, Tokenizer

__all__ = [
    "Conversation",
    "assert_inserted_segments_stable",
    "assert_matches_template",
    "assert_parse_total",
    "assert_segments_tokenize_alone",
    "assert_single_bos",
    "assert_single_tokens",
    "boundary_drift",
    "conversations",
    "template_turn",
    "texts",
    "tiny_tokenizer",
]

# Pieces that break naive renderers: whitespace runs, digit groups, multi-byte text, lookalikes.
_PIECES = (
    "\n",
    "\n\n",
    "\r\n",
    " ",
    "  ",
    "\t",
    "0",
    "42",
    "2048",
    "3.14",
    "-7",
    "é",
    "ß",
    "中文",
    "🙂",
    "\u00a0",
    "\u3000",
    "<",
    ">",
    "|",
    "<|",
    "|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "<|im_start|>",
    "<|im_end|>",
    "<|eot_id|>",
    "<|begin_of_text|>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<bos>",
    "```",
    '{"a": 1}',
)


def texts(extra: Sequence[str] = (), *, max_pieces: int = 8, exclude: Sequence[str] = ()) -> Any:
    """A hypothesis strategy of awkward text; ``exclude``\\d substrings never occur in it."""
    from hypothesis import strategies as st

    chars = st.characters(codec="utf-8", exclude_categories=["Cs"])
    pieces = [p for p in (*_PIECES, *extra) if not any(x in p for x in exclude)]
    piece = st.one_of(st.sampled_from(pieces), st.text(chars, max_size=6))
    out = st.lists(piece, max_size=max_pieces).map("".join)
    if exclude:
        out = out.filter(lambda s: not any(x in s for x in exclude))
    return out


def conversations(
    text: Any = None, reply: Any = None, *, max_turns: int = 5, system: bool | None = None
) -> Any:
    """Conversations of 1..``max_turns`` user messages; ``system``: always, never, or (None) either.

    A system prompt, when present, is never empty: an empty one means "no system message" to a
    processor (see :func:`trl_env.extras.first_prompt`).
    """
    from hypothesis import strategies as st

    text = texts() if text is None else text
    reply = text if reply is None else reply
    sys_text = text.filter(bool)
    sys_strategy = {True: sys_text, False: st.none(), None: st.none() | sys_text}[system]

    @st.composite
    def build(draw: Any) -> Conversation:
        n = draw(st.integers(1, max_turns))
        users = tuple(draw(text) for _ in range(n))
        replies = tuple(draw(reply) for _ in range(n - 1))
        return Conversation(draw(sys_strategy), users, replies)

    return build()


def assert_matches_template(
    processor: Processor,
    tokenizer: Tokenizer,
    conversations: Iterable[Conversation],
    *,
    template: str | None = None,
    **kwargs: Any,
) -> None:
    """The engine's text for each conversation equals the chat template's, character for character.

    ``template`` overrides the tokenizer's template; ``kwargs`` go to ``apply_chat_template`` on
    top of the processor's ``template_kwargs``.
    """
    options = {**template_kwargs(processor), **kwargs}
    for conv in conversations:
        ours = processor_text(processor, conv, tokenizer)
        theirs = template_text(tokenizer, conv, template=template, **options)
        diff = first_difference(ours, theirs)
        assert diff is None, f"{conv!r}: {diff}"


def assert_segments_tokenize_alone(
    processor: Processor, tokenizer: Tokenizer, conversations: Iterable[Conversation]
) -> None:
    """Tokenizing segment by segment (as the engine does) equals tokenizing the whole text.

    Holds when the replies are canonical model text; a sampled turn keeps its own ids anyway, so
    for arbitrary replies use :func:`assert_inserted_segments_stable`.
    """
    for conv in conversations:
        problem = segment_mismatch(tokenizer, segments(processor, conv, tokenizer))
        assert problem is None, f"{conv!r}: {problem}"


def assert_inserted_segments_stable(
    processor: Processor, tokenizer: Tokenizer, conversations: Iterable[Conversation]
) -> None:
    """Whatever the model wrote before it, an inserted segment tokenizes as it does alone.

    True when every inserted segment starts right after a special token (the end of turn), so no
    merge can cross into it.
    """
    for conv in conversations:
        before = ""
        for piece in segments(processor, conv, tokenizer):
            if piece.inserted and before:
                whole = encode(tokenizer, before + piece.text)
                alone = encode(tokenizer, piece.text)
                assert (
                    whole[-len(alone) :] == alone and whole == encode(tokenizer, before) + alone
                ), f"{conv!r}: inserted segment {piece.text[:40]!r} merges with the text before it"
            before += piece.text


def assert_single_bos(
    processor: Processor, tokenizer: Tokenizer, conversations: Iterable[Conversation]
) -> None:
    """Tokenized as the engine does, the text starts with one BOS and holds no other of its own.

    BOS strings inside the conversation's text count once each: text is inserted verbatim.
    """
    bos = tokenizer.bos_token_id
    if bos is None:
        return
    for conv in conversations:
        ids = [i for s in segments(processor, conv, tokenizer) for i in encode(tokenizer, s.text)]
        texts_ = (conv.system or "", *conv.users, *conv.replies)
        inside = sum(t.count(tokenizer.bos_token) for t in texts_)
        assert ids[:1] == [bos] and ids.count(bos) == 1 + inside, (
            f"{conv!r}: {ids.count(bos)} BOS tokens, expected {1 + inside}"
        )


def assert_parse_total(
    processor: Processor, completions: Iterable[str], *, markers: Sequence[str] | None = None
) -> list[tuple[str, str]]:
    """``parse_agent_output`` returns two strings without end-of-turn tokens or the reasoning
    markers (default: the processor's ``reasoning_tags``; a family without any keeps
    ``<think>`` in its action)."""
    if markers is None:
        markers = tuple(getattr(processor, "reasoning_tags", None) or ())
    stops = extras.stop_tokens(processor)
    out = []
    for completion in completions:
        result = processor.parse_agent_output(completion)
        assert isinstance(result, tuple) and len(result) == 2, f"{completion!r} -> {result!r}"
        assert all(isinstance(part, str) for part in result), f"{completion!r} -> {result!r}"
        for part in result:
            leftover = [t for t in (*stops, *markers) if t in part]
            assert not leftover, f"{completion!r} -> {result!r} still holds {leftover}"
        out.append(result)
    return out


def assert_single_tokens(tokenizer: Tokenizer, strings: Iterable[str], *, after: str) -> None:
    """Each of ``strings`` is one token when it follows the special token ``after``.

    The merges a real vocabulary has for whitespace (``"\n\n"``, runs of spaces) are what make
    re-tokenized text drift; a tiny tokenizer without them hides that drift from tests. ``after``
    is a special token that keeps the string from being the start of the text (SentencePiece
    tokenizers add a "▁" there) and that swallows no whitespace itself.
    """
    anchor = encode(tokenizer, after)
    for text in strings:
        ids = encode(tokenizer, after + text)
        assert ids[: len(anchor)] == anchor and len(ids) == len(anchor) + 1, (
            f"{text!r} is {tokenizer.convert_ids_to_tokens(ids[len(anchor) :])}, not one token"
        )


def boundary_drift(
    processor: Processor, tokenizer: Tokenizer, turn: str = "\nHello"
) -> tuple[int, int]:
    """``(bridge_mismatches, noncanonical_turns)`` of a first prompt and one sampled ``turn``.

    The turn's ids are the ones it has alone, as a model that writes canonical text samples them;
    a turn that starts with a newline right after a header ending in one is where real
    vocabularies merge across the boundary.
    """
    from ..episode import drift_counters

    prompt = encode(tokenizer, extras.first_prompt(processor, "Rules.", "Start."))
    sampled = encode(tokenizer, turn + extras.stop_tokens(processor, tokenizer)[0])
    _, mismatches, noncanonical = drift_counters(tokenizer, [(prompt, True), (sampled, False)])
    return mismatches, noncanonical


def tiny_tokenizer(processor: Processor, *, response_template: bool = False) -> Any:
    """The processor family's tiny tokenizer (built once, offline), optionally able to parse.

    ``response_template=True`` adds trl's response template for the official chat template, so
    ``tokenizer.parse_response`` works; trl raises for templates it does not know.
    """
    from ..models import load_tokenizer, model_path

    tokenizer = load_tokenizer(model_path(None, processor))
    if response_template:
        from trl.chat_template_utils import add_response_schema

        add_response_schema(tokenizer)
    return tokenizer


def template_turn(
    tokenizer: Tokenizer, processor: Processor, message: dict[str, Any], **kwargs: Any
) -> str:
    """What the model samples for assistant ``message``, read off the chat template.

    The text the template adds for ``message`` after the generation prompt, up to and including
    the end-of-turn token (the processor's ``turn_separator`` after it is not sampled).
    """
    prompt = [{"role": "user", "content": "go"}]
    before = tokenizer.apply_chat_template(
        prompt, tokenize=False, add_generation_prompt=True, **kwargs
    )
    after = tokenizer.apply_chat_template([*prompt, message], tokenize=False, **kwargs)
    assert after.startswith(before), "the template renders the prompt differently with the reply"
    return after[len(before) :].removesuffix(extras.turn_separator(processor))

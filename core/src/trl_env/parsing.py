"""Turning a sampled turn into ``(reasoning, action)``; never raises, whatever the text."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from .protocols import Tokenizer

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
ToolCallRenderer = Callable[[dict[str, Any]], str]


def cut_turn(text: str, ends: Iterable[str]) -> tuple[str, str]:
    """The turn before the first end-of-turn token, and that token ("" if none was sampled).

    Generation stops at the end of turn, so nothing after it belongs to the turn.
    """
    found = [(i, end) for end in ends if (i := text.find(end)) >= 0]
    if not found:
        return text, ""
    i, end = min(found)
    return text[:i], end


def split_reasoning(
    text: str, tags: tuple[str, str] = (THINK_OPEN, THINK_CLOSE)
) -> tuple[str, str]:
    """``(reasoning, action)`` read the way the Qwen and DeepSeek-R1 templates read a turn.

    The reasoning is what precedes the first closing tag (after the last opening tag before
    it); the action is what follows the last closing tag. Two reasoning blocks in one reply
    thus give the first block and the text after the second, on every parse path.
    """
    open_tag, close_tag = tags
    if close_tag in text:
        return text.split(close_tag)[0].split(open_tag)[-1], text.split(close_tag)[-1]
    before, opened, after = text.partition(open_tag)
    if opened:  # cut while thinking: all of it is reasoning, the action is what came before
        return after, before
    return "", text


def clean(text: str, markers: Iterable[str]) -> str:
    """``text`` without ``markers``, stripped."""
    markers = tuple(m for m in markers if m)
    # Repeat: removing one marker can join its neighbours into another ("<thi<think>nk>").
    while any(m in text for m in markers):
        for marker in markers:
            text = text.replace(marker, "")
    return text.strip()


def parse_with_tokenizer(
    tokenizer: Any,
    text: str,
    prefix: str,
    render_tool_call: ToolCallRenderer,
    joiner: str | tuple[str, str],
) -> tuple[str, str, int] | None:
    """``tokenizer.parse_response`` when the tokenizer has a response template, else ``None``:
    reasoning, action and how many tool calls the action holds.

    Tool calls come back structured; they are rendered again in the family's wire format and kept
    in the action, because the environment, not the processor, interprets them. ``joiner``: what
    the template writes between the text and the first call, and between calls (one string for
    both).
    """
    if getattr(tokenizer, "response_template", None) is None:
        return None
    try:
        parsed = tokenizer.parse_response(text, prefix=prefix)
        reasoning = parsed.get("reasoning_content") or ""
        content = parsed.get("content") or ""
        calls = [render_tool_call(call) for call in parsed.get("tool_calls") or []]
    except Exception:  # a malformed tool call or an odd parser: the hand-written path decides
        return None
    if not isinstance(reasoning, str) or not isinstance(content, str):
        return None
    before, between = (joiner, joiner) if isinstance(joiner, str) else joiner
    block = between.join(calls)
    return reasoning, before.join(part for part in (content.strip(), block) if part), len(calls)


def function_of(call: dict[str, Any]) -> tuple[str, Any]:
    function = call.get("function", call)
    return str(function.get("name", "")), function.get("arguments", {})


def to_json(value: Any) -> str:
    """JSON the way transformers' ``tojson`` template filter writes it."""
    return json.dumps(value, ensure_ascii=False)


def parse_completion(
    completion: str,
    *,
    ends: Iterable[str],
    tokenizer: Tokenizer | None,
    prefix: str,
    render_tool_call: ToolCallRenderer,
    joiner: str | tuple[str, str] = "\n",
    reasoning_tags: tuple[str, str] | None = None,
    parser_reasoning: bool = False,
) -> tuple[str, str]:
    """``(reasoning, action)`` of a sampled turn; ``ends`` are the tokens that end a turn.

    With ``reasoning_tags`` (a family whose format has a reasoning block) the reasoning is split
    off by :func:`split_reasoning` first, the same on every path, and the tokenizer's response
    parser (if any) reads only the rest, for its tool calls. Without them the format has no
    reasoning block and no tag is special: the reasoning is empty, and a parse that split some
    off is not used (trl gives Qwen 2.5 Qwen 3's parser, which reads ``<think>``), unless
    ``parser_reasoning`` says the family's reasoning format is the one its parser reads.
    """
    ends = tuple(ends)
    text, end = cut_turn(completion if isinstance(completion, str) else str(completion), ends)
    if reasoning_tags is None:
        parsed = parse_with_tokenizer(tokenizer, text + end, prefix, render_tool_call, joiner)
        if parsed is not None and parser_reasoning:
            return clean(parsed[0], ends), clean(parsed[1], ends)
        return "", clean(_calls_only(parsed, text), ends)
    open_tag, close_tag = reasoning_tags
    if prefix.rfind(open_tag) > prefix.rfind(close_tag):
        text = open_tag + text  # the generation prompt opened the block (Qwen3.5, DeepSeek-R1)
    reasoning, action = split_reasoning(text, reasoning_tags)
    markers = (*reasoning_tags, *ends)
    action = clean(action, markers)
    # The parser reads the action as a turn without reasoning: the prefix stops before the block
    # a generation prompt may open (Qwen3.5's "<think>\n", Qwen3's empty block).
    header = prefix.split(open_tag)[0]
    parsed = parse_with_tokenizer(tokenizer, action + end, header, render_tool_call, joiner)
    return clean(reasoning, markers), clean(_calls_only(parsed, action), markers)


def _calls_only(parsed: tuple[str, str, int] | None, text: str) -> str:
    """The parser's action where it read tool calls (and no reasoning), else the text itself:
    a parser is read for its tool calls, so every parse path gives the same action."""
    if parsed is None or parsed[0] or not parsed[2]:
        return text
    return parsed[1]

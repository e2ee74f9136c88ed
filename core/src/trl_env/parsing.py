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
    """Hand-written split at the closing tag (``</think>``), the way the Qwen3 template reads it."""
    open_tag, close_tag = tags
    head, closed, tail = text.partition(close_tag)
    if closed:
        return head.split(open_tag)[-1], tail
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
    tokenizer: Any, text: str, prefix: str, render_tool_call: ToolCallRenderer, joiner: str
) -> tuple[str, str] | None:
    """``tokenizer.parse_response`` when the tokenizer has a response template, else ``None``.

    Tool calls come back structured; they are rendered again in the family's wire format and kept
    in the action, because the environment, not the processor, interprets them.
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
    return reasoning, joiner.join(part for part in (content.strip(), *calls) if part)


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
    joiner: str = "\n",
    reasoning_tags: tuple[str, str] = (THINK_OPEN, THINK_CLOSE),
) -> tuple[str, str]:
    """``(reasoning, action)`` of a sampled turn; ``ends`` are the tokens that end a turn."""
    ends = tuple(ends)
    text, end = cut_turn(completion if isinstance(completion, str) else str(completion), ends)
    parsed = parse_with_tokenizer(tokenizer, text + end, prefix, render_tool_call, joiner)
    reasoning, action = parsed if parsed is not None else ("", text)
    if not reasoning:  # no reasoning field, or a parser that does not know the markers
        reasoning, action = split_reasoning(action, reasoning_tags)
    markers = (*reasoning_tags, *ends)
    return clean(reasoning, markers), clean(action, markers)

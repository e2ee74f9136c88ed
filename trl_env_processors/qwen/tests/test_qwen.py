"""Qwen processors against the official templates inside trl, with tiny offline tokenizers.

The checks every family passes come from :class:`~trl_env.testing.processor_family.ProcessorFamily`;
this file holds Qwen's facts and quirks: Qwen 3's reasoning, thinking off, and tool calls.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import trl_env
from trl_env.checks import Conversation, check_processor, processor_text, template_text
from trl_env.testing.processor_family import FUZZ, Member, ProcessorFamily, tokenizer_fixture
from trl_env.testing.processors import (
    assert_matches_template,
    assert_parse_total,
    assert_segments_tokenize_alone,
    conversations,
    template_turn,
    texts,
)
from trl_env.tiny import official_template
from trl_env_qwen import Qwen3Processor, Qwen25Processor

MARKERS = ("<think>", "</think>")
TOOL_CALL = '{"name": "f", "arguments": {"a": 1}}'


def canonical(reply: str) -> str:
    """The model's own text never starts with the newline the header already ends with."""
    return reply.lstrip()


reasoning_replies = st.builds(
    lambda r, a: f"<think>\n{r.strip(chr(10))}\n</think>\n\n{a.lstrip(chr(10))}",
    texts(exclude=MARKERS),
    texts(exclude=MARKERS),
)


class TestQwen(ProcessorFamily):
    processors = (Qwen25Processor, Qwen3Processor)
    stop_tokens = ("<|im_end|>",)
    turn_separator = "\n"
    eos_tokens = ("<|im_end|>", "<|endoftext|>")
    # Qwen's vocabulary writes newline runs, space runs and punctuation before newlines as one
    # token; the tiny one must, or re-tokenization drift stays invisible on CPU.
    single_tokens = ("\n\n", "\n\n\n", "  ", "    ", "        ", ".\n\n", " \n")
    anchor = "<|im_end|>"
    response_template = True
    parse_pieces = ("<|im_start|>", "<tool_call>", "</tool_call>", TOOL_CALL, "{bad", "🙂", " ")
    parse_examples = (
        "<thi<think>nk>x</thi</think>nk>y<|im_<|im_end|>end|>",
        f"<tool_call>\n{TOOL_CALL}<|im_end|>",
    )
    plain_exclude = ("<tool_call>",)

    def replies(self, member: Member) -> Any:
        # Qwen 3's official template drops earlier reasoning: see the tests of it below.
        return texts(exclude=["</think>"]) if member.cls is Qwen3Processor else texts()

    def canonical(self, reply: str) -> str:
        return canonical(reply)

    def test_eos_token_is_the_end_of_turn(self, member: Member) -> None:
        assert member.tokenizer.eos_token == "<|im_end|>"

    def test_tiny_tokenizer_splits_digits_after_nfc(self, member: Member) -> None:
        """The real pre-tokenizer: digits one by one, NFC before splitting."""
        tokenizer = member.tokenizer
        assert tokenizer.tokenize("2048") == ["2", "0", "4", "8"]
        assert tokenizer("e\u0301", add_special_tokens=False) == tokenizer(
            "é", add_special_tokens=False
        )


qwen3_tok = tokenizer_fixture(Qwen3Processor)


qwen3_parsing_tok = tokenizer_fixture(Qwen3Processor, parsing=True)


def test_thinking_option_is_typed() -> None:
    assert trl_env.load_processor("qwen3", thinking=False).thinking is False
    with pytest.raises(trl_env.PluginLoadError, match="thinking"):
        trl_env.load_processor("qwen3", thinking="no")


# -- Qwen 3's reasoning against the official templates ------------------------------------------


@FUZZ
@given(conversations(reply=reasoning_replies))
def test_qwen3_keeps_reasoning_like_the_training_template(
    qwen3_tok: Any, conv: Conversation
) -> None:
    processor = Qwen3Processor(qwen3_tok)
    assert_matches_template(
        processor, qwen3_tok, [conv], template=official_template("qwen3_training")
    )
    assert_segments_tokenize_alone(processor, qwen3_tok, [conv])


@FUZZ
@given(conversations(reply=st.one_of(texts(), reasoning_replies)))
def test_qwen3_drop_reasoning_gives_the_official_history(
    qwen3_tok: Any, conv: Conversation
) -> None:
    """The documented alternative: re-rendered history without earlier reasoning."""
    processor = Qwen3Processor(qwen3_tok)
    dropped = Conversation(
        conv.system, conv.users, tuple(map(processor.drop_reasoning, conv.replies))
    )
    assert processor_text(processor, dropped) == template_text(qwen3_tok, conv)


@FUZZ
@given(conversations(reply=texts(exclude=MARKERS).map(canonical)))
def test_qwen3_without_thinking(qwen3_tok: Any, conv: Conversation) -> None:
    processor = Qwen3Processor(qwen3_tok, thinking=False)
    # The first prompt is the official one with enable_thinking=False ...
    first = Conversation(conv.system, conv.users[:1])
    assert_matches_template(processor, qwen3_tok, [first])
    # ... and later turns keep the empty reasoning block they were sampled after.
    assert_matches_template(
        processor, qwen3_tok, [conv], template=official_template("qwen3_training")
    )
    assert_segments_tokenize_alone(processor, qwen3_tok, [conv])


def test_qwen3_official_template_drops_earlier_reasoning(qwen3_tok: Any) -> None:
    """The documented exception, shown on one conversation."""
    conv = Conversation("sys", ("a", "b"), ("<think>\nplan\n</think>\n\nmove",))
    ours = processor_text(Qwen3Processor(qwen3_tok), conv)
    assert "plan" in ours and "plan" not in template_text(qwen3_tok, conv)


# -- parsing Qwen 3 without thinking, its reasoning, and tool calls ------------------------------


@FUZZ
@given(TestQwen().completions())
@example(TestQwen.parse_examples[0])
def test_parse_never_raises_without_thinking(
    qwen3_tok: Any, qwen3_parsing_tok: Any, completion: str
) -> None:
    for tokenizer in (None, qwen3_tok, qwen3_parsing_tok):
        processor = Qwen3Processor(tokenizer, thinking=False)
        assert_parse_total(processor, [completion, completion[: len(completion) // 2]])


plain = TestQwen().plain()


@FUZZ
@given(plain, plain)
def test_parse_reads_template_rendered_reasoning(
    qwen3_tok: Any, qwen3_parsing_tok: Any, reasoning: str, content: str
) -> None:
    message = {"role": "assistant", "content": content, "reasoning_content": reasoning}
    completion = template_turn(qwen3_tok, Qwen3Processor(), message)
    for tokenizer in (qwen3_tok, qwen3_parsing_tok):
        assert Qwen3Processor(tokenizer).parse_agent_output(completion) == (
            reasoning.strip(),
            content.strip(),
        )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
tool_calls = st.lists(
    st.builds(
        lambda name, args: {"type": "function", "function": {"name": name, "arguments": args}},
        st.from_regex(r"[a-z_]{1,8}", fullmatch=True),
        st.dictionaries(st.from_regex(r"[a-z]{1,5}", fullmatch=True), json_values, max_size=3),
    ),
    min_size=1,
    max_size=3,
)


@FUZZ
@given(plain.map(str.strip), tool_calls)
def test_tool_calls_stay_in_the_action(content: str, calls: list[dict[str, Any]]) -> None:
    """Every parse path keeps the tool-call blocks exactly as the template renders them."""
    member = Member(Qwen25Processor, response_template=True)
    message = {"role": "assistant", "content": content, "tool_calls": calls}
    completion = template_turn(member.tokenizer, Qwen25Processor(), message)
    expected = completion.removesuffix("<|im_end|>").removeprefix("\n").strip()
    for tokenizer in member.parse_tokenizers:
        reasoning, action = Qwen25Processor(tokenizer).parse_agent_output(completion)
        assert (reasoning, action) == ("", expected)
        assert action.count("<tool_call>") == len(calls)


@pytest.mark.parametrize("thinking", [True, False])
def test_parse_paths_agree_after_the_generation_prompt(
    qwen3_parsing_tok: Any, thinking: bool
) -> None:
    processor = Qwen3Processor(qwen3_parsing_tok, thinking=thinking)
    # Thinking off, the empty block is in the prompt; thinking on, the model samples it.
    message = {"role": "assistant", "content": "left"}
    completion = template_turn(qwen3_parsing_tok, processor, message, enable_thinking=thinking)
    assert (
        processor.parse_agent_output(completion)
        == Qwen3Processor(thinking=thinking).parse_agent_output(completion)
        == ("", "left")
    )


def test_unclosed_reasoning_is_reasoning() -> None:
    assert Qwen3Processor().parse_agent_output("<think>\nstill thinking about") == (
        "still thinking about",
        "",
    )


def test_check_passes_without_thinking(qwen3_tok: Any) -> None:
    report = check_processor(Qwen3Processor(qwen3_tok, thinking=False), qwen3_tok)
    assert report.ok, report.message
    assert report.stop_tokens == {"<|im_end|>": qwen3_tok.convert_tokens_to_ids("<|im_end|>")}


@pytest.mark.parametrize("thinking", [True, False])
def test_two_reasoning_blocks_parse_the_same_on_every_path(
    qwen3_tok: Any, qwen3_parsing_tok: Any, thinking: bool
) -> None:
    """One reading, the template's: the first block is the reasoning, the text after the last
    </think> the action, with or without a response parser."""
    completion = "<think>\nplan a\n</think>\n\nmid <think>plan b</think>\n\nleft<|im_end|>"
    parsed = {
        Qwen3Processor(tok, thinking=thinking).parse_agent_output(completion)
        for tok in (None, qwen3_tok, qwen3_parsing_tok)
    }
    assert parsed == {("plan a", "left")}
    message = {"role": "assistant", "content": completion.removesuffix("<|im_end|>")}
    rendered = template_turn(qwen3_tok, Qwen3Processor(), message)
    assert rendered.endswith("\n\nleft<|im_end|>") and "plan a" in rendered


@pytest.mark.parametrize("cls", [Qwen25Processor, Qwen3Processor])
def test_tiny_tokenizer_has_the_real_special_and_added_tokens(cls: type) -> None:
    """As the real Qwen tokenizers: no unknown token, the turn tokens among all_special_tokens,
    <tool_call> (and Qwen 3's <think>) added but not special."""
    tokenizer = Member(cls).tokenizer
    assert tokenizer.unk_token is None
    assert {"<|im_start|>", "<|im_end|>", "<|endoftext|>"} <= set(tokenizer.all_special_tokens)
    added = {t.content: t.special for t in tokenizer.added_tokens_decoder.values()}
    fim = {f"<|fim_{part}|>" for part in ("prefix", "middle", "suffix", "pad")}
    plain = {"<tool_call>", "</tool_call>", "<|repo_name|>", "<|file_sep|>", *fim}
    if cls is Qwen3Processor:
        plain |= {"<think>", "</think>", "<tool_response>", "</tool_response>"}
    assert {t for t, special in added.items() if not special} == plain
    assert sum(added.values()) == 14  # <|endoftext|> and the 13 named ones

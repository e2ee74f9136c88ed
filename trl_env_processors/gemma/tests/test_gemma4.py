"""Gemma 4 against its official templates inside trl (every revision trl ships), with its tiny
offline model: the thought channel, thinking on and off, env text that spells control tokens,
``trl-env check`` and a game of guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

import trl_env
from trl_env.checks import SAMPLES, Conversation, processor_text, template_text
from trl_env.testing.family_checks import (
    assert_env_text_stays_text,
    check_cli_with_template,
    play_guess,
)
from trl_env.testing.processor_family import FUZZ, Member, ProcessorFamily
from trl_env.testing.processors import (
    assert_matches_template,
    assert_segments_tokenize_alone,
    conversations,
    template_turn,
    texts,
)
from trl_env.tiny import official_template
from trl_env_gemma import Gemma4Processor
from trl_env_gemma.gemma4 import CONTROL_TOKENS

CHANNEL = ("<|channel>", "<channel|>")
# Every Gemma 4 revision trl ships; the processor follows the current one (gemma4_v5).
REVISIONS = ("gemma4", "gemma4_v2", "gemma4_v3", "gemma4_v4", "gemma4_v5")

thought_replies = st.builds(
    lambda r, a: f"<|channel>thought\n{r}\n<channel|>{a}",
    texts(exclude=CHANNEL),
    texts(exclude=CHANNEL),
)


class TestGemma4(ProcessorFamily):
    processors = (Gemma4Processor,)
    stop_tokens = ("<turn|>",)
    turn_separator = "\n"
    eos_tokens = ("<eos>", "<turn|>", "<|tool_response>")
    single_tokens = ("\n\n", "\n\n\n", "  ", "    ")
    anchor = "<turn|>"
    response_template = True  # trl's gemma4_template
    trims_replies = True
    parse_pieces = (
        "<|channel>thought\n",
        "<channel|>",
        "<eos>",
        "<|turn>",
        "<|tool_response>",
        "<|tool_call>call:f{}<tool_call|>",
        "model\n",
        "🙂",
    )
    parse_examples = ("<|chan<|channel>thought\nx<channel|>nel>y<tu<turn|>rn|>",)
    # Gemma 4's reasoning is its thought channel; a tool call is parsed by trl's schema.
    plain_exclude = (*CHANNEL, "<|tool_call>", "<|tool_response>")

    def replies(self, member: Member) -> Any:
        # The official template drops earlier thought channels: see the tests below.
        return texts(exclude=CHANNEL)

    @FUZZ
    @given(data=st.data())
    def test_parse_reads_template_rendered_text(self, member: Member, data: st.DataObject) -> None:
        """The template strips a thought channel out of ``content``; it renders one from the
        message's ``reasoning`` field, which the module's thought-channel test parses back."""
        content = data.draw(self.plain(), "content")
        message = {"role": "assistant", "content": content}
        completion = template_turn(member.tokenizer, member.make(), message)
        for tok in member.parse_tokenizers:
            assert member.make(tok).parse_agent_output(completion) == ("", content.strip())


class TestGemma4Thinking(TestGemma4):
    """The same checks with thinking on: ``<|think|>`` opens the system turn."""

    options: ClassVar[Mapping[str, Any]] = {"thinking": True}


@pytest.fixture(scope="module")
def tok() -> Any:
    return Member(Gemma4Processor).tokenizer


@pytest.fixture(scope="module")
def parsing_tok() -> Any:
    return Member(Gemma4Processor, response_template=True).parsing


def test_thinking_option_is_typed() -> None:
    processor = trl_env.load_processor("gemma4", thinking=True)
    assert isinstance(processor, Gemma4Processor) and processor.thinking is True
    with pytest.raises(trl_env.PluginLoadError, match="thinking"):
        trl_env.load_processor("gemma4", thinking="yes")


def test_thinking_writes_a_system_turn_even_without_a_prompt(tok: Any) -> None:
    conv = Conversation(None, ("Go",))
    text = processor_text(Gemma4Processor(tok, thinking=True), conv)
    assert text.startswith("<bos><|turn>system\n<|think|>\n<turn|>\n")
    assert text == template_text(tok, conv, enable_thinking=True)


@FUZZ
@given(data=st.data())
def test_thought_channel_is_the_reasoning(tok: Any, parsing_tok: Any, data: st.DataObject) -> None:
    """The template's rendering of a final turn with reasoning (gemma4_v5 renders it) parses
    back to that reasoning and the answer, on every parse path."""
    plain = texts(exclude=(*CHANNEL, *CONTROL_TOKENS, "<eos>", "<bos>", "<pad>"))
    reasoning, content = data.draw(plain, "reasoning"), data.draw(plain, "content")
    message = {"role": "assistant", "reasoning": reasoning, "content": content}
    completion = template_turn(tok, Gemma4Processor(), message)
    assert completion.startswith("<|channel>thought\n") or not reasoning
    for parser in (None, tok, parsing_tok):
        assert Gemma4Processor(parser).parse_agent_output(completion) == (
            reasoning.strip(),
            content.strip(),
        )


@FUZZ
@given(conversations(reply=thought_replies))
def test_history_keeps_thoughts_and_drop_reasoning_gives_the_official_one(
    tok: Any, conv: Conversation
) -> None:
    """The documented difference: earlier thought channels stay in context as sampled; the
    official template shows the history without them (and trimmed)."""
    processor = Gemma4Processor(tok)
    assert_segments_tokenize_alone(processor, tok, [conv])
    dropped = Conversation(
        conv.system, conv.users, tuple(map(processor.drop_reasoning, conv.replies))
    )
    assert_matches_template(processor, tok, [dropped])
    ours, theirs = processor_text(processor, conv), template_text(tok, conv)
    assert ours.count("<|channel>thought") == len(conv.replies) + theirs.count("<|channel>")


@pytest.mark.parametrize("revision", REVISIONS)
def test_every_shipped_revision_renders_text_turns_alike(tok: Any, revision: str) -> None:
    """Thinking off, all of trl's Gemma 4 revisions render these conversations as the processor
    does; thinking on, the release revision (v2) writes ``<|think|>`` without its newline."""
    template = official_template(revision)
    for conv in SAMPLES:
        assert_matches_template(Gemma4Processor(tok), tok, [conv], template=template)
        thinking = Gemma4Processor(tok, thinking=True)
        ours = processor_text(thinking, conv)
        theirs = template_text(tok, conv, template=template, enable_thinking=True)
        assert (ours == theirs) == (revision != "gemma4_v2"), revision


def test_env_text_spelling_control_tokens_stays_text(tok: Any) -> None:
    assert_env_text_stays_text(Gemma4Processor(tok), tok, CONTROL_TOKENS)


@pytest.mark.parametrize("thinking", [False, True])
def test_check_passes_on_the_official_template_and_fails_on_others(
    tmp_path: Path, thinking: bool
) -> None:
    args = ("--processor-arg", f"thinking={str(thinking).lower()}")
    official = check_cli_with_template(Gemma4Processor, "gemma4_v5", tmp_path / "own", *args)
    assert official.exit_code == 0, official.output
    for other in ("gemma3", "gptoss", "lfm2_2_5"):
        result = check_cli_with_template(Gemma4Processor, other, tmp_path / other, *args)
        assert result.exit_code == 1 and "does not fit" in result.output, (other, result.output)


@pytest.mark.parametrize("thinking", [False, True])
def test_plays_guess_on_its_tiny_model(tmp_path: Path, thinking: bool) -> None:
    option = f"thinking={str(thinking).lower()}"
    records = play_guess("gemma4", tmp_path, "--processor-arg", option)
    assert all(("<|think|>" in r["text"]) == thinking for r in records)

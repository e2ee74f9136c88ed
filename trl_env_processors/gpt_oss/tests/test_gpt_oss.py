"""gpt-oss against trl's official ``gptoss`` template, with its tiny offline model: the harmony
channels, the documented history differences, options, env text that spells harmony tokens,
``trl-env check`` and a game of guess.

The checks every family passes come from :class:`~trl_env.testing.processor_family.ProcessorFamily`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import trl_env
from trl_env.checks import Conversation, check_processor, segments, template_text
from trl_env.testing.family_checks import (
    assert_env_text_stays_text,
    check_cli_with_template,
    play_guess,
)
from trl_env.testing.processor_family import FUZZ, Member, ProcessorFamily
from trl_env.testing.processors import (
    assert_segments_tokenize_alone,
    boundary_drift,
    conversations,
    template_turn,
    texts,
)
from trl_env_gpt_oss import GptOssProcessor
from trl_env_gpt_oss.harmony import SPECIAL_TOKENS

HARMONY = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>", "<|call|>")
ANALYSIS = "<|channel|>analysis<|message|>"
FINAL = "<|channel|>final<|message|>"
plain = texts(exclude=HARMONY)

# What the model samples: analysis then final, or the final alone.
sampled_turns = st.builds(
    lambda r, a: f"{ANALYSIS}{r}<|end|><|start|>assistant{FINAL}{a}", plain, plain
) | plain.map(FINAL.__add__)


class TestGptOss(ProcessorFamily):
    processors = (GptOssProcessor,)
    stop_tokens = ("<|return|>", "<|call|>")
    turn_separator = ""
    eos_tokens = ("<|return|>", "<|endoftext|>", "<|call|>")
    single_tokens = ("\n\n", "\n\n\n", "  ", "    ", ".\n\n", " \n")
    anchor = "<|end|>"
    response_template = True  # trl's gptoss_template (the processor reads channels by hand)
    single_bos = False  # harmony has no BOS in the text: see the quirk test
    parse_pieces = (
        *HARMONY,
        ANALYSIS,
        FINAL,
        "<|start|>assistant",
        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>",
        '{"a": 1}',
        "<|endoftext|>",
    )
    parse_examples = (
        f"{ANALYSIS}x<|e<|end|>nd|><|start|>assistant{FINAL}y<|ret<|return|>urn|>",
        f"{ANALYSIS}cut while thinking",
        '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": 1}<|call|>',
    )
    plain_exclude = HARMONY

    def replies(self, member: Member) -> Any:
        return plain

    def test_drift_counters_see_a_turn_that_starts_with_a_newline(self, member: Member) -> None:
        """The generation prompt ends in the word ``assistant``, one token, and o200k splits a
        newline or a channel token from it: no turn merges across it."""
        tokenizer = member.tokenizer
        for turn in ("\nHello", "s", "Hello", f"{FINAL}Hello"):
            assert boundary_drift(member.make(tokenizer), tokenizer, turn) == (0, 0), turn


@pytest.fixture(scope="module")
def tok() -> Any:
    return Member(GptOssProcessor).tokenizer


def test_options_are_the_templates_own(tok: Any) -> None:
    processor = trl_env.load_processor("gpt-oss", reasoning_effort="high", model_identity="Bot.")
    assert isinstance(processor, GptOssProcessor)
    report = check_processor(GptOssProcessor(tok, "high", "Bot."), tok)
    assert report.ok, report.message
    assert "Reasoning: high" in template_text(
        tok, Conversation(None, ("x",)), reasoning_effort="high"
    )
    with pytest.raises(trl_env.PluginLoadError, match="reasoning_effort"):
        trl_env.load_processor("gpt-oss", reasoning_effort="max")


def test_no_bos_is_written(tok: Any) -> None:
    """The template writes no BOS and the tokenizer adds none: the text starts with the system
    message."""
    ids = tok(trl_env.extras.first_prompt(GptOssProcessor(tok), "s", "u"), add_special_tokens=False)
    assert tok.convert_ids_to_tokens(ids["input_ids"][:2]) == ["<|start|>", "system"]
    assert tok.bos_token_id not in ids["input_ids"]


@FUZZ
@given(data=st.data())
def test_analysis_is_the_reasoning_and_final_the_action(tok: Any, data: st.DataObject) -> None:
    """The template's training rendering of a last turn with ``thinking`` is what the model
    samples; it parses back to (analysis, final) with or without trl's response schema."""
    reasoning, content = data.draw(plain, "reasoning"), data.draw(plain, "content")
    message = {"role": "assistant", "thinking": reasoning, "content": content}
    completion = template_turn(tok, GptOssProcessor(), message)
    assert completion == f"{ANALYSIS}{reasoning}<|end|><|start|>assistant{FINAL}{content}<|return|>"
    parsing = Member(GptOssProcessor, response_template=True).parsing
    for parser in (None, tok, parsing):
        parsed = GptOssProcessor(parser).parse_agent_output(completion)
        assert parsed == (reasoning.strip(), content.strip())


def test_a_tool_call_or_a_cut_turn() -> None:
    call = '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": 1}<|call|>'
    assert GptOssProcessor().parse_agent_output(
        f"{ANALYSIS}plan<|end|><|start|>assistant{call}"
    ) == (
        "plan",
        '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": 1}',
    )
    assert GptOssProcessor().parse_agent_output(f"{ANALYSIS}still thinking") == (
        "still thinking",
        "",
    )
    assert GptOssProcessor().parse_agent_output("42") == ("", "42")


@FUZZ
@given(conversations(reply=sampled_turns.map(lambda t: t.removeprefix(FINAL))))
def test_history_keeps_what_was_sampled(tok: Any, conv: Conversation) -> None:
    """The documented differences: earlier turns keep their analysis and their ``<|return|>``;
    the official template shows each as its final message closed by ``<|end|>``."""
    processor = GptOssProcessor(tok)
    pieces = segments(processor, conv, tok)
    sampled = [p.text for p in pieces if not p.inserted]
    assert all(s.startswith(FINAL) and s.endswith("<|return|>") for s in sampled)
    assert_segments_tokenize_alone(processor, tok, [conv])
    ours = "".join(p.text for p in pieces)
    finals = tuple(r.split(FINAL)[-1] for r in conv.replies)
    official = template_text(
        tok, Conversation(conv.system, conv.users, finals), **processor.template_kwargs
    )
    assert processor.history_view(ours) == official
    assert ours.count("<|return|>") == len(conv.replies) and "<|return|>" not in official


def test_env_text_spelling_harmony_tokens_stays_text(tok: Any) -> None:
    assert_env_text_stays_text(GptOssProcessor(tok), tok, SPECIAL_TOKENS)


def test_check_passes_on_the_official_template_and_fails_on_others(tmp_path: Path) -> None:
    official = check_cli_with_template(GptOssProcessor, "gptoss", tmp_path / "own")
    assert official.exit_code == 0, official.output
    for other in ("gemma4_v5", "lfm2_2_5", "qwen3", "muse_glimmer"):
        result = check_cli_with_template(GptOssProcessor, other, tmp_path / other)
        assert result.exit_code == 1 and "does not fit" in result.output, (other, result.output)


def test_plays_guess_on_its_tiny_model(tmp_path: Path) -> None:
    records = play_guess("gpt-oss", tmp_path, "--processor-arg", "reasoning_effort=low")
    assert all("Reasoning: low" in r["text"] for r in records)

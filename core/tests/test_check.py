"""``trl_env.checks``: a processor against a tokenizer's own chat template."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from trl_env.checks import (
    Conversation,
    check_processor,
    ensure_fits,
    first_difference,
    processor_text,
    template_text,
)
from trl_env.errors import TokenizerMismatchError
from trl_env.testing.processors import tiny_tokenizer

qwen = pytest.importorskip("trl_env_qwen")
llama = pytest.importorskip("trl_env_llama")


@pytest.fixture(scope="module")
def qwen_tok() -> Any:
    return tiny_tokenizer(qwen.Qwen3Processor())


@pytest.fixture(scope="module")
def llama_tok() -> Any:
    return tiny_tokenizer(llama.Llama31Processor())


def items(report: Any) -> dict[str, bool]:
    return {item.name: item.ok for item in report.items}


def test_a_fitting_pair_passes(qwen_tok: Any) -> None:
    report = check_processor(qwen.Qwen3Processor(qwen_tok), qwen_tok, name="qwen3")
    assert report.ok and all(items(report).values())
    assert report.first_difference is None
    assert report.stop_tokens == {"<|im_end|>": qwen_tok.convert_tokens_to_ids("<|im_end|>")}
    data = json.loads(json.dumps(report.to_dict()))
    assert data["ok"] is True and data["message"] == report.message


def test_qwen3_on_a_llama_tokenizer_fails(llama_tok: Any) -> None:
    report = check_processor(qwen.Qwen3Processor(llama_tok), llama_tok, name="qwen3")
    assert not report.ok
    assert report.stop_tokens == {"<|im_end|>": None}
    assert not items(report)["stop tokens"] and not items(report)["first prompt"]
    assert report.first_difference is not None
    # One sentence naming both reasons, fit for train/eval to show as the error.
    assert "\n" not in report.message and report.message.endswith(".")
    assert "<|im_end|>" in report.message and report.first_difference in report.message


def test_ensure_fits_raises_the_report_message(qwen_tok: Any, llama_tok: Any) -> None:
    assert ensure_fits(qwen.Qwen3Processor(qwen_tok), qwen_tok).ok
    processor = llama.Llama31Processor(qwen_tok)
    with pytest.raises(TokenizerMismatchError) as info:
        ensure_fits(processor, qwen_tok)
    assert str(info.value) == check_processor(processor, qwen_tok).message


class NoSeparator(qwen.Qwen25Processor):
    turn_separator = ""


class DoubleBos(llama.Llama31Processor):
    def init_system_input(self, prompt: str) -> str:
        return "<|begin_of_text|>" + super().init_system_input(prompt)


class NoClose(qwen.Qwen3Processor):
    turn_close = "</think>"


class Broken(qwen.Qwen3Processor):
    def append_user_input(self, prompt: str) -> str:
        raise RuntimeError("boom")


def test_a_missing_separator_shows_where_the_text_differs() -> None:
    tokenizer = tiny_tokenizer(qwen.Qwen25Processor())
    report = check_processor(NoSeparator(tokenizer), tokenizer)
    assert items(report)["first prompt"] and not items(report)["conversation text"]
    conv = next(c for c in _samples() if c.replies)
    ours, theirs = processor_text(NoSeparator(), conv), template_text(tokenizer, conv)
    assert report.first_difference == first_difference(ours, theirs)


def test_a_doubled_bos_is_caught(llama_tok: Any) -> None:
    report = check_processor(DoubleBos(llama_tok), llama_tok)
    assert not items(report)["segment tokens"]
    assert any("appears twice" in i.detail for i in report.items)


def test_turn_close_must_end_the_turn(qwen_tok: Any) -> None:
    report = check_processor(NoClose(qwen_tok), qwen_tok)
    assert not report.ok and not items(report)["stop tokens"]


def test_a_processor_that_raises_is_reported_not_raised(qwen_tok: Any) -> None:
    report = check_processor(Broken(qwen_tok), qwen_tok)
    assert not report.ok
    assert any("boom" in i.detail for i in report.items if not i.ok)


def test_a_tokenizer_without_template_is_only_a_note(qwen_tok: Any) -> None:
    plain = tiny_tokenizer(qwen.Qwen3Processor())
    plain.chat_template = None
    report = check_processor(qwen.Qwen3Processor(plain), plain)
    assert report.ok
    assert [i.required for i in report.items if i.name == "chat template"] == [False]


def test_conversations_need_one_reply_fewer_than_users() -> None:
    with pytest.raises(ValueError):
        Conversation(None, ("a", "b"), ())


def test_first_difference_is_none_only_for_equal_texts() -> None:
    assert first_difference("abc", "abc") is None
    assert first_difference("abc", "abd") is not None
    assert first_difference("ab", "abc") is not None


def test_importing_the_checks_stays_light() -> None:
    code = (
        "import sys, trl_env.checks, trl_env.testing.processors, trl_env.cli.check_cmd\n"
        "print([m for m in ('torch', 'transformers', 'trl', 'hypothesis') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _samples() -> tuple[Conversation, ...]:
    from trl_env.checks import SAMPLES

    return SAMPLES

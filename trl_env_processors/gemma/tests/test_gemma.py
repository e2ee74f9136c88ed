"""Gemma processors against the official templates inside trl, with tiny offline tokenizers.

The checks every family passes come from :class:`~trl_env.testing.processor_family.ProcessorFamily`;
this file holds Gemma's facts and quirks.
"""

from __future__ import annotations

import pytest

from trl_env import extras
from trl_env.testing.processor_family import Member, ProcessorFamily
from trl_env.testing.processors import tiny_tokenizer
from trl_env_gemma import Gemma2Processor, Gemma3Processor

# What a Gemma checkpoint could ship as its own response template (trl has none for Gemma 2/3).
RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<start_of_turn>model\n",
    "fields": {"content": {"close_pattern": r"<end_of_turn>\s*", "content": "text"}},
}


class TestGemma(ProcessorFamily):
    processors = (Gemma2Processor, Gemma3Processor)
    stop_tokens = ("<end_of_turn>",)
    turn_separator = "\n"
    eos_tokens = ("<eos>", "<end_of_turn>")
    single_tokens = ("\n\n", "\n\n\n", "  ", "    ")
    anchor = "<end_of_turn>"
    response_template = RESPONSE_TEMPLATE
    trims_replies = True  # and Gemma 2 refuses a system role: the reference merges it
    parse_pieces = ("<eos>", "<start_of_turn>", "<bos>", "<pad>", "model\n", "🙂")
    parse_examples = ("<end_of<end_of_turn>_turn>",)

    def test_stop_token_is_not_eos(self, member: Member) -> None:
        """Stopping at eos_token would run past the end of the turn."""
        assert member.tokenizer.eos_token != self.stop_tokens[0]

    def test_tiny_tokenizer_is_sentencepiece_like(self, member: Member) -> None:
        """Spaces are "▁", digits are single, no "▁" is added at the start, unknown characters
        fall back to bytes."""
        tokenizer = member.tokenizer
        assert tokenizer.tokenize("hello world") == ["hello", "▁world"]
        assert tokenizer.tokenize("2048") == ["2", "0", "4", "8"]
        assert tokenizer.tokenize("\u2603") == ["<0xE2>", "<0x98>", "<0x83>"]  # a snowman
        ids = tokenizer("a  \u2603\n\nb", add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == "a  \u2603\n\nb"


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

"""Llama 3 processors against the official templates inside trl, with tiny offline tokenizers.

The checks every family passes come from :class:`~trl_env.testing.processor_family.ProcessorFamily`;
this file holds Llama's facts and quirks.
"""

from __future__ import annotations

from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

import trl_env
from trl_env.checks import Conversation, processor_text
from trl_env.testing.processor_family import FUZZ, Member, ProcessorFamily
from trl_env.testing.processors import assert_matches_template, template_turn
from trl_env_llama import Llama31Processor, Llama32Processor

DATE = "03 Feb 2021"

json_args = st.dictionaries(
    st.from_regex(r"[a-z]{1,5}", fullmatch=True),
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=5),
    max_size=3,
)


class TestLlama(ProcessorFamily):
    processors = (Llama31Processor, Llama32Processor)
    options = {"date_string": DATE}  # noqa: RUF012 - read only
    stop_tokens = ("<|eot_id|>", "<|eom_id|>")
    turn_separator = ""
    eos_tokens = ("<|end_of_text|>", "<|eom_id|>", "<|eot_id|>")
    # Llama 3's vocabulary writes "\n\n\n" as one token: the header's "\n\n" and a turn's
    # leading newline merge when the text is re-tokenized.
    single_tokens = ("\n\n", "\n\n\n", "  ", "    ", "        ", ".\n\n", " \n")
    anchor = "<|eot_id|>"
    response_template = True
    trims_replies = True
    parse_pieces = (
        "<|python_tag|>",
        "<|begin_of_text|>",
        "{bad",
        '{"name": "f", "parameters": {"a": 1}}',
    )
    parse_examples = ("<|eo<|eot_id|>t_id|>",)
    plain_exclude = ("{",)

    def test_date_string_is_a_typed_option(self, member: Member) -> None:
        with pytest.raises(trl_env.PluginLoadError, match="date_string"):
            trl_env.load_processor(member.cls.name, date_string=2024)
        assert trl_env.load_processor(member.cls.name, date_string=DATE).date_string == DATE

    def test_tokenizer_adds_bos_like_the_real_one(self, member: Member) -> None:
        """The reason segments are tokenized without special tokens."""
        tokenizer = member.tokenizer
        assert tokenizer("hi")["input_ids"][0] == tokenizer.bos_token_id

    def test_digits_come_in_groups_of_three(self, member: Member) -> None:
        """As in the real vocabulary, which has every group as one token."""
        pre = member.tokenizer.backend_tokenizer.pre_tokenizer
        assert [piece for piece, _ in pre.pre_tokenize_str("2048")] == ["204", "8"]

    def test_default_date_follows_the_template(self, member: Member) -> None:
        """3.1 writes the template's fixed date, 3.2 today's, as strftime_now does."""
        tokenizer = member.tokenizer
        conv = Conversation("Be brief.", ("Hi", "Again"), ("Hello",))
        processor = member.cls(tokenizer)
        assert_matches_template(processor, tokenizer, [conv])
        today = datetime.now().strftime("%d %b %Y") in processor_text(processor, conv)
        assert today is (member.cls is Llama32Processor)

    @FUZZ
    @given(data=st.data())
    def test_tool_call_stays_in_the_action(self, member: Member, data: st.DataObject) -> None:
        """Every parse path keeps the call as the template renders it (one call per turn)."""
        name = data.draw(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), "name")
        call = {"type": "function", "function": {"name": name, "arguments": data.draw(json_args)}}
        message = {"role": "assistant", "content": "", "tool_calls": [call]}
        completion = template_turn(member.tokenizer, member.make(), message)
        for tok in member.parse_tokenizers:
            assert member.make(tok).parse_agent_output(completion) == (
                "",
                completion.removesuffix("<|eot_id|>"),
            )

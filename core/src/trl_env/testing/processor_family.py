"""The checks every processor family passes, as one test class to subclass.

A family's test file states its facts and keeps only its quirks::

    from trl_env.testing.processor_family import ProcessorFamily

    class TestGemma(ProcessorFamily):
        processors = (Gemma2Processor, Gemma3Processor)
        stop_tokens = ("<end_of_turn>",)
        turn_separator = "\\n"
        eos_tokens = ("<eos>", "<end_of_turn>")
        single_tokens = ("\\n\\n", "  ")
        anchor = "<end_of_turn>"
        parse_pieces = ("<end_of_turn>", "<start_of_turn>", "model\\n")

Each ``test_*`` method runs once per processor class, with its tiny offline tokenizer (built once
per class). A check that does not hold for a family is replaced by a method of the same name, or
dropped with ``test_name = None`` and a comment saying why.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .. import extras
from ..checks import (
    Conversation,
    check_processor,
    first_difference,
    processor_text,
    template_kwargs,
    template_text,
)
from .processors import (
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

__all__ = ["FUZZ", "Member", "ProcessorFamily", "trimmed", "turn_text"]

# pytest makes a fresh instance of the family's class per test, which hypothesis sees as a new
# executor; the tests keep no state on it (only class-level facts), so that is safe.
FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors],
)
THINK = ("<think>", "</think>")


def trimmed(conv: Conversation) -> Conversation:
    """The replies as a template shows them when it trims message text (samples are kept)."""
    return Conversation(conv.system, conv.users, tuple(r.strip() for r in conv.replies))


def turn_text(processor: Any, turn: str) -> str:
    """A sampled turn's text without its end-of-turn token, stripped: the whole action."""
    ends = (*extras.stop_tokens(processor), *getattr(processor, "extra_ends", ()))
    return min((turn.split(end)[0] for end in ends), key=len).strip()


@functools.cache
def _tokenizer(cls: type, parsing: str) -> Any:
    """``cls``'s tiny tokenizer; ``parsing``: "" plain, "trl" with trl's response template, or a
    JSON response template of the family's own (trl has none for it)."""
    if parsing == "trl":
        return tiny_tokenizer(cls(), response_template=True)
    tokenizer = tiny_tokenizer(cls())
    if parsing:
        tokenizer.response_template = json.loads(parsing)
    return tokenizer


@dataclass(frozen=True)
class Member:
    """One processor class of a family, with the options its tests make it with."""

    cls: type
    options: Mapping[str, Any] = field(default_factory=dict)
    response_template: bool | Mapping[str, Any] = False

    def make(self, tokenizer: Any = None, **options: Any) -> Any:
        """The processor (its class's own attributes too, e.g. ``tiny_spec``)."""
        return self.cls(tokenizer, **{**self.options, **options})

    @property
    def name(self) -> str:
        """The registered name (a processor class's ``name``)."""
        return str(getattr(self.cls, "name", ""))

    @property
    def tokenizer(self) -> Any:
        return _tokenizer(self.cls, "")

    @property
    def parsing(self) -> Any:
        """The tokenizer able to ``parse_response``, or None when the family has none."""
        if self.response_template is True:
            return _tokenizer(self.cls, "trl")
        if self.response_template:
            return _tokenizer(self.cls, json.dumps(self.response_template, sort_keys=True))
        return None

    @property
    def parse_tokenizers(self) -> tuple[Any, ...]:
        """No tokenizer (string parsing), the tiny one, and the parsing one if any."""
        return (None, self.tokenizer, *((self.parsing,) if self.parsing is not None else ()))


def tokenizer_fixture(cls: type, parsing: bool = False) -> Any:
    """A module-scoped fixture of ``cls``'s tiny tokenizer (``parsing``: the one with trl's
    response template), named by the module attribute it is assigned to::

        tok = tokenizer_fixture(Gemma4Processor)
    """
    member = Member(cls, response_template=parsing)

    def tokenizer() -> Any:
        return member.parsing if parsing else member.tokenizer

    return pytest.fixture(scope="module")(tokenizer)


class ProcessorFamily:
    """Subclass as ``TestFamily`` and set the family's facts; see the module docstring."""

    processors: ClassVar[Sequence[type]] = ()
    options: ClassVar[Mapping[str, Any]] = {}  # every processor of the family is made with them
    stop_tokens: ClassVar[tuple[str, ...]] = ()
    turn_separator: ClassVar[str] = ""
    eos_tokens: ClassVar[tuple[str, ...]] = ()  # the real model's generation_config, in order
    single_tokens: ClassVar[Sequence[str]] = ()  # one token each after ``anchor`` (real merges)
    anchor: ClassVar[str] = ""
    response_template: ClassVar[bool | Mapping[str, Any]] = False  # True: trl's; a mapping: own
    trims_replies: ClassVar[bool] = False  # the template strips message text
    single_bos: ClassVar[bool] = True  # one BOS starts the text (no BOS at all is a quirk test)
    # Unused: whether "<think>r</think>c" parses to (r, c) follows the processor's own
    # ``reasoning_tags`` (a family without a reasoning format keeps it in the action).
    splits_think_in_content: ClassVar[bool] = False
    parse_pieces: ClassVar[Sequence[str]] = ()  # the family's tokens, for completions to fuzz
    parse_examples: ClassVar[Sequence[str]] = ()  # completions always parsed (broken tokens)
    plain_exclude: ClassVar[Sequence[str]] = ()  # never in plain content (besides stops, THINK)

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "member" in metafunc.fixturenames:
            members = [Member(c, self.options, self.response_template) for c in self.processors]
            ids = [getattr(c, "name", c.__name__) for c in self.processors]
            metafunc.parametrize("member", members, ids=ids)

    # -- strategies a family may narrow -----------------------------------------------------
    def replies(self, member: Member) -> Any:
        """Replies the template and the engine render alike."""
        return texts()

    def canonical(self, reply: str) -> str:
        """A reply as the model writes it (what re-tokenizes to its own ids)."""
        return reply.strip()

    def completions(self) -> Any:
        pieces = (*self.parse_pieces, *self.stop_tokens, *self.eos_tokens, *THINK, "\n", "x", "{")
        chunks = st.lists(st.sampled_from(pieces) | st.text(max_size=5), max_size=12)
        return st.one_of(texts(), chunks.map("".join))

    def plain(self) -> Any:
        return texts(exclude=(*self.stop_tokens, *self.eos_tokens, *THINK, *self.plain_exclude))

    # -- registration and the tiny model ----------------------------------------------------
    def test_entry_points_create_processors(self, member: Member) -> None:
        from .. import load_processor

        processor = cast(Any, load_processor(member.name, **member.options))
        assert tuple(processor.stop_tokens) == self.stop_tokens
        assert processor.turn_separator == self.turn_separator
        assert type(processor) is member.cls

    def test_tiny_model_loads_and_runs(self, member: Member) -> None:
        import torch

        from ..models import load_model, model_path
        from ..tiny import official_template

        processor = member.make()
        tokenizer, model = member.tokenizer, load_model(model_path(None, processor))
        assert model.config.model_type == processor.tiny_spec.model_type
        assert tokenizer.chat_template == official_template(processor.chat_template)
        text = extras.first_prompt(processor, "s", "u")
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert model(torch.tensor([ids])).logits.shape == (1, len(ids), len(tokenizer))
        for token in (*processor.tiny_spec.added_tokens, *self.stop_tokens):
            assert len(tokenizer(token, add_special_tokens=False)["input_ids"]) == 1, token

    def test_tiny_model_ends_where_the_real_one_does(self, member: Member) -> None:
        from ..models import load_model, model_path

        model = load_model(model_path(None, member.make()))
        eos = model.generation_config.eos_token_id
        ids = list(eos) if isinstance(eos, list | tuple) else [eos]  # one id or several
        assert tuple(member.tokenizer.convert_ids_to_tokens(ids)) == self.eos_tokens

    def test_tiny_tokenizer_merges_whitespace_like_the_real_one(self, member: Member) -> None:
        """The real vocabulary's whitespace merges are what make re-tokenized text drift."""
        assert_single_tokens(member.tokenizer, self.single_tokens, after=self.anchor)

    def test_drift_counters_see_a_turn_that_starts_with_a_newline(self, member: Member) -> None:
        tokenizer = member.tokenizer
        assert boundary_drift(member.make(tokenizer), tokenizer) == (1, 0)
        assert boundary_drift(member.make(tokenizer), tokenizer, "Hello") == (0, 0)

    # -- rendering equals the official template ---------------------------------------------
    @FUZZ
    @given(data=st.data())
    def test_text_equals_template(self, member: Member, data: st.DataObject) -> None:
        conv = data.draw(conversations(reply=self.replies(member)), "conversation")
        tokenizer = member.tokenizer
        processor = member.make(tokenizer)
        ours = processor_text(processor, trimmed(conv) if self.trims_replies else conv, tokenizer)
        theirs = template_text(tokenizer, conv, **template_kwargs(processor))
        assert first_difference(ours, theirs) is None, first_difference(ours, theirs)

    @FUZZ
    @given(data=st.data())
    def test_segments_tokenize_alone_with_one_bos(
        self, member: Member, data: st.DataObject
    ) -> None:
        reply = self.replies(member).map(self.canonical)
        conv = data.draw(conversations(reply=reply), "conversation")
        tokenizer = member.tokenizer
        assert_segments_tokenize_alone(member.make(tokenizer), tokenizer, [conv])
        if self.single_bos:
            assert_single_bos(member.make(tokenizer), tokenizer, [conv])

    @FUZZ
    @given(data=st.data())
    def test_inserted_segments_stable_after_any_reply(
        self, member: Member, data: st.DataObject
    ) -> None:
        conv = data.draw(conversations(), "conversation")
        tokenizer = member.tokenizer
        assert_inserted_segments_stable(member.make(tokenizer), tokenizer, [conv])

    # -- parsing ----------------------------------------------------------------------------
    @FUZZ
    @given(data=st.data())
    def test_parse_never_raises(self, member: Member, data: st.DataObject) -> None:
        completion = data.draw(self.completions(), "completion")
        for tok in member.parse_tokenizers:
            assert_parse_total(member.make(tok), [completion, completion[: len(completion) // 2]])

    def test_parse_survives_broken_tokens(self, member: Member) -> None:
        halves = [c[: len(c) // 2] for c in self.parse_examples]
        for tok in member.parse_tokenizers:
            assert_parse_total(member.make(tok), [*self.parse_examples, *halves])

    @FUZZ
    @given(data=st.data())
    def test_parse_reads_template_rendered_text(self, member: Member, data: st.DataObject) -> None:
        """Every parse path reads the template's turn; reasoning in <think> is split off."""
        content = data.draw(self.plain(), "content")
        tokenizer = member.tokenizer
        completion = template_turn(
            tokenizer, member.make(), {"role": "assistant", "content": content}
        )
        for tok in member.parse_tokenizers:
            assert member.make(tok).parse_agent_output(completion) == ("", content.strip())
        tags = getattr(member.cls, "reasoning_tags", None)
        if tags is None and not getattr(member.cls, "parser_reasoning", False):
            # No reasoning format: "<think>" is text of the action on every path.
            literal = f"{THINK[0]}{content}{THINK[1]}"
            message = {"role": "assistant", "content": literal}
            turn = template_turn(tokenizer, member.make(), message)
            for tok in member.parse_tokenizers:
                expected = ("", turn_text(member.make(tok), turn))
                assert member.make(tok).parse_agent_output(turn) == expected
        if tags is None:
            return
        reasoning = data.draw(self.plain(), "reasoning")
        message = {"role": "assistant", "content": f"{tags[0]}{reasoning}{tags[1]}{content}"}
        thinking = template_turn(tokenizer, member.make(), message)
        for tok in member.parse_tokenizers:
            parsed = member.make(tok).parse_agent_output(thinking)
            assert parsed == (reasoning.strip(), content.strip())

    # -- trl-env check on the family's own tokenizer ----------------------------------------
    def test_check_passes_on_own_tiny_tokenizer(self, member: Member) -> None:
        tokenizer = member.tokenizer
        report = check_processor(member.make(tokenizer), tokenizer)
        assert report.ok, report.message
        expected = {t: tokenizer.convert_tokens_to_ids(t) for t in self.stop_tokens}
        assert report.stop_tokens == expected

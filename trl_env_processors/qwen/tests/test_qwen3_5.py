"""Qwen 3.5, 3.6 and 3.8 against their official templates inside trl, on tiny offline models.

Each member runs with thinking on (the default) and off. The family checks come from
:class:`~trl_env.testing.processor_family.ProcessorFamily`; this file holds their quirks: the
reasoning block opened by the generation prompt, the history the 3.5 template re-renders without
reasoning, 3.8's reasoning effort, and ``trl-env check`` on the official and a wrong template.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

import trl_env
from trl_env.checks import (
    Conversation,
    check_processor,
    processor_text,
    segments,
    template_text,
)
from trl_env.testing.processor_family import FUZZ, Member, ProcessorFamily, tokenizer_fixture
from trl_env.testing.processors import (
    assert_matches_template,
    assert_segments_tokenize_alone,
    conversations,
    template_turn,
    texts,
)
from trl_env.tiny import official_template
from trl_env_qwen import Qwen35Processor, Qwen36Processor, Qwen38Processor

MARKERS = ("<think>", "</think>", "<tool_response>", "<|im_end|>", "<|endoftext|>")
TOOL_CALL = "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>"

# An assistant message with its reasoning inline, as the model writes it after "<think>\n".
# (Some reasoning: an empty block is written "<think>\n\n</think>", whose sampled newline
# merges with the prompt's on re-tokenizing; sampled_reply covers that case.)
reasoning_replies = (
    texts(exclude=MARKERS)
    .filter(str.strip)
    .flatmap(
        lambda r: texts(exclude=MARKERS).map(
            lambda a: f"<think>\n{r.strip()}\n</think>\n\n{a.strip()}"
        )
    )
)


class Qwen35Family(ProcessorFamily):
    processors = (Qwen35Processor, Qwen36Processor, Qwen38Processor)
    stop_tokens = ("<|im_end|>",)
    turn_separator = "\n"
    eos_tokens = ("<|im_end|>", "<|endoftext|>")
    single_tokens = ("\n\n", "\n\n\n", "  ", "    ", ".\n\n", " \n")
    anchor = "<|im_end|>"
    response_template = True
    trims_replies = True
    parse_pieces = ("<|im_start|>", "<tool_call>", "</tool_call>", TOOL_CALL, "{bad", "🙂", " ")
    parse_examples = (
        "<thi<think>nk>x</thi</think>nk>y<|im_<|im_end|>end|>",
        f"{TOOL_CALL}<|im_end|>",
        "plan\n</think>\n\n<tool_call>\n<function=f>\n<parameter=<|im_end|>",
    )
    plain_exclude = ("<tool_call>", "<tool_response>")

    def replies(self, member: Member) -> Any:
        # A reply holding </think> is reasoning to the templates: see the tests below.
        return texts(exclude=MARKERS)

    def test_tiny_model_loads_and_runs(self, member: Member) -> None:
        """The tiny model is a Qwen3.5 text model and carries the template its option picks."""
        import torch

        from trl_env.models import load_model, load_tokenizer, model_path

        processor = member.make()
        path = model_path(None, processor)
        tokenizer, model = load_tokenizer(path), load_model(path)
        assert tokenizer.chat_template == official_template(processor.chat_template)
        assert model.config.model_type == "qwen3_5_text"
        assert set(model.config.layer_types) == {"full_attention"}  # see the tiny spec
        ids = tokenizer(processor.generation_prompt, add_special_tokens=False)["input_ids"]
        assert model(torch.tensor([ids])).logits.shape == (1, len(ids), len(tokenizer))
        for token in ("<think>", "</think>", "<tool_call>", "<|im_end|>"):
            assert len(tokenizer(token, add_special_tokens=False)["input_ids"]) == 1, token

    @FUZZ
    @given(data=st.data())
    def test_parse_reads_template_rendered_text(self, member: Member, data: st.DataObject) -> None:
        """Every parse path reads the template's turn, reasoning given as reasoning_content
        (3.8's template reads no reasoning inline in content)."""
        content, reasoning = data.draw(self.plain(), "content"), data.draw(self.plain(), "r")
        tokenizer = member.tokenizer
        cases: list[tuple[dict[str, str], tuple[str, str]]] = [
            ({"role": "assistant", "content": content}, ("", content.strip()))
        ]
        if member.make().thinking:  # thinking off, the prompt holds the (empty) block
            message = {"role": "assistant", "content": content, "reasoning_content": reasoning}
            cases.append((message, (reasoning.strip(), content.strip())))
        for message, expected in cases:
            turn = template_turn(tokenizer, member.make(), message, **member.make().template_kwargs)
            for tok in member.parse_tokenizers:
                assert member.make(tok).parse_agent_output(turn) == expected


class TestQwen35Thinking(Qwen35Family):
    options: ClassVar[dict[str, Any]] = {"thinking": True}

    def canonical(self, reply: str) -> str:
        # A turn sampled after "<think>\n" that starts with its newline ("\n</think>", an empty
        # block) merges into "\n\n" when re-tokenized: the drift counters count that; here the
        # model reasons first, as it does.
        return f"<think>\nplan\n</think>\n\n{reply.strip()}"

    def test_generation_prompt_opens_the_reasoning_block(self, member: Member) -> None:
        prompt = member.make().generation_prompt
        assert prompt == "<|im_start|>assistant\n<think>\n"


class TestQwen35NoThinking(Qwen35Family):
    options: ClassVar[dict[str, Any]] = {"thinking": False}

    def test_generation_prompt_holds_an_empty_block(self, member: Member) -> None:
        prompt = member.make().generation_prompt
        assert prompt == "<|im_start|>assistant\n<think>\n\n</think>\n\n"


tok = tokenizer_fixture(Qwen35Processor)


def test_thinking_off_selects_the_no_think_template(tok: Any) -> None:
    assert Qwen35Processor().chat_template == "qwen3_5_think"
    assert Qwen35Processor(thinking=False).chat_template == "qwen3_5_nothink"
    assert Qwen36Processor(thinking=False).chat_template == "qwen3_6"
    off = trl_env.load_processor("qwen3.5", thinking=False)
    from trl_env.models import load_tokenizer, model_path

    nothink = load_tokenizer(model_path(None, off))
    assert nothink.chat_template == official_template("qwen3_5_nothink")
    report = check_processor(Qwen35Processor(nothink, thinking=False), nothink)
    assert report.ok, report.message
    # Each 3.5 template renders the other thinking mode too when asked explicitly.
    assert check_processor(Qwen35Processor(nothink, thinking=True), nothink).ok
    assert check_processor(Qwen35Processor(tok, thinking=False), tok).ok


def test_options_are_typed() -> None:
    with pytest.raises(trl_env.PluginLoadError, match="thinking"):
        trl_env.load_processor("qwen3.5", thinking="no")
    with pytest.raises(trl_env.PluginLoadError, match="reasoning_effort"):
        trl_env.load_processor("qwen3.8", reasoning_effort="max")


@FUZZ
@given(conversations(reply=reasoning_replies))
def test_qwen3_5_keeps_reasoning_like_the_training_template(tok: Any, conv: Conversation) -> None:
    """The rollout keeps every sampled reasoning block: trl's prefix-preserving template."""
    processor = Qwen35Processor(tok)
    ours = "".join(s.text for s in segments(processor, conv))
    template = official_template("qwen3_5_think_training")
    assert ours == template_text(tok, conv, template=template, enable_thinking=True)
    assert_segments_tokenize_alone(processor, tok, [conv])


@FUZZ
@given(conversations(reply=reasoning_replies))
def test_qwen3_5_official_history_drops_reasoning(tok: Any, conv: Conversation) -> None:
    """The documented difference, undone by history_view: the official template's history."""
    ours = processor_text(Qwen35Processor(tok), conv)
    assert ours == template_text(tok, conv, enable_thinking=True)
    assert not any(r.split("</think>")[0] in ours for r in conv.replies if len(r) > 20)


@pytest.mark.parametrize("cls", [Qwen36Processor, Qwen38Processor])
@FUZZ
@given(conv=conversations(reply=reasoning_replies))
def test_preserve_thinking_renders_the_rollout_as_sampled(
    tok: Any, cls: type, conv: Conversation
) -> None:
    """3.6 and 3.8 keep earlier reasoning with preserve_thinking: no history view needed."""
    processor = cls(tok)
    messages = conv.messages()
    for message in messages:
        if message["role"] == "assistant":
            inline = message["content"].removeprefix("<think>\n")
            reasoning, _, answer = inline.partition("\n</think>\n\n")
            message["content"], message["reasoning_content"] = answer, reasoning
    theirs = tok.apply_chat_template(
        messages,
        tokenize=False,
        add_generation_prompt=True,
        chat_template=official_template(processor.chat_template),
        **processor.template_kwargs,
    )
    assert processor_text(processor, conv) == theirs


@pytest.mark.parametrize("effort", ["xhigh", "medium", "low"])
@pytest.mark.parametrize("thinking", [True, False])
@pytest.mark.parametrize("system", [None, "Be brief.", "  "])
def test_qwen3_8_reasoning_effort_opens_the_system_turn(
    tok: Any, effort: str, thinking: bool, system: str | None
) -> None:
    processor = Qwen38Processor(tok, thinking=thinking, reasoning_effort=effort)
    conv = Conversation(system, ("Guess.",))
    template = official_template("qwen3_8")
    assert_matches_template(processor, tok, [conv], template=template)
    prompt = processor_text(processor, conv)
    assert ("Reasoning effort" in prompt) == (thinking and effort != "medium")


def test_parse_reads_the_sampled_turn(tok: Any) -> None:
    """Thinking on, the turn starts inside the block the generation prompt opened."""
    parsing = Member(Qwen35Processor, response_template=True).parsing
    for tokenizer in (None, tok, parsing):
        processor = Qwen35Processor(tokenizer)
        assert processor.parse_agent_output("plan it\n</think>\n\nleft<|im_end|>") == (
            "plan it",
            "left",
        )
        # cut while thinking: all of it is reasoning
        assert processor.parse_agent_output("still thinking") == ("still thinking", "")
        assert Qwen35Processor(tokenizer, thinking=False).parse_agent_output("left") == ("", "left")


@pytest.mark.parametrize("cls", [Qwen35Processor, Qwen36Processor, Qwen38Processor])
@pytest.mark.parametrize("content", ["ok", ""])
def test_tool_calls_stay_in_the_action(cls: type, content: str) -> None:
    """Every parse path gives the template's text and tool-call blocks, the parser's calls
    rendered again as the template writes them."""
    member = Member(cls, response_template=True)
    calls = [
        {"type": "function", "function": {"name": "f", "arguments": {"a": 1, "b": "x y"}}},
        {"type": "function", "function": {"name": "g", "arguments": {"c": [1, True], "d": 2.5}}},
    ]
    message = {"role": "assistant", "content": content, "tool_calls": calls}
    completion = template_turn(member.tokenizer, cls(), message, **cls().template_kwargs)
    expected = completion.removesuffix("<|im_end|>").split("</think>")[-1].strip()
    for tokenizer in member.parse_tokenizers:
        reasoning, action = cls(tokenizer).parse_agent_output(completion)
        assert (reasoning, action) == ("", expected)
        assert action.count("<tool_call>") == 2


@pytest.mark.parametrize("cls", [Qwen35Processor, Qwen36Processor, Qwen38Processor])
def test_check_fails_on_another_familys_template(tok: Any, cls: type) -> None:
    """trl-env check tells a Qwen 3 (or Llama) template from the one the processor speaks."""
    import copy

    for other in ("qwen3", "llama3_1"):
        wrong = copy.copy(tok)
        wrong.chat_template = official_template(other)
        report = check_processor(cls(wrong), wrong)
        assert not report.ok, other


# -- the CLI: trl-env check on a tokenizer folder, trl-env eval on the tiny model ----------------


@pytest.mark.parametrize(
    ("name", "args"),
    [("qwen3.5", ()), ("qwen3.5", ("thinking=false",)), ("qwen3.6", ()), ("qwen3.8", ())],
)
def test_cli_check_passes_on_the_official_template_only(
    tmp_path: Any, name: str, args: tuple[str, ...]
) -> None:
    from click.testing import CliRunner

    from trl_env.cli import cli
    from trl_env.models import load_tokenizer, model_path

    cls = {"qwen3.5": Qwen35Processor, "qwen3.6": Qwen36Processor, "qwen3.8": Qwen38Processor}[name]
    processor = cls(thinking="thinking=false" not in args)
    tokenizer = load_tokenizer(model_path(None, processor))
    flags = [f for a in args for f in ("--processor-arg", a)]
    wrong = ["llama3_1", "gemma3"]
    if processor.thinking:  # thinking off, Qwen 3's template writes these samples alike
        wrong.append("qwen3")
    for template, ok in ((processor.chat_template, True), *((t, False) for t in wrong)):
        folder = tmp_path / template
        tokenizer.chat_template = official_template(template)
        tokenizer.save_pretrained(folder)
        result = CliRunner().invoke(
            cli, ["check", "--processor", name, *flags, "--tokenizer", str(folder)]
        )
        assert (result.exit_code == 0) == ok, (template, result.output)


@pytest.mark.parametrize(
    ("name", "args"), [("qwen3.5", ()), ("qwen3.5", ("thinking=false",)), ("qwen3.8", ())]
)
def test_eval_plays_guess_on_the_tiny_model(
    tmp_path: Any, name: str, args: tuple[str, ...]
) -> None:
    import json

    from click.testing import CliRunner

    from trl_env.cli import cli

    out = tmp_path / "eval.jsonl"
    flags = [f for a in args for f in ("--processor-arg", a)]
    command = ["eval", "--env", "guess", "--processor", name, *flags, "--episodes", "2"]
    command += ["--max-new-tokens", "4", "--env-arg", "max_turns=2", "--out", str(out), "--json"]
    result = CliRunner().invoke(cli, command)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["episodes"] == 2
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["run"]["processor"].split(" ")[0] for r in records} == {name}
    prompt = "<think>\n\n</think>\n\n" if args else "<think>\n"
    assert all(f"<|im_start|>assistant\n{prompt}" in r["text"] for r in records)


def test_list_shows_the_processors() -> None:
    from click.testing import CliRunner

    from trl_env.cli import cli

    result = CliRunner().invoke(cli, ["list"])
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.output.splitlines()]
    for name in ("qwen3.5", "qwen3.6", "qwen3.8"):
        assert [name, "trl-env-qwen"] in [row[:2] for row in rows], result.output

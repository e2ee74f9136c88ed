"""gpt-oss against trl's official ``gptoss`` template, with its tiny offline model: the harmony
channels, the documented history differences, options, env text that spells harmony tokens,
``trl-env check`` and a game of guess.

The checks every family passes come from :class:`~trl_env.testing.processor_family.ProcessorFamily`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import trl_env
from trl_env.checks import Conversation, check_processor, processor_text, segments, template_text
from trl_env.testing.family_checks import (
    assert_env_text_stays_text,
    check_cli_with_template,
    play_guess,
)
from trl_env.testing.processor_family import FUZZ, Member, ProcessorFamily, tokenizer_fixture
from trl_env.testing.processors import (
    assert_segments_tokenize_alone,
    boundary_drift,
    conversations,
    template_turn,
    texts,
)
from trl_env_gpt_oss import GptOssProcessor
from trl_env_gpt_oss.harmony import SPECIAL_TOKENS

HARMONY = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>", "<|call|>")
ANALYSIS = "<|channel|>analysis<|message|>"
FINAL = "<|channel|>final<|message|>"
plain = texts(exclude=HARMONY)

# What the model samples: analysis then final, or the final alone.
sampled_turns = st.builds(
    lambda r, a: f"{ANALYSIS}{r}<|end|><|start|>assistant{FINAL}{a}", plain, plain
) | plain.map(FINAL.__add__)


class TestGptOss(ProcessorFamily):
    processors = (GptOssProcessor,)
    stop_tokens = ("<|return|>", "<|call|>")
    turn_separator = ""
    eos_tokens = ("<|return|>", "<|endoftext|>", "<|call|>")
    single_tokens = ("\n\n", "\n\n\n", "  ", "    ", ".\n\n", " \n")
    anchor = "<|end|>"
    response_template = True  # trl's gptoss_template (the processor reads channels by hand)
    single_bos = False  # harmony has no BOS in the text: see the quirk test
    parse_pieces = (
        *HARMONY,
        ANALYSIS,
        FINAL,
        "<|start|>assistant",
        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>",
        '{"a": 1}',
        "<|endoftext|>",
    )
    parse_examples = (
        f"{ANALYSIS}x<|e<|end|>nd|><|start|>assistant{FINAL}y<|ret<|return|>urn|>",
        f"{ANALYSIS}cut while thinking",
        '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": 1}<|call|>',
    )
    plain_exclude = HARMONY

    def replies(self, member: Member) -> Any:
        return plain

    def test_drift_counters_see_a_turn_that_starts_with_a_newline(self, member: Member) -> None:
        """The generation prompt ends in the word ``assistant``, one token, and o200k splits a
        newline or a channel token from it: no turn merges across it."""
        tokenizer = member.tokenizer
        for turn in ("\nHello", "s", "Hello", f"{FINAL}Hello"):
            assert boundary_drift(member.make(tokenizer), tokenizer, turn) == (0, 0), turn


tok = tokenizer_fixture(GptOssProcessor)


def test_options_are_the_templates_own(tok: Any) -> None:
    processor = trl_env.load_processor("gpt-oss", reasoning_effort="high", model_identity="Bot.")
    assert isinstance(processor, GptOssProcessor)
    report = check_processor(GptOssProcessor(tok, "high", "Bot."), tok)
    assert report.ok, report.message
    assert "Reasoning: high" in template_text(
        tok, Conversation(None, ("x",)), reasoning_effort="high"
    )
    with pytest.raises(trl_env.PluginLoadError, match="reasoning_effort"):
        trl_env.load_processor("gpt-oss", reasoning_effort="max")


def test_no_bos_is_written(tok: Any) -> None:
    """The template writes no BOS and the tokenizer adds none: the text starts with the system
    message."""
    ids = tok(trl_env.extras.first_prompt(GptOssProcessor(tok), "s", "u"), add_special_tokens=False)
    assert tok.convert_ids_to_tokens(ids["input_ids"][:2]) == ["<|start|>", "system"]
    assert tok.bos_token_id not in ids["input_ids"]


@FUZZ
@given(data=st.data())
def test_analysis_is_the_reasoning_and_final_the_action(tok: Any, data: st.DataObject) -> None:
    """The template's training rendering of a last turn with ``thinking`` is what the model
    samples; it parses back to (analysis, final) with or without trl's response schema."""
    reasoning, content = data.draw(plain, "reasoning"), data.draw(plain, "content")
    message = {"role": "assistant", "thinking": reasoning, "content": content}
    completion = template_turn(tok, GptOssProcessor(), message)
    assert completion == f"{ANALYSIS}{reasoning}<|end|><|start|>assistant{FINAL}{content}<|return|>"
    parsing = Member(GptOssProcessor, response_template=True).parsing
    for parser in (None, tok, parsing):
        parsed = GptOssProcessor(parser).parse_agent_output(completion)
        assert parsed == (reasoning.strip(), content.strip())


def test_a_tool_call_or_a_cut_turn() -> None:
    call = '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": 1}<|call|>'
    assert GptOssProcessor().parse_agent_output(
        f"{ANALYSIS}plan<|end|><|start|>assistant{call}"
    ) == (
        "plan",
        '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": 1}',
    )
    assert GptOssProcessor().parse_agent_output(f"{ANALYSIS}still thinking") == (
        "still thinking",
        "",
    )
    assert GptOssProcessor().parse_agent_output("42") == ("", "42")


@FUZZ
@given(conversations(reply=sampled_turns.map(lambda t: t.removeprefix(FINAL))))
def test_history_keeps_what_was_sampled(tok: Any, conv: Conversation) -> None:
    """The documented differences: earlier turns keep their analysis and their ``<|return|>``;
    the official template shows each as its final message closed by ``<|end|>``."""
    processor = GptOssProcessor(tok)
    pieces = segments(processor, conv, tok)
    sampled = [p.text for p in pieces if not p.inserted]
    assert all(s.startswith(FINAL) and s.endswith("<|return|>") for s in sampled)
    assert_segments_tokenize_alone(processor, tok, [conv])
    ours = "".join(p.text for p in pieces)
    finals = tuple(r.split(FINAL)[-1] for r in conv.replies)
    official = template_text(
        tok, Conversation(conv.system, conv.users, finals), **processor.template_kwargs
    )
    assert processor.history_view(ours) == official
    assert ours.count("<|return|>") == len(conv.replies) and "<|return|>" not in official


def test_env_text_spelling_harmony_tokens_stays_text(tok: Any) -> None:
    assert_env_text_stays_text(GptOssProcessor(tok), tok, SPECIAL_TOKENS)


def test_check_passes_on_the_official_template_and_fails_on_others(tmp_path: Path) -> None:
    official = check_cli_with_template(GptOssProcessor, "gptoss", tmp_path / "own")
    assert official.exit_code == 0, official.output
    for other in ("gemma4_v5", "lfm2_2_5", "qwen3", "muse_glimmer"):
        result = check_cli_with_template(GptOssProcessor, other, tmp_path / other)
        assert result.exit_code == 1 and "does not fit" in result.output, (other, result.output)


def test_plays_guess_on_its_tiny_model(tmp_path: Path) -> None:
    records = play_guess("gpt-oss", tmp_path, "--processor-arg", "reasoning_effort=low")
    assert all("Reasoning: low" in r["text"] for r in records)


# -- against openai-harmony, the renderer vLLM serves gpt-oss with --------------------------
#
# Harmony renders only on its own o200k vocabulary, whose file it checks by sha256: it cannot
# be made to use the tiny one. So the comparison is by text (harmony's tokens decoded with its
# own encoding) and by ids on o200k itself (the engine's text encoded by harmony's encoding).
# Offline, harmony cannot download o200k_base.tiktoken; it is rebuilt once, byte for byte, from
# the ranks the npm package js-tiktoken ships, and checked against the same sha256.
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
JS_TIKTOKEN = "js-tiktoken@1.0.21"


def _o200k_from_npm(folder: Path) -> None:
    import hashlib
    import json
    import shutil
    import subprocess
    import tarfile
    import tempfile

    if shutil.which("npm") is None:
        pytest.skip("harmony cannot load o200k offline and npm is not here to rebuild it")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            ["npm", "pack", JS_TIKTOKEN, "--silent"],
            cwd=tmp,
            check=True,
            timeout=180,
            capture_output=True,
        )
        [archive] = Path(tmp).glob("js-tiktoken-*.tgz")
        with tarfile.open(archive) as tar:
            member = tar.extractfile("package/dist/ranks/o200k_base.js")
            assert member is not None
            data = json.loads(member.read().decode().removeprefix("export default ").rstrip(";\n"))
    ranks = {}
    for line in data["bpe_ranks"].split("\n"):
        _, first, *tokens = line.split(" ")
        ranks.update((int(first) + k, t) for k, t in enumerate(tokens))
    text = "".join(f"{ranks[r]} {r}\n" for r in sorted(ranks))
    assert hashlib.sha256(text.encode()).hexdigest() == O200K_SHA256
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "o200k_base.tiktoken").write_text(text)


@pytest.fixture(scope="module")
def harmony() -> Any:
    import os

    oh = pytest.importorskip("openai_harmony")
    try:
        return oh.load_harmony_encoding(oh.HarmonyEncodingName.HARMONY_GPT_OSS)
    except oh.HarmonyError:
        pass  # no network: harmony's own vocabulary file, rebuilt below
    from trl_env.tiny import cache_root

    folder = cache_root() / "harmony"
    if not (folder / "o200k_base.tiktoken").exists():
        try:
            _o200k_from_npm(folder)
        except (OSError, ValueError) as exc:
            pytest.skip(f"harmony's o200k vocabulary could not be rebuilt here: {exc}")
    before = os.environ.get("TIKTOKEN_ENCODINGS_BASE")
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(folder)
    try:
        return oh.load_harmony_encoding(oh.HarmonyEncodingName.HARMONY_GPT_OSS)
    finally:
        if before is None:
            del os.environ["TIKTOKEN_ENCODINGS_BASE"]
        else:
            os.environ["TIKTOKEN_ENCODINGS_BASE"] = before


def harmony_render(processor: GptOssProcessor, conv: Conversation, date: str, enc: Any) -> list:
    """``render_conversation_for_completion`` of ``conv`` as vLLM's gpt-oss serving builds it:
    the system message with the date, the system prompt as the developer's instructions, and
    each earlier reply as its final message (vLLM drops every analysis before the last final, as
    the HF template does; harmony 0.0.8 by itself drops only those before the first final)."""
    import openai_harmony as oh

    effort = oh.ReasoningEffort(processor.reasoning_effort.capitalize())
    system = (
        oh.SystemContent.new()
        .with_model_identity(processor.model_identity)
        .with_reasoning_effort(effort)
        .with_conversation_start_date(date)
    )
    messages = [oh.Message.from_role_and_content(oh.Role.SYSTEM, system)]
    if conv.system:
        developer = oh.DeveloperContent.new().with_instructions(conv.system)
        messages.append(oh.Message.from_role_and_content(oh.Role.DEVELOPER, developer))
    for k, user in enumerate(conv.users):
        if k:
            final = conv.replies[k - 1].rpartition(FINAL)[2]
            messages.append(
                oh.Message.from_role_and_content(oh.Role.ASSISTANT, final).with_channel("final")
            )
        messages.append(oh.Message.from_role_and_content(oh.Role.USER, user))
    conversation = oh.Conversation.from_messages(messages)
    return list(enc.render_conversation_for_completion(conversation, oh.Role.ASSISTANT))


harmony_text = texts(exclude=(*HARMONY, *SPECIAL_TOKENS))


@FUZZ
@given(
    conversations(
        text=harmony_text,
        reply=st.builds(
            lambda r, a: f"{ANALYSIS}{r}<|end|><|start|>assistant{FINAL}{a}",
            harmony_text,
            harmony_text,
        )
        | harmony_text.map(FINAL.__add__),
    ),
    st.sampled_from(["low", "medium", "high"]),
)
def test_text_and_ids_equal_openai_harmony(harmony: Any, conv: Conversation, effort: str) -> None:
    """The engine's first prompt is harmony's, character for character and id for id on o200k;
    with turns played, harmony shows earlier turns as their final message (the rollout keeps
    what was sampled: ``finals_only`` is that view, and nothing else differs)."""
    import re

    from trl_env_gpt_oss.harmony import finals_only

    processor = GptOssProcessor(reasoning_effort=effort)
    replies = tuple(r.removeprefix(FINAL) for r in conv.replies)
    conv = Conversation(conv.system, conv.users, replies)
    ours = "".join(s.text for s in segments(processor, conv))
    if conv.replies:
        ours = finals_only(ours)
    date = re.search(r"Current date: (\S+)", ours)
    assert date is not None
    tokens = harmony_render(processor, conv, date.group(1), harmony)
    assert ours == harmony.decode_utf8(tokens)
    assert harmony.encode(ours, allowed_special="all") == tokens


def test_the_template_renderer_differs_from_harmony_by_the_developer_newlines(tok: Any) -> None:
    """``renderer=template`` writes the HF template's developer message; both renderers pass
    ``trl-env check`` on the official template, where their texts differ only there."""
    conv = Conversation("Be brief.", ("Hi",))
    harmony_text_, template_text_ = (
        processor_text(GptOssProcessor(tok, renderer=r), conv) for r in ("harmony", "template")
    )
    raw = "".join(s.text for s in segments(GptOssProcessor(tok), conv))
    assert "# Instructions\n\nBe brief.<|end|>" in raw
    assert raw.replace("Be brief.<|end|>", "Be brief.\n\n<|end|>") == template_text_
    assert harmony_text_ == template_text_ == template_text(tok, conv)
    for renderer in ("harmony", "template"):
        report = check_processor(GptOssProcessor(tok, renderer=renderer), tok)
        assert report.ok, report.message
    with pytest.raises(trl_env.PluginLoadError, match="renderer"):
        trl_env.load_processor("gpt-oss", renderer="vllm")

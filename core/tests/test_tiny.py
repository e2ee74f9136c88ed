"""The generic tiny-model builder: everything family-specific comes from the TinySpec."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from trl_env import tiny
from trl_env.errors import TrlEnvError
from trl_env.tiny import SENTENCEPIECE_DECODERS, TinySpec, build_tokenizer, eos_ids, tiny_path

# A GPT-2-like split, written here: the core itself names no family's pattern.
SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
BYTE_LEVEL = TinySpec(
    model_type="llama",
    family="toy",
    chat_template="phi3",
    split_pattern=SPLIT,
    eos_token="<|end|>",
    pad_token="<|pad|>",
    special_tokens=("<|pad|>", "<|user|>", "<|assistant|>", "<|end|>"),
    vocab_size=400,
)
SENTENCEPIECE = replace(
    BYTE_LEVEL,
    family="toy-sp",
    split_pattern=r"▁?[^▁\s]+|▁+|\s+",
    pipeline={
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
        "pre_tokenizer": None,
        "decoder": {
            "type": "Sequence",
            "decoders": list(SENTENCEPIECE_DECODERS),
        },
    },
    byte_fallback=True,
    byte_chars="\n",
    unk_token="<unk>",
)


def ids(tokenizer: object, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])  # type: ignore[operator]


def test_cache_key_follows_the_spec_and_the_builder(monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed spec or builder gets a new directory, so stale tiny models are rebuilt."""
    key = tiny_path(BYTE_LEVEL)
    assert tiny_path(replace(BYTE_LEVEL)) == key
    assert tiny_path(replace(BYTE_LEVEL, eos_tokens=("<|end|>", "<|pad|>"))) != key
    monkeypatch.setattr(tiny, "BUILDER_VERSION", tiny.BUILDER_VERSION + 1)
    assert tiny_path(BYTE_LEVEL) != key
    assert isinstance(key, Path) and key.name.startswith("toy-")


def test_single_tokens_are_trained_in() -> None:
    run = "\n\n\n\n\n"
    without = build_tokenizer(BYTE_LEVEL)
    with_run = build_tokenizer(replace(BYTE_LEVEL, single_tokens=(run,)))
    assert len(ids(without, run)) > 1
    assert len(ids(with_run, run)) == 1


def test_declared_pipeline_and_byte_fallback() -> None:
    tokenizer = build_tokenizer(SENTENCEPIECE)
    assert tokenizer.backend_tokenizer.normalizer.normalize_str("a b") == "a▁b"
    # The declared byte characters have no piece of their own: they come as bytes.
    assert tokenizer.convert_ids_to_tokens(ids(tokenizer, "\n\n")) == ["<0x0A>", "<0x0A>"]
    assert "<0x0A>" in tokenizer.get_vocab() and "\n" not in tokenizer.get_vocab()
    text = "the agent moves\n\n  left ☃"
    assert tokenizer.decode(ids(tokenizer, text)) == text


def test_special_and_rstrip_tokens() -> None:
    spec = replace(BYTE_LEVEL, added_tokens=("<think>",), rstrip_tokens=("<|user|>",))
    tokenizer = build_tokenizer(spec)
    user, think = (tokenizer.convert_tokens_to_ids(t) for t in ("<|user|>", "<think>"))
    assert ids(tokenizer, "<|user|>\n") == [user]  # swallows the whitespace after it
    assert ids(tokenizer, "a<think>b")[1] == think
    assert "<think>" in tokenizer.decode([think], skip_special_tokens=True)
    assert tokenizer.decode([user], skip_special_tokens=True) == ""


def test_eos_ids_follow_the_declared_order() -> None:
    spec = replace(BYTE_LEVEL, eos_tokens=("<|end|>", "<|pad|>"))
    tokenizer = build_tokenizer(spec)
    assert tokenizer.convert_ids_to_tokens(eos_ids(spec, tokenizer)) == ["<|end|>", "<|pad|>"]
    assert eos_ids(BYTE_LEVEL, tokenizer) == [tokenizer.eos_token_id]
    with pytest.raises(TrlEnvError, match="unknown eos tokens"):
        eos_ids(replace(spec, eos_tokens=("<nope>",)), tokenizer)


def test_bad_specs_get_one_sentence() -> None:
    with pytest.raises(TrlEnvError, match="no tokenizer class 'NoSuchTokenizer'"):
        build_tokenizer(replace(BYTE_LEVEL, tokenizer_class="NoSuchTokenizer"))
    with pytest.raises(TrlEnvError, match="needs the real split_pattern"):
        build_tokenizer(replace(BYTE_LEVEL, split_pattern=None))
    with pytest.raises(TrlEnvError, match="splits it into"):
        build_tokenizer(replace(BYTE_LEVEL, single_tokens=("a b",)))
    with pytest.raises(TrlEnvError, match="no chat template named 'nope'"):
        build_tokenizer(replace(BYTE_LEVEL, chat_template="nope"))

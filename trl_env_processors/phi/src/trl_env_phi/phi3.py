"""Phi-3 (template ``phi3``) and Phi-3.5 (template ``phi3_5``): ``<|{role}|>\\n{text}<|end|>\\n``.

The two templates differ only in an empty system message, which Phi-3's writes and Phi-3.5's
skips; a processor never writes one (an empty system prompt means no system message), so the
two processors render the same text and differ in their template and end-of-sequence ids.
"""

from __future__ import annotations

from trl_env.chat_format import ChatFormat
from trl_env.tiny import SENTENCEPIECE_DECODERS, TinySpec

UNK, BOS, EOS = "<unk>", "<s>", "</s>"
ENDOFTEXT, END = "<|endoftext|>", "<|end|>"
SYSTEM, USER, ASSISTANT = "<|system|>", "<|user|>", "<|assistant|>"

# The real tokenizer is Llama 2's SentencePiece vocabulary, and transformers loads a phi3
# checkpoint's tokenizer.json as it is: the legacy Llama 2 pipeline, which writes "▁" before the
# text after every special token and turns spaces into "▁"; decoding strips one leading space.
PIPELINE = {
    "normalizer": {
        "type": "Sequence",
        "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
        ],
    },
    "pre_tokenizer": None,
    "decoder": {
        "type": "Sequence",
        "decoders": [
            *SENTENCEPIECE_DECODERS,
            {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        ],
    },
}
# While training the tiny one, pieces end like SentencePiece's: a word with at most one leading
# "▁", single digits, runs of "▁".
PIECE_PATTERN = r"▁?[^▁\s\p{N}]+|\p{N}|▁+(?![^▁\s\p{N}])|▁|\s+"


def phi_tiny(eos_tokens: tuple[str, ...]) -> TinySpec:
    return TinySpec(
        model_type="phi3",
        pipeline=PIPELINE,
        split_pattern=PIECE_PATTERN,
        byte_fallback=True,
        # Llama 2's vocabulary has no newline, tab or carriage-return piece: they are bytes, so
        # "\n\n" never merges.
        byte_chars="\n\t\r",
        unk_token=UNK,
        bos_token=BOS,
        eos_token=ENDOFTEXT,
        pad_token=ENDOFTEXT,
        special_tokens=(UNK, BOS, EOS, ENDOFTEXT, ASSISTANT, SYSTEM, END, USER),
        # As in the real tokenizer: the role and end tokens swallow the newline after them.
        rstrip_tokens=(ASSISTANT, SYSTEM, END, USER),
        single_tokens=("  ", "   ", "    ", "        "),
        eos_tokens=eos_tokens,
    )


class Phi3Processor(ChatFormat):
    """Phi-3 Instruct (mini, medium)."""

    name = "phi3"
    chat_template = "phi3"
    role_header = "<|{role}|>\n"
    turn_end = END
    stop_tokens = (END,)
    # The template's newline after <|end|> is never sampled.
    separator = "\n"
    # generation_config also stops at these; a completion ends at the first of them.
    extra_ends = (ENDOFTEXT, ASSISTANT)
    tiny = phi_tiny((ENDOFTEXT, ASSISTANT, END))


class Phi35Processor(Phi3Processor):
    """Phi-3.5 mini Instruct."""

    name = "phi3.5"
    chat_template = "phi3_5"
    tiny = phi_tiny((END, ASSISTANT, ENDOFTEXT))

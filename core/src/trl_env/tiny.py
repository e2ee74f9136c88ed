"""The ``tiny`` model: a small model of a processor's family, built offline and cached.

A BPE tokenizer is trained in well under a second on a built-in corpus through the family's own
tokenizer class from transformers (so its normalizer and pre-tokenizer are the real ones), with
the family's special and added tokens, the whitespace merges its real vocabulary has, and its
official chat template (read from the installed trl package); the weights are random from a
fixed seed. Both are saved and loaded back through the ordinary ``from_pretrained`` code, so
the loading path is the one real model ids take. Everything family-specific comes from the
family's :class:`TinySpec`; this module names no family.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from .atomic import building
from .errors import TrlEnvError

# Bump when the builder's output changes, so cached tiny models are rebuilt.
BUILDER_VERSION = 4
TINY = "tiny"
GENERIC_CLASS = "PreTrainedTokenizerFast"
# Whitespace runs that real byte-level BPE vocabularies (Qwen 2/3, Llama 3) hold as single
# tokens; a family's tiny_spec may list them in its ``single_tokens``.
BPE_WHITESPACE_TOKENS = (
    "\n\n",
    "\n\n\n",
    "\n\n\n\n",
    "  ",
    "   ",
    "    ",
    "        ",
    " \n",
    ".\n",
    ".\n\n",
    ":\n\n",
)


@dataclass(frozen=True)
class TinySpec:
    """What a family's tiny model needs; a processor exposes one as ``tiny_spec``.

    ``tokenizer_class`` is the transformers class the real tokenizer loads as: a class that
    builds its own pipeline (``Qwen2Tokenizer``, ``GemmaTokenizer``, ``LlamaTokenizer``) gives the
    tiny one the real normalizer, pre-tokenizer and decoder. With the generic class (what
    transformers loads a checkpoint's tokenizer.json as, pipeline included) the family gives the
    real byte-level ``split_pattern``, or the real ``pipeline``. With ``byte_fallback``
    (SentencePiece-like), ``split_pattern`` only marks where pieces end while training.
    """

    model_type: str
    eos_token: str
    pad_token: str
    family: str = ""  # default: the processor's name
    chat_template: str = ""  # default: the processor's chat_template
    # The template itself, for a family whose template trl does not ship (read from the model).
    template_text: str = ""
    bos_token: str | None = None
    unk_token: str | None = None
    add_bos_token: bool = False
    special_tokens: tuple[str, ...] = ()
    # The special tokens the real tokenizer names besides bos/eos/pad/unk (its
    # ``extra_special_tokens``), so they are in ``all_special_tokens`` as there (Qwen's turns).
    named_special_tokens: tuple[str, ...] = ()
    added_tokens: tuple[str, ...] = ()  # added tokens that are not special (Qwen3's <think>)
    # Tokens that swallow the whitespace after them when text is tokenized (Phi-3's <|end|>).
    rstrip_tokens: tuple[str, ...] = ()
    tokenizer_class: str = GENERIC_CLASS
    tokenizer_options: dict[str, Any] = field(default_factory=dict)
    split_pattern: str | None = None
    # The real tokenizer.json's "normalizer", "pre_tokenizer" and "decoder" (tokenizers' JSON), for
    # a family served by the generic class whose pipeline is not byte-level (Phi-3).
    pipeline: dict[str, Any] = field(default_factory=dict)
    byte_fallback: bool = False
    byte_chars: str = ""  # characters the real vocabulary has no token for (bytes instead)
    # Strings the real vocabulary has as one token ("\n\n", runs of spaces): trained in.
    single_tokens: tuple[str, ...] = ()
    words: tuple[str, ...] = ()  # the family's own words for the training corpus (role names)
    # generation_config.eos_token_id, as the real model lists it; default: eos_token.
    eos_tokens: tuple[str, ...] = ()
    vocab_size: int = 1024
    config: dict[str, Any] = field(default_factory=dict)


def cache_root() -> Path:
    root = os.environ.get("TRL_ENV_CACHE") or Path.home() / ".cache" / "trl-env"
    return Path(root)


def official_template(name: str) -> str:
    """The official chat template ``name`` as shipped inside the installed trl package."""
    path = resources.files("trl") / "chat_templates" / f"{name}.jinja"
    if not path.is_file():
        raise TrlEnvError(f"trl ships no chat template named {name!r}; upgrade trl.")
    return path.read_text(encoding="utf-8")


def tiny_path(spec: TinySpec) -> Path:
    import transformers

    payload = json.dumps(
        [BUILDER_VERSION, transformers.__version__, asdict(spec)], sort_keys=True, default=str
    )
    digest = hashlib.sha256(payload.encode()).hexdigest()[:12]
    return cache_root() / "tiny" / f"{spec.family}-{digest}"


def build_tiny(spec: TinySpec, *, force: bool = False) -> Path:
    """Build (once) and return the directory of ``spec``'s tiny model and tokenizer."""
    path = tiny_path(spec)
    if (path / "config.json").exists() and not force:
        return path
    with building(path, lambda p: (p / "config.json").exists()) as tmp:
        tokenizer = build_tokenizer(spec)
        tokenizer.save_pretrained(tmp)
        _build_model(spec, tokenizer).save_pretrained(tmp)
        if force and path.exists():
            shutil.rmtree(path)
    return path


def build_tokenizer(spec: TinySpec) -> Any:
    """Train the family's small BPE tokenizer offline and wrap it in its transformers class."""
    vocab, merges = _train(spec, _pipeline(spec))
    specials = _specials(spec)
    names = {"bos_token": spec.bos_token, "eos_token": spec.eos_token, "pad_token": spec.pad_token}
    common: dict[str, Any] = {
        **{k: v for k, v in names.items() if v},
        # None too: a class with a default one (Qwen2Tokenizer's) must not declare one the real
        # tokenizer has not.
        "unk_token": spec.unk_token,
        "add_bos_token": spec.add_bos_token,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 32768,
    }
    if spec.named_special_tokens:
        common["extra_special_tokens"] = list(spec.named_special_tokens)
    if spec.tokenizer_class == GENERIC_CLASS:
        tokenizer = _generic(spec, vocab, merges, common)
    else:
        cls = _tokenizer_class(spec.tokenizer_class)
        tokenizer = cls(vocab=vocab, merges=merges, **spec.tokenizer_options, **common)
    from tokenizers import AddedToken

    for tokens, special in ((specials, True), (spec.added_tokens, False)):
        tokenizer.add_tokens(
            [
                AddedToken(t, special=special, normalized=False, rstrip=t in spec.rstrip_tokens)
                for t in tokens
            ]
        )
    tokenizer.chat_template = spec.template_text or official_template(spec.chat_template)
    return tokenizer


def _specials(spec: TinySpec) -> list[str]:
    """Special tokens in the family's order (the real vocabulary's), then any named one missing."""
    named = (spec.bos_token, spec.eos_token, spec.pad_token, spec.unk_token)
    return _unique([t for t in (*spec.special_tokens, *named, *spec.named_special_tokens) if t])


def _tokenizer_class(name: str) -> Any:
    import transformers

    cls = getattr(transformers, name, None)
    if cls is None:
        raise TrlEnvError(f"transformers has no tokenizer class {name!r}; upgrade transformers.")
    return cls


def _byte_level_pre(spec: TinySpec) -> Any:
    from tokenizers import Regex, pre_tokenizers

    if not spec.split_pattern:
        raise TrlEnvError(f"the tiny spec of {spec.family} needs the real split_pattern")
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(spec.split_pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def _runtime(spec: TinySpec) -> Any:
    """A vocabulary-less ``tokenizers.Tokenizer`` carrying the real normalizer, pre-tokenizer
    and decoder: the real class's own, the family's declared ``pipeline``, or byte-level."""
    from tokenizers import Tokenizer, decoders, models

    if spec.tokenizer_class != GENERIC_CLASS:
        # An empty instance of the real class builds the real pipeline.
        return _tokenizer_class(spec.tokenizer_class)(**spec.tokenizer_options).backend_tokenizer
    if spec.pipeline:
        data = json.loads(Tokenizer(models.BPE()).to_str())
        return Tokenizer.from_str(json.dumps({**data, **spec.pipeline}))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = _byte_level_pre(spec)
    tok.decoder = decoders.ByteLevel()
    return tok


def _pipeline(spec: TinySpec) -> tuple[Any, Any]:
    """The normalizer and the pre-tokenizer to train with: the real ones, plus piece ends."""
    from tokenizers import Regex, pre_tokenizers

    runtime = _runtime(spec)
    pre = runtime.pre_tokenizer
    if spec.byte_fallback and spec.split_pattern:
        split = pre_tokenizers.Split(Regex(spec.split_pattern), behavior="isolated")
        pre = pre_tokenizers.Sequence([pre, split]) if pre is not None else split
    return runtime.normalizer, pre


def _train(
    spec: TinySpec, pipeline: tuple[Any, Any]
) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Vocabulary and merges learned on the corpus, shaped like the real vocabulary's."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from tokenizers.trainers import BpeTrainer

    tok = Tokenizer(models.BPE())
    tok.normalizer, tok.pre_tokenizer = pipeline
    trainer = BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=_specials(spec),
        # Byte-level: every byte has a token. Byte fallback: bytes come as <0xNN> tokens below.
        initial_alphabet=[] if spec.byte_fallback else pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(spec.words, spec.single_tokens), trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    vocab: dict[str, int] = model["vocab"]
    merges = [
        (a, b) for a, b in (m.split(" ") if isinstance(m, str) else m for m in model["merges"])
    ]
    if spec.byte_chars:  # the real vocabulary spells these as bytes: drop what holds them
        banned = set(spec.byte_chars)
        keep = [t for t in sorted(vocab, key=vocab.__getitem__) if not banned & set(t)]
        vocab = {t: i for i, t in enumerate(keep)}
        merges = [m for m in merges if not banned & set(m[0] + m[1])]
    if spec.byte_fallback:
        for byte in range(256):
            vocab.setdefault(f"<0x{byte:02X}>", len(vocab))
    _merge_in(spec, pipeline, vocab, merges)
    return vocab, merges


def _merge_in(
    spec: TinySpec, pipeline: tuple[Any, Any], vocab: dict[str, int], merges: list[tuple[str, str]]
) -> None:
    """Make each of ``spec.single_tokens`` one token, with merges after the learned ones.

    The corpus weight makes them likely to be learned early; this makes it certain whatever the
    vocabulary size. Merges appended last apply only once the learned ones are done, so the
    string's learned pieces are joined left to right, as a real vocabulary's longer runs are.
    """
    from tokenizers import models

    normalizer, pre = pipeline
    for text in spec.single_tokens:
        normal = normalizer.normalize_str(text) if normalizer is not None else text
        pieces = pre.pre_tokenize_str(normal) if pre is not None else [(normal, None)]
        if len(pieces) != 1:
            raise TrlEnvError(
                f"the tiny spec of {spec.family} asks for {text!r} as one token, but its "
                f"pre-tokenizer splits it into {[piece for piece, _ in pieces]}"
            )
        model = models.BPE(vocab=vocab, merges=merges, byte_fallback=spec.byte_fallback)
        tokens = [token.value for token in model.tokenize(pieces[0][0])]
        while len(tokens) > 1:
            joined = tokens[0] + tokens[1]
            merges.append((tokens[0], tokens[1]))
            vocab.setdefault(joined, len(vocab))
            tokens = [joined, *tokens[2:]]


def _generic(
    spec: TinySpec, vocab: dict[str, int], merges: list[tuple[str, str]], names: dict[str, Any]
) -> Any:
    """The tokenizer served by transformers' generic class, as Llama 3 and Phi-3 load."""
    from tokenizers import Tokenizer, models, processors
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(
        models.BPE(
            vocab=vocab,
            merges=merges,
            byte_fallback=spec.byte_fallback,
            unk_token=spec.unk_token,
            fuse_unk=spec.byte_fallback,
        )
    )
    runtime = _runtime(spec)
    tok.normalizer, tok.pre_tokenizer, tok.decoder = (
        runtime.normalizer,
        runtime.pre_tokenizer,
        runtime.decoder,
    )
    if spec.add_bos_token and spec.bos_token:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{spec.bos_token} $A",
            pair=f"{spec.bos_token} $A {spec.bos_token} $B",
            special_tokens=[(spec.bos_token, vocab[spec.bos_token])],
        )
    elif not spec.byte_fallback:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return PreTrainedTokenizerFast(tokenizer_object=tok, **names)


# SentencePiece's decoding, as a tokenizer.json decoder sequence: "▁" back to a space, byte
# pieces back to bytes, all joined.
SENTENCEPIECE_DECODERS: tuple[dict[str, Any], ...] = (
    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
    {"type": "ByteFallback"},
    {"type": "Fuse"},
)

# The tiny models' layers: small enough for a CPU test, with grouped-query attention.
TINY_LAYERS: dict[str, int] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
}


def eos_ids(spec: TinySpec, tokenizer: Any) -> list[int]:
    """The ids ``generation_config.eos_token_id`` lists, in the real model's order."""
    tokens = spec.eos_tokens or (spec.eos_token,)
    vocab = tokenizer.get_vocab()
    missing = [t for t in tokens if t not in vocab]
    if missing:
        raise TrlEnvError(f"the tiny spec of {spec.family} lists unknown eos tokens {missing}")
    return [vocab[t] for t in tokens]


def _build_model(spec: TinySpec, tokenizer: Any) -> Any:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    options: dict[str, Any] = {
        "vocab_size": len(tokenizer),
        **TINY_LAYERS,
        "max_position_embeddings": 8192,
        "tie_word_embeddings": True,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
    }
    options.update(spec.config)
    config = AutoConfig.for_model(spec.model_type, **options)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    eos = eos_ids(spec, tokenizer)
    model.generation_config = GenerationConfig(
        eos_token_id=eos if len(eos) > 1 else eos[0],
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    return model


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


# Generic text for the tiny tokenizer's corpus; a family adds its own words (role names).
_WORDS = (
    "the agent moves up down left right and pushes a box onto the goal you are in a room "
    "with walls guess a number between one and one hundred higher lower correct wrong "
    "letter word position green yellow gray answer result error invalid action please reply "
    "with one of think about the board first then act step reward done solved stuck "
    "def return print import for in range if else while true false none result value "
    "calculator add multiply subtract divide tool call name arguments observation "
    "hello world weather today question because therefore however"
).split()
# How often each of a family's single-token strings is seen: enough to be merged early, as
# whitespace runs are in real vocabularies.
_SINGLE_WEIGHT = 200


def corpus(words: tuple[str, ...] = (), single_tokens: tuple[str, ...] = ()) -> list[str]:
    """Deterministic training text: prose, numbers, boards, code, JSON and whitespace runs."""
    import random

    rng = random.Random(0)
    vocabulary = [*_WORDS, *words]
    lines: list[str] = []
    for _ in range(3000):
        n = rng.randint(3, 14)
        picked = [rng.choice(vocabulary) for _ in range(n)]
        if rng.random() < 0.3:
            picked[0] = picked[0].capitalize()
        sep = rng.choice([" ", " ", " ", "\n", "\n\n", ", ", ". "])
        lines.append(sep.join(picked) + rng.choice([".", "!", "?", ":", "\n", "\n\n", ""]))
    for i in range(0, 2000, 3):
        lines.append(f"{i} {i * 7 % 1000} -{i} {i}.{i % 10} {i:,}")
    for _ in range(300):
        w, h = rng.randint(5, 9), rng.randint(5, 9)
        inner = [
            "#" + "".join(rng.choice(" .$@*+") for _ in range(w - 2)) + "#" for _ in range(h - 2)
        ]
        lines.append("\n".join(["#" * w, *inner, "#" * w]) + "\n\n")
    lines += [
        "def f(x):\n    return x * 2\n\nprint(f(21))\n",
        "```python\nfor i in range(10):\n    print(i)\n```\n",
        '{"name": "add", "arguments": {"a": 1, "b": 2}}\n',
        "\n\n\n\t\t  \r\n",
        "Ünïcödé текст 中文 日本語 🙂 emojis — dashes “quotes”",
    ] * 20
    lines += [text for text in single_tokens for _ in range(_SINGLE_WEIGHT)]
    rng.shuffle(lines)
    return lines

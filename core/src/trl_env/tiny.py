"""The ``tiny`` model: a small model of a processor's family, built offline and cached.

A byte-level BPE tokenizer is trained in about a second on a built-in corpus, with the family's
special and added tokens and its official chat template (read from the installed trl package);
the weights are random from a fixed seed. Both are saved and loaded back through the ordinary
``from_pretrained`` code, so the loading path is the one real model ids take.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import TrlEnvError

BUILDER_VERSION = 1
TINY = "tiny"

# Pre-tokenizer split patterns of the real tokenizers.
QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@dataclass(frozen=True)
class TinySpec:
    """What a family's tiny model needs; a processor exposes one as ``tiny_spec``."""

    family: str
    model_type: str
    chat_template: str
    eos_token: str
    pad_token: str
    bos_token: str | None = None
    add_bos_token: bool = False
    special_tokens: tuple[str, ...] = ()
    added_tokens: tuple[str, ...] = ()
    split_pattern: str = QWEN_PATTERN
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
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=path.name + ".", dir=path.parent))
    try:
        tokenizer = build_tokenizer(spec)
        tokenizer.save_pretrained(tmp)
        _build_model(spec, tokenizer).save_pretrained(tmp)
        if force and path.exists():
            shutil.rmtree(path)
        try:
            tmp.rename(path)  # atomic: concurrent builders (test workers) race safely
        except OSError:
            if not (path / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def build_tokenizer(spec: TinySpec) -> Any:
    """Train the family's small byte-level BPE tokenizer offline and wrap it for transformers."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
    )
    from tokenizers.trainers import BpeTrainer
    from transformers import PreTrainedTokenizerFast

    specials = _unique([t for t in (spec.bos_token, spec.eos_token, spec.pad_token) if t])
    specials += [t for t in spec.special_tokens if t not in specials]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(spec.split_pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in specials],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in spec.added_tokens])
    if spec.add_bos_token and spec.bos_token:
        bos_id = tok.token_to_id(spec.bos_token)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{spec.bos_token} $A",
            pair=f"{spec.bos_token} $A {spec.bos_token} $B",
            special_tokens=[(spec.bos_token, bos_id)],
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=spec.bos_token,
        eos_token=spec.eos_token,
        pad_token=spec.pad_token,
        additional_special_tokens=[t for t in spec.special_tokens if t not in specials[:3]],
        clean_up_tokenization_spaces=False,
        model_max_length=32768,
    )
    wrapped.chat_template = official_template(spec.chat_template)
    return wrapped


def _build_model(spec: TinySpec, tokenizer: Any) -> Any:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    options: dict[str, Any] = {
        "vocab_size": len(tokenizer),
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
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
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    return model


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


_WORDS = (
    "the agent moves up down left right and pushes a box onto the goal you are in a room "
    "with walls guess a number between one and one hundred higher lower correct wrong "
    "letter word position green yellow gray answer result error invalid action please reply "
    "with one of think about the board first then act step reward done solved stuck "
    "def return print import for in range if else while true false none result value "
    "calculator add multiply subtract divide tool call name arguments observation system user "
    "assistant model hello world weather today question because therefore however"
).split()


def corpus() -> list[str]:
    """Deterministic training text: prose, numbers, boards, code, JSON and whitespace runs."""
    import random

    rng = random.Random(0)
    lines: list[str] = []
    for _ in range(3000):
        n = rng.randint(3, 14)
        words = [rng.choice(_WORDS) for _ in range(n)]
        if rng.random() < 0.3:
            words[0] = words[0].capitalize()
        sep = rng.choice([" ", " ", " ", "\n", "\n\n", ", ", ". "])
        lines.append(sep.join(words) + rng.choice([".", "!", "?", ":", "\n", "\n\n", ""]))
    for i in range(0, 2000, 3):
        lines.append(f"{i} {i * 7 % 1000} -{i} {i}.{i % 10} {i:,}")
    for _ in range(300):
        w, h = rng.randint(5, 9), rng.randint(5, 9)
        rows = (
            ["#" * w]
            + [
                "#" + "".join(rng.choice(" .$@*+") for _ in range(w - 2)) + "#"
                for _ in range(h - 2)
            ]
            + ["#" * w]
        )
        lines.append("\n".join(rows) + "\n\n")
    lines += [
        "def f(x):\n    return x * 2\n\nprint(f(21))\n",
        "```python\nfor i in range(10):\n    print(i)\n```\n",
        '{"name": "add", "arguments": {"a": 1, "b": 2}}\n',
        "\n\n\n\t\t  \r\n",
        "Ünïcödé текст 中文 日本語 🙂 emojis — dashes “quotes”",
    ] * 20
    rng.shuffle(lines)
    return lines

"""``Wire``: a processor bound to a tokenizer, the one home of every token-level fact.

The engine, the TRL integration, ``trl-env check`` and training all ask a ``Wire`` for stop ids,
the ids that close a turn, the ids of the first prompt and of an env reply, and whether another
turn fits the episode's token budget. Nothing else computes these.
"""

from __future__ import annotations

import functools
import json
import re
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import extras
from .errors import TokenizerMismatchError, UsageError
from .protocols import Processor, Tokenizer


def model_eos_ids(model: Any) -> tuple[int, ...]:
    """The end-of-sequence ids a model's ``generation_config`` (or config) lists, maybe none."""
    found: list[int] = []
    for source in (getattr(model, "generation_config", None), getattr(model, "config", None)):
        value = getattr(source, "eos_token_id", None)
        values = value if isinstance(value, list | tuple) else [value]
        found += [v for v in values if isinstance(v, int) and v not in found]
    return tuple(found)


@dataclass(frozen=True)
class Wire:
    """The token-level facts of ``processor`` on ``tokenizer``; build it with :meth:`bind`."""

    processor: Processor
    tokenizer: Tokenizer
    processor_stop_ids: tuple[int, ...]  # the processor's own end-of-turn tokens
    eos_ids: tuple[int, ...]  # the model's end-of-sequence ids (tokenizer and generation config)
    close_ids: tuple[int, ...]  # inserted (masked) after a turn that did not end on them
    close_text: str  # the text of ``close_ids``
    separator: str  # text between a closed assistant turn and the next user turn
    # The tokenizer's control tokens (longest first): env text spelling one keeps it as text.
    control_tokens: tuple[str, ...] = field(default=(), compare=False)

    @classmethod
    def bind(cls, processor: Processor, tokenizer: Tokenizer, eos_ids: Iterable[int] = ()) -> Wire:
        """Bind ``processor`` to ``tokenizer``; ``eos_ids`` adds the model's own end ids.

        Raises :class:`UsageError` in one sentence when the tokenizer lacks a stop token.
        """
        stops = extras.stop_tokens(processor, tokenizer)
        vocab = tokenizer.get_vocab()
        missing = [t for t in stops if t not in vocab]
        if missing:
            raise UsageError(
                f"The tokenizer has no stop token {', '.join(missing)} of "
                f"{type(processor).__name__}; run `trl-env check` on this processor and model."
            )
        own = getattr(tokenizer, "eos_token_id", None)
        eos = [i for i in (own, *eos_ids) if isinstance(i, int)]
        close_text = extras.turn_close(processor, tokenizer)
        close_ids = tuple(_encode(tokenizer, [close_text])[0])
        return cls(
            processor=processor,
            tokenizer=tokenizer,
            processor_stop_ids=tuple(dict.fromkeys(vocab[t] for t in stops)),
            eos_ids=tuple(dict.fromkeys(eos)),
            close_ids=close_ids,
            close_text=close_text,
            separator=extras.turn_separator(processor),
            control_tokens=control_tokens(tokenizer),
        )

    # -- stops --------------------------------------------------------------------------
    @property
    def stop_ids(self) -> frozenset[int]:
        """A turn ends at any of these: the processor's stop tokens or the model's EOS ids."""
        return frozenset(self.processor_stop_ids) | frozenset(self.eos_ids)

    def needs_close(self, ids: Sequence[int], stopped: bool) -> bool:
        """Whether a sampled turn must be followed by :attr:`close_ids` to keep the format.

        A turn cut at its token limit is closed; so is one that ended on a model EOS id that is
        not the processor's closer (``<|endoftext|>`` for a ChatML family), the same way.
        """
        if not stopped or not ids:
            return True
        return tuple(ids[-len(self.close_ids) :]) != self.close_ids

    # -- text to ids ----------------------------------------------------------------------
    def encode(self, texts: list[str]) -> list[list[int]]:
        """Each text tokenized alone, without special tokens added."""
        fast = self._fast
        if fast is None:
            return _encode(self.tokenizer, texts)
        return [e.ids for e in encode_each(fast, texts)]

    @functools.cached_property
    def _fast(self) -> Any:
        """The fast tokenizer's own ``tokenizers.Tokenizer``, which encodes a turn's text in a
        fraction of the wrapper's time, when it gives the wrapper's very ids; else ``None``."""
        return fast_tokenizer(self.tokenizer, self.control_tokens)

    def _encode_after(self, prefix: str, text: str) -> list[int]:
        """:func:`encode_after` through :attr:`_fast`, the prefix's own ids kept once."""
        if self._fast is None:
            return encode_after(self.tokenizer, prefix, text)
        both = self.encode([prefix + text])[0]
        head = self._heads.get(prefix)
        if head is None:
            head = self._heads[prefix] = self.encode([prefix])[0]
        if both[: len(head)] == head:
            return both[len(head) :]
        return self.encode([text])[0]

    @functools.cached_property
    def _heads(self) -> dict[str, list[int]]:
        return {}  # a prefix's own ids (the turn's closer): the same every turn

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(
            list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False
        )

    def first_prompt_text(self, system: str, user: str) -> str:
        """The first prompt: system turn, first user turn and the generation header."""
        return extras.first_prompt(self.processor, system, user)

    def reply_text(self, text: str) -> str:
        """What follows a closed assistant turn when the env replies ``text``."""
        return self.separator + self.processor.append_user_input(text)

    def reply_ids(
        self, text: str, env_texts: Sequence[str] = (), allow_special: bool = True
    ) -> list[int]:
        """The ids of :meth:`reply_text`, as they read after the closer of the turn before.

        ``env_texts`` are the env's own texts inside ``text``: unless ``allow_special``, a
        special token's string in them stays plain text (see :meth:`encode_env`).
        """
        return self.encode_env(text, env_texts, allow_special, after=self.close_text)

    @property
    def special_tokens(self) -> tuple[str, ...]:
        """The earlier name of :attr:`control_tokens` (it holds more than special ones now)."""
        return self.control_tokens

    def count_special(self, text: str) -> int:
        """How many control-token strings ``text`` holds."""
        pattern = self._special_pattern()
        return 0 if pattern is None else sum(1 for _ in pattern.finditer(text))

    def encode_env(
        self,
        text: str,
        env_texts: Sequence[str],
        allow_special: bool = False,
        after: str | None = None,
    ) -> list[int]:
        """The ids of ``text`` (rendered by the processor, after the control token ``after``),
        where a control token's string inside one of ``env_texts`` stays plain text.

        Control tokens are every added token that is not ordinary text (special ones, Qwen3's
        ``<think>`` and ``<tool_call>``, its ``<|fim_prefix|>``; see :func:`control_tokens`), each
        keeping its id (see :func:`literal_tokenizer`). Env text that spells
        ``<|im_end|><|im_start|>assistant`` would otherwise close the turn and open a forged one,
        and ``</think>`` would close the model's reasoning, in the context the policy learns in.
        The template's own control tokens stay tokens: the text is cut at them and only the
        pieces between are tokenized with every control token as text. Text without such strings
        gets exactly the ids it always had.
        """
        plain = self._encode_after(after, text) if after is not None else self.encode([text])[0]
        pattern = self._special_pattern()
        if allow_special or pattern is None or not any(pattern.search(t) for t in env_texts):
            return plain
        spans = _locate(text, env_texts)
        vocab = self.tokenizer.get_vocab()
        ids: list[int] = []
        pos, before = 0, after
        for match in pattern.finditer(text):
            if any(a <= match.start() and match.end() <= b for a, b in spans):
                continue  # env text: stays text
            if match.start() > pos:
                ids += self.encode_literal(text[pos : match.start()], before)
            ids.append(vocab[match.group()])
            pos, before = match.end(), match.group()
        if pos < len(text):
            ids += self.encode_literal(text[pos:], before)
        return ids

    def _special_pattern(self) -> re.Pattern[str] | None:
        if not self.control_tokens:
            return None
        return _pattern(self.control_tokens)

    @functools.cached_property
    def _literal(self) -> Any:
        """A tokenizer that reads every control token's string as text, or ``None`` when the
        tokenizer's own ``split_special_tokens`` does (all its control tokens are special)."""
        return literal_tokenizer(self.tokenizer, self.control_tokens)

    def encode_literal(self, text: str, prefix: str | None = None) -> list[int]:
        """``text`` tokenized with every control-token string in it as plain text, as it reads
        after ``prefix`` (see :func:`encode_after`: no word-start marker after a control token):
        env text, and an action a demonstration writes."""
        literal = self._literal
        if literal is None:
            return _encode_literal_after(self.tokenizer, prefix, text)
        if prefix is None:
            return literal.encode(text, add_special_tokens=False).ids
        both, head = (
            e.ids for e in literal.encode_batch([prefix + text, prefix], add_special_tokens=False)
        )
        if both[: len(head)] == head:
            return list(both[len(head) :])
        return list(literal.encode(text, add_special_tokens=False).ids)

    # -- the budget -------------------------------------------------------------------------
    def room(self, used: int, budget: int) -> int:
        """Tokens the model may still sample when ``used`` of ``budget`` are taken.

        The one budget rule: a closer must always fit after the model's last token, so an
        episode never exceeds ``budget`` however its last turn ends. A turn can start only
        when ``room`` is at least 1.
        """
        return budget - used - len(self.close_ids)

    def truncate_prompt(self, ids: list[int], budget: int) -> list[int]:
        """The first ids of an over-long first prompt that leave room for a closer only."""
        return ids[: max(0, budget - len(self.close_ids))]


def encode_after(tokenizer: Tokenizer, prefix: str, text: str) -> list[int]:
    """The ids ``text`` gets right after ``prefix`` (a special token, in the engine's use).

    Most tokenizers give the same as ``text`` alone. Some add a word-start marker at the start of
    any text (Phi-3's "▁", SentencePiece style) that they do not add after a special token, so
    text inserted after a turn's closer is tokenized in that context.
    """
    both, head = _encode(tokenizer, [prefix + text, prefix])
    if both[: len(head)] == head:
        return both[len(head) :]
    return _encode(tokenizer, [text])[0]


def control_tokens(tokenizer: Tokenizer) -> tuple[str, ...]:
    """The strings env text may not turn into tokens, longest first (for matching).

    Every added token but those that are ordinary text to the model: special tokens, added
    tokens the chat template writes (Qwen3's ``<think>``, ``<tool_call>``, not special), and
    added tokens laid on top of the vocabulary for other uses (Qwen's ``<|fim_prefix|>``,
    ``<|repo_name|>``): env text that spells one gets the text's own ids. Left to the tokenizer
    are whitespace runs and the pieces of the vocabulary itself that are added only to be matched
    whole (Gemma's HTML tags), neither special nor written by the template: the model reads text
    through them.
    """
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    template = _template_text(getattr(tokenizer, "chat_template", None))
    base = getattr(tokenizer, "vocab_size", None)
    found = {
        t.content
        for i, t in decoder.items()
        if t.content.replace("\u2581", " ").strip()
        and (
            getattr(t, "special", False)
            or t.content in template
            or not isinstance(base, int)
            or i >= base
        )
    }
    return tuple(sorted(found, key=lambda t: (-len(t), t)))


def special_tokens(tokenizer: Tokenizer) -> tuple[str, ...]:
    """The contents of the tokenizer's special added tokens, longest first."""
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    found = {t.content for t in decoder.values() if getattr(t, "special", False) and t.content}
    return tuple(sorted(found, key=lambda t: (-len(t), t)))


def _template_text(template: Any) -> str:
    """A chat template's text; a tokenizer may carry several by name."""
    if isinstance(template, str):
        return template
    if isinstance(template, Mapping):
        return "\n".join(v for v in template.values() if isinstance(v, str))
    return ""


def literal_tokenizer(tokenizer: Tokenizer, tokens: Sequence[str]) -> Any:
    """A copy of ``tokenizer``'s ``tokenizers`` pipeline that reads every one of ``tokens`` as the
    text it spells; ``None`` when every one of them is special (the tokenizer's own
    ``split_special_tokens`` does that) or there is no pipeline.

    ``split_special_tokens`` leaves added tokens that are not special whole (Qwen3's ``<think>``
    would still be the reasoning token), so the copy marks them special and splits special
    tokens. It keeps every added token: ``tokenizers`` numbers added tokens beyond its vocabulary
    in the order it reads them, so a copy without some of them would give the ones after them
    other ids (env text spelling ``<|fim_prefix|>`` would come out as ``<tool_call>``). A copy
    whose added tokens do not keep their ids is refused.
    """
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    plain = {t.content for t in decoder.values() if not getattr(t, "special", False)}
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not plain & set(tokens):
        return None
    from tokenizers import Tokenizer as Pipeline

    data = json.loads(backend.to_str())
    literal = set(tokens)
    for token in data.get("added_tokens", []):
        token["special"] = token.get("special", False) or token["content"] in literal
    copy = Pipeline.from_str(json.dumps(data))
    copy.encode_special_tokens = True
    moved = [t.content for i, t in decoder.items() if copy.token_to_id(t.content) != i]
    if moved:
        raise TokenizerMismatchError(
            f"The tokenizer's added token {moved[0]} changes its id when the tokenizer is copied, "
            "so env text cannot be read as plain text with it; report this tokenizer to trl-env."
        )
    return copy


_PATTERNS: dict[tuple[str, ...], re.Pattern[str]] = {}


def _pattern(tokens: tuple[str, ...]) -> re.Pattern[str]:
    """A regex matching any of ``tokens``, longest first, as a trie: a flat alternation of
    thousands of tokens (Gemma's) would try each one at every character of long env text."""
    pattern = _PATTERNS.get(tokens)
    if pattern is None:
        trie: dict[str, Any] = {}
        for token in tokens:
            node = trie
            for char in token:
                node = node.setdefault(char, {})
            node[""] = {}
        pattern = _PATTERNS[tokens] = re.compile(_trie_regex(trie))
    return pattern


def _trie_regex(node: dict[str, Any]) -> str:
    branches = [re.escape(c) + _trie_regex(node[c]) for c in sorted(node) if c]
    if not branches:
        return ""
    body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    return f"(?:{body})?" if "" in node else body


def _locate(text: str, pieces: Sequence[str]) -> list[tuple[int, int]]:
    """Where each of ``pieces`` sits in ``text``, in order (as given, else stripped, as templates
    trim); a piece not found is left out."""
    spans, pos = [], 0
    for piece in pieces:
        for candidate in (piece, piece.strip()):
            at = text.find(candidate, pos) if candidate else -1
            if at >= 0:
                spans.append((at, at + len(candidate)))
                pos = at + len(candidate)
                break
    return spans


def _encode_literal_after(tokenizer: Tokenizer, prefix: str | None, text: str) -> list[int]:
    """``text`` tokenized with every special-token string in it as plain text, as it reads after
    the special token ``prefix`` (see :func:`encode_after`: no word-start marker there)."""
    if prefix is None:
        return _encode(tokenizer, [text], split_special=True)[0]
    both, head = _encode(tokenizer, [prefix + text, prefix], split_special=True)
    if both[: len(head)] == head:
        return both[len(head) :]
    return _encode(tokenizer, [text], split_special=True)[0]


# Texts a turn's pieces are made of: spaces, new lines, digits, accents, markup, a control
# token's string. A tokenizer whose own backend reads any of them otherwise than its wrapper
# (a slow tokenizer, a wrapper that edits text first) keeps the wrapper.
_PROBES = [
    "Hello world.",
    " leading space and  two spaces",
    "line one\nline two\n\n  indented\ttab",
    "Guess 12 -> higher; 7.5% done, café naïve 日本語 😀",
    '{"name": "move", "arguments": {"dir": "up"}}',
    "<|im_end|>\n<|im_start|>user\n</s><eos><end_of_turn>",
    "",
]


class _Own:
    """One tokenizer's copy of its ``tokenizers`` pipeline, and what it was found to agree on.

    A copy: the wrapper sets its own pipeline's ``encode_special_tokens`` at each call
    (``split_special_tokens``) and leaves it so, which a direct call would then inherit; and no
    other thread borrows a copy mutably while the engine reads it.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.pipeline = _copy_pipeline(tokenizer)
        self.encodes: dict[tuple[str, ...], bool] = {}  # by the control tokens probed
        self.decodes: bool | None = None


_OWN: weakref.WeakKeyDictionary[Any, _Own] = weakref.WeakKeyDictionary()


def _own(tokenizer: Tokenizer) -> _Own:
    """The copy is made once per tokenizer (a batch binds a new wire, and copying a 151k-token
    pipeline takes longer than a small batch's rollout)."""
    try:
        own = _OWN.get(tokenizer)
    except TypeError:  # not weakly referable: made each time
        return _Own(tokenizer)
    if own is None:
        own = _OWN[tokenizer] = _Own(tokenizer)
    return own


def _copy_pipeline(tokenizer: Tokenizer) -> Any:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "to_str"):
        return None
    try:
        from tokenizers import Tokenizer as Pipeline

        pipeline = Pipeline.from_str(backend.to_str())
        pipeline.encode_special_tokens = False
    except Exception:  # an unusual pipeline: the wrapper it is
        return None
    return pipeline


# Fewer texts than this are encoded one call each: the pipeline's batch call spreads over
# threads, which costs more than a turn's few tokens (about 3x on two texts).
_BATCH_FROM = 16


def encode_each(pipeline: Any, texts: Sequence[str]) -> list[Any]:
    """``pipeline``'s encodings of ``texts``, special tokens as such and none added."""
    if len(texts) >= _BATCH_FROM:
        return list(pipeline.encode_batch(list(texts), add_special_tokens=False))
    return [pipeline.encode(text, add_special_tokens=False) for text in texts]


def fast_tokenizer(tokenizer: Tokenizer, control: Sequence[str] = ()) -> Any:
    """A copy of ``tokenizer``'s ``tokenizers`` pipeline where it encodes every probe text (and
    the ``control`` tokens' strings) to the ids the tokenizer itself gives, else ``None``."""
    own = _own(tokenizer)
    key = tuple(control)
    if own.pipeline is not None and key not in own.encodes:
        probes = [*_PROBES, "".join(control), " ".join(f"a{t}b" for t in control)]
        try:
            mine = [e.ids for e in own.pipeline.encode_batch(probes, add_special_tokens=False)]
        except Exception:
            mine = None
        own.encodes[key] = mine == _encode(tokenizer, probes)
    return own.pipeline if own.pipeline is not None and own.encodes[key] else None


def fast_decoder(tokenizer: Tokenizer) -> Any:
    """The same copy where it decodes (special tokens kept, no clean-up) every probe's ids, the
    added tokens and a spread of the vocabulary to the tokenizer's own text, else ``None``.

    The wrapper's ``decode`` costs several times the pipeline's own on a turn's few ids.
    """
    own = _own(tokenizer)
    if own.pipeline is not None and own.decodes is None:
        size = 1 + max(tokenizer.get_vocab().values(), default=0)
        probes = [
            *_encode(tokenizer, _PROBES),
            sorted(getattr(tokenizer, "added_tokens_decoder", None) or {}),
            list(range(0, size, max(1, size // 997))),
            list(range(size - 64, size)),
        ]
        try:
            mine = own.pipeline.decode_batch(probes, skip_special_tokens=False)
            own.decodes = mine == [_decode(tokenizer, ids) for ids in probes]
        except Exception:
            own.decodes = False
    return own.pipeline if own.pipeline is not None and own.decodes else None


def decode(tokenizer: Tokenizer, ids: Sequence[int]) -> str:
    """The text of ``ids`` as the tokenizer decodes them, special tokens kept, no clean-up."""
    fast = fast_decoder(tokenizer)
    return (
        fast.decode(ids, skip_special_tokens=False) if fast is not None else _decode(tokenizer, ids)
    )


def decode_many(tokenizer: Tokenizer, seqs: Sequence[Sequence[int]]) -> list[str]:
    """:func:`decode` of each of ``seqs`` (the pipeline's ``decode_batch`` spreads over threads,
    which costs ten times a turn's own decode)."""
    fast = fast_decoder(tokenizer)
    if fast is None:
        return [_decode(tokenizer, ids) for ids in seqs]
    return [fast.decode(ids, skip_special_tokens=False) for ids in seqs]


def _decode(tokenizer: Tokenizer, ids: Sequence[int]) -> str:
    return tokenizer.decode(
        list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False
    )


def _encode(tokenizer: Tokenizer, texts: list[str], split_special: bool = False) -> list[list[int]]:
    if not texts:
        return []
    kwargs = {"split_special_tokens": True} if split_special else {}
    out = tokenizer(texts, add_special_tokens=False, **kwargs)["input_ids"]
    return [list(ids) for ids in out]

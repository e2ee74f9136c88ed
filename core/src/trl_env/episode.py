"""The record of one played episode, and the tokenizer drift counters computed on it."""

from __future__ import annotations

import bisect
import itertools
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from .protocols import Tokenizer
from .wire import control_tokens, decode, encode_each, fast_tokenizer


class Status(StrEnum):
    """How an episode ended. Members are strings, so records and comparisons read as text."""

    DONE = "done"  # the env said it is over (``alive`` became false)
    MAX_TURNS = "max_turns"  # the turn limit was reached
    BUDGET = "budget"  # the next turn would not fit in ``max_episode_tokens``
    ERROR = "error"  # env, processor or backend failed; ``error`` says which and how
    TIMEOUT = "timeout"  # an env call ran past ``step_timeout``

    @property
    def failed(self) -> bool:
        return self in (Status.ERROR, Status.TIMEOUT)


STATUSES: tuple[Status, ...] = tuple(Status)


@dataclass
class Episode:
    """One episode as the trainer needs it (ids, masks, logprobs) plus what a person reads."""

    seed: str
    # The env's label in the run: its registered name, or the name a mixture gives it.
    env: str = ""
    stage: int | None = None  # curriculum stage index of this env when played; None: no curriculum
    stage_options: dict[str, Any] = field(default_factory=dict)  # the env options that stage set
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    reward: float = 0.0
    success: bool | None = None  # the env's own verdict (its ``success`` extra); None: not given
    status: Status = Status.DONE
    turns: int = 0
    # Where each model turn's sampled ids start in ``completion_ids`` (one index per turn).
    turn_starts: list[int] = field(default_factory=list)
    # With credit per turn (``credit="turn"``), the reward each model turn earned: the env's
    # ``turn_reward`` after its step, else the change of its ``reward``; the last turn earns what
    # the others left of the episode's ``reward``, so they sum to it. Empty otherwise.
    turn_rewards: list[float] = field(default_factory=list)
    error: str = ""
    text: str = ""
    bridge_mismatches: int = 0
    noncanonical_turns: int = 0
    messages: list[dict[str, str]] = field(default_factory=list)
    env_seconds: float = 0.0
    sanitized_chars: int = 0  # env text code points that could not be encoded (now U+FFFD)
    capped_chars: int = 0  # env text cut off past ``max_env_chars``
    # Special-token strings found in env text (first prompt, replies), kept as plain text unless
    # ``env_special_tokens`` allows them to become control tokens.
    special_token_strings: int = 0
    # A failed episode's cause: "infrastructure" (env, backend or processor broke, a timeout)
    # or "policy" (the model's output could not be parsed); "" when it did not fail.
    fault: str = ""
    masked: bool = False  # left out of training (an infrastructure failure, failed_episodes=mask)
    server: str = ""  # the env server (URL) that played the episode; "": played in this process
    # The text in order, each piece with who wrote it: "prompt" (first prompt), "env" (env
    # replies and inserted turn closers, masked) or "model" (sampled); joined it equals ``text``.
    segments: list[tuple[str, str]] = field(default_factory=list)

    @property
    def sampled_tokens(self) -> int:
        return sum(self.env_mask)

    @property
    def inserted_tokens(self) -> int:
        return len(self.env_mask) - sum(self.env_mask)

    def to_dict(self) -> dict[str, Any]:
        record = asdict(self)
        record["sampled_tokens"] = self.sampled_tokens
        record["inserted_tokens"] = self.inserted_tokens
        return record


# Ids of the text before a piece that its decoding is given as context: enough for a
# SentencePiece word-start marker and for a character whose UTF-8 bytes span several tokens.
CONTEXT_IDS = 8


def decode_after(tokenizer: Tokenizer, before: list[int], ids: list[int]) -> str:
    """The text ``ids`` add after ``before``: decoding a piece alone can differ (a SentencePiece
    decoder drops the leading space of a sequence's first word, Phi-3's "▁Hello")."""
    before = before[-CONTEXT_IDS:]
    if not before:
        return decode(tokenizer, ids)
    head = decode(tokenizer, before)
    both = decode(tokenizer, before + ids)
    return both[len(head) :] if both.startswith(head) else decode(tokenizer, ids)


def segment_texts(tokenizer: Tokenizer, pieces: list[list[int]]) -> list[str]:
    """The text of each piece as it reads in the whole sequence; joined, they are exactly
    ``decode(all ids)``.

    Each piece is decoded after a few ids of what precedes it; where that does not add up to the
    whole text (bytes of one character split between pieces), the pieces are cut from the
    whole text at the lengths of the decoded prefixes instead.
    """
    whole: list[int] = [i for ids in pieces for i in ids]
    text = decode(tokenizer, whole)
    out, done = [], 0
    for ids in pieces:
        out.append(decode_after(tokenizer, whole[max(0, done - CONTEXT_IDS) : done], ids))
        done += len(ids)
    if "".join(out) == text:
        return out
    cuts, done, last = [], 0, 0
    for ids in pieces[:-1]:
        done += len(ids)
        prefix = decode(tokenizer, whole[:done])
        last = max(last, len(prefix) if text.startswith(prefix) else last)
        cuts.append(last)
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


Pieces = list[tuple[list[int], bool]]


def drift_counters(tokenizer: Tokenizer, pieces: Pieces) -> tuple[str, int, int]:
    """Decode ``pieces`` (ids, inserted?) and count what a re-tokenizing pipeline would get wrong.

    Returns the text, the inserted segments whose ids differ from the ids the whole text gets at
    that place (bridge mismatches), and the sampled turns that do not re-encode to themselves.
    """
    return drift_counters_many(tokenizer, [pieces])[0][:3]


def drift_counters_many(
    tokenizer: Tokenizer, episodes: list[Pieces]
) -> list[tuple[str, int, int, list[str]]]:
    """:func:`drift_counters` of several episodes, with one tokenizer call for all their texts.

    Each result also holds the text of every piece.

    Each call of a fast tokenizer has a fixed cost (it goes through its batch path): one call
    per episode and per sampled turn made this ~15% slower on the tiny model's rollouts.
    """
    if not episodes:
        return []
    # A sampled turn is re-encoded as decoded alone (what a re-tokenizing pipeline would do);
    # the record's text and segments are decoded in context (see :func:`segment_texts`).
    alone = [[decode(tokenizer, ids) for ids, _ in pieces] for pieces in episodes]
    contextual = [segment_texts(tokenizer, [ids for ids, _ in pieces]) for pieces in episodes]
    joined = ["".join(t) for t in contextual]
    turns = [
        text
        for pieces, episode_texts in zip(episodes, alone, strict=True)
        for (_, inserted), text in zip(pieces, episode_texts, strict=True)
        if not inserted
    ]
    encoded = _encode_with_offsets(tokenizer, joined + turns)
    reencoded = iter(ids for ids, _ in encoded[len(joined) :])
    out = []
    for k, (pieces, episode_texts) in enumerate(zip(episodes, contextual, strict=True)):
        full_ids, offsets = encoded[k]
        starts = [s for s, _ in offsets]
        mismatches = noncanonical = 0
        pos = 0
        for j, ((ids, inserted), text) in enumerate(zip(pieces, episode_texts, strict=True)):
            a, b = pos, pos + len(text)
            pos = b
            if not inserted:
                if next(reencoded) != ids:
                    noncanonical += 1
                continue
            lo = bisect.bisect_left(starts, a)
            hi = bisect.bisect_left(starts, b)
            # A special token that strips whitespace after it (Phi-3's) spans that whitespace: a
            # boundary inside it is a token boundary if the ids on both sides are unchanged.
            whole = joined[k]
            aligned = (lo == len(offsets) or offsets[lo][0] == a) and (
                lo == 0 or offsets[lo - 1][1] <= a or whole[a : offsets[lo - 1][1]].isspace()
            )
            if aligned and hi and offsets[hi - 1][1] > b:
                after = pieces[j + 1][0] if j + 1 < len(pieces) else []
                aligned = whole[b : offsets[hi - 1][1]].isspace() and (
                    full_ids[hi : hi + len(after)] == after
                )
            if not aligned or full_ids[lo:hi] != ids:
                mismatches += 1
        out.append((joined[k], mismatches, noncanonical, episode_texts))
    return out


def _encode_with_offsets(
    tokenizer: Tokenizer, texts: list[str]
) -> list[tuple[list[int], list[tuple[int, int]]]]:
    """Each text's ids and character offsets as the tokenizer gives them (special tokens as
    such, none added), through its own pipeline where that agrees (:func:`fast_tokenizer`)."""
    if not texts:
        return []
    fast = fast_tokenizer(tokenizer, control_tokens(tokenizer))
    if fast is not None:
        return [(e.ids, e.offsets) for e in encode_each(fast, texts)]
    enc = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
    return [
        (list(ids), [(a, b) for a, b in offsets])
        for ids, offsets in zip(enc["input_ids"], enc["offset_mapping"], strict=True)
    ]

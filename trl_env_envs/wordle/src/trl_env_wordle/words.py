"""The shipped word list, split into disjoint train and eval target words.

A word is an eval word when the first byte of ``sha256("wordle-split:" + word)`` is below 52
(about one word in five). The rule looks at the word alone, so adding words to the list never
moves an existing word from one split to the other. Within a split, words are ordered by
``sha256("wordle-order:" + word)``, a fixed shuffle that is the same on every machine.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import resources

EVAL_BYTE_BELOW = 52
SPLITS = ("train", "eval")


def _digest(salt: str, word: str) -> bytes:
    return hashlib.sha256(f"{salt}:{word}".encode()).digest()


@functools.cache
def all_words() -> tuple[str, ...]:
    """Every word in ``words.txt`` (comments and blank lines skipped), sorted."""
    text = resources.files("trl_env_wordle").joinpath("words.txt").read_text(encoding="utf-8")
    words = {line.strip().lower() for line in text.splitlines()}
    return tuple(sorted(w for w in words if w and not w.startswith("#")))


def split_of(word: str) -> str:
    return "eval" if _digest("wordle-split", word)[0] < EVAL_BYTE_BELOW else "train"


@functools.cache
def targets(split: str) -> tuple[str, ...]:
    """The target words of ``split``, in their fixed shuffled order."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    chosen = [w for w in all_words() if split_of(w) == split]
    return tuple(sorted(chosen, key=lambda w: _digest("wordle-order", w)))

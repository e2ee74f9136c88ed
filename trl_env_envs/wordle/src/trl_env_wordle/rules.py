"""Wordle rules: per-letter marks, what the marks reveal, and reading a guess out of text."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

GREEN, YELLOW, GREY = "G", "Y", "_"
LENGTH = 5
_WORD = re.compile(r"[A-Za-z]+")


def marks(guess: str, target: str) -> list[str]:
    """``G`` right letter and place, ``Y`` in the word elsewhere, ``_`` not (more) in the word.

    Greens are given first; a repeated letter is yellow only as many times as the target has
    copies of it left over, so ``"eerie"`` against ``"there"`` marks one ``e`` yellow, not two.
    """
    out = [GREY] * len(guess)
    spare: Counter[str] = Counter()
    for i, (g, t) in enumerate(zip(guess, target, strict=True)):
        if g == t:
            out[i] = GREEN
        else:
            spare[t] += 1
    for i, g in enumerate(guess):
        if out[i] == GREY and spare[g] > 0:
            out[i] = YELLOW
            spare[g] -= 1
    return out


def closeness(guess_marks: list[str]) -> float:
    """A guess's share of the answer: greens count 1, yellows 1/2, over the word length."""
    return (guess_marks.count(GREEN) + 0.5 * guess_marks.count(YELLOW)) / len(guess_marks)


@dataclass
class Knowledge:
    """What all marks so far reveal: fixed letters, letters present, letters absent."""

    fixed: list[str] = field(default_factory=lambda: ["_"] * LENGTH)
    present: set[str] = field(default_factory=set)
    absent: set[str] = field(default_factory=set)

    def add(self, guess: str, guess_marks: list[str]) -> None:
        hits = {g for g, m in zip(guess, guess_marks, strict=True) if m != GREY}
        for i, (g, m) in enumerate(zip(guess, guess_marks, strict=True)):
            if m == GREEN:
                self.fixed[i] = g
        self.present |= hits
        # A grey letter with no green or yellow copy in the same guess is not in the word.
        self.absent |= {g for g, m in zip(guess, guess_marks, strict=True) if m == GREY} - hits
        self.absent -= self.present

    def render(self) -> str:
        elsewhere = sorted(self.present - set(self.fixed))
        parts = [f"Known: {' '.join(self.fixed).upper()}"]
        if elsewhere:
            parts.append(f"also in the word: {' '.join(elsewhere).upper()}")
        if self.absent:
            parts.append(f"not in the word: {' '.join(sorted(self.absent)).upper()}")
        return " | ".join(parts)


def read_guess(text: str) -> tuple[str | None, str]:
    """The guessed word in ``text`` (lower case), or None and why not.

    A reply of one word is that word. In longer text the last 5-letter word counts, and an
    ALL-CAPS 5-letter word wins over lower-case ones ("I guess CRANE", "my guess: crane").
    """
    words = _WORD.findall(text)
    if not words:
        return None, "I found no word in your reply."
    if len(words) == 1:
        word = words[0]
        if len(word) != LENGTH:
            shown = word if len(word) <= 20 else word[:20] + "..."
            return None, f"{shown.upper()!r} has {len(word)} letters, not {LENGTH}."
        return word.lower(), ""
    five = [w for w in words if len(w) == LENGTH]
    if not five:
        return None, f"I found no {LENGTH}-letter word in your reply."
    upper = [w for w in five if w.isupper()]
    return (upper or five)[-1].lower(), ""

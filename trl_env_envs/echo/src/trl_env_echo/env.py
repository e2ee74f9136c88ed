"""Copy the word: each turn shows a word, and the reply should be that word alone.

A first task for a small real model: untrained, SmolLM2-135M-Instruct rarely replies with the
word alone and often chats about it instead (docs/learning.md has the figures), so there is
room to improve, and the partial credit gives GRPO groups whose rewards differ from the start.

Reward (always in [0, 1], read from ``env.reward`` at any time, final when ``alive`` is False):
the mean over ``max_turns`` words of 1 for a reply that is the word alone (case, surrounding
spaces, quotes and end punctuation aside); for a reply that holds the word among other text,
``partial`` times the word's share of the reply's characters; 0 otherwise. The share keeps
replies that all hold the word apart: a shorter one scores more, so a group of them still
points somewhere. ``success`` is True when every word was copied exactly.

Seeds of the ``eval`` split (``eval-N``) draw from a fifth of the word list that no other seed
ever shows, so a held-out evaluation on them uses words training never saw.
"""

from __future__ import annotations

import re
from enum import Enum
from functools import cache
from importlib import resources
from typing import Any

from trl_env.envkit import EnvKit, Option, stable_int

# One word in five is held out for the eval split: decided by the word, so adding words to
# the list never moves another word between the splits.
HELD_OUT_ONE_IN = 5
# What a model may put around the word and still have copied it.
_AROUND = " \t\r\n.,!?;:'\"`*()[]"


class Verdict(Enum):
    EXACT = "exact"
    CONTAINS = "contains"
    WRONG = "wrong"


@cache
def words() -> tuple[str, ...]:
    text = (resources.files(__package__) / "words.txt").read_text(encoding="utf-8")
    return tuple(text.split())


def held_out(word: str) -> bool:
    return stable_int(f"echo-word:{word}") % HELD_OUT_ONE_IN == 0


@cache
def pool(split: str) -> tuple[str, ...]:
    """The words seeds of ``split`` draw from: ``eval`` the held-out fifth, any other the rest."""
    return tuple(w for w in words() if held_out(w) == (split == "eval"))


def judge(reply: str, word: str) -> Verdict:
    """Whether ``reply`` is ``word`` alone, holds it among other text, or misses it."""
    if reply.strip(_AROUND).casefold() == word.casefold():
        return Verdict.EXACT
    if re.search(rf"(?<![^\W\d_]){re.escape(word)}(?![^\W\d_])", reply, re.IGNORECASE):
        return Verdict.CONTAINS
    return Verdict.WRONG


def share(reply: str, word: str) -> float:
    """The word's share of the reply's characters, surrounding spaces aside (at most 1)."""
    return min(1.0, len(word) / max(1, len(reply.strip())))


class EchoEnv(EnvKit):
    """Reply to each of ``max_turns`` words with that word alone."""

    env_name = "echo"
    max_turns = Option(3, "words per episode, one a turn", min=1, max=100)
    partial = Option(
        0.5,
        "most a reply holding the word among other text earns (times the word's share of it)",
        min=0.0,
        max=1.0,
    )

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.words: list[str] = []
        self.turns = 0
        self.exact = 0
        self.score = 0.0
        self._started = False

    # -- optional extras --------------------------------------------------------------
    @property
    def system_prompt(self) -> str:
        return (
            "You are playing a copying game. Each turn I show you a word. Reply with exactly "
            "that word and nothing else."
        )

    @property
    def success(self) -> bool:
        """Every word was copied exactly (read once the episode is over)."""
        return self._started and self.exact == self.max_turns

    def demonstrate(self, seed: str) -> list[str]:
        """Each word of the episode, alone."""
        return list(self._words_of(str(seed)))

    # -- protocol -----------------------------------------------------------------------
    def _words_of(self, seed: str) -> list[str]:
        choices = pool(self.split_of(seed) or "train")
        rng = self.rng(seed)
        if self.max_turns <= len(choices):
            return rng.sample(choices, self.max_turns)
        return rng.choices(choices, k=self.max_turns)

    def reset(self, seed: str) -> str:
        self.words = self._words_of(str(seed))
        self.turns = 0
        self.exact = 0
        self.score = 0.0
        self.reward = 0.0
        self.alive = True
        self._started = True
        return f"Copy this word: {self.words[0]}"

    def step(self, action: str) -> str:
        if not self.alive:
            return self._over_message()
        word = self.words[self.turns]
        verdict = judge(action, word) if isinstance(action, str) else Verdict.WRONG
        self.turns += 1
        if verdict is Verdict.EXACT:
            self.exact += 1
            self.score += 1.0
            reply = "Correct."
        elif verdict is Verdict.CONTAINS:
            self.score += self.partial * share(action, word)
            reply = (
                f'Almost: your reply has "{word}" in it, but other words too. '
                "Reply with the word alone."
            )
        else:
            reply = f'Wrong: the word was "{word}".'
        self.reward = self.score / self.max_turns
        if self.turns >= self.max_turns:
            self.alive = False
            done = f"{self.exact} of {self.max_turns} copied exactly"
            return f"{reply} That was the last word: {done}."
        return f"{reply} Next word: {self.words[self.turns]}"

    def _over_message(self) -> str:
        if not self._started:
            return "The game has not started: call reset(seed) first."
        return "The game is over. Start a new episode to play again."

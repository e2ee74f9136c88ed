"""Guess a hidden whole number; every guess is answered "higher" or "lower".

Reward (always in [0, 1], read from ``env.reward`` at any time, final when ``alive`` is False):

- ``shaped=True`` (default, dense): ``0.3 * closeness + 0.7 * solved - turn_cost * turns``,
  clipped to [0, 1]. ``closeness = 1 - |best guess - target| / (high - low)`` for the closest
  guess so far (0 before any number is guessed), so every guess that gets nearer the target
  raises the reward a little, and solving adds the bulk.
- ``shaped=False`` (sparse): ``solved - turn_cost * turns``, clipped to [0, 1].

A reply with no number counts as a turn (so every episode ends within ``max_turns``) but adds
nothing to the reward. ``success`` (read once the episode is over) is True when the number was
found.
"""

from __future__ import annotations

import re
from typing import Any

from trl_env.envkit import EnvKit, Option, stable_int

# The first run of ASCII digits, with an optional minus sign glued to it.
_NUMBER = re.compile(r"-?[0-9]+")
# The range options' bounds: wide enough for a curriculum (21 binary-search guesses at most),
# small enough that every reply and prompt stays short.
RANGE_LIMIT = 1_000_000
# Longer digit runs are clamped: int() refuses strings over 4300 digits, and such a guess is
# out of range anyway.
_MAX_DIGITS = 18
CLOSENESS_WEIGHT = 0.3


def parse_guess(text: str) -> int | None:
    """The first integer in ``text`` ("50", "guess: 50", "I think -3"), or None."""
    match = _NUMBER.search(text)
    if match is None:
        return None
    token = match.group()
    sign = -1 if token.startswith("-") else 1
    digits = token.lstrip("-").lstrip("0") or "0"
    if len(digits) > _MAX_DIGITS:
        return sign * 10**_MAX_DIGITS
    return sign * int(digits)


def target_for(seed: str, low: int, high: int) -> int:
    """The hidden number of ``seed``: sha256, so it is the same on every machine and run."""
    return low + stable_int(f"guess:{seed}") % (high - low + 1)


class GuessEnv(EnvKit):
    """Find a number in ``[low, high]`` from "higher"/"lower" hints within ``max_turns`` turns."""

    env_name = "guess"
    low = Option(1, "smallest number the hidden one can be", min=-RANGE_LIMIT, max=RANGE_LIMIT)
    high = Option(
        100,
        "largest number the hidden one can be (at least low)",
        min=-RANGE_LIMIT,
        max=RANGE_LIMIT,
    )
    max_turns = Option(10, "guesses per episode", min=1, max=1000)
    shaped = Option(True, "dense reward: closer guesses score a little (false: only solving)")
    turn_cost = Option(0.0, "reward taken off per turn used", min=0.0, max=1.0)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        if self.high < self.low:
            raise self.refuse("high", f"at least low ({self.low})")
        self.target = self.low
        self.turns = 0
        self.best_distance: int | None = None
        self.solved = False
        self._started = False

    # -- optional extras --------------------------------------------------------------
    @property
    def system_prompt(self) -> str:
        return (
            f"You are playing a number guessing game. I am thinking of a whole number between "
            f"{self.low} and {self.high}, inclusive. Each turn, reply with one number, for "
            f"example: {(self.low + self.high) // 2}. I answer whether the hidden number is higher "
            f"or lower than your guess. Find it within {self.max_turns} turns; the fewer turns, "
            f"the better, and guesses closer to the number score more."
        )

    @property
    def success(self) -> bool:
        """The number was found (read once the episode is over)."""
        return self.solved

    def demonstrate(self, seed: str) -> list[str]:
        """Halving with the hints: each guess the middle of what the hints left open. Wins
        whenever ``max_turns`` allows a binary search of the range."""
        target = target_for(str(seed), self.low, self.high)
        low, high, guesses = self.low, self.high, []
        while True:
            guess = (low + high) // 2
            guesses.append(str(guess))
            if guess == target:
                return guesses
            low, high = (guess + 1, high) if guess < target else (low, guess - 1)

    # -- protocol -----------------------------------------------------------------------
    def reset(self, seed: str) -> str:
        self.target = target_for(str(seed), self.low, self.high)
        self.turns = 0
        self.best_distance = None
        self.solved = False
        self.alive = True
        self._started = True
        self.reward = 0.0
        return (
            f"I'm thinking of a whole number between {self.low} and {self.high}. "
            f"You have {self.max_turns} turns. Reply with one number."
        )

    def step(self, action: str) -> str:
        if not self.alive:
            return self._over_message()
        self.turns += 1
        guess = parse_guess(action) if isinstance(action, str) else None
        if guess is None:
            reply = (
                f"I found no number in your reply. Reply with one whole number between "
                f"{self.low} and {self.high}, for example {(self.low + self.high) // 2}."
            )
        else:
            reply = self._judge(guess)
        self.reward = self._score()
        if not self.solved and self.turns >= self.max_turns:
            self.alive = False
            return f"{reply} Out of turns: the number was {self.target}."
        if self.alive:
            left = self.max_turns - self.turns
            reply += f" {left} turn{'s' if left != 1 else ''} left."
        return reply

    # -- rules --------------------------------------------------------------------------
    def _judge(self, guess: int) -> str:
        distance = abs(guess - self.target)
        if self.best_distance is None or distance < self.best_distance:
            self.best_distance = distance
        if guess == self.target:
            self.solved = True
            self.alive = False
            turns = f"{self.turns} turn{'s' if self.turns != 1 else ''}"
            return f"{guess} is correct! You found the number in {turns}."
        direction = "higher" if guess < self.target else "lower"
        if not self.low <= guess <= self.high:
            # Clamped giant numbers are not echoed: the shown value would not be the one typed.
            shown = str(guess) if abs(guess) < 10**_MAX_DIGITS else "Your number"
            return f"{shown} is outside {self.low} to {self.high}. The number is {direction}."
        too = "low" if direction == "higher" else "high"
        return f"{guess} is too {too}. The number is {direction}."

    def closeness(self) -> float:
        """1 for the target, falling linearly to 0 at the far end of the range."""
        if self.best_distance is None:
            return 0.0
        span = self.high - self.low
        if span == 0:
            return 1.0
        return 1.0 - min(self.best_distance, span) / span

    def _score(self) -> float:
        solved = 1.0 if self.solved else 0.0
        if self.shaped:
            raw = CLOSENESS_WEIGHT * self.closeness() + (1.0 - CLOSENESS_WEIGHT) * solved
        else:
            raw = solved
        raw -= self.turn_cost * self.turns
        return min(1.0, max(0.0, raw))

    def _over_message(self) -> str:
        if not self._started:
            return "The game has not started: call reset(seed) first."
        outcome = "you found the number" if self.solved else f"the number was {self.target}"
        return f"The game is over ({outcome}). Start a new episode to play again."

"""The Wordle environment: find a 5-letter word from per-letter feedback.

Reward, readable at any time from ``env.reward`` (final once ``alive`` is False):

- solved: ``max(0.5, 1 - turn_cost * turns)``: 1 by default, whatever the turn;
- otherwise: ``partial_credit * best`` where ``best`` is the best guess's share of the answer
  (greens count 1, yellows 1/2, divided by 5), so at most ``partial_credit`` <= 0.5.

Every reply uses a turn, a valid guess or not (an unreadable reply gets a message saying what
is expected), so the episode ends after ``max_turns`` replies at the latest. ``success``
(read once the episode is over) is True when the word was found.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from trl_env.envkit import EnvKit, Option, stable_int

from .rules import LENGTH, Knowledge, closeness, marks, read_guess
from .words import all_words, targets

MIN_SOLVED_REWARD = 0.5
_SPLIT_SEED = re.compile(r"(train|eval)-([0-9]{1,18})")


def target_for(seed: str) -> str:
    """``train-<i>``/``eval-<i>`` walk their split's words in order; other seeds are hashed.

    Seeds starting with "eval" draw from the eval words, all others from the train words.
    """
    words = targets("eval" if seed.startswith("eval") else "train")
    match = _SPLIT_SEED.fullmatch(seed)
    index = int(match.group(2)) if match else stable_int(f"wordle:{seed}")
    return words[index % len(words)]


def solve(target: str, fixed: list[str] | None = None) -> list[str]:
    """Guesses that find ``target``: each the word still possible (its feedback matching every
    earlier guess's, its letters in the ``fixed`` places) that splits the rest into the most
    feedback groups, the first such word in sorted order on ties. Every shipped word takes at
    most six guesses (the default ``max_turns``), most three."""
    possible = tuple(
        w
        for w in all_words()
        if all(f in ("_", c) for f, c in zip(fixed or ["_"] * LENGTH, w, strict=True))
    )
    guesses: list[str] = []
    while True:
        guess = _best_guess(possible)
        guesses.append(guess)
        if guess == target:
            return guesses
        seen = marks(guess, target)
        possible = tuple(w for w in possible if w != guess and marks(guess, w) == seen)


@functools.cache
def _best_guess(possible: tuple[str, ...]) -> str:
    """The word of ``possible`` whose feedback splits it into the most groups (the opener is
    computed once a process)."""
    return max(possible, key=lambda w: len({tuple(marks(w, o)) for o in possible}))


class WordleEnv(EnvKit):
    """Guess the hidden 5-letter word in ``max_turns`` turns."""

    env_name = "wordle"
    max_turns = Option(6, "turns per episode; every reply uses one", min=1, max=100)
    partial_credit = Option(
        0.2, "reward scale for the best guess when unsolved", min=0.0, max=MIN_SOLVED_REWARD
    )
    turn_cost = Option(
        0.0, "subtracted from the solve reward per turn (floor 0.5)", min=0.0, max=1.0
    )
    strict = Option(False, "guesses must be words of the shipped list")
    reveal = Option(
        0,
        "letters of the word shown in place at the start (a curriculum's easy end)",
        min=0,
        max=LENGTH - 1,
    )

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.target = ""
        self.turns = 0
        self.solved = False
        self.best = 0.0
        self.knowledge = Knowledge()

    # -- optional extras --------------------------------------------------------------
    @property
    def system_prompt(self) -> str:
        words = "an English word from my list" if self.strict else "any 5 letters"
        return (
            "You are playing Wordle. Find the hidden 5-letter English word.\n"
            f"Each turn, reply with one 5-letter guess, e.g. crane ({words}). For every letter "
            "I answer G (right letter, right place), Y (in the word, another place) or _ (not "
            "in the word, or no more copies of it). I also list the letters known so far.\n"
            f"You have {self.max_turns} turns; every reply uses one, even one I cannot read. "
            "Finding the word scores most; close guesses score a little."
            + (
                f"\nAt the start I show {self.reveal} of the word's letters in their places."
                if self.reveal
                else ""
            )
        )

    @property
    def success(self) -> bool:
        """The word was found (read once the episode is over)."""
        return self.solved

    def demonstrate(self, seed: str) -> list[str]:
        """A solver over the shipped words and the env's own feedback (:func:`solve`), starting
        from the letters a ``reveal`` shows."""
        board = WordleEnv(**self.options)
        board.reset(str(seed))
        return solve(board.target, board.knowledge.fixed)

    # -- protocol -----------------------------------------------------------------------
    def reset(self, seed: str) -> str:
        self.target = target_for(str(seed))
        self.turns, self.solved, self.best, self.reward = 0, False, 0.0, 0.0
        self.knowledge = Knowledge()
        self.alive = True
        turns = self.max_turns
        shown = ""
        if self.reveal:
            # Which letters are shown depends on the seed only, like the word itself.
            for i in self.rng(str(seed)).sample(range(LENGTH), self.reveal):
                self.knowledge.fixed[i] = self.target[i]
            shown = f" Letters in place: {' '.join(self.knowledge.fixed).upper()}."
        return f"I am thinking of a 5-letter word. You have {turns} turns.{shown} Your first guess?"

    def step(self, action: str) -> str:
        if not self.alive:
            return self._over_message()
        self.turns += 1
        guess, problem = read_guess(action) if isinstance(action, str) else (None, "")
        if guess is not None and self.strict and guess not in all_words():
            problem = f"{guess.upper()!r} is not in my word list."
            guess = None
        if guess is None:
            reply = f"{problem} Reply with one {LENGTH}-letter word, e.g. crane."
        else:
            reply = self._judge(guess)
        self.reward = self._score()
        if self.solved:
            self.alive = False
            return f"{reply}\nSolved in {self.turns} turn{'s' if self.turns != 1 else ''}!"
        if self.turns >= self.max_turns:
            self.alive = False
            return f"{reply}\nOut of turns. The word was {self.target.upper()}."
        left = self.max_turns - self.turns
        return f"{reply}\n{left} turn{'s' if left != 1 else ''} left."

    # -- rules --------------------------------------------------------------------------
    def _judge(self, guess: str) -> str:
        guess_marks = marks(guess, self.target)
        self.knowledge.add(guess, guess_marks)
        self.best = max(self.best, closeness(guess_marks))
        self.solved = guess == self.target
        return (
            f"Turn {self.turns}/{self.max_turns}:\n"
            f"{' '.join(guess.upper())}\n{' '.join(guess_marks)}\n{self.knowledge.render()}"
        )

    def _score(self) -> float:
        if self.solved:
            return max(MIN_SOLVED_REWARD, 1.0 - self.turn_cost * self.turns)
        return self.partial_credit * self.best

    def _over_message(self) -> str:
        if not self.target:
            return "The game has not started: call reset(seed) first."
        outcome = "you found it" if self.solved else f"the word was {self.target.upper()}"
        return f"The game is over ({outcome}). Start a new episode to play again."

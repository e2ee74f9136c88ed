"""Small envs that tests play when the game itself does not matter."""

from __future__ import annotations

import time


class WordEnv:
    """Three turns; the reply repeats the action's length, so texts vary per episode."""

    def __init__(self) -> None:
        self.reward, self.alive, self.n = 0.0, True, 0

    def reset(self, seed: str) -> str:
        return f"Start {seed}. Say anything."

    def step(self, action: str) -> str:
        self.n += 1
        self.reward = self.n / 3
        self.alive = self.n < 3
        return f"You wrote {len(action)} characters.\nGo on."


class FixedTurnsEnv:
    """Lasts exactly ``turns`` steps whatever the model says, with same-length prompts and replies.

    The first prompt (:attr:`prompt`) has the same number of tokens for every seed; every reply is
    ``reply`` (``{n}`` is the turn number); every step may sleep ``delay`` seconds to stand in for
    a slow or remote environment. The reward is the share of the turns played.
    """

    prompt = "Play a short game. Answer in a few words each turn."

    def __init__(self, turns: int, delay: float = 0.0, reply: str = "Noted. Go on.") -> None:
        self.turns, self.delay, self.reply = turns, delay, reply
        self.n, self.alive, self.reward = 0, True, 0.0

    def reset(self, seed: str) -> str:
        self.n, self.alive, self.reward = 0, True, 0.0
        return self.prompt

    def step(self, action: str) -> str:
        if self.delay:
            time.sleep(self.delay)
        self.n += 1
        self.reward = self.n / self.turns
        self.alive = self.n < self.turns
        return self.reply.format(n=self.n)

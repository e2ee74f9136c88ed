"""Small envs that tests play when the game itself does not matter."""

from __future__ import annotations


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

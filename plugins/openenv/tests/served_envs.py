"""Envs for `trl-env serve` tests, registered by a fake distribution (see serving.py).

``crashy``: ``crash`` segfaults its worker process, ``hang`` never returns, anything else is
echoed; three steps end the episode, the reward is the steps taken; the option ``note``
changes nothing (a place for a secret). ``slow`` takes ``delay`` seconds per step. ``seeded``
is ``crashy`` with seed lists and demonstrations of its own. ``odd`` gives values of the wrong
type as its seed says: a reward of ``True`` (seed ``bool``) or ``"1.0"`` (``str``), an
``alive`` of ``"false"`` (``alive``), or right ones (any other seed).
"""

from __future__ import annotations

import os
import signal
import time


class CrashyEnv:
    system_prompt = "Say anything; 'crash' and 'hang' break the env."
    max_turns = 5

    def __init__(self, delay: float = 0.0, note: str = "") -> None:
        self.delay, self.note = delay, note  # note: an option that may carry a secret
        self.steps = 0
        self.alive = False

    def reset(self, seed: str) -> str:
        self.steps, self.alive = 0, True
        return f"ready {seed}"

    def step(self, action: str) -> str:
        if "crash" in action:
            os.kill(os.getpid(), signal.SIGSEGV)
        if "hang" in action:
            time.sleep(3600)
        time.sleep(self.delay)
        self.steps += 1
        self.alive = self.steps < 3
        return f"echo {action}"

    @property
    def reward(self) -> float:
        return float(self.steps)

    @property
    def success(self) -> bool:
        return self.steps >= 3


def slow(delay: float = 0.5) -> CrashyEnv:
    return CrashyEnv(delay=delay)


class SeededEnv(CrashyEnv):
    """Its own seeds: never the engine's ``split-i``."""

    def seeds(self, split: str, count: int) -> list[str]:
        return [f"{split}-own-{7 * i + 3}" for i in range(count)]

    def demonstrate(self, seed: str) -> list[str]:
        return [f"good move for {seed}", "another", "the third ends it"]


class OddValues(CrashyEnv):
    """A reward or ``alive`` of the wrong type, as its seed says."""

    kind = ""

    def reset(self, seed: str) -> str:
        self.kind = seed
        return super().reset(seed)

    @property
    def reward(self) -> object:
        return {"bool": True, "str": "1.0"}.get(self.kind, 1.0)

    @property
    def alive(self) -> object:
        return "false" if self.kind == "alive" and self.steps else self._alive

    @alive.setter
    def alive(self, value: bool) -> None:
        self._alive = value

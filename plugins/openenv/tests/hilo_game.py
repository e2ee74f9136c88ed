"""A small text game as a real openenv-core ``Environment``: guess a secret number, higher/lower.

The seed fixes the range and the secret, so the same seed replays the same game. Besides numbers
the game takes two test commands: ``boom`` (its step raises) and ``sleep <seconds>``.
"""

from __future__ import annotations

import random
import time
from typing import Any

from openenv.core.env_server import Action, Environment, Observation, State, create_fastapi_app


class HiLoAction(Action):
    message: str


class HiLoObservation(Observation):
    text: str = ""
    tries: int = 0


class HiLoEnvironment(Environment[HiLoAction, HiLoObservation, State]):
    """Guess the secret in 1..high: reward 1.0 when found, -0.1 for a reply that is no number."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(step_count=0)
        self._secret = 0

    def reset(
        self, seed: int | str | None = None, episode_id: str | None = None, **_: Any
    ) -> HiLoObservation:
        rng = random.Random(seed)
        high = rng.choice([10, 20, 50, 100, 200, 500])
        self._secret = rng.randint(1, high)
        self._state = State(episode_id=episode_id, step_count=0)
        return HiLoObservation(text=f"Guess a number from 1 to {high}.", reward=0.0)

    def step(self, action: HiLoAction, timeout_s: float | None = None, **_: Any) -> HiLoObservation:
        self._state.step_count += 1
        tries = self._state.step_count
        words = action.message.split()
        if words[:1] == ["boom"]:
            raise RuntimeError("the game engine exploded")
        if words[:1] == ["sleep"]:
            time.sleep(float(words[1]))
            return HiLoObservation(text="Slept.", tries=tries)
        try:
            guess = int(action.message.strip())
        except ValueError:
            return HiLoObservation(text="Not a number.", tries=tries, reward=-0.1)
        if guess == self._secret:
            return HiLoObservation(text="Correct!", tries=tries, reward=1.0, done=True)
        hint = "higher" if guess < self._secret else "lower"
        return HiLoObservation(text=f"Go {hint}.", tries=tries, reward=0.0)

    @property
    def state(self) -> State:
        return self._state


def make_app(max_sessions: int = 32) -> Any:
    """The FastAPI app openenv-core builds for the game (``/ws``, ``/health``, ``/schema``...)."""
    return create_fastapi_app(
        HiLoEnvironment, HiLoAction, HiLoObservation, max_concurrent_envs=max_sessions
    )

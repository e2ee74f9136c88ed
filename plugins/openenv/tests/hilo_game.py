"""A small text game as a real openenv-core ``Environment``: guess a secret number, higher/lower.

The seed fixes the range and the secret, so the same seed replays the same game. Besides numbers
the game takes test commands: ``boom`` (its step raises), ``sleep <seconds>``, ``say <text>``
(replies the text as it is) and ``big <megabytes>`` (a reply that large); and
``make_app(slow_every=3, slow_seconds=...)`` makes every third session's steps slow.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

from openenv.core.env_server import Action, Environment, Observation, State, create_fastapi_app


class HiLoAction(Action):
    message: str


class HiLoObservation(Observation):
    text: str = ""
    tries: int = 0
    found: bool = False  # the game's own success flag (OpenEnv's protocol has none)


class HiLoEnvironment(Environment[HiLoAction, HiLoObservation, State]):
    """Guess the secret in 1..high: reward 1.0 when found, -0.1 for a reply that is no number."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(step_count=0)
        self._secret = 0
        self.delay = 0.0  # seconds every step takes (a slow session)

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
        if self.delay:
            time.sleep(self.delay)
        words = action.message.split()
        if words[:1] == ["boom"]:
            raise RuntimeError("the game engine exploded")
        if words[:1] == ["say"]:  # the rest, verbatim (escape sequences included)
            return HiLoObservation(text=action.message[len("say ") :], tries=tries)
        if words[:1] == ["big"]:  # a reply of that many megabytes
            return HiLoObservation(text="x" * int(float(words[1]) * 2**20), tries=tries)
        if words[:1] == ["sleep"]:
            time.sleep(float(words[1]))
            return HiLoObservation(text="Slept.", tries=tries)
        try:
            guess = int(action.message.strip())
        except ValueError:
            return HiLoObservation(text="Not a number.", tries=tries, reward=-0.1)
        if guess == self._secret:
            return HiLoObservation(text="Correct!", tries=tries, reward=1.0, done=True, found=True)
        hint = "higher" if guess < self._secret else "lower"
        return HiLoObservation(text=f"Go {hint}.", tries=tries, reward=0.0)

    @property
    def state(self) -> State:
        return self._state


class SlowSessions:
    """A factory of games where every ``every``-th session's steps each take ``seconds`` more.

    Sessions are counted as the server creates them (a refused session is never created).
    """

    def __init__(self, every: int, seconds: float) -> None:
        self.every, self.seconds = every, seconds
        self.created = 0
        self._lock = threading.Lock()

    def __call__(self) -> HiLoEnvironment:
        with self._lock:
            self.created += 1
            slow = self.every > 0 and self.created % self.every == 0
        env = HiLoEnvironment()
        env.delay = self.seconds if slow else 0.0
        return env


def make_app(max_sessions: int = 32, slow_every: int = 0, slow_seconds: float = 0.0) -> Any:
    """The FastAPI app openenv-core builds for the game (``/ws``, ``/health``, ``/schema``...)."""
    factory = SlowSessions(slow_every, slow_seconds) if slow_every else HiLoEnvironment
    return create_fastapi_app(
        factory, HiLoAction, HiLoObservation, max_concurrent_envs=max_sessions
    )

"""A third-party OpenEnv server's reward must be a real, finite number, as an env's is in the
trainer: ``true`` (which Python reads as 1) and NaN end the episode in one sentence."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from trl_env_openenv import OpenEnvEnv, OpenEnvError


@pytest.fixture
def rewarding() -> Iterator[Any]:
    """A server at /ws answering every request with an observation whose reward is
    ``server.reward`` (as raw JSON)."""
    from websockets.sync.server import serve

    class Server:
        reward = "1.0"

    def session(connection: Any) -> None:
        for _ in connection:
            connection.send(
                '{"type": "observation", "data": {"observation": {"text": "hi"}, '
                f'"reward": {Server.reward}, "done": false}}}}'
            )

    server = serve(session, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Server.url = f"http://127.0.0.1:{server.socket.getsockname()[1]}"  # type: ignore[attr-defined]
    yield Server
    server.shutdown()
    thread.join(5)


@pytest.mark.parametrize("raw", ["true", "NaN", '"1.0"'])
def test_a_reward_that_is_not_a_real_number_ends_the_episode(rewarding: Any, raw: str) -> None:
    rewarding.reward = raw
    env = OpenEnvEnv(url=rewarding.url, retries=0, observation_field="text")
    try:
        with pytest.raises(OpenEnvError, match="reward that is not a finite number"):
            env.reset("0")
    finally:
        env.close()


def test_a_real_reward_is_read(rewarding: Any) -> None:
    rewarding.reward = json.dumps(0.5)
    env = OpenEnvEnv(url=rewarding.url, retries=0, observation_field="text")
    try:
        assert env.reset("0") == "hi" and env.reward == 0.5
    finally:
        env.close()

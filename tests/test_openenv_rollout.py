"""batch_rollout against real OpenEnv servers: a server dying mid-episode ends only its episodes,
and more episodes than the server has session slots wait for one instead of failing."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trl_env import load_env
from trl_env.testing.processes import answers_health, kill_hard

SERVER = Path(__file__).parents[1] / "plugins" / "openenv" / "tests" / "hilo_server.py"


class Server:
    """The openenv plugin's hi-lo game server in its own process (so it can be killed)."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), *args],
            cwd=SERVER.parent,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert self.proc.stdout is not None
        port = re.fullmatch(r"PORT (\d+)\n", self.proc.stdout.readline())
        assert port, "the server did not start"
        self.url = f"http://127.0.0.1:{port.group(1)}"
        deadline = time.monotonic() + 60
        while not answers_health(self.url):
            assert time.monotonic() < deadline, "the server never answered /health"
            time.sleep(0.05)

    def kill(self) -> None:
        kill_hard(self.proc)


@pytest.fixture
def servers():
    started = [Server(), Server()]
    yield started
    for server in started:
        server.kill()


class KillsItsServer:
    """An OpenEnv env that SIGKILLs its own server just before its second step."""

    def __init__(self, env, server):
        self.env, self.server, self.steps = env, server, 0

    reward = property(lambda self: self.env.reward)
    alive = property(lambda self: self.env.alive)

    def reset(self, seed):
        return self.env.reset(seed)

    def step(self, action):
        self.steps += 1
        if self.steps == 2:
            self.server.kill()
        return self.env.step(action)

    def close(self):
        self.env.close()


def test_a_dying_server_ends_only_its_episodes(qwen3, servers):
    healthy, doomed = servers
    envs = [load_env("openenv", url=healthy.url, max_turns=3, retries=1) for _ in range(3)]
    envs += [
        KillsItsServer(load_env("openenv", url=doomed.url, retries=1, backoff=0.05), doomed)
        for _ in range(2)
    ]
    episodes = qwen3.play(
        ["1", "2", "3", "4", "5"],
        envs,
        max_new_tokens=4,
        max_turns=3,
    )
    for ep in episodes[:3]:
        assert ep.status in ("done", "max_turns") and ep.error == ""
    for ep in episodes[3:]:
        # The first doomed env to reach its second step kills the server; the other one may
        # still be at its first step then (the engine does not step episodes in lockstep).
        assert ep.status == "error" and 1 <= ep.turns <= 2
        assert "stepping the environment raised" in ep.error
        assert doomed.url.split("//")[1] in ep.error or "connection" in ep.error.lower()


def test_more_episodes_than_server_slots_wait_for_one(qwen3):
    # 4 slots for 8 episodes; every third session's steps take 0.5 s on the server. Before
    # sessions waited for a slot, the episodes that found the server full ended in error.
    server = Server("4", "3", "0.5")
    made = []

    def factory():
        made.append(load_env("openenv", url=server.url, observation_field="text", max_turns=3))
        return made[-1]

    try:
        episodes = qwen3.play(
            [f"train-{i}" for i in range(8)],
            factory,
            max_new_tokens=4,
            max_turns=3,
            step_timeout=45.0,  # above the longest wait for a slot here (see the plugin README)
        )
    finally:
        server.kill()
    assert [ep.error for ep in episodes] == [""] * 8
    assert {ep.status for ep in episodes} <= {"done", "max_turns"}
    assert all(ep.turns >= 1 for ep in episodes)
    assert len(made) == 8 and max(env.slot_wait_seconds for env in made) > 0  # some waited

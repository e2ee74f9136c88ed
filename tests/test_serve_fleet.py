"""Episodes played on `trl-env serve` servers (env_servers): the same greedy episodes as played
locally, spread over the servers with the server named in each record; a server killed
mid-batch ends only its live episodes (in error, naming it), later ones go to the others, and
once restarted it plays again; with no server left, episodes wait slot_timeout and end in
error; no session is left open."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from trl_env import EnvSpec
from trl_env.rollout import batch_rollout
from trl_env.testing.modules import load_path
from trl_env.testing.timeouts import scaled

TESTS = Path(__file__).parents[1] / "plugins" / "openenv" / "tests"


serving = load_path(TESTS / "serving.py", "trl_env_serve_fleet_serving")


def active(url: str) -> int:
    with urllib.request.urlopen(f"{url}/trl-env", timeout=10) as response:
        return int(json.loads(response.read())["active_sessions"])


def wait_idle(urls: list[str]) -> None:
    deadline = time.monotonic() + 60
    while any(active(u) for u in urls):
        assert time.monotonic() < deadline, "sessions were left open on the servers"
        time.sleep(0.1)


@pytest.fixture
def two_guess_servers():
    with serving.fleet(2, "--env", "guess", "--max-sessions", "3") as started:
        yield started


def test_greedy_episodes_on_servers_equal_local_ones(qwen3, two_guess_servers):
    urls = tuple(s.url for s in two_guess_servers)
    seeds = [f"train-{i}" for i in range(6)]
    common = dict(
        processor=qwen3.processor,
        tokenizer=qwen3.tokenizer,
        model=qwen3.model,
        max_new_tokens=6,
        max_turns=3,
        temperature=0.0,
    )
    local = batch_rollout(seeds, env="guess", **common)
    served = batch_rollout(seeds, env="guess", env_servers=urls, **common)
    for here, there in zip(local, served, strict=True):
        assert there.error == "" and there.status == here.status
        assert there.prompt_ids == here.prompt_ids
        assert there.completion_ids == here.completion_ids
        assert there.env_mask == here.env_mask
        assert there.reward == here.reward and there.success == here.success
        assert there.messages == here.messages
        assert here.server == "" and there.server in urls
    # 6 episodes at once, 3 sessions per server: both servers play.
    assert {ep.server for ep in served} == set(urls)
    # Servers serving other options than the run's fail its episodes, naming both.
    other = batch_rollout(
        seeds[:2], env=EnvSpec("guess", options={"high": 10}), env_servers=urls, **common
    )
    for ep in other:
        assert ep.status == "error" and "'high': 10" in ep.error and "'guess'" in ep.error
    wait_idle(list(urls))


def test_a_killed_server_ends_only_its_episodes(qwen3, tmp_path):
    envs = serving.fake_distribution(tmp_path)
    # slow: every step takes 1 s, so an episode is live on its server for 3 s after its reset.
    servers = [
        serving.Served(
            *("--env", "slow", "--env-arg", "delay=1.0", "--max-sessions", "4"), extra_path=envs
        )
        for _ in range(2)
    ]
    doomed, survivor = servers
    killed = threading.Event()

    def kill_mid_episode() -> None:
        # Killed when the first episode ended, the server once had no episode left: they all ran
        # in step. Killed as soon as sessions opened, their resets failed and were played
        # elsewhere, as they should be. One second after two sessions opened, their resets are
        # done and their episodes have two seconds to go.
        deadline = time.monotonic() + scaled(60)
        while active(doomed.url) < 2:
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)
        time.sleep(1.0)
        doomed.kill()
        killed.set()

    common = dict(
        env=EnvSpec("slow", options={"delay": 1.0}),
        env_servers=(doomed.url, survivor.url),
        slot_timeout=60,
        processor=qwen3.processor,
        tokenizer=qwen3.tokenizer,
        model=qwen3.model,
        max_new_tokens=4,
    )
    killer = threading.Thread(target=kill_mid_episode, daemon=True)
    try:
        killer.start()
        episodes = batch_rollout([f"s{i}" for i in range(12)], max_turns=3, **common)
        assert killed.is_set(), "the doomed server never had two sessions open"
        assert len(episodes) == 12
        failed = [ep for ep in episodes if ep.status == "error"]
        assert failed, "no episode was live on the killed server"
        for ep in failed:
            assert doomed.url in ep.error and ep.server == doomed.url, ep.error
        # The others played whole, on the survivor: those that waited for a slot went there.
        finished = [ep for ep in episodes if ep.status != "error"]
        assert len(finished) > 4 and all(ep.error == "" for ep in finished)
        assert {ep.server for ep in finished} == {survivor.url}
        wait_idle([survivor.url])
        # Back on its port, the killed server passes its health check and plays again.
        doomed.restart()
        again = batch_rollout([f"t{i}" for i in range(8)], max_turns=2, **common)
        assert [ep.error for ep in again] == [""] * 8
        assert {ep.server for ep in again} == {doomed.url, survivor.url}
        wait_idle([doomed.url, survivor.url])
    finally:
        for server in servers:
            server.kill()


def test_with_no_server_left_episodes_wait_then_fail(qwen3, tmp_path):
    envs = serving.fake_distribution(tmp_path)
    server = serving.Served("--env", "crashy", extra_path=envs)
    common = dict(
        env="crashy",
        env_servers=(server.url,),
        slot_timeout=2,
        processor=qwen3.processor,
        tokenizer=qwen3.tokenizer,
        model=qwen3.model,
        max_new_tokens=4,
        max_turns=2,
    )
    try:
        first = batch_rollout(["a"], **common)
        assert first[0].error == "" and first[0].server == server.url
    finally:
        server.kill()
    episodes = batch_rollout(["b", "c"], **common)
    for ep in episodes:
        assert ep.status == "error" and "slot_timeout" in ep.error and server.url in ep.error

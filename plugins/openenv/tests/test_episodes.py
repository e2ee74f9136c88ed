"""Episodes on a real OpenEnv server: round trip, seeds, mappings, rewards, threads, retries."""

from __future__ import annotations

import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing

import pytest

import trl_env
from trl_env.extras import close, max_turns, system_prompt
from trl_env_openenv import OpenEnvEnv, OpenEnvOptionError, ServerBusyError, ServerError

MAX_GUESSES = 12  # binary search over 1..500 needs at most 9


def play(env: OpenEnvEnv, seed: str) -> list[str]:
    """Binary-search the hi-lo game to the end; returns every text the env sent."""
    texts = [env.reset(seed)]
    match = re.fullmatch(r"Guess a number from 1 to (\d+)\.", texts[0])
    assert match, texts[0]
    low, high = 1, int(match.group(1))
    for _ in range(MAX_GUESSES):
        guess = (low + high) // 2
        texts.append(env.step(str(guess)))
        if not env.alive:
            return texts
        if texts[-1] == "Go higher.":
            low = guess + 1
        else:
            assert texts[-1] == "Go lower.", texts[-1]
            high = guess - 1
    raise AssertionError(f"no answer after {MAX_GUESSES} guesses: {texts}")


def test_round_trip_through_load_env(game_url: str) -> None:
    env = trl_env.load_env("openenv", url=game_url, observation_field="text")
    assert isinstance(env, OpenEnvEnv) and isinstance(env, trl_env.Env)
    try:
        texts = play(env, "train-0")
        assert texts[-1] == "Correct!"
        assert env.reward == 1.0 and env.alive is False
        assert env.step("1") == "The episode is over."  # a finished episode is not sent on
        assert env.reward == 1.0
        again = play(env, "train-1")  # the same env (and connection) plays a second episode
        assert again[-1] == "Correct!" and env.connection_attempts == 1
    finally:
        close(env)
        close(env)  # closing twice is harmless


def test_extras_have_sensible_values(game_url: str) -> None:
    env = OpenEnvEnv(url=game_url, max_turns="7", system_prompt="Play hi-lo.")
    assert max_turns(env, 99) == 7 and system_prompt(env) == "Play hi-lo."
    default = OpenEnvEnv(url=game_url, action_field="guess")
    assert max_turns(default, 99) == 99 and "`guess`" in system_prompt(default)
    assert env.connection_attempts == 0  # creating an env opens no connection


def test_same_seed_same_game_different_seeds_differ(game_url: str) -> None:
    one = OpenEnvEnv(url=game_url, observation_field="text")
    two = OpenEnvEnv(url=game_url, observation_field="text")
    try:
        assert play(one, "eval-3") == play(two, "eval-3")
        assert play(one, "42") == play(two, "42")
        firsts = {one.reset(f"train-{i}") for i in range(12)}
        assert len(firsts) > 1  # the seed reaches the server
        as_str = OpenEnvEnv(url=game_url, observation_field="text", seed_mode="str")
        assert play(as_str, "train-5") == play(as_str, "train-5")
        as_str.close()
    finally:
        one.close()
        two.close()


def test_observation_without_a_field_is_its_json(game_url: str) -> None:
    with closing(OpenEnvEnv(url=game_url)) as env:
        first = json.loads(env.reset("train-0"))
        assert first["tries"] == 0 and first["text"].startswith("Guess a number")
        assert json.loads(env.step("0")) == {"text": "Go higher.", "tries": 1, "found": False}


def test_observation_field_that_does_not_exist_names_the_fields(game_url: str) -> None:
    with (
        closing(OpenEnvEnv(url=game_url, observation_field="board.rows")) as env,
        pytest.raises(
            OpenEnvOptionError, match=r"has no field 'board' \(it has: found, text, tries\)"
        ),
    ):
        env.reset("train-0")


def test_json_actions_and_rejected_actions_keep_the_episode(game_url: str) -> None:
    with closing(OpenEnvEnv(url=game_url, action_format="json", observation_field="text")) as env:
        env.reset("train-0")
        assert env.step('{"message": "0"}') == "Go higher."
        assert env.step('```json\n{"message": "0"}\n```') == "Go higher."
        reply = env.step("just 0")
        assert reply.startswith("Invalid action: reply with one JSON object") and env.alive
        reply = env.step('{"msg": "0"}')  # the server's action schema refuses it
        assert reply.startswith("The environment rejected the action: Invalid message")
        assert "message: Field required" in reply and env.alive
        assert env.step('{"message": "0"}') == "Go higher."  # the session is still good


def test_auto_actions_and_defaults(game_url: str) -> None:
    with closing(OpenEnvEnv(url=game_url, action_format="auto", observation_field="tries")) as env:
        env.reset("train-0")
        assert env.step("0") == "1"
        assert env.step('{"message": "0"}') == "2"
    with closing(
        OpenEnvEnv(url=game_url, action_format="json", action_defaults='{"message": "0"}')
    ) as with_defaults:
        with_defaults.reset("train-0")
        assert json.loads(with_defaults.step("{}"))["text"] == "Go higher."


@pytest.mark.parametrize(("mode", "expected"), [("sum", 0.9), ("last", 1.0)])
def test_reward_modes(game_url: str, mode: str, expected: float) -> None:
    with closing(OpenEnvEnv(url=game_url, observation_field="text", reward_mode=mode)) as env:
        env.reset("train-2")
        assert env.step("not a number") == "Not a number."
        assert env.reward == pytest.approx(-0.1)
        texts = play_on(env)
        assert texts[-1] == "Correct!" and env.reward == pytest.approx(expected)


def play_on(env: OpenEnvEnv) -> list[str]:
    """Finish the current game by trying every number (bounded by the game's 1..500 range)."""
    texts = []
    for guess in range(1, 501):
        texts.append(env.step(str(guess)))
        if not env.alive:
            return texts
    raise AssertionError("no number was right")


def test_server_side_failure_ends_the_episode_with_a_clear_error(game_url: str) -> None:
    with closing(OpenEnvEnv(url=game_url, observation_field="text")) as env:
        env.reset("train-0")
        with pytest.raises(ServerError, match=r"during step 1 of the episode: the game engine "):
            env.step("boom")
        assert env.alive is False
        assert play(env, "train-0")[-1] == "Correct!"  # the next reset reconnects
        assert env.connection_attempts == 2


def client_threads() -> int:
    return sum(t.name == "openenv-sync-client-loop" for t in threading.enumerate())


def test_envs_in_threads_play_independent_episodes(game_url: str) -> None:
    threads_before = client_threads()
    seeds = [f"train-{i}" for i in range(16)]
    expected = {}
    solo = OpenEnvEnv(url=game_url, observation_field="text")
    for seed in seeds[:4]:
        expected[seed] = play(solo, seed)
    solo.close()
    start = threading.Barrier(8, timeout=30)

    def episode(seed: str) -> tuple[str, list[str], float]:
        env = trl_env.load_env("openenv", url=game_url, observation_field="text")
        try:
            if seed in expected:
                start.wait()  # make the first eight really step side by side
            texts = play(env, seed)
            return seed, texts, env.reward
        finally:
            env.close()

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(episode, seeds[:4] * 2 + seeds[4:]))
    assert all(texts[-1] == "Correct!" and reward == 1.0 for _, texts, reward in results)
    for seed, texts, _ in results:
        if seed in expected:
            assert texts == expected[seed]
    assert client_threads() == threads_before  # close() stopped every client's loop thread


def test_busy_server_is_waited_for_then_reported(thread_server) -> None:
    server = thread_server(max_sessions=1).start()
    holder = OpenEnvEnv(url=server.url, observation_field="text")
    holder.reset("train-0")
    waiter = OpenEnvEnv(url=server.url, retries=0, backoff=0.05, slot_timeout=0.5)
    try:
        start = time.monotonic()
        with pytest.raises(
            ServerBusyError,
            match=r"has no free session .*max_concurrent_envs.*slot_timeout \(0.5 s\)",
        ):
            waiter.reset("train-1")
        # A full server is not one of the `retries` failures: it is asked again until the
        # slot budget is spent.
        assert time.monotonic() - start >= 0.5 and waiter.connection_attempts > 2
        assert waiter.slot_wait_seconds >= 0.5
        # A session freed while another waits is taken at once (the close wakes the waiter).
        patient = OpenEnvEnv(url=server.url, backoff=5.0, slot_timeout=30, observation_field="text")
        threading.Timer(0.3, holder.close).start()
        start = time.monotonic()
        assert patient.reset("train-1").startswith("Guess a number")
        # Woken by the close, not by its 5 s backoff (a loaded machine adds a second or two).
        assert 0.2 < patient.slot_wait_seconds < 4.0 and time.monotonic() - start < 4.0
        patient.close()
    finally:
        holder.close()
        waiter.close()


def test_no_slot_budget_fails_at_once(thread_server) -> None:
    server = thread_server(max_sessions=1).start()
    holder = OpenEnvEnv(url=server.url)
    holder.reset("train-0")
    try:
        with pytest.raises(ServerBusyError, match="has no free session"):
            OpenEnvEnv(url=server.url, slot_timeout=0).reset("train-1")
    finally:
        holder.close()


def test_server_that_starts_late_is_waited_for(thread_server) -> None:
    server = thread_server()  # its port is bound but refuses connections until it starts
    env = OpenEnvEnv(url=server.url, retries=8, backoff=0.1, observation_field="text")
    timer = threading.Timer(0.4, server.start)
    timer.start()
    try:
        assert env.reset("train-0").startswith("Guess a number")
        assert env.connection_attempts > 1
    finally:
        timer.join()
        env.close()


def test_success_is_null_unless_a_field_says_it(game_url: str) -> None:
    # OpenEnv's wire format has no success flag: without success_field the env does not say.
    plain = OpenEnvEnv(url=game_url, observation_field="text")
    told = OpenEnvEnv(url=game_url, observation_field="text", success_field="found")
    try:
        assert play(plain, "train-2")[-1] == "Correct!" and plain.success is None
        assert told.success is None  # no episode yet
        assert play(told, "train-2")[-1] == "Correct!" and told.success is True
        told.reset("train-3")
        assert told.success is False
        for _ in range(3):
            told.step("not a number")
        assert told.alive and told.success is False
    finally:
        close(plain)
        close(told)


def test_success_field_that_is_wrong_says_so(game_url: str) -> None:
    missing = OpenEnvEnv(url=game_url, observation_field="text", success_field="won")
    not_bool = OpenEnvEnv(url=game_url, observation_field="text", success_field="tries")
    try:
        missing.reset("train-0")
        with pytest.raises(OpenEnvOptionError, match=r"success_field='won'.*it has: found, text"):
            _ = missing.success
        not_bool.reset("train-0")
        with pytest.raises(OpenEnvOptionError, match="must name a true/false field"):
            _ = not_bool.success
    finally:
        close(missing)
        close(not_bool)

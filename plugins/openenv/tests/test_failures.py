"""Failures a user meets, each reported as one readable sentence naming the URL and the cause."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing

import pytest

import trl_env
from trl_env.errors import PluginLoadError, TrlEnvError
from trl_env_openenv import (
    ConnectionLostError,
    OpenEnvEnv,
    ProtocolMismatchError,
    ServerUnreachableError,
    WrongURLError,
)


def one_sentence(exc: BaseException) -> str:
    text = str(exc)
    assert isinstance(exc, TrlEnvError), type(exc)
    assert "\n" not in text and text.endswith("."), text
    return text


def test_server_down_is_retried_with_backoff_then_reported(refused_url: str) -> None:
    env = trl_env.load_env("openenv", url=refused_url, retries=3, backoff=0.05)
    started = time.monotonic()
    with pytest.raises(ServerUnreachableError) as info:
        env.reset("train-0")
    elapsed = time.monotonic() - started
    text = one_sentence(info.value)
    assert refused_url in text and "nothing is listening there (connection refused)" in text
    assert env.connection_attempts == 4  # the first try and three retries
    assert elapsed >= 0.05 + 0.1 + 0.2  # backed off 0.05, 0.1, 0.2 s (an upper bound is the load's)
    assert env.alive is False
    env.close()


def test_wrong_path_on_an_openenv_server_is_a_wrong_url(game_url: str) -> None:
    env = OpenEnvEnv(url=f"{game_url}/envs/hilo", retries=3, backoff=5)
    with pytest.raises(WrongURLError) as info:
        env.reset("train-0")
    assert env.connection_attempts == 1  # a 404 is not retried
    text = one_sentence(info.value)
    assert f"no OpenEnv environment at {game_url}/envs/hilo (HTTP 404" in text
    assert f"try url={game_url}" in text
    env.close()


def test_url_with_ws_path_or_ws_scheme_is_accepted(game_url: str) -> None:
    ws_url = game_url.replace("http://", "ws://") + "/ws/"
    env = OpenEnvEnv(url=ws_url, observation_field="text")
    assert env.url == game_url
    assert env.reset("train-0").startswith("Guess a number")
    env.close()


@pytest.mark.parametrize(
    ("server", "expected", "attempts"),
    [
        (
            "web_page_url",
            [
                "The server at {url} answers HTTP but not as an OpenEnv",
                "GET {url}/health gave HTTP 200 with text/html",
            ],
            1,
        ),
        (
            "echo_ws_url",
            [
                "The server at {url} does not answer as an OpenEnv environment",
                "a 'reset' message where an 'observation' message was expected",
            ],
            None,
        ),
    ],
)
def test_a_server_that_is_not_openenv_is_a_protocol_mismatch(
    request: pytest.FixtureRequest, server: str, expected: list[str], attempts: int | None
) -> None:
    url = request.getfixturevalue(server)
    env = OpenEnvEnv(url=url, retries=3, backoff=5)
    with pytest.raises(ProtocolMismatchError) as info:
        env.reset("train-0")
    text = one_sentence(info.value)
    for part in expected:
        assert part.format(url=url) in text
    if attempts is not None:
        assert env.connection_attempts == attempts
    env.close()


def test_step_past_the_timeout_ends_the_episode(game_url: str) -> None:
    with closing(OpenEnvEnv(url=game_url, timeout=0.3, observation_field="text")) as env:
        env.reset("train-0")
        with pytest.raises(ConnectionLostError) as info:
            env.step("sleep 1")
        text = one_sentence(info.value)
        assert "sent no reply to step 1 of the episode within 0.3 s" in text
        assert env.alive is False
        # A late reply must not be taken for the answer to a later request: reset reconnects.
        assert env.reset("train-0").startswith("Guess a number")
        assert env.step("0") == "Go higher."


def test_server_killed_mid_episode_ends_only_that_episode(process_server, game_url: str) -> None:
    doomed = [OpenEnvEnv(url=process_server.url, observation_field="text") for _ in range(3)]
    healthy = [OpenEnvEnv(url=game_url, observation_field="text") for _ in range(3)]
    for i, env in enumerate(doomed + healthy):
        env.reset(f"train-{i}")
        assert env.step("0") == "Go higher."
    process_server.kill()

    def next_turn(env: OpenEnvEnv) -> str:
        # What the rollout engine does: an env that raises ends its own episode with `error`.
        try:
            return env.step("0")
        except TrlEnvError as exc:
            return f"error: {exc}"

    with ThreadPoolExecutor(6) as pool:
        outcomes = list(pool.map(next_turn, doomed + healthy))
    for env, outcome in zip(doomed, outcomes[:3], strict=True):
        assert outcome.startswith(f"error: The OpenEnv server at {process_server.url} closed")
        assert "during step 2 of the episode" in outcome and "cannot go on" in outcome
        assert env.alive is False
    assert outcomes[3:] == ["Go higher."] * 3
    for env in doomed + healthy:
        env.close()
    # The dead server is now simply down, and says so after the retries.
    env = OpenEnvEnv(url=process_server.url, retries=1, backoff=0.01)
    with pytest.raises(ServerUnreachableError, match="connection refused"):
        env.reset("train-0")
    env.close()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"url": "ftp://example.org"}, "Option url must look like http://HOST:PORT"),
        ({"url": ""}, "Option url must be the address of an OpenEnv server"),
        ({"url": "http://h:1", "timeout": "soon"}, "Option timeout must be a number"),
        ({"url": "http://h:1", "retries": -1}, "Option retries must be a whole number >= 0"),
        ({"url": "http://h:1", "action_format": "xml"}, "must be one of field, json, auto"),
        ({"url": "http://h:1", "reset_args": "{oops"}, "Option reset_args must be a JSON object"),
        ({"url": "http://h:1", "max_turns": 0}, "Option max_turns must be a whole number >= 1"),
        ({"url": "http://h:1", "colour": "red"}, "unexpected keyword argument 'colour'"),
        ({}, "missing 1 required keyword-only argument: 'url'"),
    ],
)
def test_bad_options_fail_when_the_env_is_created(options: dict, message: str) -> None:
    with pytest.raises(PluginLoadError, match=message):
        trl_env.load_env("openenv", **options)

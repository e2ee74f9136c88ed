"""`trl-env serve` as OpenEnv's own client sees it: real servers on 127.0.0.1, played with
openenv-core's GenericEnvClient; a crash or a hang ends one session only; busy, idle reaping and
SIGTERM draining."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from openenv.core import GenericEnvClient

from trl_env.testing.modules import load_path
from trl_env_openenv import OpenEnvEnv, ServerBusyError

serving = load_path(Path(__file__).with_name("serving.py"), "trl_env_openenv_tests_serving")
Served, fake_distribution = serving.Served, serving.fake_distribution


@pytest.fixture(scope="module")
def envs_path(tmp_path_factory):
    return fake_distribution(tmp_path_factory.mktemp("served-envs"))


def info(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/trl-env", timeout=10) as response:
        return json.loads(response.read())


def client(url: str, timeout: float = 30.0):
    return GenericEnvClient(base_url=url, message_timeout_s=timeout).sync()


def test_generic_env_client_plays_a_served_env():
    with Served("--env", "guess", "--max-sessions", "2") as server:
        described = info(server.url)
        assert described["env"] == "guess" and described["max_sessions"] == 2
        assert "number" in described["system_prompt"] and described["max_turns"] == 10
        with client(server.url) as env:
            first = env.reset(seed=7)
            assert "number between 1 and 100" in first.observation["text"] and not first.done
            again = env.reset(seed=7)  # the same seed replays the same game
            assert again.observation == first.observation
            result = None
            low, high = 1, 100
            for _ in range(10):  # a bisecting player finds the number
                guess = (low + high) // 2
                result = env.step({"message": str(guess)})
                text = result.observation["text"]
                if result.done:
                    break
                if "higher" in text:
                    low = guess + 1
                else:
                    high = guess - 1
            assert result is not None and result.done and result.reward and result.reward > 0
            assert result.observation["success"] is True


def test_a_crash_or_a_hang_ends_only_its_session(envs_path):
    with Served(
        "--env", "crashy", "--max-sessions", "4", "--step-timeout", "2", extra_path=envs_path
    ) as server:
        with client(server.url) as good, client(server.url) as crashing, client(server.url) as hung:
            for env in (good, crashing, hung):
                assert env.reset(seed=1).observation["text"] == "ready 1"
            assert good.step({"message": "a"}).observation["text"] == "echo a"
            with pytest.raises(RuntimeError, match="SIGSEGV"):
                crashing.step({"message": "crash"})
            with pytest.raises(RuntimeError, match="step"):
                hung.step({"message": "hang"})  # past --step-timeout its process is killed
            second = good.step({"message": "b"})
            assert second.observation["text"] == "echo b" and second.reward == 2.0
            third = good.step({"message": "c"})
            assert third.done and third.reward == 3.0 and third.observation["success"] is True
            # A session whose env died starts a fresh one at its next reset.
            assert crashing.reset(seed=2).observation["text"] == "ready 2"
        assert server.healthy()


def test_busy_idle_reaping_and_a_drain_that_times_out(envs_path):
    with Served(
        *("--env", "crashy", "--max-sessions", "1", "--idle-timeout", "1"),
        *("--drain-timeout", "1"),
        extra_path=envs_path,
    ) as server:
        with client(server.url) as first:
            first.reset(seed=1)
            # openenv-core's client reads the refusal as a closed socket; trl-env's names it.
            second = OpenEnvEnv(url=server.url, slot_timeout=0, retries=0)
            with pytest.raises(ServerBusyError, match="no free session"):
                second.reset("2")
            second.close()
            # The first session sits idle: the reaper closes it and frees the slot.
            deadline = time.monotonic() + 60
            while info(server.url)["active_sessions"] > 0:
                assert time.monotonic() < deadline, "the idle session was never reaped"
                time.sleep(0.5)
        with client(server.url) as third:
            assert third.reset(seed=3).observation["text"] == "ready 3"
            # A session still open at SIGTERM gets --drain-timeout seconds, then the server
            # stops anyway, with exit status 0.
            server.terminate()
            assert server.proc.wait(60) == 0


def test_sigterm_drains_live_sessions_then_exits_zero(envs_path):
    with Served(
        "--env", "crashy", "--max-sessions", "4", "--drain-timeout", "60", extra_path=envs_path
    ) as server:
        with client(server.url) as live:
            live.reset(seed=1)
            server.terminate()
            deadline = time.monotonic() + 30
            while info(server.url)["draining"] is not True:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(f"{server.url}/health", timeout=5)
            assert refused.value.code == 503
            with pytest.raises(ConnectionError, match="503"), client(server.url) as late:
                late.reset(seed=2)  # no new sessions while draining
            assert live.step({"message": "still here"}).observation["text"] == "echo still here"
            assert server.proc.poll() is None  # a live session keeps it up
        assert server.proc.wait(60) == 0  # the last session closed: it stops, exit status 0


def test_an_unknown_env_fails_in_one_sentence():
    from click.testing import CliRunner

    from trl_env.cli.main import cli

    result = CliRunner().invoke(cli, ["serve", "--env", "no-such-env"])
    assert result.exit_code != 0
    assert "no-such-env" in result.output and "Traceback" not in result.output

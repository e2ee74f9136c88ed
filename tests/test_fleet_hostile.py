"""Env servers that misbehave toward the trainer, and what the trainer shows of them: a server
that takes sessions and never answers is taken out; one that redirects ``/ws`` is refused; one
that serves other settings is left out of the run; credentials in a URL never appear in a
record or a message; the serve token travels on every request; and an env's own seeds, the
"does this server serve the env you asked for" check and the env kind reach the trainer
through the servers whatever the isolation mode."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest

from trl_env import EnvSpec, RolloutConfig, extras
from trl_env.rollout import batch_rollout
from trl_env.startup import env_seeds
from trl_env.testing.modules import load_path

TESTS = Path(__file__).parents[1] / "plugins" / "openenv" / "tests"
serving = load_path(TESTS / "serving.py", "trl_env_fleet_hostile_serving")
served_envs = load_path(TESTS / "served_envs.py", "trl_env_fleet_hostile_envs")

pytestmark = pytest.mark.timeout(300)


def info_of(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/trl-env", timeout=10) as response:
        return dict(json.loads(response.read()))


class Impostor:
    """A server on 127.0.0.1 that answers ``/trl-env`` as ``info`` says, and ``/ws`` either by
    accepting the session and never answering (``silent``) or with a redirect to ``target``."""

    def __init__(self, info: dict[str, Any], target: str = "") -> None:
        self.info, self.target = info, target
        self.port = serving.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.sessions = 0
        ready = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(10)

    def _run(self, ready: threading.Event) -> None:
        from websockets.asyncio.server import serve

        async def answer(connection: Any, request: Any) -> Any:
            if request.path.startswith("/trl-env"):
                return connection.respond(HTTPStatus.OK, json.dumps(self.info))
            if self.target:
                response = connection.respond(HTTPStatus.FOUND, "")
                response.headers["Location"] = self.target.replace("http", "ws") + "/ws"
                return response
            return None

        async def hold(connection: Any) -> None:
            self.sessions += 1
            await asyncio.sleep(3600)  # the session is open; no reply ever comes

        async def main() -> None:
            self.done = asyncio.Event()
            async with serve(hold, "127.0.0.1", self.port, process_request=answer) as server:
                ready.set()
                await self.done.wait()
                server.close(close_connections=True)

        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(main())
        self.loop.close()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.done.set)
        self.thread.join(10)


@pytest.fixture
def guess_server():
    with serving.Served("--env", "guess", "--max-sessions", "4") as server:
        yield server


def rollout(qwen3: Any, seeds: list[str], **options: Any) -> list[Any]:
    options.setdefault("env", "guess")
    return batch_rollout(
        seeds,
        processor=qwen3.processor,
        tokenizer=qwen3.tokenizer,
        model=qwen3.model,
        max_new_tokens=4,
        max_turns=2,
        **options,
    )


def test_a_server_that_never_answers_is_taken_out_and_named(qwen3, guess_server):
    from trl_env_openenv.fleet import fleet_for

    silent = Impostor(info_of(guess_server.url))
    try:
        urls = (silent.url, guess_server.url)
        episodes = rollout(qwen3, [f"s{i}" for i in range(4)], env_servers=urls, step_timeout=3)
        assert silent.sessions >= 1, "no episode was sent to the silent server"
        assert [ep.error for ep in episodes] == [""] * 4
        assert {ep.server for ep in episodes} == {guess_server.url}
        failures = fleet_for(urls, 300.0, 3).failures()
        assert f"{silent.url}: " in failures and "no reply" in failures
    finally:
        silent.stop()


def test_a_redirect_on_ws_is_refused_not_followed(qwen3, guess_server):
    redirect = Impostor(info_of(guess_server.url), target=guess_server.url)
    try:
        episodes = rollout(qwen3, ["a", "b"], env_servers=(redirect.url,), slot_timeout=2)
        for ep in episodes:
            assert ep.status == "error" and redirect.url in ep.error, ep.error
            assert guess_server.url not in ep.error and ep.server == redirect.url
        assert info_of(guess_server.url)["active_sessions"] == 0
    finally:
        redirect.stop()


def test_credentials_in_a_server_url_are_never_shown(qwen3, guess_server):
    host = guess_server.url.removeprefix("http://")
    dead = f"127.0.0.1:{serving.free_port()}"
    good = rollout(qwen3, ["a"], env_servers=(f"http://alice:s3cret@{host}",))
    assert good[0].error == "" and good[0].server == guess_server.url
    bad = rollout(qwen3, ["b"], env_servers=(f"http://bob:t0psecret@{dead}",), slot_timeout=1)
    assert bad[0].status == "error" and dead in bad[0].error
    for ep in good + bad:
        shown = json.dumps(ep.to_dict())
        assert "s3cret" not in shown and "t0psecret" not in shown and "alice" not in shown


def test_the_serve_token_is_sent_on_every_request(qwen3, tmp_path, monkeypatch):
    token = "tok-" + "x" * 30
    with serving.Served("--env", "guess", env_vars={"TRL_ENV_SERVE_TOKEN": token}) as server:
        monkeypatch.delenv("TRL_ENV_SERVE_TOKEN", raising=False)
        refused = rollout(qwen3, ["a"], env_servers=(server.url,), slot_timeout=1)
        assert refused[0].status == "error" and "401" in refused[0].error, refused[0].error
        monkeypatch.setenv("TRL_ENV_SERVE_TOKEN", token)
        (played,) = rollout(qwen3, ["b"], env_servers=(server.url,), slot_timeout=30)
        assert played.error == "" and played.server == server.url
        seeds = env_seeds("guess", "eval", 2, RolloutConfig(env_servers=(server.url,)))
        assert seeds == ["eval-0", "eval-1"]


def test_a_server_serving_other_settings_is_left_out(qwen3, caplog):
    # The odd server first: what the first server says does not decide (it used to, and then
    # the honest server was the one left out and every episode failed).
    with (
        serving.Served("--env", "guess") as same,
        serving.Served("--env", "guess", "--env-arg", "high=10") as other,
    ):
        from trl_env_openenv.fleet import fleet_for

        urls = (other.url, same.url)
        episodes = rollout(qwen3, [f"s{i}" for i in range(6)], env_servers=urls)
        assert [ep.error for ep in episodes] == [""] * 6
        assert {ep.server for ep in episodes} == {same.url}
        failures = fleet_for(urls, 300.0, 60.0).failures()
        assert other.url in failures and "every env server of a run must serve" in failures
        assert f"env server {other.url} is left out of this run" in caplog.text


def test_servers_of_the_run_s_env_that_disagree_stop_it_naming_what_differs(qwen3, guess_server):
    # Same env and options (the digest is the honest server's), another system prompt: no
    # server is believed over the other.
    info = {**info_of(guess_server.url), "system_prompt": "Answer in French."}
    impostor = Impostor(info)
    try:
        urls = (guess_server.url, impostor.url)
        episodes = rollout(qwen3, ["a", "b"], env_servers=urls, slot_timeout=2)
        for ep in episodes:
            assert ep.status == "error" and "disagree on what they serve" in ep.error, ep.error
            assert "system_prompt" in ep.error and impostor.url in ep.error
        assert impostor.sessions == 0
    finally:
        impostor.stop()


def test_a_reward_or_alive_of_the_wrong_type_is_an_error_on_a_server_as_here(qwen3, tmp_path):
    # True and "1.0" are not rewards and "false" is not a bool, in the trainer's process as on
    # a server: the served env's values are checked as the trainer checks an env's.
    envs = serving.fake_distribution(tmp_path)
    seeds = ["bool", "str", "alive", "float"]
    with serving.Served("--env", "odd", extra_path=envs) as server:
        served = rollout(qwen3, seeds, env="odd", env_servers=(server.url,))
    local = rollout(qwen3, seeds, env=served_envs.OddValues)
    whys = ["not a finite number", "not a finite number", "not a bool", ""]
    for episodes in (served, local):
        for episode, why in zip(episodes, whys, strict=True):
            if why:
                assert episode.status == "error" and why in episode.error, episode.error
            else:
                assert episode.error == "" and episode.reward == 1.0, episode.error


def test_an_env_plays_its_own_seeds_through_servers(tmp_path):
    envs = serving.fake_distribution(tmp_path)
    with serving.Served("--env", "seeded", extra_path=envs) as server:
        config = RolloutConfig(env_servers=(server.url,))
        own = served_envs.SeededEnv().seeds("eval", 4)
        assert env_seeds("seeded", "eval", 4, config) == own
        assert env_seeds("seeded", "train", 2, config) == served_envs.SeededEnv().seeds("train", 2)
        assert own != [f"eval-{i}" for i in range(4)]
        from trl_env_openenv.fleet import ServersHost

        handle = ServersHost(EnvSpec("seeded"), config).open(0, {})
        assert extras.demonstrate(handle.env, "s1") == served_envs.SeededEnv().demonstrate("s1")


def test_sft_reads_and_plays_demonstrations_on_env_servers(tmp_path):
    """The env is not installed here: its seeds, demonstrations and episodes are the server's."""
    from click.testing import CliRunner

    from trl_env.cli import cli

    envs = serving.fake_distribution(tmp_path / "envs")
    out = tmp_path / "run"
    with serving.Served("--env", "seeded", extra_path=envs) as server:
        with_secret = server.url.replace("http://", "http://alice:s3cret@")
        args = ["sft", "--env", "seeded", "--processor", "smollm2", "--episodes", "2",
                "--epochs", "1", "--json", "--env-server", with_secret,
                "--output-dir", str(out)]  # fmt: skip
        result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    _no_secret_written(out, result.output)
    played = [json.loads(line) for line in (out / "episodes" / "rank0.jsonl").open()]
    own = served_envs.SeededEnv()
    assert [p["seed"] for p in played] == own.seeds("train", 2)
    for record in played:
        said = [m["content"] for m in record["messages"] if m["role"] == "assistant"]
        assert said == own.demonstrate(record["seed"]) and record["server"] == server.url


def _no_secret_written(out: Path, *said: str) -> None:
    """Nothing a run wrote, nor its report, nor what it said, holds the URL's password."""
    from click.testing import CliRunner

    from trl_env.cli import cli

    viewed = CliRunner().invoke(cli, ["view", str(out)])
    assert viewed.exit_code == 0, viewed.output
    for file in ("config.yaml", "summary.json", "report.html"):
        text = (out / file).read_text()
        assert "s3cret" not in text and "alice" not in text, file
    assert "***@127.0.0.1" in (out / "config.yaml").read_text()  # where, without the secret
    for text in (*said, viewed.output):
        assert "s3cret" not in text


def test_a_run_on_a_server_url_with_credentials_writes_none_and_resumes(tmp_path, guess_server):
    from click.testing import CliRunner

    from trl_env.cli import cli

    with_secret = guess_server.url.replace("http://", "http://alice:s3cret@")
    out = tmp_path / "run"
    quick = ["train", "--env", "guess", "--processor", "qwen3", "--processor-arg",
             "thinking=false", "--max-new-tokens", "4", "--max-turns", "2", "--batch-size", "4",
             "--num-generations", "2", "--train-seeds", "8", "--no-check", "--json",
             "--output-dir", str(out)]  # fmt: skip
    runner = CliRunner()
    first = runner.invoke(cli, [*quick, "--env-server", with_secret, "--max-steps", "1"])
    assert first.exit_code == 0, first.output
    _no_secret_written(out, first.output)
    # The same flags resume it (the saved config masks the secret); without the URL, the run
    # asks for it in one sentence instead of playing on a URL with a masked password.
    again = runner.invoke(
        cli, [*quick, "--env-server", with_secret, "--resume", "--max-steps", "2"]
    )
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["steps"] == 2
    bare = runner.invoke(cli, ["train", "--output-dir", str(out), "--resume", "--max-steps", "3"])
    assert bare.exit_code == 2 and "rollout.env_servers holds a URL whose secret" in bare.output
    assert "s3cret" not in bare.output


def test_the_served_env_is_checked_against_the_spec(qwen3, guess_server):
    """A run keeps one host per env (the player): each episode's env is checked against the
    spec's name and options, not a process pool made of it."""
    from trl_env.backends import build_backend
    from trl_env.player import Player

    spec = EnvSpec("guess", options={"high": 10})
    config = RolloutConfig(env_servers=(guess_server.url,), max_new_tokens=4)
    player = Player(spec, qwen3.processor, config)
    backend = build_backend("transformers", tokenizer=qwen3.tokenizer, model=qwen3.model)
    player.bind(qwen3.tokenizer, [qwen3.tokenizer.eos_token_id], backend)
    try:
        (entry,) = player.mixture
        (episode,) = player.play([(player.binding(entry), "a")])
    finally:
        player.close()
    assert episode.status == "error"
    assert "'high': 10" in episode.error and "'guess'" in episode.error, episode.error


def test_process_isolation_with_env_servers_is_one_sentence():
    """Episodes on env servers run in the servers' worker processes: asking for this process's
    own workers too is refused, not silently ignored."""
    from trl_env.errors import UsageError
    from trl_env.player import Player

    config = RolloutConfig(env_servers=("http://127.0.0.1:9",), env_isolation="process")
    with pytest.raises(UsageError, match=r"env_isolation is 'process' but env_servers is set"):
        Player("guess", "qwen3", config)


def test_a_start_up_failure_on_env_servers_names_where_the_env_ran():
    from trl_env.startup import EnvStartError

    config = RolloutConfig(env_servers=(f"http://127.0.0.1:{serving.free_port()}",))
    with pytest.raises(EnvStartError) as failed:
        env_seeds("guess", "eval", 1, config)
    message = str(failed.value)
    assert "(servers isolation)" in message and "thread" not in message, message


def test_a_person_plays_on_env_servers(guess_server):
    """`trl-env play --env-server URL`: the env a person plays is the server's, on its host."""
    from click.testing import CliRunner

    from trl_env.cli import cli

    args = ["play", "--env", "guess", "--env-server", guess_server.url, "--seed", "s1"]
    result = CliRunner().invoke(cli, args, input="50\nquit\n")
    assert result.exit_code == 0, result.output
    assert "Seed 's1'" in result.output and "stopped by you" in result.output

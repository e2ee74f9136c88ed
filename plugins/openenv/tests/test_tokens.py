"""A token goes only where it belongs: the fleet's (``TRL_ENV_SERVE_TOKEN``) to ``--env-server``
URLs alone, never to an ``openenv`` env's server or to ``trl-env openenv URL``, which send the
token of the variable their ``token_env`` option names, and otherwise none."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from trl_env_openenv import OpenEnvEnv, OpenEnvError, OpenEnvOptionError

FLEET_TOKEN = "fleet-" + "x" * 30
OWN_TOKEN = "own-" + "y" * 30


class Recorder:
    """A server that is not OpenEnv and keeps the ``Authorization`` header of every request
    and WebSocket handshake it gets."""

    def __init__(self) -> None:
        from websockets.sync.server import serve

        self.seen: list[str | None] = []
        self.server = serve(self._session, "127.0.0.1", 0, process_request=self._record)
        self.url = f"http://127.0.0.1:{self.server.socket.getsockname()[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _record(self, connection: Any, request: Any) -> Any:
        self.seen.append(request.headers.get("Authorization"))
        return None  # the handshake goes on; the session then ends at once

    def _session(self, connection: Any) -> None:
        connection.close()

    def stop(self) -> None:
        self.server.shutdown()
        self.thread.join(5)


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    monkeypatch.setenv("TRL_ENV_SERVE_TOKEN", FLEET_TOKEN)
    monkeypatch.setenv("MY_ENV_TOKEN", OWN_TOKEN)
    server = Recorder()
    yield server
    server.stop()


def _reset(env: OpenEnvEnv) -> None:
    try:
        with pytest.raises(OpenEnvError):
            env.reset("0")
    finally:
        env.close()


def test_an_openenv_env_never_sends_the_fleet_token(recorder: Recorder) -> None:
    _reset(OpenEnvEnv(url=recorder.url, retries=0, connect_timeout=5))
    assert recorder.seen, "the env never reached the server"
    assert not any(FLEET_TOKEN in (header or "") for header in recorder.seen), recorder.seen
    assert set(recorder.seen) == {None}


def test_an_openenv_env_sends_the_token_its_option_names(recorder: Recorder) -> None:
    _reset(OpenEnvEnv(url=recorder.url, retries=0, connect_timeout=5, token_env="MY_ENV_TOKEN"))
    assert f"Bearer {OWN_TOKEN}" in recorder.seen
    assert not any(FLEET_TOKEN in (header or "") for header in recorder.seen)
    env = OpenEnvEnv(url=recorder.url, token_env="MY_ENV_TOKEN")
    assert OWN_TOKEN not in repr(env.options)  # the variable's name is shown, not its value


def test_a_token_option_naming_an_unset_variable_is_one_sentence(recorder: Recorder) -> None:
    with pytest.raises(OpenEnvOptionError, match=r"^Option token_env: NOT_SET_HERE is not set"):
        OpenEnvEnv(url=recorder.url, token_env="NOT_SET_HERE")


def test_the_probe_command_sends_no_token_unless_told_which(recorder: Recorder) -> None:
    from trl_env_openenv.commands import openenv_cmd

    runner = CliRunner()
    result = runner.invoke(openenv_cmd, [recorder.url, "--env-arg", "retries=0"])
    assert result.exit_code == 1 and recorder.seen
    assert set(recorder.seen) == {None}, recorder.seen
    recorder.seen.clear()
    named = [recorder.url, "--env-arg", "retries=0", "--token-env", "TRL_ENV_SERVE_TOKEN"]
    result = runner.invoke(openenv_cmd, named)
    assert result.exit_code == 1 and f"Bearer {FLEET_TOKEN}" in recorder.seen

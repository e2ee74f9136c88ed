"""`trl-env serve` against hostile or careless clients, on real servers on 127.0.0.1: slots that
always come back (idle reaping, a reset after the reaper, HTTP resets and MCP sessions), a
/health that says when no reset can be answered, signals that stop it within --drain-timeout
even while a step hangs, and a shared token on every route but /health."""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from openenv.core import GenericEnvClient
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from trl_env.testing.modules import load_path
from trl_env.testing.timeouts import scaled

serving = load_path(Path(__file__).with_name("serving.py"), "trl_env_openenv_tests_serving")
Served, fake_distribution = serving.Served, serving.fake_distribution

TOKEN = "s3cret-token-for-tests"
SECRET_ARG = "postgres://user:hunter2@db/x"


@pytest.fixture(scope="module")
def envs_path(tmp_path_factory):
    return fake_distribution(tmp_path_factory.mktemp("served-envs"))


def http(
    url: str, method: str = "GET", body: Any = None, token: str | None = None, timeout=10.0
) -> tuple[int, dict[str, Any]]:
    """(status, JSON body) of one request; an HTTP error status is returned, not raised."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, {"raw": raw.decode("utf-8", "replace")}


def info(url: str, token: str | None = None) -> dict[str, Any]:
    return http(f"{url}/trl-env", token=token)[1]


def ws(url: str, token: str | None = None):
    headers = {"Authorization": f"Bearer {token}"} if token else None
    return connect(
        url.replace("http://", "ws://") + "/ws",
        additional_headers=headers,
        open_timeout=scaled(10),
    )


def ask(connection, message: dict[str, Any]) -> dict[str, Any]:
    connection.send(json.dumps(message))
    return json.loads(connection.recv(timeout=scaled(30)))


def wait_for(condition, what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + scaled(limit)
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_a_session_reset_after_the_reaper_leaks_no_slot(envs_path):
    # What OpenEnv's GenericEnvClient does with two episodes and a pause past --idle-timeout.
    with Served(
        *("--env", "crashy", "--max-sessions", "1", "--idle-timeout", "1"), extra_path=envs_path
    ) as server:
        client = GenericEnvClient(base_url=server.url, message_timeout_s=scaled(20)).sync()
        with client:
            assert client.reset(seed=1).observation["text"] == "ready 1"
            wait_for(lambda: info(server.url)["active_sessions"] == 0, "never reaped")
            time.sleep(1.5)
            try:  # the reaper closed the connection: the second episode fails, no slot leaks
                client.reset(seed=2)
            except Exception:
                pass
        # The only slot is free again: a new client plays at once (it hung forever before).
        fresh = GenericEnvClient(base_url=server.url, message_timeout_s=scaled(20)).sync()
        with fresh:
            assert fresh.reset(seed=3).observation["text"] == "ready 3"
        wait_for(lambda: info(server.url)["active_sessions"] == 0, "the session stayed open")
        # The worker is given back once the session's env has closed, a moment after the
        # session ends: healthy again soon, not at the same instant.
        wait_for(lambda: http(f"{server.url}/health")[0] == 200, "the slot never came back")


def test_idle_websockets_are_closed_and_never_pile_up(envs_path):
    with Served(
        *("--env", "crashy", "--max-sessions", "2", "--idle-timeout", "1"), extra_path=envs_path
    ) as server:
        idle = [ws(server.url), ws(server.url)]
        assert ask(idle[0], {"type": "reset", "data": {"seed": 1}})["type"] == "observation"
        for connection in idle:  # the server closes each idle connection, saying why
            with pytest.raises(ConnectionClosed) as closed:
                connection.recv(timeout=scaled(30))
            assert "idle" in (closed.value.rcvd.reason if closed.value.rcvd else "")
        # Two new sessions fit; a third is over --max-sessions however many were reaped.
        fresh = [ws(server.url), ws(server.url)]
        extra = ws(server.url)
        try:
            for connection in fresh:
                assert ask(connection, {"type": "reset", "data": {"seed": 2}})["type"] == (
                    "observation"
                )
            refused = json.loads(extra.recv(timeout=scaled(30)))
            assert refused["data"]["code"] == "CAPACITY_REACHED"
        finally:
            for connection in [*fresh, extra]:
                connection.close()


def test_a_step_longer_than_the_idle_timeout_is_not_idle(envs_path):
    # Idle is the time between a reply and the next message, never the time a step takes.
    with (
        Served(
            *("--env", "slow", "--env-arg", "delay=3", "--idle-timeout", "1"), extra_path=envs_path
        ) as server,
        ws(server.url) as connection,
    ):
        assert ask(connection, {"type": "reset", "data": {"seed": 1}})["type"] == "observation"
        reply = ask(connection, {"type": "step", "data": {"message": "a"}})
        assert reply["data"]["observation"]["text"] == "echo a", reply


def test_http_resets_are_refused_when_full_and_mcp_holds_no_session(envs_path):
    with Served("--env", "crashy", "--max-sessions", "1", extra_path=envs_path) as server:
        # One POST /mcp asking for a session, with no connection kept open: refused.
        mcp = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create"}
        assert http(f"{server.url}/mcp", "POST", mcp)[0] == 404
        holder = ws(server.url)
        try:
            reply = ask(holder, {"type": "reset", "data": {"seed": 1}})
            assert reply["type"] == "observation", reply  # the MCP request held no slot
            assert info(server.url)["active_sessions"] == 1
            # The only worker is taken: an HTTP reset is refused at once, not queued.
            status, body = http(f"{server.url}/reset", "POST", {"seed": 2}, timeout=scaled(20))
            assert status == 503 and "session" in json.dumps(body), body
            health, said = http(f"{server.url}/health")
            assert health == 503 and said["status"] == "busy"
        finally:
            holder.close()
        wait_for(lambda: http(f"{server.url}/health")[0] == 200, "/health stayed busy")
        status, body = http(f"{server.url}/reset", "POST", {"seed": 2}, timeout=scaled(20))
        assert status == 200 and body["observation"]["text"] == "ready 2"
        # Draining (a live session keeps the server up): nothing new is accepted.
        with ws(server.url) as live:
            assert ask(live, {"type": "reset", "data": {"seed": 3}})["type"] == "observation"
            server.terminate()
            wait_for(lambda: info(server.url).get("draining") is True, "never drained", 30)
            assert http(f"{server.url}/mcp", "POST", mcp)[0] == 503
            assert http(f"{server.url}/reset", "POST", {"seed": 4})[0] == 503
            # The extras route makes an env of its own: refused while draining as well.
            seeds = f"{server.url}/trl-env/call?name=seeds&args=%5B%22eval%22%2C2%5D"
            assert http(seeds)[0] == 503
        assert server.proc.wait(scaled(30)) == 0


@pytest.mark.parametrize(
    "signals, drain",
    [((signal.SIGTERM,), 1), ((signal.SIGTERM, signal.SIGTERM), 300), ((signal.SIGINT,), 300)],
    ids=["sigterm", "second-sigterm", "sigint"],
)
def test_signals_stop_the_server_while_a_step_hangs(envs_path, signals, drain):
    # A step that never returns, under a step timeout far past the bound of this test: the
    # server must stop within --drain-timeout (SIGTERM) or at once (a second signal, SIGINT).
    with Served(
        *("--env", "crashy", "--step-timeout", "600", "--drain-timeout", str(drain)),
        extra_path=envs_path,
    ) as server:
        connection = ws(server.url)
        assert ask(connection, {"type": "reset", "data": {"seed": 1}})["type"] == "observation"
        connection.send(json.dumps({"type": "step", "data": {"message": "hang"}}))
        wait_for(lambda: "step" in _busy_calls(server.url), "the step never started", 30)
        started = time.monotonic()
        for sig in signals:
            server.proc.send_signal(sig)
            time.sleep(0.2)
        assert server.proc.wait(scaled(20)) == 0
        assert time.monotonic() - started < scaled(20) < 600
        connection.close()
        said = server.proc.stderr.read()
        assert "Traceback" not in said, said  # a stop is not a crash


def _busy_calls(url: str) -> str:
    return json.dumps(info(url).get("calls", {}))


def test_a_non_loopback_host_without_a_token_is_warned_about(envs_path):
    with Served("--env", "crashy", "--host", "0.0.0.0", extra_path=envs_path) as server:
        server.terminate()
        assert server.proc.wait(scaled(30)) == 0
        said = server.proc.stderr.read()
    assert "Warning: serving on 0.0.0.0" in said and "TRL_ENV_SERVE_TOKEN" in said


def test_the_token_guards_every_route_but_health(envs_path):
    with Served(
        *("--env", "crashy", "--env-arg", "delay=0", "--max-sessions", "2"),
        extra_path=envs_path,
        env_vars={"TRL_ENV_SERVE_TOKEN": TOKEN},
    ) as server:
        routes = [
            ("GET", "/trl-env"),
            ("GET", "/docs"),
            ("GET", "/openapi.json"),
            ("GET", "/schema"),
            ("GET", "/state"),
            ("GET", "/metadata"),
            ("POST", "/reset"),
            ("POST", "/step"),
            ("POST", "/mcp"),
        ]
        for method, path in routes:
            for token in (None, "wrong", TOKEN + "x", TOKEN[:-1]):
                status, _ = http(f"{server.url}{path}", method, {}, token=token)
                assert status == 401, (method, path, token, status)
        assert http(f"{server.url}/health")[0] == 200
        for token in (None, "wrong"):
            with pytest.raises(InvalidStatus) as refused:
                ws(server.url, token)
            assert refused.value.response.status_code == 401
        # The token opens everything.
        assert http(f"{server.url}/schema", token=TOKEN)[0] == 200
        described = info(server.url, TOKEN)
        assert described["env"] == "crashy" and described["options"] == ["delay"]
        with ws(server.url, TOKEN) as connection:
            reply = ask(connection, {"type": "reset", "data": {"seed": 4}})
            assert reply["data"]["observation"]["text"] == "ready 4"


def test_info_names_options_without_their_values(envs_path):
    from trl_env_openenv.access import options_digest

    secret = ("--env", "crashy", "--env-arg", f"note={SECRET_ARG}")
    with Served(*secret, extra_path=envs_path) as a, Served(*secret, extra_path=envs_path) as b:
        raw = json.dumps(info(a.url))
        assert json.loads(raw)["options"] == ["note"]
        assert "hunter2" not in raw and "postgres" not in raw
        said = [info(a.url), info(b.url)]
    # The same options on two servers: two salts, two digests (one proves nothing about the
    # other, nor can a table of guesses be made once for all), each matched by the options.
    assert said[0]["options_salt"] != said[1]["options_salt"]
    assert said[0]["options_digest"] != said[1]["options_digest"]
    for one in said:
        assert options_digest({"note": SECRET_ARG}, one["options_salt"]) == one["options_digest"]
        assert options_digest({"note": "x"}, one["options_salt"]) != one["options_digest"]


def test_health_says_busy_then_wedged_when_a_worker_is_never_given_back():
    from trl_env_openenv.server import Host

    host = Host("guess", {}, max_sessions=1, step_timeout=scaled(30), idle_timeout=60)
    try:
        host.probe()
        assert host.health() == (200, {"status": "healthy", "free_sessions": 1})
        owner = object()
        remote = host.take(owner)  # the only worker, held by a session playing now
        status, said = host.health()
        assert (status, said["status"]) == (503, "busy")
        with pytest.raises(Exception, match="all 1 sessions"):
            host.take(object())  # refused at once, not queued
        # Held long past --idle-timeout and its close: no live session holds it any more.
        host._holdings[owner].used -= 60 + scaled(30) + 60
        status, said = host.health()
        assert (status, said["status"]) == (503, "wedged")
        assert "1 workers held by no live session" in said["reason"]
        assert host.status()["health"] == "wedged"
        host.give_back(owner, remote)
        assert host.health()[0] == 200
    finally:
        host.close()


@pytest.mark.parametrize("value", ["", "   ", "two words", "caf\u00e9"])
def test_a_token_that_no_header_can_carry_is_refused_in_one_sentence(value):
    from click.testing import CliRunner

    from trl_env.cli.main import cli

    result = CliRunner().invoke(
        cli, ["serve", "--env", "guess"], env={"TRL_ENV_SERVE_TOKEN": value}
    )
    assert result.exit_code == 2, result.output
    assert result.output.startswith("Error: TRL_ENV_SERVE_TOKEN must be printable ASCII")
    assert result.output.strip().count("\n") == 0


def test_the_header_check_and_the_loopback_rule():
    from trl_env_openenv.access import authorized, exposure_warning, is_loopback

    def headers(value: str) -> list[tuple[bytes, bytes]]:
        return [(b"host", b"x"), (b"Authorization", value.encode())]

    assert authorized(headers(f"Bearer {TOKEN}"), TOKEN)
    assert authorized(headers(f"bearer   {TOKEN} "), TOKEN)  # the scheme is case-insensitive
    for wrong in (TOKEN, f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer", f"Bearer{TOKEN}"):
        assert not authorized(headers(wrong), TOKEN), wrong
    assert not authorized([], TOKEN)
    for host in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"):
        assert is_loopback(host) and exposure_warning(host, 1, None) is None
    for host in ("0.0.0.0", "::", "10.0.0.5", "envhost1"):
        warning = exposure_warning(host, 1, None)
        assert not is_loopback(host) and warning and "TRL_ENV_SERVE_TOKEN" in warning
        assert exposure_warning(host, 1, TOKEN) is None


def _raw_http(url: str, path: str, headers: dict[str, str]) -> int:
    """The status of a GET with exactly these headers (urllib would set Host itself)."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=scaled(10))
    conn.putrequest("GET", path, skip_host=True)
    for name, value in headers.items():
        conn.putheader(name, value)
    conn.endheaders()
    status = conn.getresponse().status
    conn.close()
    return status


def test_a_loopback_server_without_a_token_answers_only_this_machine():
    with Served("--env", "guess") as server:
        here = f"127.0.0.1:{server.port}"
        assert _raw_http(server.url, "/trl-env", {"Host": here}) == 200
        assert _raw_http(server.url, "/trl-env", {"Host": f"localhost:{server.port}"}) == 200
        # a DNS name rebound to 127.0.0.1 by a web page's own server
        assert _raw_http(server.url, "/trl-env", {"Host": f"evil.example:{server.port}"}) == 403
        assert _raw_http(server.url, "/health", {"Host": f"evil.example:{server.port}"}) == 200
        page = {"Host": here, "Origin": "http://evil.example"}
        assert _raw_http(server.url, "/trl-env", page) == 403
        socket_url = server.url.replace("http://", "ws://") + "/ws"
        with pytest.raises(InvalidStatus) as refused:
            connect(socket_url, origin="http://evil.example", open_timeout=scaled(10))
        assert refused.value.response.status_code == 403
        with connect(socket_url, origin=f"http://{here}", open_timeout=scaled(10)) as own:
            assert ask(own, {"type": "reset", "data": {"seed": "1"}})["type"] == "observation"
        with ws(server.url) as plain:  # no Origin: a script, or trl-env's own client
            assert ask(plain, {"type": "reset", "data": {"seed": "2"}})["type"] == "observation"


def test_bad_requests_cost_the_log_a_line_now_and_then_not_a_traceback_each():
    with Served("--env", "guess", env_vars={"TRL_ENV_SERVE_TOKEN": TOKEN}) as server:
        for _ in range(5):
            with pytest.raises(InvalidStatus):
                ws(server.url).close()  # no token: refused
            status, said = http(f"{server.url}/step", "POST", {"action": {"message": "x"}}, TOKEN)
            assert status == 404 and "/ws" in said["detail"]  # a stateless step has no episode
        server.proc.send_signal(signal.SIGINT)
        assert server.proc.stderr is not None
        log = server.proc.stderr.read()
    lines = [line for line in log.splitlines() if line.strip()]
    assert "Traceback" not in log
    assert len(lines) <= 3, log  # the banner, at most one line for the refused handshakes


def test_the_log_throttle_writes_each_kind_once_a_while_as_one_line(monkeypatch):
    import logging

    from trl_env_openenv import logs

    clock = [1000.0]
    monkeypatch.setattr(logs.time, "monotonic", lambda: clock[0])
    logger = logging.getLogger("trl_env_test_throttle")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    throttle = logs.Throttle(every=30.0)
    handler.addFilter(throttle)
    logger.addHandler(handler)
    logger.addFilter(throttle)  # a record seen twice is judged once
    try:
        for _ in range(40):
            try:
                raise RuntimeError("bad \x1b]52;c;cGF5bG9hZA==\x07request\nfrom a client")
            except RuntimeError:
                logger.exception("Exception in ASGI application\n")
        logger.error("another kind")
        clock[0] += 31
        try:
            raise RuntimeError("again")
        except RuntimeError:
            logger.exception("Exception in ASGI application\n")
    finally:
        logger.removeHandler(handler)
    said = [r.getMessage() for r in records]
    assert len(said) == 3 and all(r.exc_info is None for r in records)
    assert said[0].startswith("Exception in ASGI application: RuntimeError: bad request from")
    assert "\x1b" not in said[0] and "\n" not in said[0] and "(at " in said[0]
    assert said[1] == "another kind"
    assert said[2].endswith("(39 more like this in the last 30 s not shown)")


def test_an_extras_request_is_bounded_before_any_env_is_made():
    from fastapi import HTTPException

    from trl_env_openenv.extras_route import MAX_SEEDS, Extras

    extras = Extras("guess", {}, step_timeout=scaled(30))
    try:
        for args, why in (
            (["train", MAX_SEEDS + 1], f"at most {MAX_SEEDS:,} seeds a request"),
            (["train", 10**7], "not 10,000,000"),
            (["train", "5"], "a whole count"),
            (["train", True], "a whole count"),
            (["train"], "seeds takes [split, count]"),
        ):
            with pytest.raises(HTTPException) as refused:
                extras.call("seeds", json.dumps(args))
            assert refused.value.status_code == 422 and why in str(refused.value.detail), args
        assert extras._pool is None  # refused before a worker was started
        assert extras.call("seeds", json.dumps(["train", 3])) == {
            "value": ["train-0", "train-1", "train-2"]
        }
    finally:
        extras.close()

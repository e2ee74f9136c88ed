"""Real servers on 127.0.0.1 for the tests: OpenEnv ones (in a thread or a process) and impostors.

Every wait here is a bounded loop; every server is stopped when its fixture ends.
"""

from __future__ import annotations

import functools
import http.server
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from trl_env.testing.modules import load_path
from trl_env.testing.processes import answers_health, kill_hard

HERE = Path(__file__).parent


@functools.cache
def game() -> ModuleType:
    """tests/hilo_game.py, imported on first use (it imports openenv-core, which takes seconds)."""
    # Registered in sys.modules by its name: pydantic resolves the models' annotations there.
    return load_path(HERE / "hilo_game.py", "trl_env_openenv_tests_hilo_game")


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {timeout} s waiting for {what}")
        time.sleep(0.02)


def bound_socket() -> socket.socket:
    """A socket bound to a free port on 127.0.0.1 and not listening: connecting is refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    return sock


class ThreadServer:
    """openenv-core's FastAPI app for the hi-lo game, served by uvicorn on a background thread."""

    def __init__(
        self,
        max_sessions: int = 32,
        sock: socket.socket | None = None,
        slow_every: int = 0,
        slow_seconds: float = 0.0,
    ) -> None:
        import uvicorn

        self.sock = sock or bound_socket()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(
            game().make_app(max_sessions, slow_every, slow_seconds),
            log_level="warning",
            ws_ping_interval=None,
            timeout_graceful_shutdown=1,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def start(self) -> ThreadServer:
        self.thread.start()
        wait_until(lambda: self.server.started, 30, f"the OpenEnv server at {self.url}")
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        if self.thread.is_alive():
            self.thread.join(10)
        self.sock.close()


class ProcessServer:
    """The hi-lo game served by its own process (tests/hilo_server.py), so it can be killed."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "hilo_server.py")],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=HERE,
        )
        self.url = ""

    def ready(self) -> ProcessServer:
        """Wait (bounded) until the server answers /health."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # the server prints its port once it has bound it
        match = re.fullmatch(r"PORT (\d+)\n", line)
        if match is None:
            self.kill()
            raise RuntimeError(f"hilo_server.py did not start: {line!r}")
        self.url = f"http://127.0.0.1:{match.group(1)}"
        wait_until(self._healthy, 60, f"the OpenEnv server process at {self.url}")
        return self

    def _healthy(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"hilo_server.py exited with {self.proc.returncode}")
        return answers_health(self.url)

    def kill(self) -> None:
        """SIGKILL: no shutdown handshake, as when a server crashes or its machine goes away."""
        kill_hard(self.proc)


@pytest.fixture(scope="session")
def game_url() -> Iterator[str]:
    """URL of a real OpenEnv server (hi-lo game, 32 sessions) shared by the whole test run."""
    server = ThreadServer().start()
    yield server.url
    server.stop()


@pytest.fixture
def thread_server() -> Iterator[Callable[..., ThreadServer]]:
    """Factory for extra OpenEnv servers (not started), stopped at the end of the test."""
    servers: list[ThreadServer] = []

    def make(**kwargs: Any) -> ThreadServer:
        servers.append(ThreadServer(**kwargs))
        return servers[-1]

    yield make
    for server in servers:
        server.stop()


@pytest.fixture(scope="session", autouse=True)
def _spawned_servers(request: pytest.FixtureRequest) -> Iterator[list[ProcessServer]]:
    """Start the server processes the selected tests need at once, so they boot during others."""
    needed = sum("process_server" in item.fixturenames for item in request.session.items)
    servers = [ProcessServer() for _ in range(needed)]
    yield servers
    for server in servers:
        server.kill()


@pytest.fixture
def process_server(_spawned_servers: list[ProcessServer]) -> Iterator[ProcessServer]:
    """An OpenEnv server in its own process, for one test only (it may kill it)."""
    server = _spawned_servers.pop().ready()
    yield server
    server.kill()


@pytest.fixture
def refused_url() -> Iterator[str]:
    """A URL where nothing listens: its port is held by a socket that never listens."""
    sock = bound_socket()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


class _WebPage(http.server.BaseHTTPRequestHandler):
    """Any ordinary web server: every GET gets the same HTML page, WebSocket upgrades included."""

    def do_GET(self) -> None:
        body = b"<html><body>Just a web page.</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep the test output clean


@pytest.fixture
def web_page_url() -> Iterator[str]:
    """A plain HTTP server that is not OpenEnv."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _WebPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture
def echo_ws_url() -> Iterator[str]:
    """A WebSocket server at /ws that is not OpenEnv: it echoes every message back."""
    from websockets.sync.server import ServerConnection, serve

    def echo(connection: ServerConnection) -> None:
        for message in connection:
            connection.send(message)

    server = serve(echo, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.socket.getsockname()[1]}"
    server.shutdown()
    thread.join(5)

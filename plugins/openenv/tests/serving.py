"""`trl-env serve` processes for tests: started on a free loopback port, stopped by the test."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trl_env.testing.processes import answers_health, kill_hard

HERE = Path(__file__).parent
TRL_ENV = [sys.executable, "-m", "trl_env"]


def fake_distribution(root: Path) -> Path:
    """A dist-info folder registering the envs of served_envs.py; put ``root`` on PYTHONPATH."""
    info = root / "trl_env_served_envs-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: trl-env-served-envs\nVersion: 0.1\n"
    )
    (info / "entry_points.txt").write_text(
        "[trl_env.envs]\ncrashy = served_envs:CrashyEnv\nslow = served_envs:slow\n"
        "seeded = served_envs:SeededEnv\nodd = served_envs:OddValues\n"
    )
    return root


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Served:
    """One `trl-env serve` process; ``url`` answers /health once the constructor returns."""

    def __init__(
        self,
        *args: str,
        extra_path: Path | None = None,
        port: int | None = None,
        env_vars: dict[str, str] | None = None,
    ):
        self.port = port or free_port()
        self.extra_path = extra_path
        self.env_vars = env_vars
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, **(env_vars or {})}
        paths = [str(HERE)] + ([str(extra_path)] if extra_path else [])
        env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
        self.proc = subprocess.Popen(
            [*TRL_ENV, "serve", "--port", str(self.port), *args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 120
        while not self.healthy():
            if self.proc.poll() is not None:
                raise RuntimeError(f"trl-env serve exited: {self.proc.stderr.read()}")
            assert time.monotonic() < deadline, "the server never answered /health"
            time.sleep(0.1)

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()

    def healthy(self) -> bool:
        return answers_health(self.url, timeout=2)

    def kill(self) -> None:
        kill_hard(self.proc, wait=30)
        if self.proc.stderr:
            self.proc.stderr.close()

    def terminate(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def restart(self) -> None:
        """Kill this server and start one on the same port with the same arguments."""
        args = self.proc.args[len(TRL_ENV) + 3 :]  # after "serve --port N"
        self.kill()
        self.__init__(  # type: ignore[misc]
            *args, extra_path=self.extra_path, port=self.port, env_vars=self.env_vars
        )


@contextlib.contextmanager
def fleet(count: int, *args: str, **options: Any) -> Iterator[list[Served]]:
    """``count`` servers started with the same arguments, all killed after the block."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(Served(*args, **options)) for _ in range(count)]

"""Processes under test: Ctrl-C one at a point, ask a server for its health, kill one hard;
nothing of them is left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable

from .timeouts import scaled


def interrupt_when(
    proc: subprocess.Popen, ready: Callable[[], bool], what: str, settle: float = 0.0
) -> None:
    """Send SIGINT to ``proc`` once ``ready()`` holds (``settle`` seconds later) and wait for it
    to end; whatever fails on the way, ``proc`` is killed and its stderr pipe closed.

    ``what`` says what did not happen when ``ready()`` never holds within the scaled limit.
    """
    try:
        deadline = time.monotonic() + scaled(240)
        while not ready():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, what
            time.sleep(0.1)
        time.sleep(settle)
        proc.send_signal(signal.SIGINT)
        proc.wait(scaled(60))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()


def answers_health(url: str, timeout: float = 1.0) -> bool:
    """Whether the server at ``url`` answers ``GET /health`` with 200 now."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def kill_hard(proc: subprocess.Popen, wait: float = 10.0) -> None:
    """SIGKILL ``proc`` (no shutdown handshake, as when a server crashes) and reap it."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(wait)


def default_sigint() -> None:
    """A ``preexec_fn``: the child gets Ctrl-C's default handling even where the test process
    inherited SIGINT ignored (an ignored SIGINT is inherited through exec, and Python then
    installs no KeyboardInterrupt handler), so a test that sends SIGINT tests the command."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)

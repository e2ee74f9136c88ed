"""Fixtures for the sandbox tests: what isolation this machine gives, and leftover processes."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

import pytest

from trl_env_python.sandbox import PID_SPAN, UID_BASE, UID_SLOTS, capabilities

if not sys.platform.startswith("linux"):
    collect_ignore_glob = ["test_*.py"]  # the sandbox needs Linux


@pytest.fixture(scope="session")
def caps() -> dict[str, bool]:
    """Isolation the default sandbox gets on this machine."""
    return capabilities()


@pytest.fixture
def need(caps: dict[str, bool]) -> Callable[[str], None]:
    """``need("network")`` skips the test, saying why, when this machine lacks the feature."""

    def check(feature: str) -> None:
        if not caps.get(feature):
            pytest.skip(f"{feature} is not available on this machine: {caps}")

    return check


def _sandbox_uids(pid: int) -> range:
    base = UID_BASE + (pid % PID_SPAN) * UID_SLOTS
    return range(base, base + UID_SLOTS)


def _live_processes_of(trainer: int) -> list[int]:
    """The program's processes (by uid) and the launcher and init (by command line)."""
    uids = _sandbox_uids(trainer)
    marker = f'"parent_pid": {trainer},'.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as fh:
                fields = dict(line.split(":", 1) for line in fh if ":" in line)
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except OSError:
            continue
        if fields["State"].strip().startswith("Z"):
            continue
        ours = b"_launcher.py" in cmdline and marker in cmdline
        if int(fields["Uid"].split()[0]) in uids or ours:
            found.append(int(entry))
    return found


@pytest.fixture
def leftovers() -> Callable[..., list[int]]:
    """``leftovers(pid=None, seconds=5)``: sandbox processes of trainer ``pid`` (default: this
    process) still alive after waiting up to ``seconds``; empty when every one is gone."""

    def check(pid: int | None = None, seconds: float = 5.0) -> list[int]:
        trainer = os.getpid() if pid is None else pid
        deadline = time.monotonic() + seconds
        while (left := _live_processes_of(trainer)) and time.monotonic() < deadline:
            time.sleep(0.05)
        return left

    return check

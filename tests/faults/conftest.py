"""Fixtures of the fault catalogue: the hostile envs importable by worker processes, and a
check that a test leaves no thread, child process or file descriptor behind."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

# Worker processes rebuild factories by module name, and they get this process's sys.path.
HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)


@dataclass(frozen=True)
class Footprint:
    """What a test may leak: Python threads, child processes, open descriptors."""

    threads: int
    children: int
    fds: int

    @classmethod
    def now(cls) -> Footprint:
        me = psutil.Process()
        return cls(threading.active_count(), len(me.children(recursive=True)), me.num_fds())


def wait_for_footprint(base: Footprint, seconds: float) -> Footprint:
    """The footprint once it is back to ``base`` (or whatever it is after ``seconds``)."""
    end = time.monotonic() + seconds
    while True:
        now = Footprint.now()
        settled = now.threads <= base.threads and now.children <= base.children
        if (settled and now.fds <= base.fds) or time.monotonic() > end:
            return now
        time.sleep(0.05)


@pytest.fixture
def no_leaks() -> Iterator[Footprint]:
    """Fails the test if threads, child processes or descriptors stay above their baseline."""
    base = Footprint.now()
    yield base
    after = wait_for_footprint(base, seconds=10.0)
    assert after.threads <= base.threads, f"threads: {base} -> {after}"
    assert after.children <= base.children, f"child processes: {base} -> {after}"
    assert after.fds <= base.fds, f"file descriptors: {base} -> {after}"

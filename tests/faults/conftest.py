"""Fixtures of the fault catalogue: the hostile envs importable by worker processes, and a
check that a test leaves no thread, child process or file descriptor behind."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from trl_env.testing.timeouts import scaled

try:
    import psutil
except ImportError:  # a transitive dependency (of trl); /proc answers the same on Linux
    psutil = None

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
        threads = _threads()
        if psutil is not None:
            me = psutil.Process()
            return cls(threads, len(me.children(recursive=True)), me.num_fds())
        return cls(threads, len(_proc_children(os.getpid())), _proc_fds())


def _threads() -> int:
    """Python threads, less the one that starts env workers (it lives as long as the process by
    design: a worker's parent-death signal follows the thread that started it) and the pool's
    spare workers (bounded, each exits once no batch has wanted it for SPARE_LINGER seconds;
    tests/test_callpool_spares.py checks that)."""
    return sum(t.name not in ("trl-env-spawner", "trl-env-spare") for t in threading.enumerate())


def _proc_children(pid: int) -> list[int]:
    """Descendants of ``pid`` from /proc (field 4 of /proc/N/stat is the parent's pid)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):  # gone meanwhile
                continue
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        kids = [child for child, ppid in parents.items() if ppid == parent]
        found += kids
        frontier += kids
    return found


def _proc_fds() -> int:
    return len(os.listdir("/proc/self/fd"))  # the listing's own descriptor too, as psutil counts


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
    after = wait_for_footprint(base, seconds=scaled(10.0))  # bounds a wait, not the code
    assert after.threads <= base.threads, f"threads: {base} -> {after}"
    assert after.children <= base.children, f"child processes: {base} -> {after}"
    assert after.fds <= base.fds, f"file descriptors: {base} -> {after}"

"""Bounds of the process boundary that cost the trainer if missing: a worker's reply is counted
before it is decoded, in time and memory linear in its size, and a worker dies with its parent
even while stuck in C with the GIL."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import boundary_envs as B
import pytest
from playing import parent_of_a_busy_worker

from trl_env.errors import EnvCrashed
from trl_env.hosts.pool import EnvProcessPool

psutil = pytest.importorskip("psutil")
pytestmark = pytest.mark.timeout(180)


def test_a_reply_of_many_empty_lists_is_refused_before_it_is_decoded(no_leaks) -> None:
    count = 1_500_000  # 4.5 MB on the wire; decoded, about 90 MB
    with EnvProcessPool(B.ManyLists, max_workers=1) as pool:
        remote = pool.open(timeout=30.0)
        remote.call("reset", "ok", timeout=30.0)
        # The peak of what Python allocated during the call, not RSS: in a suite's worker
        # process RSS also moves with the allocator's arenas and other tests' threads (it once
        # read 23 MB here, over a bound it had always met by luck).
        tracemalloc.start()
        try:
            with pytest.raises(EnvCrashed, match="JSON values, over the limit"):
                remote.call("step", str(count), timeout=60.0)
            grown = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        remote.release()
        # What it cost is about three times the bytes read (the read buffer and its text, made
        # in pieces), not the 20 times decoding takes.
        assert grown < 6 * 3 * count, f"the trainer grew {grown / 2**20:.0f} MB"
        # a reply within the bound is read as it was sent
        again = pool.open(timeout=30.0)
        again.call("reset", "ok", timeout=30.0)
        assert again.call("step", "1000", timeout=30.0) == [[]] * 1000
        again.release()


def test_a_frame_of_escaped_quotes_is_refused_in_linear_time(no_leaks) -> None:
    # A string of escaped quotes that never closes: 60 KB of it held the GIL for half a minute
    # (a regular expression looking for strings, quadratic), 1 MB for hours; now it is refused
    # as not JSON at once, and the module's timeout is a wide margin.
    with EnvProcessPool(B.RawFrame, max_workers=1) as pool:
        remote = pool.open(timeout=30.0)
        remote.call("reset", "ok", timeout=30.0)
        with pytest.raises(EnvCrashed, match="not JSON"):
            remote.call("step", "escaped-open-1000000", timeout=60.0)
        remote.release()


def test_a_long_string_of_escapes_costs_memory_linear_in_its_size(no_leaks) -> None:
    size = 4_000_000  # bytes on the wire: two million escaped quotes
    with EnvProcessPool(B.RawFrame, max_workers=1) as pool:
        remote = pool.open(timeout=30.0)
        remote.call("reset", "ok", timeout=30.0)
        tracemalloc.start()
        try:
            value = remote.call("step", f"escaped-{size}", timeout=60.0)
            grown = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        remote.release()
    assert value == '"' * (size // 2)
    # The read buffer, its text, the string's pieces and the string: about three times the
    # bytes read. Looking for strings with a backtracking regular expression took 70 times.
    assert grown < 5 * size, (
        f"the trainer grew {grown / 2**20:.0f} MB for a {size // 10**6} MB reply"
    )


def test_a_worker_holding_the_gil_dies_with_its_parent(tmp_path: Path) -> None:
    parent, worker = parent_of_a_busy_worker(tmp_path, B, "HoldsTheGil", "ok")
    time.sleep(1.0)  # the worker is inside the match, holding the GIL
    assert psutil.Process(worker).status() != psutil.STATUS_ZOMBIE
    parent.kill()
    parent.wait()
    end = time.monotonic() + 10.0
    while _running(worker) and time.monotonic() < end:
        time.sleep(0.05)
    assert not _running(worker), "the worker outlived its killed parent"


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False

"""Thread isolation's bounds: threads stuck in C are counted for the whole process (they outlive
their batch), and a declared ``reset_timeout`` cannot remove a call's deadline."""

from __future__ import annotations

import functools
import time
from typing import Any

import boundary_envs as B
import pytest
from playing import play_tiny

from trl_env.callpool import PoolExhausted, stuck_threads
from trl_env.testing.timeouts import scaled

pytestmark = pytest.mark.timeout(180)


def play(stack: Any, env: Any, seeds: list[str], **kw: Any):
    return play_tiny(
        stack, env, seeds, "thread", **{"max_new_tokens": 2, "step_timeout": 0.3, **kw}
    )


def test_threads_stuck_in_c_are_bounded_across_batches(qwen3, no_leaks):
    """One stuck call per batch: each batch alone stays under the limit, but the threads stay,
    so the run stops once the process holds more than the limit, in one sentence."""
    B.GATE.clear()
    # An earlier test's hang in C may still be returning: counted now and gone mid-test, it
    # would lower the count under this test's limit, so wait (bounded) for it to end first.
    end = time.monotonic() + scaled(30)
    while stuck_threads() and time.monotonic() < end:
        time.sleep(0.05)
    base = stuck_threads()
    limit = base + 2
    try:
        for _ in range(2):
            episodes = play(qwen3, B.StuckInC, ["s0", "bad-1"], max_hung_workers=limit)
            assert [ep.status for ep in episodes] == ["done", "timeout"]
        assert stuck_threads() >= base + 2
        with pytest.raises(PoolExhausted) as info:  # its stuck call is one too many
            play(qwen3, B.StuckInC, ["s0", "bad-1"], max_hung_workers=limit)
        message = str(info.value)
        assert "--env-isolation process" in message and "whole run" in message
        assert "\n" not in message
    finally:
        B.GATE.set()  # the stuck calls return; their threads exit
    end = time.monotonic() + 10
    while stuck_threads() > base and time.monotonic() < end:
        time.sleep(0.05)
    assert stuck_threads() <= base


def test_a_declared_reset_timeout_is_honoured_and_capped(qwen3, no_leaks):
    ok = play(qwen3, functools.partial(B.SlowReset, 3.0), ["slow-1"], step_timeout=0.5)
    assert ok[0].status == "done", ok[0].error
    start = time.monotonic()
    capped = play(qwen3, functools.partial(B.SlowReset, float("inf")), ["slow-60"])
    assert capped[0].status == "timeout"
    assert time.monotonic() - start < 30  # ten step timeouts (3 s), not 60 s or forever

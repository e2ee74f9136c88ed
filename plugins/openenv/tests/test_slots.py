"""Sessions are always given back, and a full server is waited for, against real servers.

The episodes here are driven the way trl-env's rollout engine drives envs: every call on a
worker thread, each step with a deadline; a step past it ends its episode with status
``timeout`` and the driver calls ``close()`` from its own thread while the step is still stuck.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from dataclasses import dataclass, field

import pytest

from trl_env_openenv import ConnectionLostError, OpenEnvEnv, ServerBusyError

STEP_TIMEOUT = 2.0


@dataclass
class Played:
    seed: str
    status: str = ""
    reward: float = 0.0
    error: str = ""
    slot_wait: float = 0.0
    close_seconds: float = 0.0
    replies: list[str] = field(default_factory=list)


def openenv_threads() -> int:
    """Client event-loop threads and background closes alive now."""
    names = ("openenv-sync-client-loop", "trl-env-openenv-close")
    return sum(t.name in names for t in threading.enumerate())


def call_with_deadline(fn, timeout: float):
    """Run ``fn()`` on its own thread: (finished, value or exception)."""
    box: list = []
    thread = threading.Thread(target=lambda: box.append(_attempt(fn)), daemon=True)
    thread.start()
    thread.join(timeout)
    return (bool(box), box[0] if box else None)


def _attempt(fn):
    try:
        return fn()
    except Exception as exc:
        return exc


def play(url: str, seed: str, max_turns: int = 12) -> Played:
    """One episode, binary search on the hi-lo game, as the engine would run it."""
    out = Played(seed)
    env = OpenEnvEnv(url=url, observation_field="text", slot_timeout=60, retries=2)
    try:
        first = env.reset(seed)  # no deadline of the engine: the wait for a slot is its own
        out.slot_wait = env.slot_wait_seconds
        high = int(first.split()[-1].rstrip("."))
        low = 1
        for _ in range(max_turns):
            guess = (low + high) // 2
            finished, reply = call_with_deadline(lambda g=guess: env.step(str(g)), STEP_TIMEOUT)
            if not finished:
                start = time.monotonic()
                env.close()  # from this thread, while the step is stuck on the other
                out.close_seconds = time.monotonic() - start
                out.status = "timeout"
                return out
            if isinstance(reply, Exception):
                out.status, out.error = "error", f"{type(reply).__name__}: {reply}"
                return out
            out.replies.append(reply)
            if not env.alive:
                out.status, out.reward = "done", env.reward
                return out
            low, high = (guess + 1, high) if reply == "Go higher." else (low, guess - 1)
        out.status = "max_turns"
        return out
    except Exception as exc:
        out.status, out.error = "error", f"{type(exc).__name__}: {exc}"
        return out
    finally:
        env.close()


def test_more_episodes_than_slots_with_slow_sessions_all_finish(thread_server, caplog) -> None:
    # 4 slots; every third session the server creates takes 4 s per step (past the 2 s step
    # timeout, and its slot stays taken until the server's step returns).
    server = thread_server(max_sessions=4, slow_every=3, slow_seconds=4.0).start()
    seeds = [f"train-{i}" for i in range(15)]
    results: dict[str, Played] = {}

    def run(seed: str) -> None:
        results[seed] = play(server.url, seed)

    caplog.set_level(logging.WARNING, logger="trl_env_openenv")
    threads_before = openenv_threads()
    start = time.monotonic()
    threads = [threading.Thread(target=run, args=(s,)) for s in seeds]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    elapsed = time.monotonic() - start

    played = [results[s] for s in seeds]
    assert not [p.error for p in played if p.status == "error"], "no episode may fail"
    statuses = sorted(p.status for p in played)
    # 15 sessions created, one per episode: the 3rd, 6th, ... 15th are slow.
    assert statuses == ["done"] * 10 + ["timeout"] * 5, statuses
    assert all(
        p.reward == 1.0 and p.replies[-1] == "Correct!" for p in played if p.status == "done"
    )
    # close() during a stuck step returns at once; the session is closed in the background.
    assert max(p.close_seconds for p in played) < 0.5
    assert max(p.slot_wait for p in played) > 0.5, "some episodes must have waited for a slot"
    reasons = [r.getMessage() for r in caplog.records if "in the background" in r.getMessage()]
    assert len(reasons) == 5 and all("step 1 was still running" in r for r in reasons)
    assert elapsed < 60

    # No client thread is left behind: each session's event loop and each background close end.
    deadline = time.monotonic() + 15
    while openenv_threads() != threads_before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert openenv_threads() == threads_before

    # Every slot is free again: four sessions open at once without waiting.
    envs = [OpenEnvEnv(url=server.url, slot_timeout=10) for _ in range(4)]
    try:
        for env in envs:
            env.reset("eval-0")
        assert all(env.slot_wait_seconds < 5 for env in envs)
    finally:
        for env in envs:
            env.close()


def test_close_while_a_step_is_stuck_is_quick_and_ends_the_step(thread_server, caplog) -> None:
    server = thread_server(max_sessions=1).start()
    env = OpenEnvEnv(url=server.url, observation_field="text", timeout=30)
    env.reset("train-0")
    caplog.set_level(logging.WARNING, logger="trl_env_openenv")
    box: list = []
    stepping = threading.Thread(target=lambda: box.append(_attempt(lambda: env.step("sleep 2"))))
    stepping.start()
    time.sleep(0.3)
    start = time.monotonic()
    env.close()
    assert time.monotonic() - start < 0.2
    stepping.join(10)
    # The stuck step ends once the server, done with its 2 s step, answers the close: with
    # ConnectionLostError, never with the late reply of an episode that was ended.
    assert not stepping.is_alive()
    assert isinstance(box[0], ConnectionLostError) and "closed during step 1" in str(box[0])
    assert "step 1 was still running when the episode was closed" in caplog.text
    # The only slot comes back once the server's step returns.
    other = OpenEnvEnv(url=server.url, observation_field="text", slot_timeout=10)
    assert other.reset("train-1").startswith("Guess a number")
    other.close()


def test_an_abandoned_env_gives_its_session_back(thread_server, caplog) -> None:
    server = thread_server(max_sessions=1).start()
    caplog.set_level(logging.WARNING, logger="trl_env_openenv")
    dropped = OpenEnvEnv(url=server.url)
    dropped.reset("train-0")
    del dropped
    gc.collect()
    assert "abandoned episode" in caplog.text
    env = OpenEnvEnv(url=server.url, slot_timeout=10)
    try:
        env.reset("train-1")
        assert env.slot_wait_seconds < 5
    finally:
        env.close()


def test_a_reset_waiting_for_a_slot_ends_when_closed(thread_server) -> None:
    server = thread_server(max_sessions=1).start()
    holder = OpenEnvEnv(url=server.url)
    holder.reset("train-0")
    waiter = OpenEnvEnv(url=server.url, slot_timeout=60)
    box: list = []
    thread = threading.Thread(target=lambda: box.append(_attempt(lambda: waiter.reset("x"))))
    try:
        thread.start()
        time.sleep(0.5)
        start = time.monotonic()
        waiter.close()
        thread.join(5)
        assert not thread.is_alive() and time.monotonic() - start < 2.0
        assert isinstance(box[0], ConnectionLostError | ServerBusyError)
    finally:
        holder.close()


@pytest.mark.parametrize("value", ["-1", "soon"])
def test_slot_timeout_is_checked(value: str) -> None:
    from trl_env_openenv import OpenEnvOptionError

    with pytest.raises(OpenEnvOptionError, match="slot_timeout"):
        OpenEnvEnv(url="http://127.0.0.1:1", slot_timeout=value)  # type: ignore[arg-type]

"""Process isolation as a boundary: no deadlock waiting for workers, nothing a worker sends is
code, workers see a scrubbed environment, run as another user, are recycled, and take every
program their env started with them. Real worker processes, real signals."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
import time
from typing import Any

import boundary_envs as B
import hostile_envs as H
import pytest
from playing import play_tiny

from trl_env.callpool import CallPool, Slots
from trl_env.config import RolloutConfig
from trl_env.errors import EnvCrashed, EnvTimeout, UsageError
from trl_env.hosts.pool import EnvProcessPool

psutil = pytest.importorskip("psutil")
pytestmark = pytest.mark.timeout(180)  # a deadlock fails the test instead of hanging the suite


def play(stack: Any, env: Any, seeds: list[str], **kw: Any):
    return play_tiny(
        stack, env, seeds, "process", **{"max_new_tokens": 2, "step_timeout": 5.0, **kw}
    )


def gone(pid: int, seconds: float = 10.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


# -- 1. no deadlock ------------------------------------------------------------------------------
def test_a_batch_four_times_the_workers_finishes(qwen3, no_leaks):
    """8 episodes on 2 workers: each waits for a worker in the call pool's books, not on one of
    its 2 threads (which used to all block, leaving none to run the steps that free a worker)."""
    episodes = play(qwen3, H.Calm, [f"s{i}" for i in range(8)], env_workers=2)
    assert [ep.status for ep in episodes] == ["done"] * 8, [ep.error for ep in episodes]


def test_calls_waiting_for_slots_never_hold_a_thread():
    """128 episodes, 64 slots and 64 threads, as with the defaults: each opening job waits for
    a slot, holds it until its episode's last call (a later job) gives it back."""
    slots = Slots(64)
    pool = CallPool(workers=64)
    opened: list[int] = []

    def make_open(i: int) -> Any:
        def open_env() -> int:
            opened.append(i)
            return i

        open_env.gate = slots  # type: ignore[attr-defined]
        return open_env

    try:
        for i in range(128):
            pool.submit(make_open(i), None, tag=("open", i))
        done = 0
        end = time.monotonic() + 60
        while done < 128 and time.monotonic() < end:
            for call in pool.wait(1.0):
                kind, i = call.tag
                if kind == "open":  # the episode plays, then its close gives the slot back
                    pool.submit(slots.release, None, tag=("close", i))
                else:
                    done += 1
        assert done == 128 and sorted(opened) == list(range(128))
        assert threading.active_count() < 64 + 10  # never more threads than workers
    finally:
        pool.shutdown()


def test_waiting_calls_are_dropped_when_the_batch_ends_and_their_slots_kept():
    slots = Slots(1)
    assert slots.try_acquire(lambda: None)
    pool = CallPool(workers=2)
    ran: list[str] = []

    def job() -> None:
        ran.append("ran")

    job.gate = slots  # type: ignore[attr-defined]
    pool.submit(job, None)
    pool.shutdown(wait=0.2)
    slots.release()  # the holder leaves after the batch: nobody of the old batch may take it
    time.sleep(0.1)
    assert ran == [] and slots.try_acquire(lambda: None)


# -- 2. a data-only protocol -----------------------------------------------------------------------
def test_a_pickle_sent_by_a_worker_is_never_unpickled(qwen3, tmp_path, no_leaks):
    marker = tmp_path / "pwned"
    episodes = play(qwen3, B.PicklePayload, ["s0", f"bad:{marker}", "s2"], step_timeout=10.0)
    assert [ep.status for ep in episodes] == ["done", "error", "done"]
    assert "not JSON" in episodes[1].error and "killed" in episodes[1].error
    time.sleep(0.5)
    assert not marker.exists()
    # The control: the same bytes, unpickled, do run the command.
    import pickle

    pickle.loads(pickle.dumps(B._Payload(str(marker))))
    assert marker.exists()


def test_a_reply_over_the_size_cap_kills_the_worker(monkeypatch, no_leaks):
    import trl_env.hosts.frames as frames

    monkeypatch.setattr(frames, "MAX_REPLY_BYTES", 10_000)
    with EnvProcessPool(H.HugeReply, max_workers=1) as pool:
        remote = pool.open(timeout=10.0)
        remote.reset("bad-big")
        with pytest.raises(EnvCrashed, match="over the limit of 10000"):
            remote.step("x")
        remote.release()


def test_replies_are_plain_data(no_leaks):
    """numpy scalars arrive as Python values; str subclasses as str; objects not at all."""
    with EnvProcessPool(H.Calm, max_workers=1) as pool:
        remote = pool.open(timeout=10.0)
        assert type(remote.reset("s")) is str and remote.alive is True
        assert type(remote.reward) is float
        remote.release()


# -- 3. what a worker sees and leaves behind ----------------------------------------------------
def test_workers_do_not_see_the_trainers_secrets_unless_passed(monkeypatch, no_leaks):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    # trl-env's own variables pass by name, not by prefix: the fleet's token is one of them
    monkeypatch.setenv("TRL_ENV_SERVE_TOKEN", "fleet_secret_value")
    monkeypatch.setenv("TRL_ENV_NEXT_SECRET", "next_secret_value")
    monkeypatch.setenv("TRL_ENV_CACHE", "/tmp/trl-env-cache")
    monkeypatch.setenv("LANG", "C.UTF-8")
    with EnvProcessPool(B.Shows, max_workers=1) as pool:
        remote = pool.open(timeout=10.0)
        for secret in ("HF_TOKEN", "TRL_ENV_SERVE_TOKEN", "TRL_ENV_NEXT_SECRET"):
            assert remote.reset(f"env:{secret}") == "<unset>", secret
        assert remote.reset("env:LANG") == "C.UTF-8"  # the allow-list still passes
        assert remote.reset("env:TRL_ENV_CACHE") == "/tmp/trl-env-cache"
        remote.release()
    cfg = RolloutConfig(env_pass_env="HF_TOKEN,TRL_ENV_SERVE_TOKEN")
    with EnvProcessPool.for_config(B.Shows, cfg) as pool:
        remote = pool.open(timeout=10.0)
        assert remote.reset("env:HF_TOKEN") == "hf_secret_value"
        assert remote.reset("env:TRL_ENV_SERVE_TOKEN") == "fleet_secret_value"
        remote.release()


def test_a_batch_keeps_the_secret_from_the_env(qwen3, monkeypatch, no_leaks):
    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    episodes = play(qwen3, B.Shows, ["env:HF_TOKEN"])
    assert episodes[0].status == "done"
    assert "hf_secret_value" not in episodes[0].text and "<unset>" in episodes[0].text


@pytest.mark.skipif(os.geteuid() != 0, reason="starting workers as another user needs root")
def test_workers_run_as_another_user_when_asked(no_leaks):
    try:
        reachable = subprocess.run([sys.executable, "-c", "pass"], user=65534).returncode == 0
    except PermissionError:  # this interpreter is not readable by nobody (pyenv under /root)
        reachable = False
    with EnvProcessPool(B.Shows, max_workers=1, user="nobody") as pool:
        if not reachable:
            with pytest.raises(EnvCrashed, match="could not start as uid 65534"):
                pool.open(timeout=10.0)
            return
        remote = pool.open(timeout=10.0)
        assert remote.reset("uid") == "65534"
        remote.release()


def test_an_unknown_user_is_refused_in_one_sentence():
    with pytest.raises(UsageError, match="is not a user of this machine") as info:
        EnvProcessPool(H.Calm, user="no-such-user-here")
    assert "\n" not in str(info.value)


def test_workers_are_recycled_after_max_episodes(no_leaks):
    with EnvProcessPool(B.Shows, max_workers=1, max_episodes=2) as pool:
        pids = []
        for _ in range(5):
            remote = pool.open(timeout=10.0)
            pids.append(remote.reset("pid"))
            remote.release()
        assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4]
        assert pool.workers_started == 3 and pool.workers_recycled == 2


def test_recycling_from_the_config_in_a_batch(qwen3, no_leaks):
    episodes = play(qwen3, B.Shows, ["pid"] * 6, env_workers=1, env_max_episodes=2)
    pids = [ep.messages[1]["content"] for ep in episodes]
    assert len(set(pids)) == 3, pids


def started(folder: Any) -> tuple[int, int]:
    end = time.monotonic() + 10
    while not (folder / "pids").exists() and time.monotonic() < end:
        time.sleep(0.02)
    plain, detached = (int(p) for p in (folder / "pids").read_text().split())
    return plain, detached


@pytest.mark.parametrize("how", ["drop", "timeout", "close"])
def test_programs_an_env_started_die_with_it_setsid_or_not(tmp_path, how, no_leaks):
    pool = EnvProcessPool(B.Spawner, max_workers=1)
    try:
        remote = pool.open(timeout=10.0)
        remote.reset(("hang:" if how == "timeout" else "ok:") + str(tmp_path))
        plain, detached = started(tmp_path)
        assert psutil.Process(detached).ppid() != 1  # still in the worker's tree
        if how == "drop":
            remote.release()  # the episode is over: the worker stays for the next one
            assert pool.live_workers == 1
        elif how == "timeout":
            with pytest.raises(EnvTimeout):
                remote.call("step", "x", timeout=0.5)
            remote.release()
        else:
            pool.close()
        assert gone(plain) and gone(detached)
    finally:
        pool.close()


def test_reset_timeout_is_honoured_in_a_worker_and_capped(qwen3, no_leaks):
    """Declared 3 s: a 1.5 s reset passes a 0.5 s step timeout. Declared inf: capped at ten step
    timeouts, so a reset that never ends times out instead of holding the batch."""
    seeds = ["slow-1.5"]
    ok = play(qwen3, functools.partial(B.SlowReset, 3.0), seeds, step_timeout=0.5)
    assert ok[0].status == "done", ok[0].error
    short = play(qwen3, functools.partial(B.SlowReset, 0.0), seeds, step_timeout=0.5)
    assert short[0].status == "timeout"
    start = time.monotonic()
    capped = play(
        qwen3, functools.partial(B.SlowReset, float("inf")), ["slow-60"], step_timeout=0.3
    )
    assert capped[0].status == "timeout" and time.monotonic() - start < 30

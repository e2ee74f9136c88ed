"""EnvProcessPool and RemoteEnv with real worker processes, real signals and real hangs."""

from __future__ import annotations

import functools
import os
import threading
import time

import hostile_envs as H
import pytest
from playing import parent_of_a_busy_worker

from trl_env.errors import (
    EnvCrashed,
    EnvMisbehaved,
    EnvRaised,
    EnvTimeout,
    IsolationError,
    UsageError,
)
from trl_env.hosts.pool import EnvProcessPool

psutil = pytest.importorskip("psutil")  # a dependency of trl; reads children and pids


def play_step(pool: EnvProcessPool, seed: str, timeout: float = 5.0) -> str:
    remote = pool.open(timeout=5.0)
    try:
        assert remote.call("reset", seed, timeout=5.0).startswith(f"Game {seed}")
        return remote.call("step", "word", timeout=timeout)
    finally:
        remote.release()


def workers_of(pool: EnvProcessPool) -> list[psutil.Process]:
    """The pool's own worker processes (not other children this test process may still have,
    such as those of an earlier test being reaped)."""
    return [psutil.Process(w.proc.pid) for w in list(pool._live)]


def worker_pids(pool_owner: psutil.Process) -> set[int]:
    return {p.pid for p in pool_owner.children()}


def test_an_env_lives_in_another_process_and_answers_every_kind_of_call(no_leaks):
    with EnvProcessPool(H.Calm) as pool:
        remote = pool.open(timeout=5.0)
        assert remote.call("reset", "s1", timeout=5.0) == "Game s1: the board is empty. Say a word."
        assert remote.call("step", "hi", timeout=5.0) == "Turn 1 of s1: you wrote 2 characters."
        assert remote.call("alive", timeout=5.0) is True
        assert remote.call("reward", timeout=5.0) == 0.5
        assert remote.call("system_prompt", timeout=5.0) == H.Calm.system_prompt
        assert remote.call("max_turns", timeout=5.0) is None  # absent: read as None
        assert remote.call("close", timeout=5.0) is None
        (worker,) = workers_of(pool)
        assert worker.pid != os.getpid()
        remote.release()


def test_workers_are_reused_across_episodes_and_stay_bounded(no_leaks):
    with EnvProcessPool(H.Calm, max_workers=2) as pool:
        for round_ in range(5):
            remotes = [pool.open(timeout=5.0) for _ in range(2)]
            for i, remote in enumerate(remotes):
                assert remote.call("reset", f"r{round_}-{i}", timeout=5.0)
            for remote in remotes:
                remote.release()
        assert pool.workers_started == 2 and pool.live_workers == 2
        held = [pool.open(timeout=5.0) for _ in range(2)]
        later = threading.Timer(0.3, held[0].release)
        later.start()
        start = time.monotonic()
        third = pool.open(timeout=0.1)  # waits for a worker; the wait is not the factory's time
        assert time.monotonic() - start >= 0.25 and pool.live_workers == 2
        later.join()
        for remote in (held[1], third):
            remote.release()


def test_registered_names_and_partials_are_built_in_the_worker(no_leaks):
    with EnvProcessPool("guess") as pool:
        remote = pool.open(timeout=10.0)
        assert isinstance(remote.call("reset", "train-1", timeout=5.0), str)
        remote.release()
    with EnvProcessPool(functools.partial(H.Calm, turns=1)) as pool:
        remote = pool.open(timeout=5.0)
        remote.call("reset", "p", timeout=5.0)
        remote.call("step", "a", timeout=5.0)
        assert remote.call("alive", timeout=5.0) is False
        assert remote.call("reward", timeout=5.0) == 1.0
        remote.release()


def test_an_unpicklable_factory_is_refused_in_one_sentence():
    with pytest.raises(UsageError) as info:
        EnvProcessPool(lambda: H.Calm())
    message = str(info.value)
    assert "cannot be sent to a worker process" in message and "top level" in message
    assert message.count(". ") == 0 and "\n" not in message


@pytest.mark.parametrize(
    ("env", "error", "words"),
    [
        (H.Segfault, EnvCrashed, "killed by SIGSEGV"),
        (H.Exits, EnvCrashed, "exited with code 3"),
        (H.Killed, EnvCrashed, "killed by SIGKILL"),
        (H.Busy, EnvTimeout, "no reply within 0.3s"),
        (H.SleepInC, EnvTimeout, "no reply within 0.3s"),
    ],
)
def test_a_dying_or_stuck_env_costs_its_worker_and_the_next_episode_gets_a_fresh_one(
    no_leaks, env, error, words
):
    with EnvProcessPool(env, max_workers=1) as pool:
        assert play_step(pool, "good-1") == "Turn 1 of good-1: you wrote 4 characters."
        (first,) = workers_of(pool)
        start = time.monotonic()
        with pytest.raises(error, match=words):
            play_step(pool, "bad-2", timeout=0.3)
        assert time.monotonic() - start < 3.0
        assert not psutil.pid_exists(first.pid)  # killed and reaped, not a zombie
        assert play_step(pool, "good-3") == "Turn 1 of good-3: you wrote 4 characters."
        (second,) = workers_of(pool)
        assert second.pid != first.pid and pool.workers_started == 2


def test_env_exceptions_come_back_as_env_raised_and_unsendable_values_as_misbehaviour(no_leaks):
    with EnvProcessPool(H.Unsendable) as pool:
        with pytest.raises(EnvMisbehaved) as info:
            play_step(pool, "bad-1")
        assert "step returned lock, not str or other plain data" in str(info.value)
        assert play_step(pool, "ok") == "Turn 1 of ok: you wrote 4 characters."  # same worker
        assert pool.workers_started == 1
    with EnvProcessPool(H.StepRaises) as pool:
        with pytest.raises(EnvRaised) as info:
            play_step(pool, "bad-1")
        assert (info.value.type_name, info.value.message) == ("ValueError", "step exploded")
        assert "hostile_envs.py" in info.value.where


@pytest.mark.parametrize("factory", [H.none_once, H.not_an_env_once])
def test_a_factory_that_returns_no_env_is_named(tmp_path, factory):
    with EnvProcessPool(functools.partial(factory, str(tmp_path / "token"))) as pool:
        with pytest.raises(EnvRaised, match=f"partial\\({factory.__name__}\\) returned"):
            pool.open(timeout=5.0)
        remote = pool.open(timeout=5.0)  # the token is spent: a real env now
        assert remote.call("reset", "x", timeout=5.0)
        remote.release()


def test_a_huge_reply_crosses_whole(no_leaks):
    with EnvProcessPool(H.HugeReply) as pool:
        reply = play_step(pool, "bad-big", timeout=30.0)
    assert len(reply) > 50 * 1024 * 1024


def test_env_output_does_not_reach_the_parents_terminal(capfd, no_leaks):
    with EnvProcessPool(H.Printer) as pool:
        play_step(pool, "bad-loud")
    out, err = capfd.readouterr()
    assert len(out) + len(err) < 1000


def test_env_threads_die_with_their_worker(no_leaks):
    with EnvProcessPool(H.ThreadSpawner) as pool:
        remote = pool.open(timeout=5.0)
        remote.call("reset", "t", timeout=5.0)
        (worker,) = workers_of(pool)
        assert worker.num_threads() >= 4  # main, parent watcher, three helpers
        remote.release()  # close() never called: the helpers are still waiting


def test_close_stops_busy_workers_and_leaves_nothing_behind(no_leaks):
    pool = EnvProcessPool(H.SleepInC)
    remotes = [pool.open(timeout=5.0) for _ in range(3)]
    for remote in remotes:
        remote.call("reset", "bad-stuck", timeout=5.0)
    pids = [p.pid for p in workers_of(pool)]
    assert len(pids) == 3
    start = time.monotonic()
    pool.close()
    assert time.monotonic() - start < 5.0
    assert not any(psutil.pid_exists(pid) for pid in pids)  # reaped: not even zombies
    with pytest.raises(IsolationError):
        remotes[0].call("step", "late", timeout=1.0)
    with pytest.raises(EnvCrashed, match="closed"):
        pool.open(timeout=1.0)


def test_a_worker_exits_when_its_parent_dies(tmp_path):
    parent, worker = parent_of_a_busy_worker(tmp_path, H, "SleepInC", "bad")
    parent.kill()
    parent.wait()
    end = time.monotonic() + 5.0
    while psutil.pid_exists(worker) and time.monotonic() < end:
        time.sleep(0.05)
    assert not psutil.pid_exists(worker)


def test_a_timeout_also_stops_the_programs_the_env_started(tmp_path, no_leaks):
    with EnvProcessPool(H.SpawnsAndHangs) as pool:
        remote = pool.open(timeout=5.0)
        remote.call("reset", f"bad:{tmp_path}", timeout=5.0)
        with pytest.raises(EnvTimeout):
            remote.call("step", "x", timeout=1.0)
        remote.release()
    grandchild = int((tmp_path / "pid").read_text())
    end = time.monotonic() + 5.0
    while psutil.pid_exists(grandchild) and time.monotonic() < end:
        time.sleep(0.05)
    assert not psutil.pid_exists(grandchild)


def test_a_worker_that_dies_while_idle_is_replaced_before_the_next_episode(no_leaks):
    with EnvProcessPool(H.ExitsLater, max_workers=1) as pool:
        remote = pool.open(timeout=5.0)
        remote.call("reset", "a", timeout=5.0)
        remote.call("close", timeout=5.0)
        remote.release()
        (first,) = workers_of(pool)
        end = time.monotonic() + 5.0  # the env ends the idle worker (a zombie: ours to reap)
        while first.status() != psutil.STATUS_ZOMBIE and time.monotonic() < end:
            time.sleep(0.02)
        assert play_step(pool, "b") == "Turn 1 of b: you wrote 4 characters."
        assert pool.workers_started == 2

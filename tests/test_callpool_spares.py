"""The call pool's workers outlive their batch as spares: the next batch's pool takes them instead
of starting threads, and they exit once no batch has wanted them for a while."""

from __future__ import annotations

import multiprocessing
import threading
import time

import pytest

from trl_env import callpool
from trl_env.callpool import CallPool, call_all
from trl_env.testing.timeouts import scaled


def _alive(idents: set[int]) -> set[int]:
    return idents & {t.ident for t in threading.enumerate()}


def _named(idents: set[int]) -> set[str]:
    return {t.name for t in threading.enumerate() if t.ident in idents}


def _batch(workers: int) -> tuple[set[int], set[str]]:
    """One pool whose ``workers`` calls must all run at once; the threads that ran them and
    their names while they did."""
    barrier = threading.Barrier(workers, timeout=scaled(10))

    def call() -> tuple[int, str]:
        barrier.wait()
        return threading.get_ident(), threading.current_thread().name

    ran = [o.value for o in call_all([call] * workers, timeout=scaled(10))]
    assert all(ran), "a call did not run"
    return {ident for ident, _ in ran}, {name for _, name in ran}


def test_the_next_batch_runs_on_the_last_batch_s_threads():
    first, names = _batch(4)
    assert names == {"trl-env-call"}
    end = time.monotonic() + scaled(5)
    while _named(first) != {"trl-env-spare"} and time.monotonic() < end:
        time.sleep(0.01)
    assert _named(first) == {"trl-env-spare"}  # waiting for a pool, not exited
    before = threading.active_count()
    second, names = _batch(4)
    assert second == first and names == {"trl-env-call"}
    assert threading.active_count() <= before


def test_spares_exit_once_no_batch_wants_them(monkeypatch):
    monkeypatch.setattr(callpool, "SPARE_LINGER", 0.2)
    used, _ = _batch(3)
    end = time.monotonic() + scaled(10)
    while _alive(used) and time.monotonic() < end:
        time.sleep(0.05)
    assert not _alive(used)


def test_a_worker_abandoned_past_its_deadline_is_not_kept():
    pool = CallPool(workers=1)
    hung = pool.submit(lambda: (time.sleep(0.5), threading.get_ident())[1], timeout=0.05)
    while hung.outcome is None:
        pool.wait(0.1)
    assert hung.outcome.timed_out
    pool.shutdown()
    ident = hung.worker.ident if hung.worker is not None else None
    assert ident is not None
    end = time.monotonic() + scaled(10)
    while _alive({ident}) and time.monotonic() < end:
        time.sleep(0.05)
    assert not _alive({ident})  # its call returned late and it exited, not parked
    assert all(s.thread.ident != ident for s in callpool._spares)


def _child_batch(out: multiprocessing.Queue) -> None:
    outcomes = call_all([lambda: 1, lambda: 2], timeout=5)
    out.put([o.value for o in outcomes])


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork")
def test_a_forked_child_starts_its_own_workers():
    _batch(2)  # spares exist in this process when it forks
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_child_batch, args=(out,))
    child.start()
    child.join(timeout=scaled(20))
    if child.is_alive():
        child.kill()
    assert child.exitcode == 0
    assert out.get(timeout=1) == [1, 2]  # not handed to the parent's spares, which it lacks

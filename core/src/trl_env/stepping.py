"""``CallPool``: env calls on a bounded set of worker threads, each with a deadline.

A call past its deadline is abandoned: its caller gets a timed-out :class:`Outcome` at once, the
worker is counted as hung and a fresh one takes its place, so one stuck env never holds up the
others. Pure-Python code that ignores its deadline (a tight loop holding the GIL) gets an
asynchronous exception in its thread, which stops it at its next bytecode; code blocked in C
(a socket, ``time.sleep``) cannot be stopped from another thread and stays hung until it returns
(use ``env_isolation="process"`` for that). Past ``max_hung`` hung workers the pool refuses new
calls with :class:`PoolExhausted` instead of piling up threads.

The pool lives for one batch: ``shutdown`` lets every worker that is not hung finish and exit,
so threads return to their baseline when a batch ends.
"""

from __future__ import annotations

import ctypes
import heapq
import itertools
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import TrlEnvError

_POLL = 0.05  # seconds between looks for deadlines of calls that just started


class PoolExhausted(TrlEnvError):
    """Too many env calls are stuck past their timeout for the run to go on."""


class _Abandoned(BaseException):
    """Raised asynchronously in a worker whose call ran past its deadline."""


@dataclass
class Outcome:
    """What one call did: its value, or the exception it raised, or that it timed out."""

    value: Any = None
    error: BaseException | None = None
    timed_out: bool = False
    seconds: float = 0.0


@dataclass(eq=False)
class Call:
    """One submitted call; ``tag`` is the caller's (the engine puts the episode there)."""

    fn: Callable[[], Any]
    timeout: float | None
    tag: Any = None
    outcome: Outcome | None = None  # set once, by the worker or by the timeout
    started: float = 0.0
    worker: threading.Thread | None = None
    done: threading.Event = field(default_factory=threading.Event)


class CallPool:
    """Run calls on at most ``workers`` threads; finished calls arrive on :meth:`wait`."""

    def __init__(self, workers: int = 64, max_hung: int = 256) -> None:
        self.workers, self.max_hung = workers, max_hung
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[Call | None] = queue.SimpleQueue()
        self._finished: queue.SimpleQueue[Call] = queue.SimpleQueue()
        self._threads: set[threading.Thread] = set()  # alive and not hung
        self._idle = 0  # workers waiting for a job
        self._queued = 0  # jobs no worker has taken yet
        self._running: dict[threading.Thread, Call] = {}
        self._deadlines: list[tuple[float, int, Call]] = []
        self._order = itertools.count()
        self.hung = 0  # workers abandoned past a deadline, over the pool's life
        self.pending = 0  # submitted calls whose outcome has not been taken by wait()

    # -- submitting -----------------------------------------------------------------------
    def submit(self, fn: Callable[[], Any], timeout: float | None, tag: Any = None) -> Call:
        if self.hung > self.max_hung:
            raise PoolExhausted(
                f"{self.hung} env calls are stuck past their timeout, more than the "
                f"{self.max_hung} allowed (max_hung_workers); the envs hang in code a thread "
                "cannot interrupt: use env_isolation='process'."
            )
        call = Call(fn, timeout, tag)
        with self._lock:
            self.pending += 1
            self._queued += 1
            if self._queued > self._idle and len(self._threads) < self.workers:
                self._start_worker()
        self._jobs.put(call)
        return call

    def _start_worker(self) -> None:
        thread = threading.Thread(target=self._serve, name="trl-env-call", daemon=True)
        self._threads.add(thread)
        thread.start()

    # -- collecting -----------------------------------------------------------------------
    def wait(self, timeout: float | None) -> list[Call]:
        """Calls that finished or timed out, waiting up to ``timeout`` s for the first one."""
        end = None if timeout is None else time.monotonic() + timeout
        out: list[Call] = []
        while True:
            out += self._expire()
            try:
                while True:
                    out.append(self._finished.get_nowait())
            except queue.Empty:
                pass
            now = time.monotonic()
            if out or self.pending == 0 or (end is not None and now >= end):
                break
            # A call not started yet has no deadline: look again soon rather than block forever.
            wakes = [t for t in (self._next_deadline(), end, now + _POLL) if t is not None]
            try:
                out.append(
                    self._finished.get(timeout=max(0.0, min(wakes) - now) if wakes else None)
                )
            except queue.Empty:
                pass
        self.pending -= len(out)
        return out

    def _next_deadline(self) -> float | None:
        with self._lock:
            while self._deadlines and self._deadlines[0][2].outcome is not None:
                heapq.heappop(self._deadlines)
            return self._deadlines[0][0] if self._deadlines else None

    def _expire(self) -> list[Call]:
        """Abandon running calls past their deadline; their workers count as hung."""
        now = time.monotonic()
        expired = []
        with self._lock:
            while self._deadlines and self._deadlines[0][0] <= now:
                _, _, call = heapq.heappop(self._deadlines)
                if call.outcome is not None:
                    continue
                call.outcome = Outcome(timed_out=True, seconds=now - call.started)
                expired.append(call)
                worker = call.worker
                if worker is not None and worker in self._threads:
                    self._threads.discard(worker)
                    self.hung += 1
                    _interrupt(worker)
                    if self._queued > self._idle:  # someone must take the queued jobs
                        self._start_worker()
        return expired

    # -- the workers ----------------------------------------------------------------------
    def _serve(self) -> None:
        me = threading.current_thread()
        while True:
            try:
                with self._lock:
                    self._idle += 1
                call = self._jobs.get()
                with self._lock:
                    self._idle -= 1
                    if call is not None:
                        self._queued -= 1
                if call is None:
                    return
                self._run(me, call)
                with self._lock:
                    if me not in self._threads:  # hung and replaced: make way
                        return
            except _Abandoned:  # arrived just after its call finished: nothing left to stop
                with self._lock:
                    if me not in self._threads:
                        return

    def _run(self, me: threading.Thread, call: Call) -> None:
        start = time.monotonic()
        with self._lock:
            call.started, call.worker = start, me
            self._running[me] = call
            if call.timeout is not None:
                entry = (start + call.timeout, next(self._order), call)
                heapq.heappush(self._deadlines, entry)
        outcome = Outcome()
        try:
            outcome.value = call.fn()
        except _Abandoned:
            pass
        except BaseException as exc:  # reported per episode, never raised into the batch
            outcome.error = exc
        outcome.seconds = time.monotonic() - start
        with self._lock:
            self._running.pop(me, None)
            if call.outcome is not None:  # timed out meanwhile; the waiter already has it
                return
            call.outcome = outcome
        call.done.set()
        self._finished.put(call)

    def shutdown(self, wait: float | None = None) -> None:
        """Let workers exit once the queue is empty; wait up to ``wait`` s for calls left.

        Hung workers are not waited for: each exits when its call returns.
        """
        if wait:
            end = time.monotonic() + wait
            while self.pending and time.monotonic() < end:
                self.wait(max(0.0, end - time.monotonic()))
        with self._lock:
            threads = list(self._threads)
        for _ in threads:
            self._jobs.put(None)
        end = time.monotonic() + 1.0  # one second for all: a busy worker exits after its call
        for thread in threads:
            thread.join(timeout=max(0.0, end - time.monotonic()))

    def __enter__(self) -> CallPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _interrupt(thread: threading.Thread) -> None:
    """Raise :class:`_Abandoned` in ``thread`` at its next bytecode (C calls finish first)."""
    if thread.ident is not None:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(thread.ident), ctypes.py_object(_Abandoned)
        )


def call_all(calls: list[Callable[[], Any]], timeout: float | None) -> list[Outcome]:
    """Run ``calls`` at once and wait for all (at most ``timeout`` s each); one outcome each."""
    pool = CallPool(workers=max(1, len(calls)))
    try:
        submitted = [pool.submit(fn, timeout, tag=i) for i, fn in enumerate(calls)]
        while pool.pending:
            pool.wait(None)
        return [c.outcome or Outcome(timed_out=True) for c in submitted]
    finally:
        pool.shutdown()

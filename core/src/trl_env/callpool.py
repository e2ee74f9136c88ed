"""``CallPool``: env calls on a bounded set of worker threads, each with a deadline.

A call past its deadline is abandoned: its caller gets a timed-out :class:`Outcome` at once, the
worker is counted as hung and a fresh one takes its place, so one stuck env never holds up the
others. Pure-Python code that ignores its deadline (a tight loop holding the GIL) gets an
asynchronous exception in its thread, which stops it at its next bytecode; code blocked in C
(a socket, ``time.sleep``) cannot be stopped from another thread and stays hung until it returns
(use ``env_isolation="process"`` for that). Past ``max_hung`` hung workers in one pool, or
``max_hung`` threads of the whole process still stuck (they outlive the batch that hung them),
the pool refuses new calls with :class:`PoolExhausted` instead of piling up threads.

A job that needs a scarce resource before it can start (an env worker process) declares it as
``job.gate``, a :class:`Slots`: the call waits in the pool's books, not on a thread, until a
slot is free, and then runs holding that slot (the job gives it back). So no thread ever blocks
waiting for a slot that only another queued call could free.

The pool lives for one batch: ``shutdown`` lets every worker that is not hung finish its call
and leave. A worker that left waits as a spare for the next batch's pool (a training step later)
for up to ``SPARE_LINGER`` seconds, then exits, so threads return to their baseline once batches
stop: starting a thread per env a batch cost the tiny model's rollout several percent.
"""

from __future__ import annotations

import ctypes
import heapq
import itertools
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from .errors import TrlEnvError

_POLL = 0.05  # seconds between looks for deadlines of calls that just started
_WORKER, _SPARE = "trl-env-call", "trl-env-spare"  # thread names: serving a pool, waiting for one
SPARE_LINGER = 60.0  # seconds a spare waits for a pool before it exits
MAX_SPARES = 64  # the default env_workers: a wider pool starts the rest


class PoolExhausted(TrlEnvError):
    """Too many env calls are stuck past their timeout for the run to go on."""


class _Abandoned(BaseException):
    """Raised asynchronously in a worker whose call ran past its deadline."""


# Threads of this process abandoned in a call that has not returned yet, all pools together: a
# thread blocked in C outlives its batch, so a per-batch count would let a long run leak them.
_stuck_lock = threading.Lock()
_stuck = 0


def stuck_threads() -> int:
    """Threads of this process still running a call abandoned past its deadline."""
    return _stuck


def _count_stuck(delta: int) -> None:
    global _stuck
    with _stuck_lock:
        _stuck += delta


class Slots:
    """A counting semaphore whose waiters may be callbacks instead of blocked threads.

    :meth:`try_acquire` either takes a slot or parks ``on_free``, which is called (from the
    thread of whoever releases) once a slot has been handed to it. :meth:`acquire` blocks, for
    callers with no scheduler (a person playing, a test).
    """

    def __init__(self, count: int) -> None:
        self._free = count
        self._parked: deque[Callable[[], None]] = deque()
        self._cond = threading.Condition()

    def try_acquire(self, on_free: Callable[[], None]) -> bool:
        with self._cond:
            if self._free > 0 and not self._parked:
                self._free -= 1
                return True
            self._parked.append(on_free)
            return False

    def acquire(self) -> None:
        with self._cond:
            while self._free <= 0:
                self._cond.wait()
            self._free -= 1

    def release(self) -> None:
        with self._cond:
            if not self._parked:
                self._free += 1
                self._cond.notify()
                return
            wake = self._parked.popleft()
        wake()  # the slot passes to it

    def cancel(self, on_free: Callable[[], None]) -> bool:
        """Forget a parked waiter; False if it was already handed a slot."""
        with self._cond:
            try:
                self._parked.remove(on_free)
            except ValueError:
                return False
            return True


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


class CallPool:
    """Run calls on at most ``workers`` threads; finished calls arrive on :meth:`wait`."""

    def __init__(self, workers: int = 64, max_hung: int = 256) -> None:
        self.workers, self.max_hung = workers, max_hung
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[Call | None] = queue.SimpleQueue()
        self._finished: queue.SimpleQueue[Call] = queue.SimpleQueue()
        self._threads: set[threading.Thread] = set()  # serving this pool and not hung
        self._left = threading.Condition(self._lock)  # a worker left the pool
        self._idle = 0  # workers waiting for a job
        self._queued = 0  # jobs no worker has taken yet
        self._running: dict[threading.Thread, Call] = {}
        self._deadlines: list[tuple[float, int, Call]] = []
        self._order = itertools.count()
        self._parked: dict[Call, tuple[Slots, Callable[[], None]]] = {}  # waiting for a slot
        self._hung_threads: set[threading.Thread] = set()  # abandoned, their call not returned
        self._closed = False
        self.hung = 0  # workers abandoned past a deadline, over the pool's life
        self.pending = 0  # submitted calls whose outcome has not been taken by wait()

    # -- submitting -----------------------------------------------------------------------
    def submit(self, fn: Callable[[], Any], timeout: float | None, tag: Any = None) -> Call:
        """Queue ``fn``; a ``fn.gate`` (:class:`Slots`) must give it a slot before it starts."""
        if self.hung > self.max_hung:
            raise PoolExhausted(
                f"{self.hung} env calls are stuck past their timeout, more than the "
                f"{self.max_hung} allowed (max_hung_workers); the envs hang in code a thread "
                "cannot interrupt: use --env-isolation process."
            )
        if stuck_threads() > self.max_hung:
            raise PoolExhausted(
                f"{stuck_threads()} threads of this process are stuck in env calls that never "
                f"returned (code blocked in C), more than the {self.max_hung} allowed "
                "(max_hung_workers) for the whole run: use --env-isolation process, which can "
                "stop such calls."
            )
        call = Call(fn, timeout, tag)
        gate: Slots | None = getattr(fn, "gate", None)
        with self._lock:
            self.pending += 1
        if gate is not None:
            wake = partial(self._admit, call)
            with self._lock:
                self._parked[call] = (gate, wake)
            if not gate.try_acquire(wake):
                return call  # parked: _admit queues it once a slot is handed over
            with self._lock:
                self._parked.pop(call, None)
        self._enqueue(call)
        return call

    def _admit(self, call: Call) -> None:
        """A parked call was handed its slot (on the releasing thread)."""
        with self._lock:
            entry = self._parked.pop(call, None)
            if self._closed and entry is not None:
                self.pending -= 1
        if self._closed and entry is not None:
            entry[0].release()  # the batch is over: the slot goes to whoever waits next
            return
        self._enqueue(call)

    def _enqueue(self, call: Call) -> None:
        with self._lock:
            self._queued += 1
            if self._queued > self._idle and len(self._threads) < self.workers:
                self._start_worker()
        self._jobs.put(call)

    def watch(self, future: Future[Any], tag: Any) -> Call:
        """A call that runs elsewhere (a backend's own threads): its outcome arrives on
        :meth:`wait` like the pool's own, and it holds none of the pool's workers."""
        call = Call(future.result, None, tag, started=time.monotonic())
        with self._lock:
            self.pending += 1

        def finished(done: Future[Any]) -> None:
            outcome = Outcome(seconds=time.monotonic() - call.started)
            try:
                outcome.value = done.result()
            except BaseException as exc:  # reported to the waiter, as a worker's call would be
                outcome.error = exc
            call.outcome = outcome
            self._finished.put(call)

        future.add_done_callback(finished)
        return call

    def _start_worker(self) -> None:
        spare = _take_spare()
        if spare is not None:
            spare.thread.name = _WORKER
            self._threads.add(spare.thread)
            spare.handoff.put(self)
            return
        thread = threading.Thread(target=_work, args=(self,), name=_WORKER, daemon=True)
        self._threads.add(thread)
        try:
            thread.start()
        except RuntimeError as exc:  # the process cannot start another thread
            self._threads.discard(thread)
            raise PoolExhausted(
                f"no thread could be started for env calls ({exc}); "
                f"{stuck_threads()} are stuck in env calls that never returned: "
                "use --env-isolation process."
            ) from None

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
        with self._lock:
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
                    self._hung_threads.add(worker)
                    _count_stuck(1)
                    self.hung += 1
                    _interrupt(worker)
                    if self._queued > self._idle:  # someone must take the queued jobs
                        self._start_worker()
        return expired

    # -- the workers ----------------------------------------------------------------------
    def _serve(self, me: threading.Thread) -> bool:
        """Run jobs until the pool shuts down; True if ``me`` left free (not hung)."""
        released = False
        try:
            released = self._serve_jobs(me)
        finally:
            with self._lock:
                hung = me in self._hung_threads
                self._hung_threads.discard(me)
                self._threads.discard(me)
                self._left.notify_all()
            if hung:  # its call returned at last (or was interrupted): no longer stuck
                _count_stuck(-1)
        return released and not hung

    def _serve_jobs(self, me: threading.Thread) -> bool:
        """True when the pool shut down, False when ``me`` was abandoned and replaced."""
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
                    return True
                self._run(me, call)
                with self._lock:
                    if me not in self._threads:  # hung and replaced: make way
                        return False
            except _Abandoned:  # arrived just after its call finished: nothing left to stop
                with self._lock:
                    if me not in self._threads:
                        return False

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
        self._finished.put(call)

    def shutdown(self, wait: float | None = None) -> None:
        """Let workers exit once the queue is empty; wait up to ``wait`` s for calls left.

        Hung workers are not waited for: each exits when its call returns. Calls still waiting
        for a slot are dropped.
        """
        with self._lock:
            self._closed = True
            parked = list(self._parked.items())
        for call, (gate, wake) in parked:
            if gate.cancel(wake):  # else it was handed a slot meanwhile: _admit gives it back
                with self._lock:
                    self._parked.pop(call, None)
                    self.pending -= 1
        if wait:
            end = time.monotonic() + wait
            while self.pending and time.monotonic() < end:
                self.wait(max(0.0, end - time.monotonic()))
        with self._lock:
            for _ in self._threads:
                self._jobs.put(None)
            # one second for all: a busy worker leaves after its call
            self._left.wait_for(lambda: not self._threads, timeout=1.0)

    def __enter__(self) -> CallPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


# -- worker threads, kept between batches ------------------------------------------------------
@dataclass(eq=False)
class _Spare:
    """A worker between pools; the next pool arrives on ``handoff`` (``None``: exit)."""

    thread: threading.Thread
    handoff: queue.SimpleQueue[CallPool | None] = field(default_factory=queue.SimpleQueue)


_spare_lock = threading.Lock()
_spares: list[_Spare] = []


def _take_spare() -> _Spare | None:
    with _spare_lock:
        return _spares.pop() if _spares else None


def _forget_spares() -> None:
    """In a forked child the spares' threads do not exist."""
    global _spare_lock
    _spare_lock = threading.Lock()
    _spares.clear()


os.register_at_fork(after_in_child=_forget_spares)


def _work(pool: CallPool | None) -> None:
    """A worker thread's life: serve a pool until it shuts down, then the next one."""
    me = threading.current_thread()
    spare = _Spare(me)
    while pool is not None:
        served, pool = pool._serve(me), None  # a spare holds no pool (nor its calls' values)
        if not served:
            return
        pool = _park(spare)


def _park(spare: _Spare) -> CallPool | None:
    """Wait up to ``SPARE_LINGER`` s for a pool to adopt ``spare``; ``None``: exit."""
    with _spare_lock:
        if len(_spares) >= MAX_SPARES:
            return None
        spare.thread.name = _SPARE
        _spares.append(spare)
    try:
        return spare.handoff.get(timeout=SPARE_LINGER)
    except queue.Empty:
        with _spare_lock:
            if spare in _spares:
                _spares.remove(spare)
                return None
        return spare.handoff.get()  # adopted meanwhile: its pool is on the way


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

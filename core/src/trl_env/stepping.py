"""Run environment calls concurrently, each with a deadline, without ever blocking on a hung env."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any


@dataclass
class Outcome:
    """What one call did: its value, or the exception it raised, or that it timed out."""

    value: Any = None
    error: BaseException | None = None
    timed_out: bool = False
    seconds: float = 0.0


class _Workers:
    """Daemon threads kept for reuse between env calls.

    Every call starts at once in a daemon thread of its own (a hung env blocks neither the batch
    nor interpreter exit; an executor's threads would keep the interpreter from exiting), but
    threads are reused rather than started per call: ``Thread.start`` waits until the new thread
    runs, and on a busy 2-core machine starting 32 took 5-25 ms per turn, up to a quarter of a
    6-turn rollout of the tiny model. A worker serves one call at a time; a call takes an idle
    worker or starts one, so a hung env only ever holds its own worker. Idle workers exit.
    """

    IDLE_SECONDS = 30.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[Callable[[], None]]] = []

    def call_all(self, calls: Sequence[Callable[[], Any]], timeout: float | None) -> list[Outcome]:
        boxes = [Outcome() for _ in calls]
        done = [threading.Event() for _ in calls]
        for call, box, event in zip(calls, boxes, done, strict=True):
            self._submit(partial(_run_into, call, box, event))
        deadline = None if timeout is None else time.monotonic() + timeout
        outcomes = []
        for box, event in zip(boxes, done, strict=True):
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            finished = event.wait(remaining)
            outcomes.append(box if finished else Outcome(timed_out=True, seconds=timeout or 0.0))
        return outcomes

    def _submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(inbox,), daemon=True).start()
        inbox.put(job)

    def _serve(self, inbox: queue.SimpleQueue[Callable[[], None]]) -> None:
        while True:
            try:
                job = inbox.get(timeout=self.IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if any(q is inbox for q in self._idle):  # nobody is handing us a job
                        self._idle = [q for q in self._idle if q is not inbox]
                        return
                continue  # taken off the idle list: a job is on its way
            job()
            with self._lock:
                self._idle.append(inbox)


def _run_into(call: Callable[[], Any], box: Outcome, event: threading.Event) -> None:
    start = time.perf_counter()
    try:
        box.value = call()
    except BaseException as exc:  # reported per episode, never raised into the batch
        box.error = exc
    finally:
        box.seconds = time.perf_counter() - start
        event.set()


_WORKERS = _Workers()
call_all = _WORKERS.call_all
"""``call_all(calls, timeout)``: run ``calls`` at once; wait at most ``timeout`` s for all."""

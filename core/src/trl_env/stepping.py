"""Run environment calls concurrently, each with a deadline, without ever blocking on a hung env."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class Outcome:
    """What one call did: its value, or the exception it raised, or that it timed out."""

    value: Any = None
    error: BaseException | None = None
    timed_out: bool = False
    seconds: float = 0.0


def call_all(calls: Sequence[Callable[[], Any]], timeout: float | None) -> list[Outcome]:
    """Run ``calls`` in parallel daemon threads; wait at most ``timeout`` seconds for all of them.

    Daemon threads, not an executor: a hung environment must neither block the batch nor keep
    the interpreter from exiting.
    """
    boxes = [Outcome() for _ in calls]
    done = [threading.Event() for _ in calls]

    def run(call: Callable[[], Any], box: Outcome, event: threading.Event) -> None:
        start = time.perf_counter()
        try:
            box.value = call()
        except BaseException as exc:  # reported per episode, never raised into the batch
            box.error = exc
        finally:
            box.seconds = time.perf_counter() - start
            event.set()

    for call, box, event in zip(calls, boxes, done, strict=True):
        threading.Thread(target=run, args=(call, box, event), daemon=True).start()
    deadline = None if timeout is None else time.monotonic() + timeout
    outcomes = []
    for box, event in zip(boxes, done, strict=True):
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        finished = event.wait(remaining)
        outcomes.append(box if finished else Outcome(timed_out=True, seconds=timeout or 0.0))
    return outcomes

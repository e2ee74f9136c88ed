"""Calling TextArena code safely from many episodes in one process.

TextArena games draw from the process-wide ``random`` (and ``numpy.random``) streams, seeded by
``random.seed`` in their state's constructor, and some print. trl-env runs episodes on worker
threads, so every call into TextArena goes through :func:`call`: one at a time (a process-wide
lock), with this episode's own random streams swapped in and out (so a game's later draws, a 2048
tile or a Minesweeper field, depend on its seed and moves only, not on other episodes), with the
calling thread's prints dropped (:func:`trl_env.streams.muted`: other threads print as
usual), and with ``nltk.download`` made a local look-up (TextArena calls it at import; it
would reach the network).
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np

from trl_env.streams import muted

T = TypeVar("T")

_LOCK = threading.RLock()


class Streams:
    """One episode's ``random`` and ``numpy.random`` states, kept between calls."""

    def __init__(self) -> None:
        self.python: Any = None
        self.numpy: Any = None

    def seed(self, number: int) -> None:
        """Start both streams from ``number`` (the next :func:`call` uses them)."""
        self.python = random.Random(number).getstate()
        self.numpy = np.random.RandomState(number % 2**32).get_state()

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        saved = random.getstate(), np.random.get_state()
        if self.python is not None:
            random.setstate(self.python)
        if self.numpy is not None:
            np.random.set_state(self.numpy)
        try:
            yield
        finally:
            self.python, self.numpy = random.getstate(), np.random.get_state()
            random.setstate(saved[0])
            np.random.set_state(saved[1])


def _local_download(package: str = "", *args: Any, **kwargs: Any) -> bool:
    """``nltk.download`` offline: True when the package is installed, never a network call."""
    import nltk

    for where in ("corpora", "taggers", "tokenizers"):
        try:
            nltk.data.find(f"{where}/{package}")
            return True
        except LookupError:
            continue
    return False


@contextlib.contextmanager
def _offline_nltk() -> Iterator[None]:
    import nltk  # a dependency of textarena

    saved = nltk.download
    nltk.download = _local_download
    try:
        yield
    finally:
        nltk.download = saved


def call(streams: Streams, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` as described in the module docstring."""
    with _LOCK, muted(), _offline_nltk(), streams.active():
        return fn(*args, **kwargs)

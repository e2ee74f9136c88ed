"""Dropping what library code prints on the thread that calls it.

``sys.stdout`` and ``sys.stderr`` are process-wide, and trl-env runs episodes on worker threads
beside the trainer: ``contextlib.redirect_stdout`` around a call would also swallow whatever
another thread prints meanwhile. :func:`muted` instead puts a filter in front of both streams
while any call is inside it, dropping only the writes of the threads inside.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any, TextIO

_LOCK = threading.Lock()
_MUTED: dict[int, int] = {}  # thread id -> calls of that thread inside muted()
_SAVED: list[TextIO] = []  # the streams the filters replaced, while any are installed


class _ThreadFilter:
    """A stream that drops the writes of muted threads and passes on everything else."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner

    def write(self, text: str) -> int:
        if threading.get_ident() in _MUTED:
            return len(text)
        return self.inner.write(text)

    def flush(self) -> None:
        if threading.get_ident() not in _MUTED:
            self.inner.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@contextlib.contextmanager
def muted() -> Iterator[None]:
    """Drop this thread's prints (stdout and stderr) inside the block."""
    me = threading.get_ident()
    with _LOCK:
        if not _MUTED:
            _SAVED[:] = [sys.stdout, sys.stderr]
            sys.stdout = _ThreadFilter(sys.stdout)
            sys.stderr = _ThreadFilter(sys.stderr)
        _MUTED[me] = _MUTED.get(me, 0) + 1
    try:
        yield
    finally:
        with _LOCK:
            _MUTED[me] -= 1
            if not _MUTED[me]:
                del _MUTED[me]
            if not _MUTED:
                # Put back only what is still ours: a stream someone set meanwhile stays.
                out, err = _SAVED
                if isinstance(sys.stdout, _ThreadFilter) and sys.stdout.inner is out:
                    sys.stdout = out
                if isinstance(sys.stderr, _ThreadFilter) and sys.stderr.inner is err:
                    sys.stderr = err
                _SAVED.clear()

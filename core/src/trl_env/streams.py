"""The trainer's own stdout and stderr, pinned when a command starts.

``sys.stdout`` and ``sys.stderr`` are process-wide: an env run on a thread of the trainer (thread
isolation) that enters ``contextlib.redirect_stdout`` and never leaves it would capture
everything printed after it, a summary or ``--json`` included. Commands pin the streams they
started with (:func:`pin`, before any env code runs) and print results through :func:`out` and
:func:`err`, so what an env does to ``sys.stdout`` cannot take trl-env's output.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any, TextIO

_pinned: tuple[TextIO, TextIO] | None = None


def pin() -> None:
    """Keep the current ``sys.stdout`` and ``sys.stderr`` as the trainer's own."""
    global _pinned
    _pinned = (sys.stdout, sys.stderr)


def out() -> TextIO:
    """The stdout pinned by :func:`pin` (``sys.stdout`` when nothing was pinned)."""
    return _pinned[0] if _pinned is not None else sys.stdout


def err() -> TextIO:
    """The stderr pinned by :func:`pin` (``sys.stderr`` when nothing was pinned)."""
    return _pinned[1] if _pinned is not None else sys.stderr


def progress_bar(label: str, fields: str, *, left: str | None = None, **options: Any) -> Any:
    """A rich ``Progress`` on :func:`out`: ``label``, the bar, done/total, ``fields`` (a column
    reading the task's fields), time spent and time left; ``options`` go to ``Progress``.
    ``left`` names a task field holding the time left, shown instead of rich's own estimate."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn(f"[bold]{label}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(fields),
        TimeElapsedColumn(),
        TextColumn(f"{{task.fields[{left}]}}", style="progress.remaining")
        if left
        else TimeRemainingColumn(),
        console=Console(file=out()),
        **options,
    )


# Muting one thread's prints. ``contextlib.redirect_stdout`` around an env's library call would
# also swallow what other threads (the trainer, other episodes) print meanwhile: :func:`muted`
# puts a filter in front of both streams while any call is inside it, dropping only the writes of
# the threads inside. Env packages wrapping chatty libraries (TextArena, reasoning-gym) use it.

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

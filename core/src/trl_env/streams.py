"""The trainer's own stdout and stderr, pinned when a command starts.

``sys.stdout`` and ``sys.stderr`` are process-wide: an env run on a thread of the trainer (thread
isolation) that enters ``contextlib.redirect_stdout`` and never leaves it would capture
everything printed after it, a summary or ``--json`` included. Commands pin the streams they
started with (:func:`pin`, before any env code runs) and print results through :func:`out` and
:func:`err`, so what an env does to ``sys.stdout`` cannot take trl-env's output.

A stream's reader may go away while a command runs: ``trl-env train ... | tee log`` under
Ctrl-C (the signal reaches ``tee`` too), a closed terminal. The pinned streams then drop what is
written to them instead of raising (a write to a closed pipe raises ``BrokenPipeError`` anywhere
in the process, a checkpoint's save included), and tell those who asked (:func:`on_lost`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, TextIO, cast

_pinned: tuple[TextIO, TextIO] | None = None


def pin() -> None:
    """Keep the current ``sys.stdout`` and ``sys.stderr`` as the trainer's own, each guarded
    against a reader that goes away (:class:`Guarded`, which also takes their place in ``sys``)."""
    global _pinned
    sys.stdout, sys.stderr = guarded(sys.stdout), guarded(sys.stderr)
    _pinned = (sys.stdout, sys.stderr)


def out() -> TextIO:
    """The stdout pinned by :func:`pin` (``sys.stdout`` when nothing was pinned)."""
    return _pinned[0] if _pinned is not None else sys.stdout


def err() -> TextIO:
    """The stderr pinned by :func:`pin` (``sys.stderr`` when nothing was pinned)."""
    return _pinned[1] if _pinned is not None else sys.stderr


# errno values of a write whose reader is gone: a closed pipe, a terminal that hung up
_GONE = frozenset({errno.EPIPE, errno.EIO, errno.ENXIO, errno.ECONNRESET})
_lost_lock = threading.Lock()
_listeners: list[Callable[[str], None]] = []


class Guarded:
    """A stream whose reader may go away: a write to a closed pipe or a hung-up terminal is
    dropped, and so is every later one (its descriptor then points at /dev/null, so that
    what Python flushes at exit, or a library writing to the descriptor, meets no error
    either); :func:`on_lost` listeners hear of it once. Any other error is raised as it was."""

    def __init__(self, inner: TextIO, name: str) -> None:
        self.inner, self.name = inner, name
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return self.inner.write(text)
            except (OSError, ValueError) as exc:
                self._check(exc)
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self.inner.flush()
            except (OSError, ValueError) as exc:
                self._check(exc)

    def _check(self, exc: BaseException) -> None:
        """Drop the stream if ``exc`` says its reader is gone; raise ``exc`` otherwise."""
        closed = isinstance(exc, ValueError)  # written after it was closed
        if not closed and getattr(exc, "errno", None) not in _GONE:
            raise exc
        self.gone = True
        if not closed:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, self.inner.fileno())
                os.close(devnull)
        if _pinned is None or self not in _pinned:
            return  # an earlier command's stream, which a library kept: not this command's news
        with _lost_lock:
            listeners = list(_listeners)
        for listener in listeners:
            listener(self.name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def guarded(stream: TextIO) -> TextIO:
    """``stream`` behind a :class:`Guarded` (once: a guarded stream is returned as it is)."""
    if isinstance(stream, Guarded):
        return stream
    name = "stdout" if stream is sys.stdout else "stderr" if stream is sys.stderr else "stream"
    return cast(TextIO, Guarded(stream, name))


def on_lost(listener: Callable[[str], None]) -> Callable[[], None]:
    """Call ``listener(name)`` when a guarded stream's reader goes away (``name``: "stdout" or
    "stderr"), at once for one already gone; returns what stops the listening."""
    with _lost_lock:
        _listeners.append(listener)
    for stream in _pinned or ():
        if isinstance(stream, Guarded) and stream.gone:
            listener(stream.name)

    def stop() -> None:
        with _lost_lock, contextlib.suppress(ValueError):
            _listeners.remove(listener)

    return stop


def console(file: TextIO | None = None) -> Any:
    """A rich ``Console`` on ``file`` (default :func:`out`): the terminal's width on a terminal,
    elsewhere (a log, a pipe) as wide as what it prints, so that no path in a table is cut."""
    from rich.console import Console

    file = file if file is not None else out()
    return Console(file=file, width=None if _isatty(file) else 100_000)


def _isatty(file: Any) -> bool:
    try:
        return bool(file.isatty())
    except (AttributeError, ValueError, OSError):
        return False


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

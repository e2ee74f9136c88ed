"""The trainer's own stdout and stderr, pinned when a command starts.

``sys.stdout`` and ``sys.stderr`` are process-wide: an env run on a thread of the trainer (thread
isolation) that enters ``contextlib.redirect_stdout`` and never leaves it would capture
everything printed after it, a summary or ``--json`` included. Commands pin the streams they
started with (:func:`pin`, before any env code runs) and print results through :func:`out` and
:func:`err`, so what an env does to ``sys.stdout`` cannot take trl-env's output.
"""

from __future__ import annotations

import sys
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

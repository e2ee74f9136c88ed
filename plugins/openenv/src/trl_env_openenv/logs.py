"""What ``trl-env serve`` logs about a client's requests: one line, now and then, per kind.

A client decides how often a request fails (a refused handshake, a ``POST /step`` with no
episode, a connection cut mid-answer), so a log line per failure, or a traceback of forty, lets
any client fill the server's disk. Each kind of line (its logger, level, message and exception
type) is written at most once every :data:`EVERY` seconds, its traceback cut to one line (the
exception and where it was raised), its text cleaned of terminal control sequences (it may
quote what the client sent) and cut at :data:`MAX_CHARS`; the next one written says how many
were left out meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback

from trl_env.terminal import printable

EVERY = 30.0  # seconds between two lines of one kind
MAX_CHARS = 500  # one line's length at most
# The loggers that speak for requests: the server's own (uvicorn) and the libraries under it.
LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "websockets", "fastapi", "openenv")


class Throttle(logging.Filter):
    """The filter that writes each kind of line once every ``every`` seconds, as one line."""

    def __init__(self, every: float = EVERY) -> None:
        super().__init__()
        self.every = every
        self._last: dict[tuple[object, ...], float] = {}
        self._left_out: dict[tuple[object, ...], int] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "trl_env_throttled", False):  # its logger's filter let it through
            return True
        error = record.exc_info[1] if record.exc_info else None
        kind = (record.name, record.levelno, str(record.msg), type(error).__name__)
        now = time.monotonic()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < self.every:
                self._left_out[kind] = self._left_out.get(kind, 0) + 1
                return False
            self._last[kind] = now
            left_out = self._left_out.pop(kind, 0)
        text = record.getMessage().strip()
        if error is not None:
            text += f": {type(error).__name__}: {error}{_where(error)}"
        text = " ".join(printable(text).split())
        if len(text) > MAX_CHARS:
            text = text[:MAX_CHARS] + " ..."
        if left_out:
            text += f" ({left_out} more like this in the last {self.every:g} s not shown)"
        record.msg, record.args = text, ()
        record.exc_info = record.exc_text = record.stack_info = None
        record.trl_env_throttled = True
        return True


def _where(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    return f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""


def throttle_request_logs(every: float = EVERY) -> Throttle:
    """Put one :class:`Throttle` on the request loggers and on every handler they write to
    (a handler's filter also sees what their children pass up)."""
    throttle = Throttle(every)
    for name in LOGGERS:
        logger = logging.getLogger(name)
        logger.addFilter(throttle)
        for handler in logger.handlers:
            handler.addFilter(throttle)
    handlers = list(logging.getLogger().handlers)
    if logging.lastResort is not None:  # what a logger with no handler writes to
        handlers.append(logging.lastResort)
    for handler in handlers:
        handler.addFilter(throttle)
    return throttle

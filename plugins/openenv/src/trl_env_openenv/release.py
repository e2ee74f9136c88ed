"""Sessions are always given back: closed in the background, and their slot announced.

An OpenEnv server holds a slot for every open WebSocket session. A session left open (an
episode the rollout engine timed out, an env dropped without ``close``) keeps its slot until the
process exits, and later episodes find the server full. So closing never waits on the caller's
thread: :func:`close_in_background` hands the session to a short-lived daemon thread (closing
can take seconds when the server is stuck in a slow step), logs why, and then wakes every
``reset`` waiting for a slot (:func:`wait_for_slot`).
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

log = logging.getLogger("trl_env_openenv")

# Notified whenever a session of this process has been closed: a slot may be free now.
_slot_freed = threading.Condition()


class Closable(Protocol):
    url: str

    def close(self) -> None: ...


def close_in_background(session: Closable, reason: str) -> threading.Thread:
    """Close ``session`` on a daemon thread; ``reason`` is logged (empty: a normal close)."""
    if reason:
        log.warning(
            "Closing the OpenEnv session with %s in the background: %s.", session.url, reason
        )
    thread = threading.Thread(
        target=_close, args=(session, reason), name="trl-env-openenv-close", daemon=True
    )
    thread.start()
    return thread


def _close(session: Closable, reason: str) -> None:
    try:
        session.close()
    except Exception as exc:  # best effort: the server may be gone, and then so is the slot
        log.debug("Closing the OpenEnv session with %s failed: %s", session.url, exc)
    finally:
        slot_freed()


def slot_freed() -> None:
    """Wake every reset waiting for a session slot (and every wait that a close should end)."""
    with _slot_freed:
        _slot_freed.notify_all()


def wait_for_slot(seconds: float) -> None:
    """Sleep up to ``seconds``, returning early when a session of this process is closed.

    Other processes free slots too, unannounced, so callers poll at a bounded interval.
    """
    if seconds > 0:
        with _slot_freed:
            _slot_freed.wait(seconds)

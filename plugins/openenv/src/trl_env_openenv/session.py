"""One WebSocket session with an OpenEnv server: connect with retries, reset, step, close.

The server keeps an environment per WebSocket connection (its HTTP ``/reset`` and ``/step`` make a
fresh environment per request), so one episode is one connection, held by openenv-core's
:class:`~openenv.core.SyncEnvClient` on its own event-loop thread. Calls from the rollout
engine's worker threads therefore never share a loop.
"""

from __future__ import annotations

import threading
import time
from typing import Any, TypeAlias

from .auth import headers
from .client import ServerReply, WireClient
from .diagnose import Failure, connect_failure, exchange_failure
from .errors import ConnectionLostError, ServerBusyError
from .openenv_core import StepResult, SyncEnvClient
from .options import Options
from .release import slot_freed, wait_for_slot

Result: TypeAlias = StepResult[dict[str, Any]]
# Longest pause between two tries at a full server: slots freed by other processes are not
# announced, so they are found by asking again.
SLOT_POLL_SECONDS = 2.0


class ActionRejected(Exception):
    """The server refused the action's shape (a validation error); the session goes on."""


class Session:
    """A reconnecting session: ``reset`` may (re)connect, ``step`` never does.

    :meth:`close` may be called from any thread, also while ``reset`` or ``step`` runs on
    another: that call then fails with :class:`ConnectionLostError` instead of going on.
    """

    def __init__(self, options: Options) -> None:
        self.options = options
        self.url = options.url
        self.attempts = 0  # connection attempts so far, for tests and logs
        self.slot_wait_seconds = 0.0  # time the last reset waited for a free server slot
        self.closed = False
        self._lock = threading.Lock()  # connect and close never interleave
        self._client: SyncEnvClient[dict[str, Any], dict[str, Any], dict[str, Any]] = WireClient(
            headers(options.credentials, options.token),
            base_url=options.url,
            connect_timeout_s=options.connect_timeout,
            message_timeout_s=options.timeout,
            # openenv-core's default is 100 MB; a text agent reads a few kB of each reply, and a
            # large JSON reply costs many times its size once parsed.
            max_message_size_mb=options.max_reply_mb,
            mode="simulation",
        ).sync()
        self._connected = False

    def reset(self, kwargs: dict[str, Any]) -> Result:
        """Start an episode; failures that may pass (down, 5xx) are retried with backoff.

        A full server is not a failure: reset waits for a slot, up to ``slot_timeout`` seconds
        on a budget of its own (:attr:`slot_wait_seconds` says how long it waited).
        """
        self.slot_wait_seconds = 0.0
        failures = busy_tries = 0
        busy_since: float | None = None
        while True:
            self._check_open("reset")
            outcome = self._try_reset(kwargs)
            now = time.monotonic()
            if busy_since is not None:
                self.slot_wait_seconds = now - busy_since
            if isinstance(outcome, StepResult):
                return outcome
            if isinstance(outcome.error, ServerBusyError):
                busy_since = now if busy_since is None else busy_since
                left = self.options.slot_timeout - (now - busy_since)
                if left <= 0:
                    self._raise_busy(outcome)
                # Woken at once when a session of this process closes.
                wait_for_slot(min(left, SLOT_POLL_SECONDS, self.options.delay(busy_tries)))
                busy_tries += 1
                continue
            if not outcome.retryable or failures >= self.options.retries:
                outcome.raise_()
            wait_for_slot(self.options.delay(failures))  # a close() also ends this pause
            failures += 1

    def _raise_busy(self, outcome: Failure) -> None:
        if self.options.slot_timeout > 0:
            outcome = Failure(
                ServerBusyError(
                    f"{outcome.error} No slot came free within slot_timeout "
                    f"({self.options.slot_timeout:g} s)."
                ),
                retryable=False,
                cause=outcome.cause,
            )
        outcome.raise_()

    def _try_reset(self, kwargs: dict[str, Any]) -> Result | Failure:
        if not self._connected:
            with self._lock:
                self._check_open("reset")
                self.attempts += 1
                try:
                    self._client.connect()
                except Exception as exc:  # every connect failure is diagnosed, none escapes raw
                    self._drop()
                    return connect_failure(exc, self.url, self.options.connect_timeout)
                self._connected = True
        try:
            return self._client.reset(**kwargs)
        except Exception as exc:
            self._check_open("reset")
            self._drop()
            return exchange_failure(exc, self.url, "reset", 0, self.options.timeout)

    def _check_open(self, request: str) -> None:
        if self.closed:
            raise ConnectionLostError(
                f"The session with the OpenEnv server at {self.url} was closed during {request} "
                "(the episode was ended, e.g. by the rollout's step timeout)."
            )

    def step(self, action: dict[str, Any], step: int) -> Result:
        """Play ``action`` as step number ``step``; a lost session raises, it is never retried.

        Reconnecting would open a fresh server-side environment, so the episode's state is gone:
        the error ends the episode instead of silently restarting it.
        """
        if not self._connected:
            raise ConnectionLostError(
                f"No open session with the OpenEnv server at {self.url} for step {step}; "
                "the episode was never reset or its connection was already lost."
            )
        try:
            result = self._client.step(action)
            # A reply that arrived while the session was being closed belongs to an episode
            # the caller has already ended.
            self._check_open(f"step {step}")
            return result
        except ConnectionLostError:
            raise
        except ServerReply as reply:
            if reply.code == "VALIDATION_ERROR":
                raise ActionRejected(reply.details()) from None
            failure = exchange_failure(reply, self.url, "step", step, self.options.timeout)
        except Exception as exc:
            self._check_open(f"step {step}")
            failure = exchange_failure(exc, self.url, "step", step, self.options.timeout)
        # The session is in an unknown state (a late reply would answer the next request).
        self._drop()
        failure.raise_()

    def close(self) -> None:
        """Close the connection and stop the client's event-loop thread (any thread may call).

        A ``reset`` or ``step`` running on another thread then fails with
        :class:`ConnectionLostError` once the close handshake ends, which a server stuck in a
        slow step answers when that step returns; the server frees the slot then too.
        """
        self.closed = True
        slot_freed()  # ends a reset's pause between two tries at once
        with self._lock:
            self._connected = False
            try:
                self._client.close()
            except Exception:
                pass  # best effort: the server may already be gone

    def _drop(self) -> None:
        self._connected = False
        try:
            self._client.disconnect()
        except Exception:
            pass  # best effort: the connection is already broken

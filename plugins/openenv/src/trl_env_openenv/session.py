"""One WebSocket session with an OpenEnv server: connect with retries, reset, step, close.

The server keeps an environment per WebSocket connection (its HTTP ``/reset`` and ``/step`` make a
fresh environment per request), so one episode is one connection, held by openenv-core's
:class:`~openenv.core.SyncEnvClient` on its own event-loop thread. Calls from the rollout
engine's worker threads therefore never share a loop.
"""

from __future__ import annotations

import time
from typing import Any, TypeAlias

from openenv.core import SyncEnvClient
from openenv.core.client_types import StepResult

from .client import ServerReply, WireClient
from .diagnose import Failure, connect_failure, exchange_failure
from .errors import ConnectionLostError
from .options import Options

Result: TypeAlias = StepResult[dict[str, Any]]


class ActionRejected(Exception):
    """The server refused the action's shape (a validation error); the session goes on."""


class Session:
    """A reconnecting session: ``reset`` may (re)connect, ``step`` never does."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.url = options.url
        self.attempts = 0  # connection attempts so far, for tests and logs
        self._client: SyncEnvClient[dict[str, Any], dict[str, Any], dict[str, Any]] = WireClient(
            base_url=options.url,
            connect_timeout_s=options.connect_timeout,
            message_timeout_s=options.timeout,
            mode="simulation",
        ).sync()
        self._connected = False

    def reset(self, kwargs: dict[str, Any]) -> Result:
        """Start an episode; failures that may pass (down, busy, 5xx) are retried with backoff."""
        for attempt in range(self.options.retries + 1):
            outcome = self._try_reset(kwargs)
            if isinstance(outcome, StepResult):
                return outcome
            if not outcome.retryable or attempt == self.options.retries:
                outcome.raise_()
            time.sleep(self.options.delay(attempt))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _try_reset(self, kwargs: dict[str, Any]) -> Result | Failure:
        if not self._connected:
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
            self._drop()
            return exchange_failure(exc, self.url, "reset", 0, self.options.timeout)

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
            return self._client.step(action)
        except ServerReply as reply:
            if reply.code == "VALIDATION_ERROR":
                raise ActionRejected(reply.details()) from None
            failure = exchange_failure(reply, self.url, "step", step, self.options.timeout)
        except Exception as exc:
            failure = exchange_failure(exc, self.url, "step", step, self.options.timeout)
        # The session is in an unknown state (a late reply would answer the next request).
        self._drop()
        failure.raise_()

    def close(self) -> None:
        """Close the connection and stop the client's event-loop thread."""
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

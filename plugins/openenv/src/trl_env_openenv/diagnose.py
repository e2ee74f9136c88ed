"""Turn a low-level failure into one readable sentence, and say whether retrying can help.

The sentence names the URL and the cause a user can act on: nothing listening, wrong path,
not an OpenEnv server, server busy, server-side failure, connection lost mid-episode.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
from dataclasses import dataclass, replace
from typing import NoReturn
from urllib.parse import urlsplit, urlunsplit

from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from .client import BadReply, ServerReply
from .errors import (
    ConnectionLostError,
    OpenEnvError,
    ProtocolMismatchError,
    ServerBusyError,
    ServerError,
    ServerUnreachableError,
    WrongURLError,
)

# Gateway and "starting up" statuses: the server (or the proxy before it) may be back soon.
_TRANSIENT_STATUS = {502, 503, 504}


@dataclass(frozen=True)
class Failure:
    """What went wrong, as the error to raise, and whether another attempt may succeed."""

    error: OpenEnvError
    retryable: bool
    cause: BaseException | None = None

    def raise_(self) -> NoReturn:
        """Raise the error, chained to the low-level exception for ``--debug`` tracebacks."""
        raise self.error from self.cause


def _final(error: OpenEnvError) -> Failure:
    """A failure that another attempt would meet again."""
    return Failure(error, retryable=False)


def _retry(error: OpenEnvError) -> Failure:
    """A failure that may pass: the server may be starting, restarting or busy."""
    return Failure(error, retryable=True)


def _unreachable(where: str, why: str) -> Failure:
    """Nothing answered at all: worth another try (the server may be starting)."""
    return _retry(ServerUnreachableError(f"Could not reach {where}: {why}."))


def connect_failure(exc: BaseException, url: str, timeout: float) -> Failure:
    """Why opening the WebSocket session at ``url`` failed."""
    return replace(_connect_failure(exc, url, timeout), cause=exc)


def _connect_failure(exc: BaseException, url: str, timeout: float) -> Failure:
    cause = exc.__cause__ if isinstance(exc, ConnectionError) and exc.__cause__ else exc
    where = f"the OpenEnv server at {url}"
    if isinstance(cause, InvalidStatus) and cause.response.status_code in _TRANSIENT_STATUS:
        return _retry(
            ServerUnreachableError(
                f"Could not open a session with {where}: it answered HTTP "
                f"{cause.response.status_code} (unavailable or still starting)."
            )
        )
    if isinstance(cause, InvalidURI):
        return _final(WrongURLError(f"{url} is not a usable server address ({cause})."))
    if isinstance(cause, InvalidHandshake):
        # Something answered, but refused or botched the WebSocket upgrade: ask it over plain
        # HTTP whether it is an OpenEnv server at all, to tell a wrong path from a wrong server.
        return _final(_rejected(url, cause, timeout))
    if isinstance(cause, socket.gaierror):
        host = urlsplit(url).hostname
        return _final(
            WrongURLError(f"Could not reach {where}: the host name {host!r} does not resolve.")
        )
    if isinstance(cause, ConnectionRefusedError):
        return _unreachable(
            where,
            "nothing is listening there (connection refused); check that the server runs on "
            "that port",
        )
    if isinstance(cause, TimeoutError):
        return _unreachable(where, f"no answer within {timeout:g} s (connect_timeout)")
    if isinstance(cause, OSError):
        return _unreachable(where, _describe(cause))
    return _exchange_failure(cause, url, "reset", 0, timeout)


def exchange_failure(
    exc: BaseException, url: str, request: str, step: int, timeout: float
) -> Failure:
    """Why a ``reset`` or ``step`` request (step number ``step``) on an open session failed."""
    return replace(_exchange_failure(exc, url, request, step, timeout), cause=exc)


def _exchange_failure(
    exc: BaseException, url: str, request: str, step: int, timeout: float
) -> Failure:
    where = f"The OpenEnv server at {url}"
    during = "reset" if request == "reset" else f"step {step} of the episode"
    if isinstance(exc, ServerReply):
        if exc.code == "CAPACITY_REACHED":
            return _retry(
                ServerBusyError(
                    f"{where} has no free session ({exc.message}); start it with a larger "
                    "max_concurrent_envs, or run fewer episodes at once."
                )
            )
        if request == "reset" and exc.code == "EXECUTION_ERROR" and exc.message.startswith("503"):
            # trl-env serve refuses a reset it cannot start now (HTTP 503 in the error reply):
            # all its sessions play (busy: try again soon), or it drains (down for this run).
            if "shutting down" in exc.message:
                return _retry(ServerUnreachableError(f"{where} is shutting down ({exc.message})."))
            return _retry(ServerBusyError(f"{where} has no free session ({exc.message})."))
        if exc.code in ("INVALID_JSON", "UNKNOWN_TYPE"):
            return _final(
                ProtocolMismatchError(
                    f"{where} did not understand a {request!r} message ({exc.message}); it may run "
                    "an OpenEnv version whose protocol differs from openenv-core's client."
                )
            )
        return _final(ServerError(f"{where} failed during {during}: {exc.details()} [{exc.code}]."))
    if isinstance(exc, BadReply):
        return _final(
            ProtocolMismatchError(
                f"The server at {url} does not answer as an OpenEnv environment server: it sent "
                f"{exc} in reply to {request!r}."
            )
        )
    if isinstance(exc, ConnectionClosed) and exc.sent is not None and exc.sent.code == 1009:
        # websockets refused a message over max_size (1009: message too big) before reading it.
        return _final(
            ConnectionLostError(
                f"{where} sent a reply to {during} larger than {_limit_mb(exc.sent.reason)} "
                "(option max_reply_mb); the session was closed and this episode cannot go on."
            )
        )
    if isinstance(exc, ConnectionClosed):
        if request == "reset":
            # Nothing is lost yet: a restarting or full server is worth another try.
            return _retry(
                ServerUnreachableError(
                    f"{where} closed the session before answering reset ({_closed(exc)})."
                )
            )
        return _final(
            ConnectionLostError(
                f"{where} closed the connection during {during} ({_closed(exc)}); the server "
                "crashed, restarted or dropped the session, and this episode cannot go on."
            )
        )
    if isinstance(exc, TimeoutError):
        return _final(
            ConnectionLostError(
                f"{where} sent no reply to {during} within {timeout:g} s (option timeout); "
                "the session was closed and this episode cannot go on."
            )
        )
    if isinstance(exc, OSError):
        return _final(
            ConnectionLostError(f"{where} became unreachable during {during}: {_describe(exc)}.")
        )
    return _final(OpenEnvError(f"{where} failed during {during}: {type(exc).__name__}: {exc}"))


def _rejected(url: str, cause: InvalidHandshake, timeout: float) -> OpenEnvError:
    """The server refused the WebSocket upgrade: wrong path, or not an OpenEnv server at all?"""
    status = cause.response.status_code if isinstance(cause, InvalidStatus) else None
    refused = f"refused with HTTP {status}" if status else f"failed: {cause}"
    health = _probe(f"{url}/health", timeout)
    if health == "openenv":
        return ProtocolMismatchError(
            f"The server at {url} answers /health like an OpenEnv server but refused the "
            f"WebSocket session at {url}/ws ({refused}); it may predate OpenEnv's WebSocket "
            "protocol, or a proxy in between may drop WebSocket upgrades."
        )
    parts = urlsplit(url)
    origin = urlunsplit((parts.scheme, parts.netloc, "", "", ""))
    if status == 404 or health == "404":
        hint = ""
        if origin != url and _probe(f"{origin}/health", timeout) == "openenv":
            hint = f"; an OpenEnv server answers at {origin}, so try url={origin}"
        return WrongURLError(
            f"There is no OpenEnv environment at {url} (HTTP 404 for {url}/health; the "
            f"WebSocket session at {url}/ws was {refused}){hint}."
        )
    return ProtocolMismatchError(
        f"The server at {url} answers HTTP but not as an OpenEnv environment server (the WebSocket "
        f"session at {url}/ws was {refused}; GET {url}/health gave {health})."
    )


def _probe(url: str, timeout: float) -> str:
    """``"openenv"`` if ``url`` answers like OpenEnv's ``/health``; else what it answered."""
    from .fetch import ServerDeadline, http_get

    try:  # a total deadline: a server dripping its answer byte by byte cannot hold the probe
        status, ctype, body = http_get(url, min(timeout, 5.0), limit=4096)
    except ServerDeadline:
        return f"no complete answer within {min(timeout, 5.0):g} s"
    except (OSError, ValueError, http.client.HTTPException) as exc:
        return f"no answer ({_describe(exc)})"
    if status != 200:
        return str(status) if status == 404 else f"HTTP {status}"
    try:
        data = json.loads(body)
    except ValueError:
        return f"HTTP 200 with {ctype.split(';')[0]}"
    if isinstance(data, dict) and "status" in data:
        return "openenv"
    return "HTTP 200 with JSON that is not an OpenEnv health check"


def _limit_mb(reason: str) -> str:
    """The size limit, in MB, from websockets' close reason ("... exceeds limit of 4194304
    bytes"); "the allowed size" when the reason does not say."""
    numbers = [int(n) for n in re.findall(r"\d+", reason or "")]
    return f"{numbers[-1] / 2**20:g} MB" if numbers else "the allowed size"


def _describe(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    if reason is not None:
        return str(reason)
    return str(exc) or type(exc).__name__


def _closed(exc: ConnectionClosed) -> str:
    close = exc.rcvd or exc.sent
    if close is None:
        return "no close frame: the connection dropped"
    reason = f", {close.reason}" if close.reason else ""
    return f"close code {close.code}{reason}"

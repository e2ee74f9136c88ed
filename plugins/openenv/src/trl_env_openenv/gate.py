"""The ASGI layer in front of openenv-core's app in ``trl-env serve``: what reaches a route.

- the shared token (:mod:`.access`) on every route but ``/health``;
- without a token, on loopback: only requests whose ``Host`` names this machine and whose
  ``Origin`` (sent by browsers) is this machine's too, so a web page the user opens can neither
  reach the server through a rebinding DNS name nor open a WebSocket to it from its own origin;
- ``/health`` from :meth:`Host.health`: 503 when no reset could be answered (draining, busy,
  wedged), so a load balancer or a probe sees it;
- no new session while draining (HTTP 503 on ``/ws``, ``/reset`` and ``/mcp``);
- no ``/mcp``: trl-env's envs have no MCP tools, and openenv-core's HTTP ``/mcp`` would hold a
  session per request until a reaper ran, with no connection open; no HTTP ``/step`` (each HTTP
  request gets a fresh env, with no episode to step: it could only fail, with a traceback);
- idle WebSockets closed after ``idle_timeout`` seconds without a message (openenv-core's
  reaper closed the env but left the connection open: it piled up past ``--max-sessions``, and
  a reset on it opened an env that no session owned).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Protocol
from urllib.parse import urlsplit

from .access import authorized, is_loopback
from .extras_route import CALL_PATH

Message = dict[str, Any]


class Guarded(Protocol):
    """What the gate asks of the server it guards."""

    draining: bool

    def health(self) -> tuple[int, dict[str, Any]]: ...


class Gate:
    def __init__(
        self,
        app: Any,
        host: Guarded,
        token: str | None,
        idle_timeout: float,
        local_only: bool = False,
    ) -> None:
        self.app, self.host, self.token, self.idle_timeout = app, host, token, idle_timeout
        self.local_only = local_only  # a loopback server with no token: checks Host and Origin

    async def __call__(self, scope: Message, receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):  # lifespan
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if kind == "http" and path == "/health":
            status, body = self.host.health()
            await _answer(scope, send, status, body)
            return
        if self.local_only and not _from_this_machine(scope.get("headers", [])):
            detail = "this server answers only requests to and from this machine (Host, Origin)"
            await _answer(scope, send, 403, {"detail": detail})
            return
        if self.token is not None and not authorized(scope.get("headers", []), self.token):
            await _answer(
                scope,
                send,
                401,
                {"detail": "this server asks for its token: Authorization: Bearer <token>"},
                [(b"www-authenticate", b"Bearer")],
            )
            return
        # The extras route makes an env of its own, so it is refused while draining too.
        new_session = (
            kind == "websocket"
            or (scope.get("method") == "POST" and path in ("/reset", "/mcp"))
            or path == CALL_PATH
        )
        if self.host.draining and new_session:
            await _answer(scope, send, 503, {"status": "draining"})
            return
        if path == "/mcp":
            detail = "this server's envs have no MCP tools: play them over /ws"
            await _answer(scope, send, 404, {"detail": detail})
            return
        if kind == "http" and path == "/step":
            detail = "an HTTP request has a fresh env, with no episode to step: play over /ws"
            await _answer(scope, send, 404, {"detail": detail})
            return
        if kind == "http":
            await self.app(scope, receive, send)
            return
        connection = _IdleClose(receive, send, self.idle_timeout)
        try:
            await self.app(scope, connection.receive, connection.send)
        except Exception as exc:
            # openenv-core closes the socket after a client's "close" message, when that client
            # has already gone: nothing is lost, and it is not worth a traceback per episode.
            if type(exc).__name__ not in ("ClientDisconnected", "WebSocketDisconnect"):
                raise
        finally:
            connection.forget()


class _IdleClose:
    """A WebSocket's receive and send, ending the session after ``timeout`` idle seconds.

    The app waits in ``receive`` only between requests, so the wait is the idle time. Past
    it, the app is handed a disconnect: openenv-core ends the session (its env closed, its
    worker given back) and closes the socket, with a reason saying why.
    """

    def __init__(self, receive: Any, send: Any, timeout: float) -> None:
        self._receive, self._send, self.timeout = receive, send, timeout
        self._pending: asyncio.Future[Message] | None = None
        self.reaped = False

    async def receive(self) -> Message:
        if self.reaped:
            return {"type": "websocket.disconnect", "code": 1000}
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._receive())
        try:
            message = await asyncio.wait_for(asyncio.shield(self._pending), self.timeout)
        except TimeoutError:
            self.reaped = True
            return {"type": "websocket.disconnect", "code": 1000}
        self._pending = None
        return message

    async def send(self, message: Message) -> None:
        if self.reaped and message.get("type") == "websocket.close":
            reason = f"idle for more than {self.timeout:g} s: the session was closed"
            message = {**message, "code": 1000, "reason": reason}
        await self._send(message)

    def forget(self) -> None:
        if self._pending is not None:
            self._pending.cancel()


def _from_this_machine(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a request's ``Host`` names a loopback address (not a DNS name that rebinds to
    one) and its ``Origin``, when it has one, is such a host too."""
    found = {name.lower(): value for name, value in headers}
    host = found.get(b"host", b"").decode("latin-1")
    origin = found.get(b"origin")
    if not _loopback_name(host):
        return False
    if origin is None:
        return True  # not a browser: scripts and trl-env's clients send none
    try:
        return _loopback_name(urlsplit(origin.decode("latin-1")).netloc)
    except ValueError:
        return False


def _loopback_name(netloc: str) -> bool:
    try:
        name = urlsplit("//" + netloc).hostname or ""
    except ValueError:
        return False
    return bool(name) and is_loopback(name)


async def _answer(
    scope: Message,
    send: Any,
    status: int,
    body: dict[str, Any],
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """An HTTP answer; on a WebSocket handshake, the same answer instead of the upgrade."""
    raw = json.dumps(body).encode()
    start = {
        "status": status,
        "headers": [(b"content-type", b"application/json"), *(headers or [])],
    }
    if scope["type"] == "http":
        await send({"type": "http.response.start", **start})
        await send({"type": "http.response.body", "body": raw})
        return
    if "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008 if status == 401 else 1013})
        return
    await send({"type": "websocket.http.response.start", **start})
    await send({"type": "websocket.http.response.body", "body": raw})

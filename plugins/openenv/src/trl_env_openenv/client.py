"""openenv-core's own WebSocket client, made strict about what the server answers.

:class:`openenv.core.GenericEnvClient` speaks the protocol (``/ws``, ``reset``/``step`` messages,
``StepResult``); this subclass only turns a server's error reply into a structured
:class:`ServerReply` instead of a ``RuntimeError`` string, and a reply that is not OpenEnv's into
:class:`BadReply`, so the caller can tell a busy server from a broken one. Its handshake sends
the ``Authorization`` header of :mod:`trl_env_openenv.auth` and follows no redirect: a server
that answers ``/ws`` with one is refused, never replaced by the address it names.
"""

from __future__ import annotations

import json
from contextvars import ContextVar
from typing import Any

from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from trl_env.boundary import real_number

from .openenv_core import GenericEnvClient, StepResult
from .openenv_core import env_client as _env_client

_EXPECTED = {"reset": "observation", "step": "observation", "state": "state"}


class ServerReply(Exception):
    """The server answered with an OpenEnv error message (``{"type": "error", ...}``)."""

    def __init__(self, code: str, message: str, errors: list[Any] | None = None) -> None:
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message
        self.errors = errors or []

    def details(self) -> str:
        """The message plus pydantic's per-field errors, when the server sent them."""
        parts = []
        for err in self.errors[:5]:
            if isinstance(err, dict):
                loc = ".".join(str(p) for p in err.get("loc", ()))
                parts.append(f"{loc}: {err.get('msg', err)}" if loc else str(err.get("msg", err)))
        return f"{self.message}: {'; '.join(parts)}" if parts else self.message


class BadReply(Exception):
    """The server answered something that is not an OpenEnv message."""


# The headers of the handshake openenv's client is making now, for one of this package's
# sessions (None: someone else's client, left as openenv made it).
_HANDSHAKE: ContextVar[dict[str, str] | None] = ContextVar("trl_env_handshake", default=None)


class _Handshake(ws_connect):
    """websockets' ``connect`` as openenv's client calls it: for this package's sessions it adds
    the ``Authorization`` header and treats a redirect as the refusal it is."""

    def __init__(self, uri: str, **kwargs: Any) -> None:
        ours = _HANDSHAKE.get()
        if ours:
            kwargs["additional_headers"] = {**dict(kwargs.get("additional_headers") or {}), **ours}
        super().__init__(uri, **kwargs)
        self._ours = ours is not None

    def process_redirect(self, exc: Exception) -> Exception | str:
        return exc if self._ours else super().process_redirect(exc)


_env_client.ws_connect = _Handshake  # openenv's client opens every WebSocket through this name


class WireClient(GenericEnvClient):
    """A :class:`GenericEnvClient` that checks every reply (dict actions, dict observations),
    sends ``headers`` with its handshake and follows no redirect."""

    def __init__(self, headers: dict[str, str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._handshake = dict(headers)

    async def _ours(self, connect: Any) -> Any:
        token = _HANDSHAKE.set(self._handshake)
        try:
            return await connect()
        finally:
            _HANDSHAKE.reset(token)

    if hasattr(GenericEnvClient, "_connect_async"):  # openenv 0.10

        async def _connect_async(self) -> Any:
            return await self._ours(super()._connect_async)

    else:  # openenv-core 0.3

        async def connect(self) -> Any:
            return await self._ours(super().connect)

    if hasattr(GenericEnvClient, "_ensure_connected"):  # openenv 0.10 reconnects in _send

        async def _ensure_connected(self) -> None:
            # A session lives in its server's memory: a step after the socket closed (the server
            # restarted, or dropped us) would open a fresh session and play on from nothing.
            ws = getattr(self, "_ws", None)
            if ws is not None and ws.state in (State.CLOSING, State.CLOSED):
                raise ConnectionClosed(None, None)
            await super()._ensure_connected()

    async def _send_and_receive(self, message: dict[str, Any]) -> dict[str, Any]:
        try:
            await self._send(message)
        except ConnectionClosed:
            # A server that refuses a session (at capacity, say) sends why and closes at once;
            # the why is still queued, and it is worth more than "connection closed".
            reply = await self._receive_checked(message)
            raise BadReply(f"a {reply.get('type')!r} message before any request") from None
        return await self._receive_checked(message)

    async def _receive_checked(self, message: dict[str, Any]) -> dict[str, Any]:
        try:
            reply = await self._receive()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BadReply(f"a message that is not JSON ({exc})") from None
        if not isinstance(reply, dict):
            raise BadReply(f"a JSON {type(reply).__name__} where an object was expected")
        kind = reply.get("type")
        data = reply.get("data")
        if kind == "error":
            data = data if isinstance(data, dict) else {}
            raise ServerReply(
                str(data.get("code", "UNKNOWN")),
                str(data.get("message", "unknown error")),
                data.get("errors") if isinstance(data.get("errors"), list) else None,
            )
        expected = _EXPECTED.get(str(message.get("type")), "observation")
        if kind != expected or not isinstance(data, dict):
            raise BadReply(
                f"a {kind!r} message where an {expected!r} message was expected: {_clip(reply)}"
            )
        return reply

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[dict[str, Any]]:
        observation = payload.get("observation")
        reward = payload.get("reward")
        done = payload.get("done", False)
        if not isinstance(observation, dict):
            raise BadReply(f"an observation message without an observation: {_clip(payload)}")
        # a real, finite number, as a reward read from an env in the trainer must be (true,
        # "1.0" and NaN are not): trl_env.boundary's check, on every path
        if reward is not None and real_number(reward) is None:
            raise BadReply(f"a reward that is not a finite number: {_clip(reward)}")
        if not isinstance(done, bool):
            raise BadReply(f"a done flag that is not true or false: {done!r}")
        return StepResult(
            observation=observation,
            reward=None if reward is None else float(reward),
            done=done,
        )


def _clip(value: Any, limit: int = 200) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + "..."

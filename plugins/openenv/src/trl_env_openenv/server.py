"""``trl-env serve``: any installed trl-env env behind openenv-core's own HTTP/WebSocket server.

openenv-core's :class:`HTTPEnvServer` speaks the protocol (``/ws`` sessions, ``/health``,
``/schema``, ``/metadata``, ``CAPACITY_REACHED`` at ``max_concurrent_envs``, the idle reaper), so
OpenEnv's ``GenericEnvClient`` plays it as it plays any OpenEnv env. What this module adds:

- each session's env lives in a worker process (:class:`trl_env.isolation.EnvProcessPool`), so a
  crash or a hang ends that session only;
- ``GET /trl-env``: what trl-env's clients need before a reset (system prompt, turn limit, the
  env's name and options, free sessions);
- draining: after SIGTERM new sessions get HTTP 503, live ones get ``drain_timeout`` seconds,
  then the process exits 0.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from trl_env.isolation import EnvProcessPool, EnvRaised, IsolationError, RemoteEnv

from .openenv_core import (
    Action,
    ConcurrencyConfig,
    Environment,
    HTTPEnvServer,
    Observation,
    State,
)

INFO_PATH = "/trl-env"
# The longest text one reply carries; the trainer cuts env text at its own max_env_chars anyway.
MAX_TEXT_CHARS = 500_000


class TrlEnvAction(Action):
    """The agent's reply, as text."""

    message: str


class TrlEnvObservation(Observation):
    """The env's text; ``success`` is its own verdict (None: not given), read at every step."""

    text: str = ""
    success: bool | None = None
    reward_error: str | None = None  # why ``reward`` could not be read (then reward is null)


@dataclass
class Host:
    """What every session of one server shares: the worker pool, deadlines and the drain flag."""

    env: str
    options: dict[str, Any]
    max_sessions: int
    step_timeout: float
    pool: EnvProcessPool = field(init=False)
    info: dict[str, Any] = field(default_factory=dict)
    draining: bool = False
    server: HTTPEnvServer | None = None

    def __post_init__(self) -> None:
        self.pool = EnvProcessPool(self.env, self.options, max_workers=self.max_sessions)

    def probe(self) -> None:
        """The start-up check: one env made in a worker, what it declares read."""
        remote = self.pool.open(self.step_timeout)
        try:
            prompt = remote.call("system_prompt", timeout=self.step_timeout)
            turns = remote.call("max_turns", timeout=self.step_timeout)
            remote.call("close", timeout=self.step_timeout)
        finally:
            remote.release()
        self.info = {
            "env": self.env,
            "options": self.options,
            "system_prompt": prompt if isinstance(prompt, str) and prompt else None,
            "max_turns": turns if isinstance(turns, int) and turns > 0 else None,
            "max_sessions": self.max_sessions,
        }

    def status(self) -> dict[str, Any]:
        active = self.server.active_sessions if self.server is not None else 0
        return {**self.info, "active_sessions": active, "draining": self.draining}


class SessionEnv(Environment[TrlEnvAction, TrlEnvObservation, State]):
    """One OpenEnv session: its trl-env env is made in a worker process at each reset."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # every session has a process of its own

    def __init__(self, host: Host) -> None:
        super().__init__()
        self._host = host
        self._remote: RemoteEnv | None = None
        self._state = State(step_count=0)

    def reset(
        self, seed: int | str | None = None, episode_id: str | None = None, **_: Any
    ) -> TrlEnvObservation:
        self._drop()
        if self._host.draining:
            raise RuntimeError("the server is shutting down and starts no new episodes")
        trl_seed = str(seed) if seed is not None else (episode_id or "0")
        self._state = State(episode_id=episode_id or trl_seed, step_count=0)
        self._remote = self._guard("creating the env", lambda: self._host.pool.open(self._timeout))
        text = _text(self._call("reset", trl_seed), "reset")
        # done stays False: the trainer reads alive only after a step, as locally.
        return self._observe(text, done=False)

    def step(self, action: TrlEnvAction, timeout_s: float | None = None, **_: Any) -> Any:
        if self._remote is None:
            raise RuntimeError("no episode is running in this session: send reset first")
        self._state.step_count += 1
        text = _text(self._call("step", action.message), "step")
        return self._observe(text, done=not bool(self._call("alive")))

    def _observe(self, text: str, done: bool) -> TrlEnvObservation:
        """The text, with the env's reward and success as they stand now (the last are final)."""
        observation = TrlEnvObservation(text=text, done=done)
        try:
            reward = float(self._call("reward"))
            if not math.isfinite(reward):
                raise ValueError(f"{reward!r} is not finite")
            observation.reward = reward
        except Exception as exc:  # said to the client, which fails the episode if it reads it
            observation.reward_error = f"reading the reward raised {exc}"
        try:  # a broken success extra costs the verdict, never the reward
            success = self._call("success")
        except Exception:
            success = None
        observation.success = success if isinstance(success, bool) else None
        return observation

    @property
    def state(self) -> State:
        return self._state

    def close(self) -> None:
        self._drop()

    @property
    def _timeout(self) -> float:
        return self._host.step_timeout

    def _call(self, method: str, *args: Any) -> Any:
        remote = self._remote
        if remote is None:
            raise RuntimeError("the session's env was closed (idle too long, or shut down)")
        return self._guard(method, lambda: remote.call(method, *args, timeout=self._timeout))

    def _guard(self, what: str, call: Any) -> Any:
        try:
            return call()
        except IsolationError as exc:
            if not isinstance(exc, EnvRaised):
                self._drop()  # its worker is gone: this session's episode cannot go on
            raise RuntimeError(f"{what}: {exc}") from None

    def _drop(self) -> None:
        remote, self._remote = self._remote, None
        if remote is None:
            return
        try:
            remote.call("close", timeout=self._timeout)
        except Exception:
            pass  # a dead or stuck env: release kills or recycles its worker
        finally:
            remote.release()


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise RuntimeError(f"the env's {what} returned {type(value).__name__}, not str")
    if len(value) > MAX_TEXT_CHARS:
        value = value[:MAX_TEXT_CHARS]
    # JSON cannot carry lone surrogates; the trainer would replace them with U+FFFD anyway.
    return value.encode("utf-8", "replace").decode("utf-8") if _has_surrogates(value) else value


def _has_surrogates(value: str) -> bool:
    try:
        value.encode("utf-8")
        return False
    except UnicodeEncodeError:
        return True


def build_app(host: Host, idle_timeout: float | None) -> Any:
    """openenv-core's app for ``host``'s env, with the info route and the drain gate."""
    from fastapi import FastAPI

    server = HTTPEnvServer(
        lambda: SessionEnv(host),
        TrlEnvAction,
        TrlEnvObservation,
        concurrency_config=ConcurrencyConfig(
            max_concurrent_envs=host.max_sessions, session_timeout=idle_timeout
        ),
    )
    host.server = server
    app = FastAPI(title=f"trl-env serve: {host.env}")
    server.register_routes(app)
    app.add_api_route(INFO_PATH, host.status, methods=["GET"])
    return _Gate(app, host)


class _Gate:
    """Refuses new sessions (HTTP 503) and answers /health 503 while the server drains."""

    def __init__(self, app: Any, host: Host) -> None:
        self.app, self.host = app, host

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if self.host.draining and scope["type"] == "websocket" and path.endswith("/ws"):
            body = b'{"status": "draining"}'
            if "websocket.http.response" in scope.get("extensions", {}):
                await send(
                    {
                        "type": "websocket.http.response.start",
                        "status": 503,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await send({"type": "websocket.http.response.body", "body": body})
            else:
                await send({"type": "websocket.close", "code": 1013})
            return
        if self.host.draining and scope["type"] == "http" and path.endswith("/health"):
            await send(
                {
                    "type": "http.response.start",
                    "status": 503,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": b'{"status": "draining"}'})
            return
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        except Exception as exc:
            # openenv-core closes the socket after a client's "close" message, when that client
            # has already gone: nothing is lost, and it is not worth a traceback per episode.
            if type(exc).__name__ not in ("ClientDisconnected", "WebSocketDisconnect"):
                raise


def serve(
    host: Host, bind: str, port: int, idle_timeout: float | None, drain_timeout: float
) -> None:
    """Run until SIGTERM (drain, then return) or SIGINT (stop now)."""
    import uvicorn

    app = build_app(host, idle_timeout)
    config = uvicorn.Config(app, host=bind, port=port, log_level="warning", lifespan="on")
    server = _DrainingServer(config, host, drain_timeout)
    try:
        server.run()
    finally:
        host.pool.close()


class _DrainingServer:
    """uvicorn's server whose SIGTERM drains live sessions before it stops."""

    def __init__(self, config: Any, host: Host, drain_timeout: float) -> None:
        import uvicorn

        self.host, self.drain_timeout = host, drain_timeout
        outer = self

        class Server(uvicorn.Server):
            def handle_exit(self, sig: int, frame: FrameType | None) -> None:
                # Not re-raised after shutdown (uvicorn would): a drained server exits 0.
                if sig == signal.SIGTERM and not outer.host.draining:
                    outer.drain()
                else:
                    self.should_exit = True
                    self.force_exit = self.force_exit or sig == signal.SIGINT

        self.server = Server(config)

    def run(self) -> None:
        self.server.run()

    def drain(self) -> None:
        self.host.draining = True

        def wait() -> None:
            deadline = time.monotonic() + self.drain_timeout
            while time.monotonic() < deadline and self._active() > 0:
                time.sleep(0.05)
            self.server.should_exit = True

        threading.Thread(target=wait, name="trl-env-drain", daemon=True).start()

    def _active(self) -> int:
        server = self.host.server
        return server.active_sessions if server is not None else 0

"""``trl-env serve``: any installed trl-env env behind openenv-core's own HTTP/WebSocket server.

openenv-core's :class:`HTTPEnvServer` speaks the protocol (``/ws`` sessions, ``/schema``,
``/metadata``, ``CAPACITY_REACHED`` at ``max_concurrent_envs``), so OpenEnv's
``GenericEnvClient`` plays it as it plays any OpenEnv env. What this module adds:

- each session's env lives in a worker process (:class:`trl_env.hosts.pool.EnvProcessPool`), so a
  crash or a hang ends that session only; :class:`Host` alone hands out and takes back those
  workers (a reset finds one at once or is refused, never queued);
- ``GET /trl-env``: what trl-env's clients need before a reset (system prompt, turn limit, the
  env's name and option names, free sessions);
- the gate in front (:mod:`.gate`): the shared token, ``/health``, idle sessions closed;
- signals: after SIGTERM new sessions get HTTP 503, live ones get ``drain_timeout`` seconds; a
  second SIGTERM or SIGINT stops it at once; either way it exits within a second of that, a
  hung step or not.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from fastapi import HTTPException

from trl_env.boundary import real_number, shown
from trl_env.errors import EnvRaised, IsolationError
from trl_env.hosts.pool import EnvProcessPool, RemoteEnv

from .access import is_loopback, new_salt, options_digest
from .extras_route import CALL_PATH, Extras
from .gate import Gate
from .logs import throttle_request_logs
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


class Refused(HTTPException):
    """No new episode now (all workers playing, or draining): HTTP 503, one sentence."""

    def __init__(self, why: str) -> None:
        super().__init__(503, why)


@dataclass
class _Holding:
    """One session's hold on a worker: since when it was last used, and the call running."""

    used: float
    call: str = ""
    call_since: float = 0.0


# A worker held this long past the deadlines that should have given it back is a leak.
WEDGE_MARGIN = 10.0


@dataclass
class Host:
    """What every session of one server shares: the worker pool, deadlines and the drain flag.

    Workers are handed out by :meth:`take` and come back by :meth:`give_back` only: the one
    count of who holds one, checked against ``max_sessions`` without waiting.
    """

    env: str
    options: dict[str, Any]
    max_sessions: int
    step_timeout: float
    idle_timeout: float = math.inf
    pass_env: tuple[str, ...] = ()  # what the workers get beyond the allow-list (--env-pass-env)
    pool: EnvProcessPool = field(init=False)
    extras: Extras = field(init=False)
    info: dict[str, Any] = field(default_factory=dict)
    draining: bool = False
    server: HTTPEnvServer | None = None
    # Keyed by the owner itself: a session dropped without closing stays counted (and shows
    # as wedged), and no later session can take its place under a reused id.
    _holdings: dict[object, _Holding] = field(default_factory=dict, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        self.pool = EnvProcessPool(
            self.env, self.options, max_workers=self.max_sessions, pass_env=self.pass_env
        )
        self.extras = Extras(self.env, self.options, self.step_timeout, self.pass_env)

    def close(self) -> None:
        """Kill every worker: the sessions' and the extras route's."""
        self.extras.close()
        self.pool.close()

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
            # Names only: an option's value may be a secret (a URL with a password).
            "options": sorted(self.options),
            "options_salt": (salt := new_salt()),
            "options_digest": options_digest(self.options, salt),
            "system_prompt": prompt if isinstance(prompt, str) and prompt else None,
            "max_turns": turns if isinstance(turns, int) and turns > 0 else None,
            "max_sessions": self.max_sessions,
        }

    # -- workers --------------------------------------------------------------------------
    def take(self, owner: object) -> RemoteEnv:
        """A fresh env in a worker for ``owner``, or :class:`Refused` at once."""
        with self._lock:
            if self.draining:
                raise Refused("the server is shutting down and starts no new episodes")
            if len(self._holdings) >= self.max_sessions:
                raise Refused(
                    f"all {self.max_sessions} sessions of this server are playing; "
                    "try again later or another server"
                )
            self._holdings[owner] = _Holding(used=time.monotonic())
        try:  # the pool has a worker for every holding, so this waits for none
            return self.pool.open(self.step_timeout)
        except BaseException:
            self._forget(owner)
            raise

    def give_back(self, owner: object, remote: RemoteEnv) -> None:
        try:
            remote.call("close", timeout=self.step_timeout)
        except Exception:
            pass  # a dead or stuck env: release kills or recycles its worker
        finally:
            remote.release()
            self._forget(owner)

    @contextlib.contextmanager
    def calling(self, owner: object, method: str) -> Iterator[None]:
        """Marks ``owner``'s call running (for /health and /trl-env) while the block runs."""
        with self._lock:
            holding = self._holdings.get(owner)
            if holding is not None:
                holding.call, holding.call_since = method, time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                if holding is not None:
                    holding.call, holding.used = "", time.monotonic()

    def _forget(self, owner: object) -> None:
        with self._lock:
            self._holdings.pop(owner, None)

    # -- what it says about itself --------------------------------------------------------
    def health(self) -> tuple[int, dict[str, Any]]:
        """HTTP status and body of ``/health``: 200 while a reset could be answered now."""
        if self.draining:
            return 503, {"status": "draining"}
        now = time.monotonic()
        with self._lock:
            holdings = list(self._holdings.values())
        # A call is killed at step_timeout; an idle session is closed at idle_timeout, and
        # its env's close has step_timeout: a worker held past those is stuck or lost.
        stuck = [
            h for h in holdings if h.call and now - h.call_since > self.step_timeout + WEDGE_MARGIN
        ]
        leaked = self.idle_timeout + self.step_timeout + WEDGE_MARGIN
        lost = [h for h in holdings if not h.call and now - h.used > leaked]
        if stuck or lost:
            why = []
            if stuck:
                why.append(f"{len(stuck)} env calls running past --step-timeout")
            if lost:
                why.append(f"{len(lost)} workers held by no live session")
            return 503, {"status": "wedged", "reason": "; ".join(why)}
        active = self.server.active_sessions if self.server is not None else 0
        free = self.max_sessions - max(len(holdings), active)
        if free <= 0:
            return 503, {"status": "busy", "active_sessions": active}
        return 200, {"status": "healthy", "free_sessions": free}

    def status(self) -> dict[str, Any]:
        """``GET /trl-env``: what the env declares, and the server's state now."""
        active = self.server.active_sessions if self.server is not None else 0
        with self._lock:
            calls = Counter(h.call for h in self._holdings.values() if h.call)
        health = self.health()[1]["status"]
        state = {"active_sessions": active, "draining": self.draining, "health": health}
        return {**self.info, **state, "calls": calls}


class SessionEnv(Environment[TrlEnvAction, TrlEnvObservation, State]):
    """One OpenEnv session: its trl-env env is made in a worker process at each reset.

    Once closed (the session ended, or was closed for idling) it opens no env again: a worker
    it took then would belong to no session, and never come back.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True  # every session has a process of its own

    def __init__(self, host: Host) -> None:
        super().__init__()
        self._host = host
        self._remote: RemoteEnv | None = None
        self._closed = False
        self._state = State(step_count=0)

    def reset(
        self, seed: int | str | None = None, episode_id: str | None = None, **_: Any
    ) -> TrlEnvObservation:
        self._drop()
        if self._closed:
            raise RuntimeError("this session was closed; open a new one")
        trl_seed = str(seed) if seed is not None else (episode_id or "0")
        self._state = State(episode_id=episode_id or trl_seed, step_count=0)
        self._remote = self._guard("creating the env", lambda: self._host.take(self))
        text = _text(self._call("reset", trl_seed), "reset")
        # done stays False: the trainer reads alive only after a step, as locally.
        return self._observe(text, done=False)

    def step(self, action: TrlEnvAction, timeout_s: float | None = None, **_: Any) -> Any:
        if self._remote is None:
            raise RuntimeError("no episode is running in this session: send reset first")
        self._state.step_count += 1
        text = _text(self._call("step", action.message), "step")
        alive = self._call("alive")
        if not isinstance(alive, bool):  # as the trainer checks it: "false" is not False
            raise RuntimeError(
                f"the env's alive is {type(alive).__name__} {shown(alive)}, not a bool"
            )
        return self._observe(text, done=not alive)

    def _observe(self, text: str, done: bool) -> TrlEnvObservation:
        """The text, with the env's reward and success as they stand now (the last are final)."""
        observation = TrlEnvObservation(text=text, done=done)
        try:
            value = self._call("reward")
            reward = real_number(value)  # as the trainer checks an env's reward: True is not 1
            if reward is None:
                raise ValueError(f"{shown(value)} is not a finite number")
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
        self._closed = True
        self._drop()

    def _call(self, method: str, *args: Any) -> Any:
        remote = self._remote
        if remote is None:
            raise RuntimeError("the session's env was closed (idle too long, or shut down)")
        timeout = self._host.step_timeout

        def call() -> Any:
            with self._host.calling(self, method):
                return remote.call(method, *args, timeout=timeout)

        return self._guard(method, call)

    def _guard(self, what: str, call: Any) -> Any:
        try:
            return call()
        except IsolationError as exc:
            if not isinstance(exc, EnvRaised):
                self._drop()  # its worker is gone: this session's episode cannot go on
            raise RuntimeError(f"{what}: {exc}") from None

    def _drop(self) -> None:
        remote, self._remote = self._remote, None
        if remote is not None:
            self._host.give_back(self, remote)


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


def build_app(host: Host, token: str | None = None, bind: str = "127.0.0.1") -> Any:
    """openenv-core's app for ``host``'s env, with the info route, behind the gate (which, on
    loopback without a token, answers only requests to and from this machine)."""
    from fastapi import FastAPI

    server = HTTPEnvServer(
        lambda: SessionEnv(host),
        TrlEnvAction,
        TrlEnvObservation,
        # No reaper of openenv-core's: it closed idle envs but not their connections.
        concurrency_config=ConcurrencyConfig(
            max_concurrent_envs=host.max_sessions, session_timeout=None
        ),
    )
    host.server = server
    app = FastAPI(title=f"trl-env serve: {host.env}")
    server.register_routes(app)
    app.add_api_route(INFO_PATH, host.status, methods=["GET"])
    app.add_api_route(CALL_PATH, host.extras.call, methods=["GET"])  # seeds and other extras
    local_only = token is None and is_loopback(bind)
    return Gate(app, host, token, host.idle_timeout, local_only)


def serve(host: Host, bind: str, port: int, drain_timeout: float, token: str | None) -> None:
    """Run until signalled: SIGTERM drains, then returns; a second signal or SIGINT stops now."""
    import uvicorn

    app = build_app(host, token, bind)
    # No lifespan: the app has no start-up or shutdown handlers, and a stop that cuts the
    # shutdown short cancels the lifespan task, which starlette logs as a traceback.
    config = uvicorn.Config(app, host=bind, port=port, log_level="warning", lifespan="off")
    throttle_request_logs()  # after uvicorn set its loggers up: a client cannot fill the log
    server = _DrainingServer(config, host, drain_timeout)
    try:
        server.run()
    finally:
        host.close()


# After the drain, or a second signal: what is left gets this long, then the process exits.
STOP_SECONDS = 0.5


class _DrainingServer:
    """uvicorn's server whose SIGTERM drains live sessions, and which always stops in time."""

    def __init__(self, config: Any, host: Host, drain_timeout: float) -> None:
        import uvicorn

        self.host, self.drain_timeout = host, drain_timeout
        self._stopping = threading.Lock()
        outer = self

        class Server(uvicorn.Server):
            def handle_exit(self, sig: int, frame: FrameType | None) -> None:
                # Not re-raised after shutdown (uvicorn would): a stopped server exits 0.
                if sig == signal.SIGTERM and not outer.host.draining:
                    outer.drain()
                else:
                    outer.stop()

        self.server = Server(config)

    def run(self) -> None:
        self.server.run()

    def drain(self) -> None:
        self.host.draining = True
        deadline = time.monotonic() + self.drain_timeout

        def wait() -> None:
            while time.monotonic() < deadline and self._active() > 0:
                time.sleep(0.05)
            self.stop()

        threading.Thread(target=wait, name="trl-env-drain", daemon=True).start()

    def stop(self) -> None:
        """Stop now: workers killed (a hung step returns), uvicorn told to exit, and the
        process ended ``STOP_SECONDS`` later whatever still runs."""
        if not self._stopping.acquire(blocking=False):
            return
        self.host.draining = True
        self.server.should_exit = True
        self.server.force_exit = True
        threading.Thread(target=self.host.close, name="trl-env-stop", daemon=True).start()
        timer = threading.Timer(STOP_SECONDS, _exit_now)
        timer.daemon = True
        timer.start()

    def _active(self) -> int:
        server = self.host.server
        return server.active_sessions if server is not None else 0


def _exit_now() -> None:
    """The last resort: a thread stuck in a call would hold the interpreter's exit."""
    os._exit(0)

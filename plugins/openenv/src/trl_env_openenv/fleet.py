"""Episodes played on env servers (``--env-server URL``, repeatable): which server plays each.

Each episode stays on one server. A new episode goes to the healthy server with the most free
sessions (its ``max_sessions`` less the episodes this process plays there, and none for a short
while after it answered busy). A server that fails (refused, unreachable, draining, lost
mid-episode, or silent past the timeout at reset) is skipped and checked again on ``/trl-env``
with a growing backoff; the episode it was playing ends in error naming it, and new episodes go
to the others. When no server can take an episode, its reset waits up to ``slot_timeout``
seconds, then fails naming each server's last failure.

Every server must serve the run's env with the run's options (checked by each server's salted
digest of them), and all such servers must agree on the rest (option names, system prompt,
turn limit): all are asked when the run starts; one that serves another env or other options
is left out of the run with a warning, and servers of the run's env that disagree stop it in
one sentence naming what differs. No server's word wins over another's, so every episode plays
by the settings it was opened with. The env's own seeds and extras come from the servers too.
The fleet's token (``TRL_ENV_SERVE_TOKEN``) goes to these servers and to no other URL; a URL's
credentials never appear in a record or a message (:mod:`trl_env_openenv.auth`).

This is the ``servers`` kind of :mod:`trl_env.hosts`, registered by this package's
``register_env_hosts`` hook.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import quote, urlsplit

from trl_env.boundary import EnvHandle
from trl_env.errors import UsageError
from trl_env.protocols import Env
from trl_env.redact import redact, redact_text
from trl_env.spec import EnvSpec

from .access import options_digest
from .auth import Credentials, fleet_token, headers, split_credentials
from .errors import ConnectionLostError, OpenEnvError, ServerBusyError, ServerError
from .extras_route import MAX_SEEDS
from .fetch import get_json
from .served import served_client

INFO_PATH = "/trl-env"  # served by `trl-env serve` next to OpenEnv's own routes
CALL_PATH = "/trl-env/call"  # an extra of the served env that takes arguments (seeds, ...)
HEALTH_BACKOFF = (0.5, 10.0)  # first and longest pause between two checks of a failed server
BUSY_SECONDS = 0.5  # a server that answered busy gets no new episode for this long
_WAIT_TICK = 0.25
# What every server of a run's env must say alike (its options' values: by their digest, which
# each server salts its own way), so that no episode plays by another's settings.
_SAME = ("env", "options", "system_prompt", "max_turns")
log = logging.getLogger(__name__)
Expected = tuple[str, dict[str, Any]]  # a registered env's name and options


@dataclass
class _Server:
    url: str  # as records and messages show it: without credentials
    credentials: Credentials | None = None
    live: int = 0  # episodes this process plays there now
    capacity: int = 1
    healthy: bool = True
    checking: bool = False
    next_check: float = 0.0
    backoff: float = HEALTH_BACKOFF[0]
    busy_until: float = 0.0
    last_failure: str = ""
    health: str = ""  # what the last failed /health check got
    played: int = 0  # episodes started there, for the spread over servers
    agreed: bool | None = None  # serves what the fleet serves (None: not asked since it came up)

    def free(self, now: float) -> int:
        return 0 if now < self.busy_until else self.capacity - self.live


class EnvServers:
    """A fleet of env servers serving one env; calling it makes an env for one episode."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        slot_timeout: float = 300.0,
        timeout: float = 60.0,
        connect_timeout: float = 10.0,
    ) -> None:
        if not urls:
            raise UsageError("env_servers needs at least one server URL.")
        self.servers = [_Server(*split_credentials(_normalize(u))) for u in urls]
        if len({s.url for s in self.servers}) != len(self.servers):
            raise UsageError("An env server is given twice in env_servers.")
        try:
            self.token = fleet_token()  # read once: these servers' token, and no one else's
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        self.slot_timeout = slot_timeout
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._cond = threading.Condition()
        self._said: dict[str, dict[str, Any]] = {}  # what each server said it serves
        self._surveyed = False
        self._settled: dict[str, dict[str, Any]] = {}  # per expected env: the common settings
        self._info_lock = threading.Lock()

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    def __call__(self) -> Env:
        # reward and alive are read-only properties here, which the protocol's plain
        # attributes do not express; the engine only reads them.
        return cast(Env, ServerEnv(self))

    def __repr__(self) -> str:
        return f"the env servers {', '.join(self.urls)}"

    # -- what the served env declares ---------------------------------------------------------
    def info(self, expected: Expected | None = None) -> dict[str, Any]:
        """What the servers of ``expected`` (a registered env name and options; None: any)
        serve alike: env, option names, system prompt, turn limit. Every server is asked once,
        when a run first needs it; servers serving something else are left out of the run
        with a warning; ``RuntimeError`` (one sentence) when none serves ``expected`` or
        those that do disagree."""
        key = json.dumps(_plain(expected))
        with self._info_lock:
            if not self._surveyed:
                self._survey()
            if key not in self._settled:
                self._settled[key] = self._settle(expected)
            return self._settled[key]

    def _survey(self) -> None:
        """Ask every server what it serves, all at once; one that does not answer is taken out
        (and asked again when it comes back, see :meth:`vet`)."""
        answers: dict[str, Any] = {}

        def ask(server: _Server) -> None:
            try:
                answers[server.url] = self._ask_info(server, 10.0)
            except Exception as exc:
                answers[server.url] = exc

        threads = [threading.Thread(target=ask, args=(s,), daemon=True) for s in self.servers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(15.0)
        failures = []
        for server in self.servers:
            answer = answers.get(server.url, TimeoutError("no answer"))
            if isinstance(answer, dict) and isinstance(answer.get("env"), str):
                self._said[server.url] = answer
                capacity = answer.get("max_sessions")
                if isinstance(capacity, int) and capacity > 0:
                    with self._cond:
                        server.capacity = capacity
                continue
            why = _why(answer) if isinstance(answer, BaseException) else "not a trl-env server"
            failures.append(f"{server.url}: {why}")
            self.failed(server, f"asking what it serves failed: {why}")
        if not self._said:
            raise ConnectionError("No env server said what it serves (" + "; ".join(failures) + ")")
        self._surveyed = True

    def _settle(self, expected: Expected | None) -> dict[str, Any]:
        out = {s.url for s in self.servers if s.agreed is False}  # refused earlier in the run
        said = {url: info for url, info in self._said.items() if url not in out}
        fits = {url: info for url, info in said.items() if _fits(info, expected)}
        if not fits:
            raise RuntimeError(_not_served(said, expected, self))
        common = {k: _plain(next(iter(fits.values())).get(k)) for k in _SAME}
        differ = [
            k for k in _SAME if len({json.dumps(_plain(i.get(k))) for i in fits.values()}) > 1
        ]
        if differ:
            said_each = "; ".join(
                f"{url}: " + ", ".join(f"{k} {_plain(info.get(k))!r}" for k in differ)
                for url, info in fits.items()
            )
            raise RuntimeError(
                f"The env servers of this run disagree on what they serve ({said_each}); every "
                "env server of a run must serve the same env with the same settings"
            )
        for url, info in said.items():
            server = self._server(url)
            if url in fits:
                with self._cond:
                    server.agreed = True
                continue
            why = _differs(info, expected, common)
            log.warning("env server %s is left out of this run: %s", url, why)
            self.refuse(server, why)
        return common

    def _server(self, url: str) -> _Server:
        return next(s for s in self.servers if s.url == url)

    def _ask_info(self, server: _Server, longest: float) -> Any:
        timeout = min(self.connect_timeout, longest)
        return get_json(server.url + INFO_PATH, timeout, auth=self.auth(server))

    def auth(self, server: _Server) -> dict[str, str]:
        """The ``Authorization`` header of a request to ``server``."""
        return headers(server.credentials, self.token)

    def vet(self, server: _Server, expected: Expected | None = None) -> str:
        """Ask ``server``, back after a failure, what it serves: "" when it serves what the
        run's servers serve, else why it must not play this run's episodes."""
        common = self.info(expected)
        try:
            info = self._ask_info(server, 10.0)
        except Exception as exc:
            return f"asking what it serves failed: {_why(exc)}"
        if not isinstance(info, dict) or not isinstance(info.get("env"), str):
            return "not a trl-env serve server"
        with self._info_lock:
            self._said[server.url] = info
        if _fits(info, expected) and all(_plain(info.get(k)) == common[k] for k in _SAME):
            with self._cond:
                server.agreed = True
            return ""
        return _differs(info, expected, common)

    def refuse(self, server: _Server, why: str) -> None:
        """Leave ``server`` out of this run: it serves something else."""
        with self._cond:
            server.last_failure, server.agreed = why, False
            server.healthy, server.next_check = False, math.inf
            self._cond.notify_all()

    def call(self, name: str, *args: Any) -> Any:
        """An extra of the served env that takes arguments (``seeds``, ...), asked of the
        first healthy server that answers; None when the env has no such extra."""
        failures = []
        query = f"?name={quote(name)}&args={quote(json.dumps(list(args)))}"
        for server in [s for s in self.servers if s.healthy] or self.servers:
            try:
                reply = get_json(
                    server.url + CALL_PATH + query,
                    self.timeout,
                    limit=64 << 20,
                    auth=self.auth(server),
                )
            except Exception as exc:
                failures.append(f"{server.url}: {_why(exc)}")
                continue
            if isinstance(reply, dict) and "value" in reply:
                return reply["value"]
            failures.append(f"{server.url}: an answer without a value")
        raise ConnectionError(f"No env server answered {name}: " + "; ".join(failures))

    # -- placing episodes ---------------------------------------------------------------------
    def acquire(self, deadline: float, stop: Callable[[], bool] = lambda: False) -> _Server | None:
        """The healthy server with the most free sessions, its session counted; None at the
        deadline (after waiting for one to come free or back) or once ``stop()`` says so."""
        with self._cond:
            while not stop():
                now = time.monotonic()
                self._check_failed(now)
                ready = [s for s in self.servers if s.healthy and s.free(now) > 0]
                if ready:
                    server = max(ready, key=lambda s: (s.free(now), -s.played))
                    server.live += 1
                    server.played += 1
                    return server
                if now >= deadline:
                    return None
                self._cond.wait(min(_WAIT_TICK, deadline - now))
            return None

    def release(self, server: _Server) -> None:
        with self._cond:
            server.live = max(0, server.live - 1)
            self._cond.notify_all()

    def busy(self, server: _Server) -> None:
        """The server answered busy: other clients hold its sessions."""
        with self._cond:
            server.busy_until = time.monotonic() + BUSY_SECONDS

    def failed(self, server: _Server, why: str) -> None:
        """Take ``server`` out until ``/health`` answers again (checked with backoff)."""
        with self._cond:
            server.last_failure = why
            if server.healthy:
                server.healthy = False
                server.backoff = HEALTH_BACKOFF[0]
                server.next_check = time.monotonic() + server.backoff

    def failures(self) -> str:
        with self._cond:
            return "; ".join(_failure(s) for s in self.servers)

    def spread(self) -> dict[str, int]:
        """Episodes started on each server so far."""
        with self._cond:
            return {s.url: s.played for s in self.servers}

    def _check_failed(self, now: float) -> None:
        for server in self.servers:
            if not server.healthy and not server.checking and now >= server.next_check:
                server.checking = True
                threading.Thread(
                    target=self._health, args=(server,), name="trl-env-health", daemon=True
                ).start()

    def _health(self, server: _Server) -> None:
        why = "draining"
        try:
            status = self._ask_info(server, 5.0)
            ok = isinstance(status, dict) and not status.get("draining")
            capacity = status.get("max_sessions") if ok else None
        except Exception as exc:
            ok, capacity, why = False, None, _why(exc)
        with self._cond:
            server.checking = False
            if ok and server.agreed is not False:
                server.healthy = True
                server.agreed = None  # a restarted server may serve another env: asked again
                if isinstance(capacity, int) and capacity > 0:
                    server.capacity = capacity
            else:
                server.backoff = min(server.backoff * 2, HEALTH_BACKOFF[1])
                server.next_check = time.monotonic() + server.backoff
                server.health = why
            self._cond.notify_all()


class ServerEnv:
    """One episode's env on an env server chosen at reset; the trl-env env protocol.

    ``expected`` is the env (registered name and options) the run would play here; an episode
    fails when the servers serve another one, instead of training on the wrong env.
    """

    def __init__(self, fleet: EnvServers, expected: Expected | None = None):
        self.fleet = fleet
        self.expected = expected
        self.server = ""  # the URL of the server that plays this episode
        self.slot_wait_seconds = 0.0
        self.reset_timeout = fleet.slot_timeout + fleet.timeout
        self._client: Any = None
        self._held: _Server | None = None
        self._pending: Any = None  # the client of a reset in flight
        self._closes = 0

    @property
    def system_prompt(self) -> str | None:
        return self.fleet.info(self.expected).get("system_prompt")

    @property
    def max_turns(self) -> int | None:
        return self.fleet.info(self.expected).get("max_turns")

    def seeds(self, split: str, count: int) -> Any:
        """The served env's own seeds (None when it has none: the engine's ``split-i`` then)."""
        if isinstance(count, int) and count > MAX_SEEDS:
            raise ValueError(
                f"{count:,} seeds were asked of {self.fleet}, which give at most {MAX_SEEDS:,} "
                "a request; ask for fewer"
            )
        self.fleet.info(self.expected)  # asked of a server of this env only
        return self.fleet.call("seeds", split, count)

    def demonstrate(self, *args: Any) -> Any:
        """The served env's ``demonstrate`` extra (None when it has none)."""
        self.fleet.info(self.expected)
        return self.fleet.call("demonstrate", *args)

    def reset(self, seed: str) -> str:
        self.close()
        closes = self._closes  # a close() from now on (the engine's timeout) ends this reset
        self.fleet.info(self.expected)  # the servers of this env, sized; the others left out
        start = time.monotonic()
        deadline = start + self.fleet.slot_timeout
        while True:
            if self._closes != closes:
                raise ConnectionError("the episode was closed while it waited for an env server")
            server = self.fleet.acquire(deadline, lambda: self._closes != closes)
            if self._closes != closes:
                if server is not None:
                    self.fleet.release(server)
                raise ConnectionError("the episode was closed while it waited for an env server")
            if server is None:
                raise ConnectionError(
                    f"No env server could take the episode within slot_timeout "
                    f"({self.fleet.slot_timeout:g} s): {self.fleet.failures()}."
                )
            self.server = server.url  # a reset that fails names its server too
            if server.agreed is None:
                why = self.fleet.vet(server, self.expected)
                if why:
                    self.fleet.release(server)
                    self.fleet.refuse(server, why)
                    continue
            client = served_client(
                server.url,
                timeout=self.fleet.timeout,
                connect_timeout=self.fleet.connect_timeout,
                credentials=server.credentials,
                token=self.fleet.token,
            )
            began = time.monotonic()
            self._pending = client  # close() from another thread ends this reset
            try:
                text = client.reset(seed)
            except ServerBusyError:
                self._let_go(client, server)
                self.fleet.busy(server)
                continue
            except ConnectionLostError as exc:
                self._let_go(client, server)
                if self._closes != closes or "no reply" not in str(exc):
                    raise  # the episode was closed, or the server dropped it: not a silence
                # A server that takes sessions and never answers is failing, as one that
                # refuses them is: out until /trl-env answers, and the episode goes elsewhere.
                self.fleet.failed(server, str(exc))
                continue
            except ServerError:
                # The env itself failed (the server is fine).
                self._let_go(client, server)
                raise
            except OpenEnvError as exc:
                self._let_go(client, server)
                self.fleet.failed(server, str(exc))
                continue
            except BaseException:
                self._let_go(client, server)
                raise
            finally:
                self._pending = None
            self._client, self._held, self.server = client, server, server.url
            # Waiting for a server is not env time (the episode's env_seconds leave it out).
            self.slot_wait_seconds = began - start
            return str(text)

    def step(self, action: str) -> str:
        client, server = self._client, self._held
        if client is None or server is None:
            raise RuntimeError("step before reset, or after the episode's server was given back")
        try:
            return str(client.step(action))
        except ConnectionLostError as exc:
            # A server that dropped the connection is taken out; not one this episode closed
            # (the engine's step timeout) or one that was only slow to answer.
            if self._held is server and "no reply" not in str(exc):
                self.fleet.failed(server, str(exc))
            raise

    @property
    def alive(self) -> bool:
        return bool(self._client is not None and self._client.alive)

    @property
    def reward(self) -> float:
        if self._client is None:
            return 0.0
        observation = self._client.observation or {}
        if observation.get("reward_error"):
            raise RuntimeError(f"the env server {self.server} said: {observation['reward_error']}")
        return float(self._client.reward)

    @property
    def success(self) -> bool | None:
        observation = (self._client.observation if self._client is not None else None) or {}
        value = observation.get("success")
        return value if isinstance(value, bool) else None

    def close(self) -> None:
        self._closes += 1
        pending = self._pending
        if pending is not None:  # its reset fails at once and gives its server back
            pending.close()
        client, server = self._client, self._held
        self._client = self._held = None
        if client is not None and server is not None:
            self._let_go(client, server)

    def _let_go(self, client: Any, server: _Server) -> None:
        try:
            client.close()
        finally:
            self.fleet.release(server)


def _fits(info: dict[str, Any], expected: Expected | None) -> bool:
    """Whether a server that said ``info`` serves ``expected`` (compared by the server's salted
    digest: a server names its options but never says their values)."""
    if expected is None:
        return True
    name, options = expected
    salt, digest = info.get("options_salt"), info.get("options_digest")
    if info.get("env") != name or not isinstance(salt, str) or not isinstance(digest, str):
        return False
    try:
        return hmac.compare_digest(options_digest(_plain(options), salt), digest)
    except ValueError:  # a salt that is not hex
        return False


def _not_served(said: dict[str, dict[str, Any]], expected: Expected | None, fleet: Any) -> str:
    served = "; ".join(
        f"{url}: {info.get('env')!r} with options named {info.get('options') or []}"
        for url, info in said.items()
    )
    if expected is None:
        return f"Every server of {fleet} was left out of this run ({served or 'none answered'})"
    name, options = expected
    return (
        f"{fleet} serve no env {name!r} with options {redact(_plain(options))} ({served}; "
        "values not shown); start servers for it (trl-env serve --env NAME --env-arg K=V), "
        "or play it here without env_servers"
    )


def _differs(info: dict[str, Any], expected: Expected | None, common: dict[str, Any]) -> str:
    """Why a server that said ``info`` is not one of this run's."""
    if not _fits(info, expected) and expected is not None:
        said = f"the env {info.get('env')!r} with options named {info.get('options') or []}"
        wanted = f"the run's {expected[0]!r} with its options"
    else:
        differ = [k for k in _SAME if _plain(info.get(k)) != common[k]]
        said = ", ".join(f"{k} {_plain(info.get(k))!r}" for k in differ)
        wanted = "the run's other servers serve " + ", ".join(repr(common[k]) for k in differ)
    return (
        f"it serves {said}, where {wanted}; every env server of a run must serve the same env "
        "with the same settings"
    )


def _plain(options: Any) -> Any:
    """Values as JSON carries them, so 7 and 7.0 or a tuple and a list compare equal."""
    return json.loads(json.dumps(options, sort_keys=True, default=str))


class ServedHandle(EnvHandle):
    """The engine's handle on a :class:`ServerEnv`: it also names the episode's server."""

    def server(self) -> str:
        return str(self.env.server)


class ServersHost:
    """The ``servers`` kind of env host: every episode's env is a :class:`ServerEnv` of the
    fleet of ``config.env_servers``, standing in for the spec's env (a registered env's name and
    options are checked at each reset against what the servers serve)."""

    gate: Any = None

    def __init__(self, spec: EnvSpec, config: Any) -> None:
        self.fleet = fleet_for(config.env_servers, config.slot_timeout, config.step_timeout)
        self.name = spec.env if isinstance(spec.env, str) else None
        self.call_timeout = config.step_timeout
        self.label = repr(self.fleet)

    def open(self, index: int, options: Mapping[str, Any]) -> EnvHandle:
        expected = None if self.name is None else (self.name, dict(options))
        return ServedHandle(cast(Env, ServerEnv(self.fleet, expected)), self.label)

    def close(self) -> None:
        """Nothing to let go: the fleet, its health and counts last for the process."""


_FLEETS: dict[tuple[Any, ...], EnvServers] = {}
_FLEETS_LOCK = threading.Lock()


def fleet_for(urls: Sequence[str], slot_timeout: float, timeout: float | None) -> EnvServers:
    """The fleet of these servers, one per process, so its health and counts last across
    batches."""
    key = (tuple(urls), slot_timeout, timeout)
    with _FLEETS_LOCK:
        if key not in _FLEETS:
            _FLEETS[key] = EnvServers(urls, slot_timeout=slot_timeout, timeout=timeout or 600.0)
        return _FLEETS[key]


def _normalize(url: str) -> str:
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"An env server is an http(s)://HOST:PORT URL, not {redact_text(url)!r}.")
    return url


def _failure(server: _Server) -> str:
    if server.healthy:
        return f"{server.url}: no free session"
    health = f" (then /health: {server.health})" if server.health else ""
    return f"{server.url}: {server.last_failure}{health}"


def _why(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    return str(exc) or type(exc).__name__

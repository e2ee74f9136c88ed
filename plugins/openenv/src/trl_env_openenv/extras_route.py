"""``GET /trl-env/call?name=NAME&args=JSON``: an extra of the served env that takes arguments.

A client playing on env servers needs more of the env than its episodes: its own seeds
(``seeds(split, count)``) and its ``demonstrate`` extra. This route makes one env in a worker
process of its own (never one of the sessions' workers), calls the extra, closes the env and
answers ``{"value": ...}`` (null when the env has no such extra). Only the names in
:data:`CALLABLE` are answered, with arguments of the shape each takes and bounded in size: a
request costs the server what its answer costs, so a client asks for at most
:data:`MAX_SEEDS` seeds at once (ten million took 1.1 GB and half a minute).
"""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any

from trl_env.errors import IsolationError

if TYPE_CHECKING:
    from trl_env.hosts.pool import EnvProcessPool

CALL_PATH = "/trl-env/call"
CALLABLE = ("seeds", "demonstrate")
MAX_ARGS_CHARS = 10_000
# Seeds one request may ask for: a run's worth (each is a string the worker sends back, and a
# worker's reply holds at most a million values).
MAX_SEEDS = 200_000


class Extras:
    """The route's endpoint for the env ``env`` with ``options``: one call at a time, in one
    worker kept for the next and killed by :meth:`close` with the sessions' workers."""

    def __init__(
        self, env: str, options: dict[str, Any], step_timeout: float, pass_env: tuple[str, ...] = ()
    ) -> None:
        self.env, self.options, self.step_timeout = env, options, step_timeout
        self.pass_env = pass_env
        self._pool: EnvProcessPool | None = None
        self._lock = threading.Lock()
        self._closed = False

    def call(self, name: str, args: str = "[]") -> dict[str, Any]:
        from fastapi import HTTPException

        from trl_env.hosts.pool import EnvProcessPool

        if name not in CALLABLE:
            raise HTTPException(404, f"{name!r} is not an extra this route calls ({CALLABLE})")
        try:
            values = json.loads(args) if len(args) <= MAX_ARGS_CHARS else None
        except ValueError:
            values = None
        if not isinstance(values, list):
            raise HTTPException(422, "args must be a JSON list of at most 10,000 characters")
        problem = _bad_args(name, values)
        if problem:
            raise HTTPException(422, problem)
        # A call ahead of this one has at most its step timeout (its worker enforces it) and
        # the env's close as long: past that it is stuck, and this one is refused, not queued.
        if not self._lock.acquire(timeout=2 * self.step_timeout + 1):
            raise HTTPException(503, f"the env's extras are busy with a stuck {name} call")
        try:
            if self._closed:
                raise HTTPException(503, "the server is shutting down")
            if self._pool is None:
                self._pool = EnvProcessPool(
                    self.env, self.options, max_workers=1, pass_env=self.pass_env
                )
            remote = self._pool.open(self.step_timeout)
            try:
                value = remote.call(name, *values, timeout=self.step_timeout)
                remote.call("close", timeout=self.step_timeout)
            except IsolationError as exc:
                raise HTTPException(500, f"the env's {name} failed: {exc}") from None
            finally:
                remote.release()
        finally:
            self._lock.release()
        return {"value": value}

    def close(self) -> None:
        """Kill the worker (a call running in it returns at once) and answer no more calls."""
        self._closed = True
        if self._pool is not None:
            self._pool.close()


def _bad_args(name: str, values: list[Any]) -> str:
    """Why ``values`` are not arguments ``name`` takes ("" when they are)."""
    if name == "seeds":
        if len(values) != 2 or not isinstance(values[0], str):
            return "seeds takes [split, count]"
        count = values[1]
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            return f"seeds takes a whole count of seeds, not {json.dumps(count)[:40]}"
        if count > MAX_SEEDS:
            return f"seeds takes at most {MAX_SEEDS:,} seeds a request, not {count:,}"
    return ""

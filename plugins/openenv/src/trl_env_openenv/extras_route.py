"""``GET /trl-env/call?name=NAME&args=JSON``: an extra of the served env that takes arguments.

A client playing on env servers needs more of the env than its episodes: its own seeds
(``seeds(split, count)``) and its ``demonstrate`` extra. This route makes one env in a worker
process of its own (never one of the sessions' workers), calls the extra, closes the env and
answers ``{"value": ...}`` (null when the env has no such extra). Only the names in
:data:`CALLABLE` are answered.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from trl_env.errors import IsolationError

CALL_PATH = "/trl-env/call"
CALLABLE = ("seeds", "demonstrate")
MAX_ARGS_CHARS = 10_000


def extras_route(env: str, options: dict[str, Any], step_timeout: float) -> Any:
    """The route's endpoint for the env ``env`` with ``options``."""
    from fastapi import HTTPException

    from trl_env.hosts.pool import EnvProcessPool

    pool: list[EnvProcessPool] = []
    lock = threading.Lock()

    def call(name: str, args: str = "[]") -> dict[str, Any]:
        if name not in CALLABLE:
            raise HTTPException(404, f"{name!r} is not an extra this route calls ({CALLABLE})")
        try:
            values = json.loads(args) if len(args) <= MAX_ARGS_CHARS else None
        except ValueError:
            values = None
        if not isinstance(values, list):
            raise HTTPException(422, "args must be a JSON list of at most 10,000 characters")
        with lock:  # one call at a time, in one worker kept for the next
            if not pool:
                pool.append(EnvProcessPool(env, options, max_workers=1))
            remote = pool[0].open(step_timeout)
            try:
                value = remote.call(name, *values, timeout=step_timeout)
                remote.call("close", timeout=step_timeout)
            except IsolationError as exc:
                raise HTTPException(500, f"the env's {name} failed: {exc}") from None
            finally:
                remote.release()
        return {"value": value}

    return call

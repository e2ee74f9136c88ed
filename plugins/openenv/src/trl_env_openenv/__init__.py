"""trl-env-openenv: any OpenEnv environment server as a trl-env environment named ``openenv``.

``trl_env.load_env("openenv", url="http://127.0.0.1:8000")`` or, on the command line,
``--env openenv --env-arg url=http://127.0.0.1:8000``. Importing this package is cheap;
openenv-core is imported when the first episode starts.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .env import OpenEnvEnv
    from .errors import (
        ConnectionLostError,
        OpenEnvError,
        OpenEnvOptionError,
        ProtocolMismatchError,
        ServerBusyError,
        ServerError,
        ServerUnreachableError,
        WrongURLError,
    )
    from .mapping import seed_to_int

# Imported on first use: the `trl_env.plugins` entry point (.commands) imports this package at
# every CLI start, and the env modules would add a quarter to trl-env's start-up time.
_LAZY = {"OpenEnvEnv": ".env", "seed_to_int": ".mapping"}


def __getattr__(name: str) -> Any:
    if name in _LAZY or name in __all__:
        return getattr(importlib.import_module(_LAZY.get(name, ".errors"), __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ConnectionLostError",
    "OpenEnvEnv",
    "OpenEnvError",
    "OpenEnvOptionError",
    "ProtocolMismatchError",
    "ServerBusyError",
    "ServerError",
    "ServerUnreachableError",
    "WrongURLError",
    "seed_to_int",
]

"""trl-env-openenv: any OpenEnv environment server as a trl-env environment named ``openenv``.

``trl_env.load_env("openenv", url="http://127.0.0.1:8000")`` or, on the command line,
``--env openenv --env-arg url=http://127.0.0.1:8000``. Importing this package is cheap;
openenv-core is imported when the first episode starts.
"""

from __future__ import annotations

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

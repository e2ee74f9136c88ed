"""What can go wrong talking to an OpenEnv server, one class per thing the user fixes differently.

Every class is a :class:`trl_env.errors.TrlEnvError`: the CLI prints its message as one sentence,
and the rollout engine ends only the episode whose env raised it.
"""

from __future__ import annotations

from trl_env.errors import TrlEnvError, UsageError


class OpenEnvError(TrlEnvError):
    """Talking to an OpenEnv environment server failed."""


class OpenEnvOptionError(OpenEnvError, UsageError):
    """An option of the ``openenv`` environment is invalid or does not fit the server's data."""


class ServerUnreachableError(OpenEnvError):
    """Nothing answered at the URL (refused, timed out, 5xx), even after the retries."""


class WrongURLError(OpenEnvError):
    """Something answers, but there is no OpenEnv environment at that path (HTTP 404)."""


class ProtocolMismatchError(OpenEnvError):
    """The server answers, but not as an OpenEnv environment server."""


class ServerBusyError(OpenEnvError):
    """The server refused a new session because all its sessions are in use, even after retries."""


class ServerError(OpenEnvError):
    """The server's environment failed on its side (its reset or step raised)."""


class ConnectionLostError(OpenEnvError):
    """The session broke mid-episode (server died, restarted or stopped answering)."""

"""The OpenEnv classes this plugin uses, imported without OpenEnv's Gradio web UI.

The one module that imports OpenEnv. Both ``openenv`` (0.10, the maintained distribution the
plugin depends on) and ``openenv-core`` (0.3, its former name) install them as ``openenv.core``
with these names; ``make compat`` runs the plugin's tests against each (docs/compatibility.md).

Importing anything from ``openenv.core`` runs its package ``__init__``, which imports the web UI
module and with it Gradio: about 15 of the 20 seconds an import takes on a 2-core machine, paid
by every ``trl-env openenv`` probe, ``trl-env serve`` start and first OpenEnv episode. trl-env
never serves that UI, and openenv-core itself falls back when the module cannot be imported, so
the module is held back while the package loads, then released: a later import of it (a server
started with ``ENABLE_WEB_INTERFACE``) loads it as usual.
"""

from __future__ import annotations

import sys

_WEB_UI = "openenv.core.env_server.web_interface"
_held_back = _WEB_UI not in sys.modules
if _held_back:
    sys.modules[_WEB_UI] = None  # type: ignore[assignment]  # import raises ModuleNotFoundError
try:
    import openenv.core.env_client as env_client  # its ws_connect opens every client WebSocket
    from openenv.core import GenericEnvClient, SyncEnvClient
    from openenv.core.client_types import StepResult
    from openenv.core.env_server import Action, Environment, Observation, State
    from openenv.core.env_server.http_server import HTTPEnvServer
    from openenv.core.env_server.types import ConcurrencyConfig
finally:
    if _held_back and sys.modules.get(_WEB_UI, False) is None:
        del sys.modules[_WEB_UI]

__all__ = [
    "Action",
    "ConcurrencyConfig",
    "Environment",
    "GenericEnvClient",
    "HTTPEnvServer",
    "Observation",
    "State",
    "StepResult",
    "SyncEnvClient",
    "env_client",
]

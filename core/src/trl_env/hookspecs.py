"""Hook specifications for ``trl_env.plugins`` entry points (pluggy, project name ``trl_env``).

Each is fired through :func:`trl_env.plugins.manager` at the place its docstring names; a hook
that raises is reported and the run goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:  # the CLI imports click; a library user firing episode hooks need not
    import click

hookspec = pluggy.HookspecMarker("trl_env")
hookimpl = pluggy.HookimplMarker("trl_env")


@hookspec
def register_commands(cli: click.Group) -> None:
    """Add commands to the ``trl-env`` command group (when the CLI lists or looks up commands)."""


@hookspec
def register_backends(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Register generation backends: ``register(name, factory)``; ``factory(BackendContext)``
    returns a backend (called by ``trl_env.backends.build_backend``, e.g. for ``--backend``)."""


@hookspec
def register_env_hosts(register: Callable[..., None]) -> None:
    """Register places envs run: ``register(kind, factory, selected_by="")``; ``factory(spec,
    config)`` returns a :class:`trl_env.hosts.EnvHost` for one :class:`trl_env.EnvSpec` (called
    by ``trl_env.hosts.open_host``). ``--env-isolation KIND`` chooses a kind; ``selected_by``
    names a rollout option whose being set chooses it too (``servers``: ``env_servers``)."""


@hookspec
def on_episode_end(episode: dict[str, Any]) -> None:
    """Called with each finished episode record (rollouts, eval and training alike)."""


@hookspec
def on_train_begin(config: dict[str, Any]) -> None:
    """Called once before training starts, with the resolved training configuration."""


@hookspec
def on_train_end(summary: dict[str, Any]) -> None:
    """Called once after training, with the closing summary."""

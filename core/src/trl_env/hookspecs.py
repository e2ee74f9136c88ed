"""Hook specifications for ``trl_env.plugins`` entry points (pluggy, project name ``trl_env``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
import pluggy

hookspec = pluggy.HookspecMarker("trl_env")
hookimpl = pluggy.HookimplMarker("trl_env")


@hookspec
def register_commands(cli: click.Group) -> None:
    """Add commands to the ``trl-env`` command group."""


@hookspec
def register_backends(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Register generation backends: ``register(name, factory)``."""


@hookspec
def on_episode_end(episode: dict[str, Any]) -> None:
    """Called with each finished episode record (rollouts, eval and training alike)."""


@hookspec
def on_train_begin(config: dict[str, Any]) -> None:
    """Called once before training starts, with the resolved training configuration."""


@hookspec
def on_train_end(summary: dict[str, Any]) -> None:
    """Called once after training, with the closing summary."""

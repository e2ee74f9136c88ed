"""The ``trl-env`` command group: one readable line for user errors, plugin commands added."""

from __future__ import annotations

import importlib
import importlib.metadata as md
from typing import Any

import click

from ..errors import TrlEnvError

# name -> "module:attribute"; each module stays light at import time.
_COMMANDS = {
    "list": "trl_env.cli.list_cmd:list_cmd",
    "check": "trl_env.cli.check_cmd:check_cmd",
    "eval": "trl_env.cli.eval_cmd:eval_cmd",
    "train": "trl_env.cli.train_cmd:train_cmd",
    "play": "trl_env.cli.play_cmd:play_cmd",
    "new": "trl_env.cli.new_cmd:new_cmd",
    "view": "trl_env.cli.view_cmd:view_cmd",
    "compare": "trl_env.cli.compare_cmd:compare_cmd",
}


class TrlEnvGroup(click.Group):
    """Turns :class:`TrlEnvError` into ``Error: <message>`` and its exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TrlEnvError as exc:
            click.secho(f"Error: {exc}", err=True, fg="red")
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            ctx.exit(130)


def _version() -> str:
    try:
        return md.version("trl-env")
    except md.PackageNotFoundError:
        return "unknown"


@click.group(cls=TrlEnvGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(_version(), "--version", prog_name="trl-env")
def cli() -> None:
    """Train LLM agents with RL in text environments, on top of TRL.

    Environments and model processors are plugins resolved by name: install
    trl-env-qwen and trl-env-sokoban, then `trl-env train --env sokoban --processor qwen3`.
    """


def register_command(name: str, target: str) -> None:
    """Add a built-in command given as ``module:attribute``."""
    module, attr = target.split(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        return  # command not part of this build
    cli.add_command(getattr(mod, attr), name)


for _name, _target in _COMMANDS.items():
    register_command(_name, _target)


def _add_plugin_commands() -> None:
    from ..plugins import manager

    pm = manager()
    pm.load_entry_points()
    # Each plugin adds its commands on its own; one that fails is named, the others still work.
    for problem in pm.add_commands(cli):
        click.secho(f"warning: {problem}", err=True, fg="yellow")


_add_plugin_commands()


def main() -> None:
    cli(prog_name="trl-env")

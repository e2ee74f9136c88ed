"""The ``trl_env.plugins`` hooks of trl-env-openenv: ``trl-env openenv URL`` probes a server."""

from __future__ import annotations

import json
from typing import Any

import click

from trl_env.hookspecs import hookimpl


@click.command("openenv")
@click.argument("url")
@click.option("--seed", default="0", show_default=True, help="Seed of the probing episode.")
@click.option("--action", help="Also send one action and show the reply.")
@click.option("--env-arg", "env_args", multiple=True, metavar="KEY=VALUE", help="Env option.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def openenv_cmd(
    url: str, seed: str, action: str | None, env_args: tuple[str, ...], as_json: bool
) -> None:
    """Check that URL serves an OpenEnv environment: reset it once and show what the agent sees.

    Fails with one sentence (server down, wrong path, not an OpenEnv server) and exit status 1.
    """
    from trl_env import extras
    from trl_env.cli.options import parse_kv

    from .env import OpenEnvEnv

    env = OpenEnvEnv(url=url, **parse_kv(env_args, "--env-arg"))
    try:
        result: dict[str, Any] = {"url": env.url, "seed": seed, "observation": env.reset(seed)}
        if action is not None:
            result["action"] = action
            result["reply"] = env.step(action)
        result.update(reward=env.reward, alive=env.alive, system_prompt=extras.system_prompt(env))
    finally:
        env.close()
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.secho(f"OpenEnv server at {result['url']} answered.", fg="green")
    click.echo(f"\nObservation after reset({seed!r}):\n{result['observation']}")
    if action is not None:
        click.echo(f"\nReply to {action!r}:\n{result['reply']}")
    click.echo(f"\nreward {result['reward']}, alive {result['alive']}")


@hookimpl
def register_commands(cli: click.Group) -> None:
    cli.add_command(openenv_cmd)

"""``trl-env play``: play an environment by hand in the terminal, one action per line."""

from __future__ import annotations

import sys
from typing import Any

import click

# parse_kv lives in options.py, shared with the other commands, so that --env-arg reads the
# same everywhere; it is re-exported here under the name this command has documented.
from .options import env_options, parse_kv

__all__ = ["parse_kv", "play_cmd"]

QUIT_WORDS = frozenset({"quit", "exit", ":q"})


def _status(env: Any, quit_early: bool, turns: int, limit: int | None) -> str:
    if env.alive and quit_early:
        return "stopped by you"
    if env.alive and limit is not None and turns >= limit:
        return f"turn limit ({limit}) reached"
    return "episode over" if not env.alive else "still running"


@click.command("play")
@env_options
@click.option("--seed", default=None, help="Episode seed; default: the env's first eval seed.")
@click.option(
    "--max-turns",
    type=click.IntRange(min=1),
    default=None,
    help="Stop after this many turns; default: the env's max_turns, if it has one.",
)
@click.option("--no-system-prompt", is_flag=True, help="Do not print the system prompt.")
def play_cmd(
    env_name: str,
    seed: str | None,
    env_args: tuple[str, ...],
    max_turns: int | None,
    no_system_prompt: bool,
) -> None:
    """Play an environment yourself: type an action per line; `quit` or end of input stops."""
    from .. import extras
    from ..registry import load_env

    env = load_env(env_name, **parse_kv(env_args))
    if seed is None:
        seed = extras.seeds(env, "eval", 1)[0]
    limit = max_turns or extras.max_turns(env, 0) or None
    if not no_system_prompt:
        click.secho("System prompt:", bold=True)
        click.echo(extras.system_prompt(env) + "\n")
    click.secho(f"Seed {seed!r}. Type an action per line; 'quit' or Ctrl-D stops.\n", dim=True)
    click.echo(env.reset(seed))
    turns, quit_early = 0, False
    try:
        while env.alive and (limit is None or turns < limit):
            click.echo("> ", nl=False)
            line = sys.stdin.readline()  # CliRunner swaps sys.stdin in tests
            if not line or line.strip().lower() in QUIT_WORDS:
                quit_early = True
                click.echo()
                break
            action = line.rstrip("\r\n")
            if not sys.stdin.isatty():  # piped input: show it, so the output reads as a log
                click.echo(action)
            turns += 1
            click.echo(env.step(action))
    finally:
        extras.close(env)
    status = _status(env, quit_early, turns, limit)
    click.secho(f"\nReward: {float(env.reward):.3f} | turns: {turns} | {status}", bold=True)

"""``trl-env play``: play an environment by hand in the terminal, one action per line."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import click

# parse_kv lives in options.py, shared with the other commands, so that --env-arg reads the
# same everywhere; it is re-exported here under the name this command has documented.
from .options import env_options, parse_kv, rollout_options

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
@rollout_options(only=("env_isolation",))
def play_cmd(
    env_name: str,
    seed: str | None,
    env_args: tuple[str, ...],
    max_turns: int | None,
    no_system_prompt: bool,
    env_isolation: str | None,
) -> None:
    """Play an environment yourself: type an action per line; `quit` or end of input stops."""
    with _opened(env_name, parse_kv(env_args), env_isolation) as env:
        _play(env, seed, max_turns, no_system_prompt)


@contextlib.contextmanager
def _opened(name: str, options: dict[str, Any], isolation: str | None) -> Iterator[Any]:
    """The env, in this process or (``process``) in a worker process of its own."""
    from ..config import Isolation, RolloutConfig
    from ..spec import EnvSpec

    spec = EnvSpec(name, options=options)
    from ..hosts import host_kind

    chosen = RolloutConfig(env_isolation=Isolation(isolation or Isolation.AUTO))
    if host_kind(chosen, name) == Isolation.THREAD.value:
        yield spec.factory()()
        return
    from ..errors import IsolationError
    from ..hosts.pool import EnvProcessPool

    spec.factory(check=True)  # the registry's own errors for a bad name or option, here
    config = RolloutConfig(env_workers=1)
    # Only env calls have a deadline (the step timeout); the time a person takes to type is not
    # the env's. The worker's env is an Env like any other (hosts.pool.RemoteEnv).
    with EnvProcessPool.for_config(name, config, options) as pool:
        try:
            env = pool.open(config.step_timeout)
            try:
                yield env
            finally:
                env.release()
        except IsolationError as exc:
            from ..errors import TrlEnvError

            raise TrlEnvError(f"The env's worker process failed: {exc}") from exc


def _play(env: Any, seed: str | None, max_turns: int | None, no_system_prompt: bool) -> None:
    from .. import extras
    from ..terminal import printable, typed

    if seed is None:
        seed = extras.seeds(env, "eval", 1)[0]
    limit = max_turns or extras.max_turns(env, 0) or None
    if not no_system_prompt:
        click.secho("System prompt:", bold=True)
        click.echo(printable(extras.system_prompt(env)) + "\n")
    click.secho(f"Seed {seed!r}. Type an action per line; 'quit' or Ctrl-D stops.\n", dim=True)
    click.echo(printable(env.reset(seed)))
    turns, quit_early = 0, False
    try:
        while env.alive and (limit is None or turns < limit):
            click.echo("> ", nl=False)
            line = sys.stdin.readline()  # CliRunner swaps sys.stdin in tests
            if not line or line.strip().lower() in QUIT_WORDS:
                quit_early = True
                click.echo()
                break
            action = typed(line)
            if not action.strip() and action != line.rstrip("\r\n"):
                # Only special keys (an arrow's ESC [ D): not an action, and no turn spent.
                click.secho("(arrow and other special keys are not actions; type one)", dim=True)
                continue
            if not sys.stdin.isatty():  # piped input: show it, so the output reads as a log
                click.echo(action)
            turns += 1
            click.echo(printable(env.step(action)))
    finally:
        extras.close(env)
    status = _status(env, quit_early, turns, limit)
    click.secho(f"\nReward: {float(env.reward):.3f} | turns: {turns} | {status}", bold=True)

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
# Where the env runs, and what its worker processes get: as a run's envs (see RolloutConfig).
PLAY_OPTIONS = (
    "env_isolation", "env_pass_env", "env_user", "step_timeout", "env_servers", "slot_timeout",
)  # fmt: skip


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
@rollout_options(only=PLAY_OPTIONS)
def play_cmd(
    env_name: str,
    seed: str | None,
    env_args: tuple[str, ...],
    max_turns: int | None,
    no_system_prompt: bool,
    **rollout: Any,
) -> None:
    """Play an environment yourself: type an action per line; `quit` or end of input stops."""
    from ..spec import EnvSpec
    from .precheck import check_env, rollout_config, runs_elsewhere

    # one worker is all a person needs; only env calls have a deadline (the step timeout), the
    # time a person takes to type is not the env's
    given = {k: v for k, v in rollout.items() if v is not None}
    config = rollout_config({"env_workers": 1, **given})
    options, elsewhere = parse_kv(env_args), runs_elsewhere(config, env_name)
    check_env(env_name, options, config)
    with _opened(EnvSpec(env_name, options=options), config, elsewhere) as env:
        _play(env, seed, max_turns, no_system_prompt)


@contextlib.contextmanager
def _opened(spec: Any, config: Any, elsewhere: bool) -> Iterator[Any]:
    """The env, on its host as a run's would be (this process, a worker process of its own, or
    a plugin's place); a broken one is one sentence, as at a run's start (``elsewhere``: its
    options, which this process could not check, are checked there first)."""
    from ..errors import EnvFault, TrlEnvError
    from ..hosts import open_host
    from ..startup import check_options

    host = open_host(spec, config)
    try:
        if elsewhere:
            check_options(host, config, spec=spec)
        if host.gate is not None:  # a worker free for this env (handed back by its release)
            host.gate.acquire()
        try:
            handle = host.open(0, spec.options_at())
        except EnvFault as exc:
            raise TrlEnvError(f"The env could not be made: {exc}") from exc
        try:
            yield handle.env
        except EnvFault as exc:
            raise TrlEnvError(f"The env failed: {exc}") from exc
        finally:
            handle.release()
    finally:
        host.close()


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
        # read before the env is closed: one on a server or in a worker says no more after
        status, reward = _status(env, quit_early, turns, limit), float(env.reward)
    finally:
        extras.close(env)
    click.secho(f"\nReward: {reward:.3f} | turns: {turns} | {status}", bold=True)

"""The ``trl_env.plugins`` hooks of trl-env-openenv: ``trl-env openenv URL`` probes a server,
``trl-env serve --env NAME`` hosts an env as an OpenEnv server, and the ``servers`` env host
plays a run's episodes on such servers (``--env-server``)."""

from __future__ import annotations

from typing import Any

import click

from trl_env.hookspecs import hookimpl


@click.command("openenv")
@click.argument("url")
@click.option("--seed", default="0", show_default=True, help="Seed of the probing episode.")
@click.option("--action", help="Also send one action and show the reply.")
@click.option("--env-arg", "env_args", multiple=True, metavar="KEY=VALUE", help="Env option.")
@click.option(
    "--token-env",
    metavar="VARIABLE",
    help="Send the token in this environment variable as 'Authorization: Bearer' (the env "
    "option token_env). No token is sent otherwise: TRL_ENV_SERVE_TOKEN only when named here.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def openenv_cmd(
    url: str,
    seed: str,
    action: str | None,
    env_args: tuple[str, ...],
    token_env: str | None,
    as_json: bool,
) -> None:
    """Check that URL serves an OpenEnv environment: reset it once and show what the agent sees.

    Fails with one sentence (server down, wrong path, not an OpenEnv server) and exit status 1.
    """
    from trl_env import extras
    from trl_env.cli.options import parse_kv
    from trl_env.terminal import printable

    from .env import OpenEnvEnv
    from .errors import OpenEnvError

    options = parse_kv(env_args, "--env-arg")
    if token_env:
        options["token_env"] = token_env
    env = OpenEnvEnv(url=url, **options)
    try:
        result: dict[str, Any] = {"url": env.url, "seed": seed, "observation": env.reset(seed)}
        if action is not None:
            result["action"] = action
            result["reply"] = env.step(action)
        result.update(reward=env.reward, alive=env.alive, system_prompt=extras.system_prompt(env))
    except OpenEnvError as exc:  # its sentence may quote the server: no escapes reach the terminal
        exc.args = (printable(str(exc)),)
        raise
    finally:
        env.close()
    if as_json:  # JSON escapes every control character
        import json  # here: this module loads at every CLI start

        click.echo(json.dumps(result, indent=2))
        return
    click.secho(f"OpenEnv server at {result['url']} answered.", fg="green")
    click.echo(f"\nObservation after reset({seed!r}):\n{printable(result['observation'])}")
    if action is not None:
        click.echo(f"\nReply to {action!r}:\n{printable(result['reply'])}")
    click.echo(f"\nreward {result['reward']}, alive {result['alive']}")


def _seconds(flag: str, default: float, help: str, zero: bool = False) -> Any:
    """A duration option in seconds: above 0 (or 0 and above, with ``zero``)."""
    kind = click.FloatRange(0, min_open=not zero)
    return click.option(flag, default=default, show_default=True, type=kind, help=help)


def _names(given: tuple[str, ...]) -> tuple[str, ...]:
    from trl_env.config import comma_list

    return comma_list(given)


@click.command("serve")
@click.option("--env", "env_name", required=True, help="Registered env name (see `trl-env list`).")
@click.option("--env-arg", "env_args", multiple=True, metavar="KEY=VALUE", help="Env option.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535))
@click.option(
    "--max-sessions",
    default=64,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="Sessions (episodes) at once; more get OpenEnv's CAPACITY_REACHED, never a wait.",
)
@_seconds(
    "--drain-timeout",
    30.0,
    "After SIGTERM: seconds live sessions get to end before the server exits 0 (a second "
    "SIGTERM or SIGINT stops it at once).",
    zero=True,
)
@_seconds(
    "--idle-timeout",
    600.0,
    "Seconds a session may sit idle before it is closed (its connection too) and its slot freed.",
)
@_seconds(
    "--step-timeout",
    60.0,
    "Seconds one env call may take; past it the env's process is killed, the session fails.",
)
@click.option(
    "--env-pass-env",
    "env_pass_env",
    multiple=True,
    metavar="NAME",
    callback=lambda ctx, param, value: _names(value),
    help="Environment variable the env's worker processes get beyond a safe allow-list "
    "(repeatable NAME, or a comma list); never TRL_ENV_SERVE_TOKEN unless named.",
)
def serve_cmd(
    env_name: str,
    env_args: tuple[str, ...],
    host: str,
    port: int,
    max_sessions: int,
    drain_timeout: float,
    idle_timeout: float,
    step_timeout: float,
    env_pass_env: tuple[str, ...],
) -> None:
    """Serve an installed env over OpenEnv's protocol (openenv-core's server), one worker
    process per session: `--env-server URL` on train and eval plays it, and so does OpenEnv's
    GenericEnvClient. SIGTERM drains: no new sessions, then exit 0 once the live ones end.

    With TRL_ENV_SERVE_TOKEN set, every route but /health asks for the header
    `Authorization: Bearer <token>` (set the same variable where the trainer runs).
    """
    from trl_env.cli.options import parse_kv
    from trl_env.errors import UsageError
    from trl_env.registry import envs

    from .access import exposure_warning, read_token

    try:
        token = read_token()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    options = parse_kv(env_args, "--env-arg")
    # An unknown name fails here, in one sentence, from metadata: this process imports nothing
    # of the env (it holds the token); its workers do, and the probe says what fails there.
    envs.require(env_name)
    from .server import Host, serve

    served = Host(env_name, options, max_sessions, step_timeout, idle_timeout, env_pass_env)
    try:
        served.probe()
    except Exception as exc:
        served.pool.close()
        raise UsageError(f"The env {env_name!r} could not be made and read: {exc}") from None
    guarded = "; token required" if token else ""
    click.echo(
        f"Serving {env_name} on http://{host}:{port} (up to {max_sessions} sessions{guarded}); "
        "SIGTERM drains.",
        err=True,
    )
    warning = exposure_warning(host, port, token)
    if warning:
        click.secho(warning, fg="yellow", err=True)
    serve(served, host, port, drain_timeout, token)


@hookimpl
def register_env_hosts(register: Any) -> None:
    """``servers``: the env servers of ``--env-server``, which chooses this kind (imported when
    a run uses them)."""
    from trl_env.discovery import LazyFactory

    register("servers", LazyFactory("trl_env_openenv.fleet:ServersHost"), selected_by="env_servers")


@hookimpl
def register_commands(cli: click.Group) -> None:
    cli.add_command(openenv_cmd)
    cli.add_command(serve_cmd)

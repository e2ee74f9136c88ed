"""``trl-env list``: what is installed, with distribution, version and status.

Environments and processors come from metadata only (nothing of theirs is imported, so a broken
one is listed too); hook plugins are imported, as at every CLI start, to report their failures
and the backends they register. Plain text, no rich: listing must start fast.
"""

from __future__ import annotations

from collections import Counter

import click

from .. import discovery, registry
from ..plugins import manager

SECTIONS = (
    ("env", "Environments"),
    ("processor", "Processors"),
    ("backend", "Generation backends"),
    ("host", "Env hosts (--env-isolation)"),
    ("plugin", "Hook plugins"),
    ("distribution", "Broken distributions"),
)
COLUMNS = ("name", "distribution", "version", "value", "status")
HEADERS = ("name", "distribution", "version", "entry point", "status")


def rows() -> list[dict[str, str]]:
    """One dict per name (``kind``, ``name``, ``value``, ``distribution``, ``version``,
    ``status``), plus one per distribution whose metadata is broken."""
    pm = manager()
    pm.load_entry_points()
    pm.add_commands(click.Group("probe"))  # so that a failing register_commands shows here too
    infos = registry.all_infos() + pm.backend_infos() + pm.infos()
    counts = Counter((i.kind, i.name) for i in infos if i.enabled)
    out = []
    for info in infos:
        status = "ok"
        if not info.enabled:
            status = f"left out by {discovery.SELECT_VAR}"
        elif counts[(info.kind, info.name)] > 1:
            status = "conflict: registered by more than one distribution"
        elif info.kind == "plugin" and info.name in pm.failures:
            status = pm.failures[info.name]
        out.append({**info.to_dict(), "status": status})
    for broken in discovery.scan().broken:
        out.append(
            {
                "kind": "distribution",
                "name": broken.distribution,
                "value": "",
                "distribution": broken.distribution,
                "version": broken.version,
                "status": f"broken: {broken.reason}",
            }
        )
    return out


@click.command("list")
@click.option(
    "--env",
    "env_name",
    metavar="NAME",
    help="Show the options of one environment (what --env-arg, mixtures and curricula set).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list for scripts.")
def list_cmd(env_name: str | None, as_json: bool) -> None:
    """List installed environments, processors, backends and plugins.

    Each with its distribution, version and status; env hosts are the places envs can run
    (--env-isolation KIND). Environments and processors are read from
    package metadata only, so a broken one is listed too. TRL_ENV_PLUGINS (a comma list of
    distributions or names; empty for none) limits what is loaded; what it leaves out is listed
    as such. With --env NAME: that environment's options (this imports it).
    """
    if env_name is not None:
        _env_options(env_name, as_json)
        return
    found = rows()
    if as_json:
        import json  # only here: plain `list` imports what it prints

        click.echo(json.dumps(found, indent=2))
        return
    for kind, title in SECTIONS:
        section = [r for r in found if r["kind"] == kind]
        if section:
            click.echo(f"{title}:")
            click.echo(_table(section))
        elif kind != "distribution":
            click.echo(f"{title}: none installed.")


def _table(section: list[dict[str, str]]) -> str:
    cells = [HEADERS] + [tuple(row[c] for c in COLUMNS) for row in section]
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS) - 1)]
    lines = []
    for n, line in enumerate(cells):
        padded = [v.ljust(w) for v, w in zip(line, widths, strict=False)]
        text = "  " + "  ".join([*padded, line[-1]])
        bad = n > 0 and line[-1] != "ok"
        lines.append(click.style(text, fg="red") if bad else text)
    return "\n".join(lines)


ACCEPTS_WIDTH = 60


def _env_options(name: str, as_json: bool) -> None:
    from dataclasses import asdict

    from ..envkit import option_specs

    factory = registry.envs.factory(name)
    specs = option_specs(factory)
    if as_json:
        import json

        click.echo(json.dumps([asdict(s) for s in specs], indent=2, default=str))
        return
    click.echo(_demonstrates(name, factory))
    if not specs:
        click.echo(f"{name} declares no options (it is not an EnvKit env); see its documentation.")
        return
    click.echo(f"Options of {name} (--env-arg KEY=VALUE, or `options:` in a config file):")
    import textwrap

    # A long list of accepted values (a library's game ids) wraps in its own column.
    cells = [("name", "default", ["accepts"], "")] + [
        (
            s.name,
            str(s.default),
            textwrap.wrap(s.accepted, ACCEPTS_WIDTH, break_on_hyphens=False) or [""],
            s.help,
        )
        for s in specs
    ]
    w_name, w_default = (max(len(c[i]) for c in cells) for i in (0, 1))
    w_accepts = max(len(part) for c in cells for part in c[2])
    for name_, default, accepts, help_ in cells:
        for i, part in enumerate(accepts):
            head = (
                f"{name_:<{w_name}}  {default:<{w_default}}"
                if i == 0
                else " " * (w_name + 2 + w_default)
            )
            line = f"  {head}  {part:<{w_accepts}}  {help_ if i == 0 else ''}"
            click.echo(line.rstrip())


def _demonstrates(name: str, factory: object) -> str:
    """Whether the env has the ``demonstrate`` extra: episodes for ``trl-env sft``."""
    from ..extras import demonstrates

    has = demonstrates(factory)
    if has is False:
        return f"{name} gives no demonstrations (no demonstrate), so `trl-env sft` cannot use it."
    if has is None:
        return f"{name} may give demonstrations for `trl-env sft`: it is made by a function."
    return f"{name} demonstrates: `trl-env sft --env {name}` warms a model up on its episodes."

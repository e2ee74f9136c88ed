"""``trl-env list``: installed environments, processors and plugins, from metadata only."""

from __future__ import annotations

import json
from collections import Counter

import click

from .. import registry
from ..plugins import manager


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list for scripts.")
def list_cmd(as_json: bool) -> None:
    """List installed environments, processors and plugins with their distribution and version.

    Reads package metadata only: nothing is imported, so a broken plugin is listed too.
    """
    pm = manager()
    pm.load_entry_points()  # hook plugins load at CLI start anyway; this records their failures
    infos = registry.all_infos() + pm.infos()
    counts = Counter((i.kind, i.name) for i in infos)
    rows = []
    for info in infos:
        row = info.to_dict()
        status = "ok"
        if counts[(info.kind, info.name)] > 1:
            status = "conflict: registered by more than one distribution"
        elif info.kind == "plugin" and info.name in pm.failures:
            status = pm.failures[info.name]
        row["status"] = status
        rows.append(row)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for kind, title in (
        ("env", "Environments"),
        ("processor", "Processors"),
        ("plugin", "Plugins"),
    ):
        table = Table(title=title, title_justify="left", expand=False)
        for col in ("name", "distribution", "version", "entry point", "status"):
            table.add_column(col)
        for row in rows:
            if row["kind"] == kind:
                style = None if row["status"] == "ok" else "red"
                table.add_row(
                    row["name"],
                    row["distribution"],
                    row["version"],
                    row["value"],
                    row["status"],
                    style=style,
                )
        if table.row_count:
            console.print(table)
        else:
            console.print(f"{title}: none installed.")

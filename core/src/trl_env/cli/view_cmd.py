"""``trl-env view``: an HTML report of a training run or an eval file."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("view")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Where to write it.")
@click.option("--open", "open_browser", is_flag=True, help="Open the report in a browser.")
def view_cmd(path: Path, out: Path | None, open_browser: bool) -> None:
    """Write an offline HTML report (plots of reward, turns and episode status, sample episodes).

    PATH is a training output directory (reads episodes/rank*.jsonl and summary.json) or a
    JSONL file written by `trl-env eval --out`. The report goes to PATH/report.html or
    FILE.html unless --out says otherwise.
    """
    from ..report import write_report

    target = write_report(path, out)
    click.echo(f"Report written to {target}")
    if open_browser:
        click.launch(str(target))

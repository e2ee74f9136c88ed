"""``trl-env view``: one self-contained HTML report of a training run or an eval file."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("view")
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write it (default: PATH/report.html, or FILE.html next to an eval file).",
)
@click.option("--open", "open_browser", is_flag=True, help="Open the report in a browser.")
def view_cmd(path: Path, out: Path | None, open_browser: bool) -> None:
    """Write an offline HTML report: summary, plots and every episode as a conversation.

    PATH is a training output directory (episodes/rank*.jsonl, summary.json, config.yaml and
    the TensorBoard logs in runs/) or a JSONL file written by `trl-env eval --out`. The page
    needs no network; its episode list is filtered and paged in the browser. A mixed run is
    broken down per env and curriculum stage, with a reward line per env; the held-out
    episodes of --eval-every are kept apart from the training ones.

    \b
    Example:
      trl-env view eval.jsonl -o eval.html
    """
    from ..errors import UsageError
    from ..report import default_target, write_report

    target = out or default_target(path)
    if not path.exists():
        raise UsageError(f"{path} does not exist; give a training output directory or eval file.")
    try:
        target = write_report(path, target)
    except OSError as exc:
        raise UsageError(f"Cannot write the report to {target}: {exc.strerror or exc}.") from exc
    click.echo(f"Report written to {target}")
    if open_browser:
        click.launch(str(target))

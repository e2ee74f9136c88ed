"""``trl-env compare``: the paired reward difference of two runs on the seeds they share."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from ..report.compare import Comparison
    from ..report.load import Source


@click.command("compare")
@click.argument("a", type=click.Path(path_type=Path))
@click.argument("b", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (keys below).")
@click.option(
    "--held-out",
    is_flag=True,
    help="For a training directory, pair the held-out episodes of its last --eval-every "
    "evaluation instead of its training episodes.",
)
@click.option(
    "--html",
    "html_out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write a self-contained HTML page with plots.",
)
def compare_cmd(a: Path, b: Path, as_json: bool, held_out: bool, html_out: Path | None) -> None:
    """Compare the rewards of run B against run A, seed by seed.

    A and B are eval files (`trl-env eval --out`) or training output directories. Episodes
    are paired on their seed (and env, and curriculum stage when both runs had one); the mean
    of B - A comes with a 95% t interval, per env, per env and stage, and overall, next to the
    success rate of each side and the two runs' model, processor and sampling options.

    \b
    JSON keys: a, b (the paths); metadata (field -> {a, b}); groups (one per
    env); stages (one per env and curriculum stage, empty without curricula);
    overall; only_a, only_b (seeds one side alone played); html. Each group:
    env, stage, n (paired seeds), mean_a, mean_b, mean_diff, low, high (95%
    interval of B - A), stdev, b_higher, ties, a_higher (seed counts),
    success_a, success_b ({successes, n, rate} over the paired seeds' episodes;
    null when no env says); a, b: each side's own figures over all its episodes
    of the group (episodes, reward, reward_low, reward_high, success, turns,
    status: per episode, the same as view, eval and summary.json show).
    mean_a and mean_b average each paired seed's mean reward.

    \b
    Example:
      trl-env compare base.jsonl tuned.jsonl --html compare.html
    """
    from ..errors import UsageError
    from ..report import load
    from ..report.compare import compare

    for path in (a, b):
        if not path.exists():
            raise UsageError(f"{path} does not exist; give an eval file or a training directory.")
    if html_out:
        from ..report import refuse_input

        refuse_input(html_out, a, b)
    first, second = load(a, scalars=False), load(b, scalars=False)
    result = compare(first, second, held_out=held_out)
    if html_out:
        from ..report.compare_page import render

        try:
            page = render(first, second, result)
        except RecursionError:  # a side file (summary.json) nested too deeply to render
            raise UsageError("A run holds values nested too deeply to render.") from None
        try:
            html_out.write_text(page, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"Cannot write {html_out}: {exc.strerror or exc}.") from exc
    if as_json:
        from ..report.compare_page import metadata_rows

        _, rows = metadata_rows(first, second)
        out = {
            "a": str(a),
            "b": str(b),
            "metadata": {row[0]: {"a": row[1], "b": row[2]} for row in rows},
            "groups": [p.to_dict() for p in result.groups],
            "stages": [p.to_dict() for p in result.stages],
            "overall": result.overall.to_dict(),
            "only_a": result.only_a,
            "only_b": result.only_b,
            "html": str(html_out) if html_out else None,
        }
        click.echo(json.dumps(out, indent=2))
        return
    _print(first, second, result, html_out)


def _print(first: Source, second: Source, result: Comparison, html_out: Path | None) -> None:
    import sys

    from rich import box
    from rich.console import Console
    from rich.table import Table

    from ..report.compare_page import (
        RUNS_NOTE,
        metadata_rows,
        result_head,
        result_rows,
        runs_head,
        runs_rows,
    )

    # piped output has no width; 150 columns keep each row on one line in a log, success
    # columns and stage rows included
    console = Console(width=None if sys.stdout.isatty() else 150)
    head, rows = metadata_rows(first, second)
    meta = Table(title="Runs", title_justify="left", box=box.SIMPLE_HEAD)
    for name in head:
        meta.add_column(name, overflow="fold")
    for row in rows:
        meta.add_row(*row, style="bold" if row[1] != row[2] else None)
    console.print(meta)
    own = Table(title="Each run's episodes", title_justify="left", box=box.SIMPLE_HEAD)
    for i, name in enumerate(runs_head(result)):
        own.add_column(name, justify="left" if i == 0 else "right", no_wrap=True)
    for row in runs_rows(result):
        own.add_row(*row)
    console.print(own)
    console.print(RUNS_NOTE, markup=False)
    paired = Table(
        title="Paired reward difference on shared seeds", title_justify="left", box=box.SIMPLE_HEAD
    )
    head = result_head(result)
    for i, name in enumerate(head):
        paired.add_column(
            name, justify="left" if i in (0, len(head) - 1) else "right", no_wrap=True
        )
    for row in result_rows(result):
        paired.add_row(*row)
    console.print(paired)
    console.print(f"Seeds only in A: {result.only_a}; only in B: {result.only_b} (left out).")
    if html_out:
        console.print(f"Plots written to {html_out}")

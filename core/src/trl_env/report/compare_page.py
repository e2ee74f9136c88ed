"""The ``trl-env compare --html`` page: metadata side by side, the paired table and its plots."""

from __future__ import annotations

from html import escape
from typing import Any

from . import charts
from .assets import CSS
from .compare import Comparison, Paired, verdict
from .load import Source
from .meta import describe, source_runs
from .page import num, table
from .stats import MeanCI

RUNS_NOTE = (
    "Per-episode means over all of each run's episodes (shared seeds or not), as view, eval "
    "and summary.json show them."
)


def metadata_rows(a: Source, b: Source) -> tuple[list[str], list[list[str]]]:
    """Rows (field, A, B) of both runs' metadata; several runs in one file are listed in turn."""

    def merged(source: Source) -> dict[str, str]:
        described = [describe(run) for run, _ in source_runs(source)]
        keys = dict.fromkeys(k for d in described for k in d)
        return {k: " | ".join(dict.fromkeys(d[k] for d in described if k in d)) for k in keys}

    ma, mb = merged(a), merged(b)
    keys = list(dict.fromkeys([*ma, *mb]))
    rows = [[k, ma.get(k, ""), mb.get(k, "")] for k in keys]
    rows.append(["episodes", str(len(a.records)), str(len(b.records))])
    if a.held_out or b.held_out:
        rows.append(["held-out episodes", str(len(a.held_out)), str(len(b.held_out))])
    return ["", f"A: {a.path}", f"B: {b.path}"], rows


def shown_groups(result: Comparison) -> list[Paired]:
    """Each env followed by its curriculum stages, then all of them; a single env is its own
    overall row."""
    rows = []
    for group in result.groups:
        rows.append(group)
        rows += [p for p in result.stages if p.env == group.env]
    return rows if len(result.groups) == 1 else [*rows, result.overall]


def _signed(ci: MeanCI) -> str:
    if ci.low is None or ci.high is None:
        return "n/a"
    return f"[{ci.low:+.3g}, {ci.high:+.3g}]"


def has_success(result: Comparison) -> bool:
    """Whether any episode's env said whether it succeeded (columns for it, then)."""
    return any(
        fig.get("success") is not None
        for fig in (result.overall.figures_a, result.overall.figures_b)
    )


def runs_head(result: Comparison) -> list[str]:
    head = ["env", "episodes A", "reward A", "95% interval A"]
    head += ["episodes B", "reward B", "95% interval B"]
    return [*head, *(["success A", "success B"] if has_success(result) else [])]


def _bounds(fig: dict[str, Any]) -> str:
    low, high = fig.get("reward_low"), fig.get("reward_high")
    return "n/a" if low is None or high is None else f"[{num(low)}, {num(high)}]"


def _success(fig: dict[str, Any]) -> str:
    rate = fig.get("success")
    return "n/a" if rate is None else f"{100 * rate:.0f}%"


def runs_rows(result: Comparison) -> list[list[str]]:
    """Each side's own figures per env (and stage) over all its episodes there: the per-episode
    mean reward with its interval, as ``view`` and ``summary.json`` show it."""
    rows = []
    for p in shown_groups(result):
        row = [p.label]
        for fig in (p.figures_a, p.figures_b):
            row += [str(fig.get("episodes", 0)), num(fig.get("reward")), _bounds(fig)]
        if has_success(result):
            row += [_success(p.figures_a), _success(p.figures_b)]
        rows.append(row)
    return rows


def result_head(result: Comparison) -> list[str]:
    return ["env", "seeds", "B - A", "95% interval", "B>A/=/A>B", ""]


def result_rows(result: Comparison) -> list[list[str]]:
    """Rows of the paired table: env (or env and stage), shared seeds, the mean of B - A per
    seed and its interval, B/tie/A, verdict."""
    return [
        [
            p.label,
            str(p.diff.n),
            f"{p.diff.mean:+.3g}",
            _signed(p.diff),
            f"{p.wins}/{p.ties}/{p.losses}",
            verdict(p),
        ]
        for p in shown_groups(result)
    ]


def render(a: Source, b: Source, result: Comparison) -> str:
    head, rows = metadata_rows(a, b)
    # fields where the runs differ are the ones to read first: bold
    esc = [[f"<b>{escape(c)}</b>" if row[1] != row[2] else escape(c) for c in row] for row in rows]
    results = [[escape(c) for c in row] for row in result_rows(result)]
    own = [[escape(c) for c in row] for row in runs_rows(result)]
    classes = ["sub" if p.stage is not None else "" for p in shown_groups(result)]
    forest = charts.forest_chart(
        "mean reward difference B - A (95% interval)",
        [(p.label, p.diff.mean, p.diff.low, p.diff.high) for p in shown_groups(result)],
        "B - A",
    )
    scatter = charts.scatter_chart(
        "reward per shared seed", [(ra, rb) for _, _, ra, rb in result.pairs], "A", "B"
    )
    diffs = charts.distribution_chart(
        "distribution of B - A per seed",
        [rb - ra for _, _, ra, rb in result.pairs],
        "B - A",
        "seeds",
    )
    unshared = (
        f"<p class='muted'>Seeds only in A: {result.only_a}; only in B: "
        f"{result.only_b} (left out).</p>"
    )
    body: list[Any] = [
        "<h1>trl-env compare</h1>",
        "<h2>Runs</h2>",
        table([escape(h) for h in head], esc),
        "<h2>Each run's episodes</h2>",
        f"<p class='muted'>{escape(RUNS_NOTE)}</p>",
        table([escape(h) for h in runs_head(result)], own, {1, 2, 4, 5}, classes),
        "<h2>Paired reward difference on shared seeds</h2>",
        table([escape(h) for h in result_head(result)], results, {1, 2}, classes),
        unshared,
        f'<div class="charts">{forest}{scatter}{diffs}</div>',
    ]
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>trl-env compare: {escape(a.path.name)} vs {escape(b.path.name)}</title>"
        f"<style>{CSS}</style></head><body><main>{''.join(body)}</main></body></html>"
    )

"""A training run's TensorBoard scalars as a few readable charts instead of one per tag.

A tag logged for training (``train/X``) and for the held-out evaluation (``eval/X``) shares one
chart, held-out dashed, so the gap between them shows. The per-env rollout tags
(``train/rollout/<env>/<metric>``, env labels never hold "/") are one chart per metric with a
line per env, training and held-out in that env's colour.
"""

from __future__ import annotations

import re
from html import escape

from . import charts
from .charts import Series, thin

Points = list[tuple[float, float]]

SPLITS = {"train": "train", "eval": "held-out"}  # tag prefix -> line name
SPLIT_TAG = re.compile(r"(train|eval)/(.+)")
PER_ENV = re.compile(r"rollout/([^/]+)/([^/]+)")
STATUS = re.compile(r"rollout/status_(\w+)")
# Per-env metrics a reader looks at first; the rest (statuses...) follow, by name.
FIRST = ("env_reward", "success", "turns", "stage", "sampled_tokens", "inserted_tokens")


def _split(tag: str) -> tuple[str, str]:
    """(split or "", the tag without it)."""
    match = SPLIT_TAG.fullmatch(tag)
    return (match[1], match[2]) if match else ("", tag)


def run_charts(scalars: dict[str, Points]) -> list[str]:
    """One chart per tag, a tag's training and held-out series sharing it; the run-wide
    ``rollout/status_<status>`` tags share one chart, a line per status."""
    grouped: dict[str, dict[str, Points]] = {}
    statuses: dict[str, dict[str, Points]] = {}  # status -> split -> points
    for tag, points in scalars.items():
        split, rest = _split(tag)
        status = STATUS.fullmatch(rest)
        if status and split:
            statuses.setdefault(status[1], {})[split] = points
        elif not PER_ENV.fullmatch(rest):
            grouped.setdefault(rest if split else tag, {})[split] = points
    out = []
    if statuses:
        series = [
            Series(
                name if split == "train" else f"{name} (held-out)",
                thin(splits[split]),
                color=charts.COLORS[i % len(charts.COLORS)],
                dashed=split == "eval",
            )
            for i, (name, splits) in enumerate(sorted(statuses.items()))
            for split in SPLITS
            if split in splits
        ]
        held_out = any("eval" in splits for splits in statuses.values())
        title = "rollout/status_<status>" + (" (held-out dashed)" if held_out else "")
        out.append(charts.line_chart(title, series, "step", integer_x=True, force_legend=True))
    for name, splits in grouped.items():
        if len(splits) == 1:  # one split: the chart reads as the tag it plots
            split, points = next(iter(splits.items()))
            tag = f"{split}/{name}" if split else name
            out.append(charts.line_chart(tag, [Series(tag, thin(points))], "step", integer_x=True))
            continue
        series = [
            Series(SPLITS[s], thin(splits[s]), color=charts.COLORS[0], dashed=s == "eval")
            for s in SPLITS
            if s in splits
        ]
        title = f"{name} (train, held-out dashed)"
        out.append(charts.line_chart(title, series, "step", integer_x=True))
    return out


def per_env_charts(scalars: dict[str, Points]) -> tuple[list[str], int]:
    """One chart per per-env metric, a line per env (and per split); also the tag count."""
    metrics: dict[str, dict[str, dict[str, Points]]] = {}  # metric -> env -> split -> points
    tags = 0
    for tag, points in scalars.items():
        split, rest = _split(tag)
        match = PER_ENV.fullmatch(rest)
        if match:
            env, metric = match.groups()
            split = split or "train"  # a bare rollout/<env>/<metric>: logged while training
            metrics.setdefault(metric, {}).setdefault(env, {})[split] = points
            tags += 1
    out = []
    for metric in sorted(metrics, key=lambda m: (FIRST.index(m) if m in FIRST else len(FIRST), m)):
        envs = metrics[metric]
        held_out = any("eval" in splits for splits in envs.values())
        series = []
        for i, env in enumerate(sorted(envs)):
            color = charts.COLORS[i % len(charts.COLORS)]
            for split, points in sorted(envs[env].items(), key=lambda kv: kv[0] != "train"):
                name = env if split == "train" else f"{env} (held-out)"
                series.append(Series(name, thin(points), color=color, dashed=split == "eval"))
        title = f"rollout/<env>/{metric}" + (" (held-out dashed)" if held_out else "")
        out.append(
            charts.line_chart(
                title,
                series,
                "step",
                integer_x=True,
                force_legend=True,
                integer_y=metric == "stage",
            )
        )
    return out, tags


def scalar_plots(scalars: dict[str, Points]) -> str:
    """The TensorBoard section of the page: run-wide charts, then the per-env ones."""
    if not scalars:
        return ""
    html = ""
    wide = run_charts(scalars)
    if wide:
        html += (
            f"<details open><summary>TensorBoard scalars ({escape(_count(scalars, wide))})"
            f'</summary><div class="charts">{"".join(wide)}</div></details>'
        )
    per_env, tags = per_env_charts(scalars)
    if per_env:
        html += (
            f"<details open><summary>TensorBoard scalars per env ({tags} tags in "
            f"{len(per_env)} charts, a line per env)</summary>"
            f'<div class="charts">{"".join(per_env)}</div></details>'
        )
    return html


def _count(scalars: dict[str, Points], drawn: list[str]) -> str:
    wide = sum(not PER_ENV.fullmatch(_split(tag)[1]) for tag in scalars)
    return f"{wide} tags" if wide == len(drawn) else f"{wide} tags in {len(drawn)} charts"

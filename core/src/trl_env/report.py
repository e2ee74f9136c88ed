"""An offline HTML report of a training run or an eval file: summary, plots, sample episodes."""

from __future__ import annotations

import html
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from .episode import STATUSES
from .errors import UsageError

COLORS = ("#2563eb", "#16a34a", "#f59e0b", "#dc2626", "#7c3aed", "#0891b2")


def read_records(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Episode records and summary from a run directory or an eval ``.jsonl`` file."""
    if path.is_dir():
        files = sorted((path / "episodes").glob("rank*.jsonl"))
        summary_file = path / "summary.json"
        summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    elif path.is_file():
        files, summary = [path], {}
    else:
        raise UsageError(f"{path} is neither a training output directory nor an eval file.")
    records = []
    for file in files:
        for n, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise UsageError(f"{file}:{n} is not a JSON record: {exc.msg}.") from exc
    if not records:
        raise UsageError(f"No episode records found in {path}.")
    return records, summary


def series(records: list[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    """Per training step (or per episode, for eval files): mean reward, turns, status shares."""
    key = "step" if "step" in records[0] else None
    groups: dict[float, list[dict[str, Any]]] = defaultdict(list)
    for i, rec in enumerate(records):
        groups[rec[key] if key else i].append(rec)
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for x in sorted(groups):
        group = groups[x]
        out["reward"].append((x, sum(r["reward"] for r in group) / len(group)))
        out["turns"].append((x, sum(r["turns"] for r in group) / len(group)))
        for status in STATUSES:
            share = sum(r["status"] == status for r in group) / len(group)
            out[f"status: {status}"].append((x, share))
    return out


def svg_chart(title: str, lines: dict[str, list[tuple[float, float]]], x_label: str) -> str:
    """A small line chart as inline SVG (no JavaScript, no network)."""
    w, h, pad = 560, 220, 40
    points = [p for pts in lines.values() for p in pts]
    if not points:
        return ""
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    y0, y1 = min(0.0, *(p[1] for p in points)), max(p[1] for p in points)
    x1, y1 = (x1 if x1 > x0 else x0 + 1), (y1 if y1 > y0 else y0 + 1)

    def sx(x: float) -> float:
        return pad + (x - x0) / (x1 - x0) * (w - 2 * pad)

    def sy(y: float) -> float:
        return h - pad - (y - y0) / (y1 - y0) * (h - 2 * pad)

    parts = [
        f'<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img">',
        f"<title>{html.escape(title)}</title>",
        f'<text x="{w / 2}" y="16" text-anchor="middle" font-weight="bold">'
        f"{html.escape(title)}</text>",
        f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="#999"/>',
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="#999"/>',
        f'<text x="{pad - 4}" y="{sy(y1) + 4}" text-anchor="end" font-size="11">{y1:.3g}</text>',
        f'<text x="{pad - 4}" y="{sy(y0) + 4}" text-anchor="end" font-size="11">{y0:.3g}</text>',
        f'<text x="{sx(x0)}" y="{h - pad + 14}" font-size="11">{x0:g}</text>',
        f'<text x="{sx(x1)}" y="{h - pad + 14}" text-anchor="end" font-size="11">{x1:g}</text>',
        f'<text x="{w / 2}" y="{h - 6}" text-anchor="middle" font-size="11">'
        f"{html.escape(x_label)}</text>",
    ]
    for i, (name, pts) in enumerate(lines.items()):
        color = COLORS[i % len(COLORS)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{path}"/>')
        parts.append(
            f'<text x="{w - pad + 4 - 120}" y="{pad + 14 * i}" fill="{color}" font-size="11">'
            f"{html.escape(name)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def render(path: Path) -> str:
    """The whole report as one self-contained HTML page."""
    records, summary = read_records(path)
    data = series(records)
    x_label = "training step" if "step" in records[0] else "episode"
    statuses = {k: v for k, v in data.items() if k.startswith("status") and any(y for _, y in v)}
    charts = [
        svg_chart("mean reward", {"reward": data["reward"]}, x_label),
        svg_chart("mean turns", {"turns": data["turns"]}, x_label),
        svg_chart("episode status shares", statuses, x_label),
    ]
    last_step = [r for r in records if r.get("step") == records[-1].get("step")]
    ranked = sorted(last_step, key=lambda r: r["reward"], reverse=True)
    samples = ranked[:3] + [r for r in ranked[-2:] if r not in ranked[:3]]
    body = [
        f"<h1>trl-env report: {html.escape(str(path))}</h1>",
        _table(summary) if summary else "",
        f"<p>{len(records)} episodes.</p>",
        *charts,
        "<h2>Sample episodes (best and worst of the last step)</h2>",
        *(_episode(r) for r in samples),
    ]
    style = (
        "body{font-family:system-ui,sans-serif;max-width:960px;margin:2em auto;padding:0 1em}"
        "svg{display:block;margin:1em 0;border:1px solid #eee}"
        "pre{white-space:pre-wrap;background:#f6f6f6;padding:.8em;font-size:12px}"
        "td,th{padding:2px 10px;text-align:left}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>trl-env report</title>"
        f"<style>{style}</style></head><body>{''.join(body)}</body></html>"
    )


def _table(summary: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(_fmt(v))}</td></tr>"
        for k, v in summary.items()
    )
    return f"<table>{rows}</table>"


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _episode(rec: dict[str, Any]) -> str:
    head = (
        f"seed {rec['seed']} - reward {rec['reward']:.3f} - {rec['status']} - {rec['turns']} turns"
    )
    error = f"<p>error: {html.escape(rec['error'])}</p>" if rec.get("error") else ""
    return (
        f"<details><summary>{html.escape(head)}</summary>{error}"
        f"<pre>{html.escape(rec.get('text', ''))}</pre></details>"
    )


def write_report(path: Path, out: Path | None = None) -> Path:
    target = out or (path / "report.html" if path.is_dir() else path.with_suffix(".html"))
    target.write_text(render(path), encoding="utf-8")
    return target

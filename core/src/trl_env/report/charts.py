"""Inline SVG charts (no JavaScript, no network): line, bar, forest and paired scatter plots.

Every chart draws its frame through :class:`Frame`, so all share the same axis rules: round
ticks that fit without overlapping, a padded domain for one point or a flat series, and a
"no data" panel instead of an empty box.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from html import escape
from typing import TypeVar

from .axes import CHAR_PX, fitting_ticks, labels, padded, ticks

T = TypeVar("T")

COLORS = ("#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563")
WIDTH, HEIGHT = 600, 260
MAX_POINTS = 1500  # points per line chart; longer series are thinned evenly (last point kept)


# Presentation attributes, so a chart reads right without the page's stylesheet too.
TEXT_STYLE = {
    "title": 'text-anchor="middle" font-size="13" font-weight="600"',
    "xtick": 'text-anchor="middle"',
    "ytick": 'text-anchor="end"',
    "xlabel": 'text-anchor="middle"',
    "ylabel": 'text-anchor="middle"',
    "empty": 'text-anchor="middle"',
    "legend": "",
}


def text(cls: str, x: float, y: float, content: str, extra: str = "") -> str:
    """An escaped SVG text element of one of the classes in :data:`TEXT_STYLE`."""
    return (
        f'<text class="{cls}" {TEXT_STYLE[cls]} x="{x:.1f}" y="{y:.1f}"{extra}>'
        f"{escape(content)}</text>"
    )


def svg_open(title: str, height: float) -> str:
    return (
        f'<svg class="chart" font-size="11" font-family="sans-serif" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{escape(title)}">'
        + text("title", WIDTH / 2, 18, title)
    )


class Frame:
    """A plot area with scaled axes, grid lines, tick labels, a title and axis names."""

    def __init__(
        self,
        title: str,
        x: tuple[float, float] | list[str],
        y: tuple[float, float],
        x_label: str = "",
        y_label: str = "",
        *,
        integer_x: bool = False,
        integer_y: bool = False,
        legend_rows: int = 0,
        height: int = HEIGHT,
    ) -> None:
        self.title, self.height = title, height
        self.top = 30 + 16 * legend_rows
        self.bottom = height - 44
        self.y_ticks, self.y_texts = fitting_ticks(
            *y, self.bottom - self.top, integer_y, horizontal=False
        )
        widest = max(len(t) for t in self.y_texts) * CHAR_PX
        self.left = round(16 + widest + (14 if y_label else 0), 1)
        self.right = WIDTH - 16
        self.categories = x if isinstance(x, list) else None
        if isinstance(x, tuple):
            self.x_ticks, self.x_texts = fitting_ticks(*x, self.right - self.left, integer_x)
        self.x_label, self.y_label = x_label, y_label

    def sx(self, x: float) -> float:
        lo, hi = self.x_ticks[0], self.x_ticks[-1]
        return self.left + (x - lo) / (hi - lo) * (self.right - self.left)

    def sy(self, y: float) -> float:
        lo, hi = self.y_ticks[0], self.y_ticks[-1]
        return self.bottom - (y - lo) / (hi - lo) * (self.bottom - self.top)

    def band(self, i: int) -> tuple[float, float]:
        """Left edge and width of category ``i``'s slot."""
        assert self.categories is not None
        width = (self.right - self.left) / len(self.categories)
        return self.left + i * width, width

    def svg(self, body: list[str]) -> str:
        parts = [svg_open(self.title, self.height)]
        for value, label in zip(self.y_ticks, self.y_texts, strict=True):
            y = self.sy(value)
            parts.append(
                f'<line class="grid" x1="{self.left}" x2="{self.right}" y1="{y:.1f}" y2="{y:.1f}"/>'
            )
            parts.append(text("ytick", self.left - 6, y + 4, label))
        if self.categories is None:
            for value, label in zip(self.x_ticks, self.x_texts, strict=True):
                x = self.sx(value)
                parts.append(
                    f'<line class="tick" x1="{x:.1f}" x2="{x:.1f}" y1="{self.bottom}" '
                    f'y2="{self.bottom + 4}"/>'
                )
                parts.append(text("xtick", x, self.bottom + 18, label))
        else:
            parts.extend(self._category_labels())
        parts.append(
            f'<line class="axis" x1="{self.left}" x2="{self.right}" y1="{self.bottom}" '
            f'y2="{self.bottom}"/>'
        )
        parts.append(
            f'<line class="axis" x1="{self.left}" x2="{self.left}" y1="{self.top}" '
            f'y2="{self.bottom}"/>'
        )
        if self.x_label:
            parts.append(
                text("xlabel", (self.left + self.right) / 2, self.height - 8, self.x_label)
            )
        if self.y_label:
            cy = (self.top + self.bottom) / 2
            turn = f' transform="translate(12 {cy:.1f}) rotate(-90)"'
            parts.append(text("ylabel", 0, 0, self.y_label, turn))
        return "".join([*parts, *body, "</svg>"])

    def _category_labels(self) -> list[str]:
        assert self.categories is not None
        _, width = self.band(0)
        widest = max(len(c) for c in self.categories) * CHAR_PX + 8
        every = max(1, math.ceil(widest / width))  # show every n-th label so none overlap
        out = []
        for i, label in enumerate(self.categories):
            if i % every == 0:
                x0, w = self.band(i)
                out.append(text("xtick", x0 + w / 2, self.bottom + 18, label))
        return out


def empty(title: str, message: str = "no data") -> str:
    """A chart-sized panel saying why there is no chart."""
    return svg_open(title, 80) + text("empty", WIDTH / 2, 52, message) + "</svg>"


@dataclass
class Series:
    """One line: points (x, y) and optionally a shaded band (x, low, high) around it.

    ``color`` defaults to the series' place in :data:`COLORS`; a ``dashed`` line shares its
    colour with a solid one to show a second view of the same thing (held-out vs training).
    """

    name: str
    points: list[tuple[float, float]]
    band: list[tuple[float, float, float]] | None = None
    color: str | None = None
    dashed: bool = False


def thin(points: list[T], limit: int = MAX_POINTS) -> list[T]:
    """At most ``limit`` evenly spaced points, always keeping the last."""
    if len(points) <= limit:
        return points
    stride = math.ceil(len(points) / limit)
    return points[::stride] + ([points[-1]] if (len(points) - 1) % stride else [])


def _finite(*values: float) -> bool:
    return all(math.isfinite(v) for v in values)


def _legend(entries: list[tuple[str, str, bool]]) -> tuple[list[str], int]:
    """Legend entries (name, colour, dashed) laid out left to right, wrapping; returns the SVG
    parts and the row count. A dashed entry shows a dashed stroke, a solid one a swatch."""
    parts, x, row = ['<g class="legend-box">'], 16.0, 0
    for name, color, dashed in entries:
        width = 18 + len(name) * CHAR_PX + 14
        if x + width > WIDTH - 16 and x > 16:
            x, row = 16.0, row + 1
        y = 34 + 16 * row
        if dashed:
            parts.append(
                f'<line class="line dashed" x1="{x}" x2="{x + 12}" y1="{y - 4}" y2="{y - 4}" '
                f'stroke="{color}" stroke-dasharray="3 2"/>'
            )
        else:
            parts.append(f'<rect x="{x}" y="{y - 9}" width="12" height="10" fill="{color}"/>')
        parts.append(text("legend", x + 16, y, name))
        x += width
    return [*parts, "</g>"], row + 1


def line_chart(
    title: str,
    series: list[Series],
    x_label: str,
    y_label: str = "",
    integer_x: bool = False,
    force_legend: bool = False,
    integer_y: bool = False,
) -> str:
    """Lines over a numeric x axis; a series of one point shows as a dot. Several series get a
    legend, a single one too with ``force_legend`` (when its name says what it is)."""
    series = [
        Series(
            s.name,
            [p for p in s.points if _finite(*p)],
            [b for b in s.band or [] if _finite(*b)] or None,
            s.color or COLORS[i % len(COLORS)],
            s.dashed,
        )
        for i, s in enumerate(series)
    ]
    series = [s for s in series if s.points]
    if not series:
        return empty(title)
    xs = [x for s in series for x, _ in s.points]
    ys = [y for s in series for _, y in s.points]
    ys += [v for s in series for _, lo, hi in s.band or [] for v in (lo, hi)]
    entries = [(s.name, s.color or COLORS[0], s.dashed) for s in series]
    legend, rows = _legend(entries) if len(series) > 1 or force_legend else ([], 0)
    frame = Frame(
        title,
        (min(xs), max(xs)),
        (min(ys), max(ys)),
        x_label,
        y_label,
        integer_x=integer_x,
        integer_y=integer_y,
        legend_rows=rows,
    )
    body = list(legend)
    for s in series:
        color = s.color or COLORS[0]
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        if s.band and len(s.band) > 1:
            upper = [f"{frame.sx(x):.1f},{frame.sy(hi):.1f}" for x, _, hi in s.band]
            lower = [f"{frame.sx(x):.1f},{frame.sy(lo):.1f}" for x, lo, _ in reversed(s.band)]
            body.append(
                f'<polygon class="band" fill="{color}" points="{" ".join(upper + lower)}"/>'
            )
        coords = [f"{frame.sx(x):.1f},{frame.sy(y):.1f}" for x, y in s.points]
        if len(coords) > 1:
            body.append(
                f'<polyline class="line" stroke="{color}"{dash} points="{" ".join(coords)}">'
                f"<title>{escape(s.name)}</title></polyline>"
            )
        if len(coords) <= 60:
            for (x, y), xy in zip(s.points, coords, strict=True):
                cx, cy = xy.split(",")
                body.append(
                    f'<circle class="dot" cx="{cx}" cy="{cy}" r="3" fill="{color}">'
                    f"<title>{escape(s.name)}: {x:g}, {y:.4g}</title></circle>"
                )
    return frame.svg(body)


def bar_chart(title: str, bars: list[tuple[str, int]], x_label: str, y_label: str = "") -> str:
    """Counts per category (a histogram when the categories are bins)."""
    if not bars or not any(count for _, count in bars):
        return empty(title)
    frame = Frame(
        title,
        [label for label, _ in bars],
        (0, max(count for _, count in bars)),
        x_label,
        y_label,
        integer_y=True,
    )
    body = []
    for i, (label, count) in enumerate(bars):
        x0, width = frame.band(i)
        top = frame.sy(count)
        body.append(
            f'<rect class="bar" x="{x0 + width * 0.1:.1f}" y="{top:.1f}" '
            f'width="{width * 0.8:.1f}" height="{frame.bottom - top:.1f}">'
            f"<title>{escape(label)}: {count}</title></rect>"
        )
    return frame.svg(body)


def distribution_chart(
    title: str, values: list[float], x_label: str, y_label: str, integer: bool = False
) -> str:
    """A histogram: one bar per distinct value when there are few, else bins on round edges.

    Bins are drawn on a numeric axis whose ticks fall on bin edges, so a bin reads off the axis.
    """
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return empty(title)
    counts = Counter(values)
    lo, hi = min(values), max(values)
    if integer and hi - lo < 40:
        bars = [(f"{v:g}", counts.get(v, 0)) for v in range(int(lo), int(hi) + 1)]
        return bar_chart(title, bars, x_label, y_label)
    keys = sorted(counts)
    texts = labels(keys) if len(keys) <= 20 else []
    # A bar per value only where the values are few and read as short round labels (0, 0.5, 1);
    # values such as -0.703030303 (a reward of 1/33 steps) go into bins on round edges instead,
    # whose bars are all one width and whose axis labels are round.
    if texts and len(set(texts)) == len(keys) and max(map(len, texts)) <= 6:
        return bar_chart(
            title, list(zip(texts, (counts[k] for k in keys), strict=True)), x_label, y_label
        )
    edges = ticks(lo, hi, 20, integer)  # covers [lo, hi]; the last bin is closed on the right
    binned = [0] * (len(edges) - 1)
    width = edges[1] - edges[0]
    for v, n in counts.items():
        binned[min(int((v - edges[0]) / width), len(binned) - 1)] += n
    frame = Frame(title, (edges[0], edges[-1]), (0, max(binned)), x_label, y_label, integer_y=True)
    body = []
    for a, b, n in zip(edges, edges[1:], binned, strict=False):
        x0, x1, top = frame.sx(a), frame.sx(b), frame.sy(n)
        width = max(x1 - x0 - 1, 0.5)
        body.append(
            f'<rect class="bar" x="{x0 + 0.5:.1f}" y="{top:.1f}" width="{width:.1f}" '
            f'height="{frame.bottom - top:.1f}"><title>[{a:.4g}, {b:.4g}): {n}</title></rect>'
        )
    return frame.svg(body)


def forest_chart(
    title: str, rows: list[tuple[str, float, float | None, float | None]], x_label: str
) -> str:
    """A dot per row (label, mean, low, high) with its interval as a whisker, and a zero line."""
    rows = [r for r in rows if math.isfinite(r[1])]
    if not rows:
        return empty(title)
    values = [0.0] + [v for _, m, lo, hi in rows for v in (m, lo, hi) if v is not None]
    lo, hi = padded(min(values), max(values))
    height = 90 + 30 * len(rows)
    frame = Frame(title, (lo, hi), (0, len(rows)), x_label, height=height)
    # rows are categories on the y axis: relabel the frame's left side with their names
    frame.y_ticks, frame.y_texts = [0, float(len(rows))], ["", ""]
    widest = max(len(r[0]) for r in rows) * CHAR_PX + 16
    frame.left = round(max(frame.left, widest), 1)
    frame.x_ticks, frame.x_texts = fitting_ticks(lo, hi, frame.right - frame.left)
    zero = frame.sx(0)
    body = [
        f'<line class="zero" x1="{zero:.1f}" x2="{zero:.1f}" y1="{frame.top}" y2="{frame.bottom}"/>'
    ]
    for i, (label, mean, low, high) in enumerate(rows):
        y = frame.sy(len(rows) - i - 0.5)
        body.append(text("ytick", frame.left - 8, y + 4, label))
        if low is not None and high is not None:
            body.append(
                f'<line class="whisker" x1="{frame.sx(low):.1f}" x2="{frame.sx(high):.1f}" '
                f'y1="{y:.1f}" y2="{y:.1f}"/>'
            )
        tip = f"{label}: {mean:+.4g}" + (
            f" [{low:+.4g}, {high:+.4g}]" if low is not None and high is not None else ""
        )
        body.append(
            f'<circle class="dot" cx="{frame.sx(mean):.1f}" cy="{y:.1f}" r="5" '
            f'fill="{COLORS[0]}"><title>{escape(tip)}</title></circle>'
        )
    return frame.svg(body)


def scatter_chart(title: str, pairs: list[tuple[float, float]], x_label: str, y_label: str) -> str:
    """Paired values (x, y) on equal axes with the y = x diagonal; repeated pairs grow the dot."""
    pairs = [p for p in pairs if _finite(*p)]
    if not pairs:
        return empty(title)
    lo = min(min(p) for p in pairs)
    hi = max(max(p) for p in pairs)
    frame = Frame(title, (lo, hi), (lo, hi), x_label, y_label)
    # one domain for both axes, so the diagonal is the line of no difference
    frame.x_ticks, frame.x_texts = frame.y_ticks, frame.y_texts
    a, b = frame.y_ticks[0], frame.y_ticks[-1]
    body = [
        f'<line class="zero" x1="{frame.sx(a):.1f}" y1="{frame.sy(a):.1f}" '
        f'x2="{frame.sx(b):.1f}" y2="{frame.sy(b):.1f}"/>'
    ]
    for (x, y), n in sorted(Counter(pairs).items()):
        r = 2.5 + 2 * math.sqrt(n - 1)
        body.append(
            f'<circle class="pt" cx="{frame.sx(x):.1f}" cy="{frame.sy(y):.1f}" '
            f'r="{min(r, 14):.1f}" fill="{COLORS[0]}"><title>{x:.4g}, {y:.4g}: {n}'
            f"</title></circle>"
        )
    return frame.svg(body)


def standalone(svg: str) -> str:
    """A chart as an SVG file of its own (docs, papers): its namespace and the page's chart
    styles inside it."""
    from .assets import CSS

    rules = [line for line in CSS.splitlines() if line.startswith("svg")]
    style = "\n".join(rules).replace("var(--mute)", "#6b7280")
    head, _, rest = svg.partition(">")
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n{head} xmlns="http://www.w3.org/2000/svg" '
        f'width="{WIDTH}">'
        f"<style>{style}</style>{rest}\n"
    )

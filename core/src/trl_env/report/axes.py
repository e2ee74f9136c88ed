"""Axis ticks that read well: round steps (1, 2, 2.5, 5 x 10^k), labels with one precision."""

from __future__ import annotations

import itertools
import math

CHAR_PX = 6.8  # width of one character of the 11px axis font, a generous estimate


def nice_step(span: float, count: int, integer: bool = False) -> float:
    """The smallest round step that cuts ``span`` into at most ``count`` intervals."""
    raw = span / max(count, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10) if integer else (1, 2, 2.5, 5, 10):
        if m * magnitude >= raw * (1 - 1e-9):
            step = m * magnitude
            break
    return max(1.0, round(step)) if integer else step


def padded(lo: float, hi: float, integer: bool = False) -> tuple[float, float]:
    """A domain with room around a single value, so one point or a constant series still shows."""
    if hi < lo:
        lo, hi = hi, lo
    # spans below a billionth of the values (float noise like 0.1 + 0.2 vs 0.3) are flat
    if hi - lo > 1e-9 * max(1.0, abs(lo), abs(hi)):
        return lo, hi
    pad = 1.0 if integer or abs(lo) < 1e-9 else abs(lo) * 0.5
    return lo - pad, hi + pad


def ticks(lo: float, hi: float, count: int, integer: bool = False) -> list[float]:
    """Round tick values covering [lo, hi] with at most about ``count`` + 1 ticks."""
    lo, hi = padded(lo, hi, integer)
    step = nice_step(hi - lo, count, integer)
    start = math.floor(lo / step + 1e-9) * step
    n = max(1, math.ceil((hi - start) / step - 1e-9))
    digits = decimals(step) + 2
    return [round(start + i * step, digits) for i in range(n + 1)]


def decimals(step: float) -> int:
    """Digits after the point that show every multiple of ``step`` exactly (0.25 -> 2)."""
    for d in range(16):
        scaled = step * 10**d
        if round(scaled) >= 1 and abs(scaled - round(scaled)) < 1e-6 * scaled:
            return d
    return 16


def labels(values: list[float]) -> list[str]:
    """Tick labels with one precision for the whole axis, no ``-0``; very large or very small
    values in exponent form (``2.5e-07``) with as few digits as keep them distinct."""
    if not values:
        return []
    step = min((b - a for a, b in itertools.pairwise(values)), default=1.0) or 1.0
    if max(abs(v) for v in values) >= 1e6 or step < 1e-4:
        for digits in range(2, 9):
            out = [f"{v:.{digits}g}" if abs(v) > step * 1e-6 else "0" for v in values]
            if len(set(out)) == len(out):
                return out
        return out
    out = [f"{v:.{decimals(step)}f}" for v in values]
    return [t[1:] if t.startswith("-") and float(t) == 0 else t for t in out]


def fitting_ticks(
    lo: float, hi: float, length: float, integer: bool = False, horizontal: bool = True
) -> tuple[list[float], list[str]]:
    """Ticks and labels for an axis ``length`` px long whose labels do not touch each other.

    Horizontal labels need their width plus a gap; vertical ones a line height each.
    """
    for count in range(10, 0, -1):
        values = ticks(lo, hi, count, integer)
        texts = labels(values)
        widest = max(len(t) for t in texts) * CHAR_PX + 12 if horizontal else 22
        if len(values) <= 2 or (len(values) - 1) * widest <= length:
            return values, texts
    return values, texts

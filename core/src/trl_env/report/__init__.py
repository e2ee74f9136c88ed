"""Reports on episode records: ``trl-env view`` (one HTML page) and ``trl-env compare``.

Everything here is light (no torch, transformers or trl), so both commands start fast.
"""

from __future__ import annotations

from pathlib import Path

from .load import Source, load


def default_target(path: Path) -> Path:
    """PATH/report.html for a run directory, FILE.html next to an eval file."""
    return path / "report.html" if path.is_dir() else path.with_suffix(".html")


def write_report(path: Path, out: Path | None = None) -> Path:
    """Read ``path`` and write its HTML report to ``out`` (default :func:`default_target`)."""
    from .page import render

    target = out or default_target(path)
    target.write_text(render(load(path)), encoding="utf-8")
    return target


__all__ = ["Source", "default_target", "load", "write_report"]

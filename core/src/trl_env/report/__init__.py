"""Reports on episode records: ``trl-env view`` (one HTML page) and ``trl-env compare``.

Everything here is light (no torch, transformers or trl), so both commands start fast.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import UsageError
from .load import Source, load

REPORT_FILE = "report.html"  # a run directory's report (train --overwrite replaces it too)


def default_target(path: Path) -> Path:
    """PATH/report.html for a run directory, FILE.html next to an eval file."""
    return path / REPORT_FILE if path.is_dir() else path.with_suffix(".html")


def write_report(path: Path, out: Path | None = None) -> Path:
    """Read ``path`` and write its HTML report to ``out`` (default :func:`default_target`)."""
    from .page import render

    target = out or default_target(path)
    refuse_input(target, path)
    source = load(path)
    try:
        page = render(source)
    except RecursionError:  # a side file (summary.json) nested too deeply to render
        raise UsageError(f"{path} holds values nested too deeply to render.") from None
    target.write_text(page, encoding="utf-8")
    return target


def refuse_input(target: Path, *paths: Path) -> None:
    """Refuse, in one sentence, to write ``target`` over a file a report reads from ``paths``."""
    for path in paths:
        for read in input_files(path):
            if _same(target, read):
                raise UsageError(
                    f"{target} is one of the files the report reads ({read}); "
                    "write the report elsewhere (-o/--out or --html)."
                )


def input_files(path: Path) -> list[Path]:
    """The files a report of ``path`` reads: the file itself, or a run's records, summary,
    config and TensorBoard logs."""
    if not path.is_dir():
        return [path]
    found = [path / "summary.json", path / "config.yaml"]
    found += sorted((path / "episodes").glob("*"))
    found += sorted((path / "runs").rglob("*")) if (path / "runs").is_dir() else []
    return found


def _same(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return os.path.abspath(a) == os.path.abspath(b)


__all__ = ["Source", "default_target", "input_files", "load", "refuse_input", "write_report"]

"""The output directory of a run: one run per directory, so two runs never mix.

``train`` starts only in a new or empty directory; ``--resume`` continues the run already
there (its saved config.yaml must match) and ``--overwrite`` replaces it. A directory holding
something other than a trl-env run is never overwritten.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from ..errors import UsageError

CONFIG_FILE = "config.yaml"
# What a run writes at the top of its directory; anything else means it is not only a run.
_RUN_ENTRIES = ("config.yaml", "summary.json", "episodes", "runs", "final", "README.md")


def _is_run_entry(path: Path) -> bool:
    name = path.name
    return name in _RUN_ENTRIES or name.startswith(("checkpoint-", ".staging-checkpoint-"))


def check(out: Path, *, resume: bool, overwrite: bool) -> None:
    """Refuse, in one sentence, a directory this run may not use; touches nothing."""
    if resume and overwrite:
        raise UsageError(
            "--resume continues the run in --output-dir, --overwrite replaces it; give one."
        )
    if out.exists() and not out.is_dir():
        raise UsageError(f"--output-dir {out} is a file, not a directory.")
    entries = sorted(out.iterdir()) if out.is_dir() else []
    if resume:
        if not entries:
            raise UsageError(f"--resume found no run in {out}; train without --resume first.")
        return
    if not entries:
        return
    shown = ", ".join(p.name for p in entries[:3]) + (", ..." if len(entries) > 3 else "")
    if not overwrite:
        raise UsageError(
            f"--output-dir {out} is not empty ({shown}); continue that run with --resume, "
            "replace it with --overwrite, or choose another --output-dir."
        )
    foreign = [p.name for p in entries if not _is_run_entry(p)]
    if foreign:
        raise UsageError(
            f"--overwrite refused: {out} holds {', '.join(foreign[:3])}, which no trl-env run "
            "writes; choose another --output-dir."
        )


def ensure_writable(out: Path) -> None:
    """Create ``out`` if needed and prove a file can be written in it."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UsageError(f"--output-dir {out} cannot be written: {reason}.") from exc


def clear(out: Path) -> None:
    """Remove the previous run's files (``--overwrite``; :func:`check` vetted them)."""
    for entry in out.iterdir():
        if _is_run_entry(entry):
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()

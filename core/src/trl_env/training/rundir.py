"""The output directory of a run: one run per directory, so two runs never mix.

``train`` starts only in a new or empty directory; ``--resume`` continues the run already
there (its saved config.yaml must match) and ``--overwrite`` replaces it. A run marks its
directory first (:data:`MARKER`, :func:`claim`); ``--overwrite`` replaces only a marked
directory, only the entries a run writes there (and what trl-env's tools write into one, such
as the report of ``trl-env view``), and removes a link in it as a link, never what it points
to. A user's own folder that merely holds a ``README.md``, ``config.yaml``, ``runs/`` or
``final/`` is never touched. A run has trained to its end (:func:`trained_steps`),
or was stopped: then :func:`next_command` says how to carry it on, from its newest whole
checkpoint, or from the start when it stopped before saving one.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..report import REPORT_FILE
from . import checkpoints

CONFIG_FILE = "config.yaml"
SUMMARY_FILE = "summary.json"
# What `trl-env train` said when the run ended (its closing table; for a stopped run, how to carry
# it on), kept for when its output went nowhere
CLOSING_FILE = "closing.txt"
MARKER = ".trl-env-run"  # written first into a run's directory: what --overwrite may replace
# What a run, and trl-env's tools, write at the top of its directory; anything else means it is
# not only a run.
_RUN_ENTRIES = (
    *(MARKER, CONFIG_FILE, SUMMARY_FILE, CLOSING_FILE, "episodes", "runs", "final", "README.md"),
    REPORT_FILE,
)


def _is_run_entry(path: Path) -> bool:
    name = path.name
    return name in _RUN_ENTRIES or name.startswith(("checkpoint-", checkpoints.STAGING_PREFIX))


def write_summary(out: Path, summary: dict[str, Any]) -> None:
    """Write ``summary.json`` whole or not at all: a second signal may end the process while it
    is written, and a half-written file would lose the checkpoint it names."""
    staging = out / f"{checkpoints.STAGING_PREFIX}{SUMMARY_FILE}"
    staging.write_text(json.dumps(summary, indent=2), encoding="utf-8")
    os.replace(staging, out / SUMMARY_FILE)


def saved_summary(out: Path) -> dict[str, Any] | None:
    """The summary the last run in ``out`` wrote when it ended, or None."""
    try:
        summary = json.loads((out / SUMMARY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


def trained_steps(out: Path) -> int:
    """How many steps the run in ``out`` has trained for good: those of a run that ended
    without a signal (its summary), or of its newest whole checkpoint, whichever is more."""
    summary = saved_summary(out) or {}
    done = summary.get("steps") if not summary.get("stopped_by") else 0
    steps = done if isinstance(done, int) else 0
    for candidate in checkpoints.checkpoints(out):
        if checkpoints.problem(candidate) is None:
            return max(steps, checkpoints.step_of(candidate))
    return steps


def restart_command(out: Path) -> str:
    """The command that starts the run in ``out`` again from its first step."""
    if (out / CONFIG_FILE).is_file():  # the run's own options, output folder included
        return f"trl-env train --config {out / CONFIG_FILE} --overwrite"
    return f"trl-env train --output-dir {out} --overwrite (with the run's options)"


def next_command(out: Path) -> str:
    """The command that carries on the stopped run in ``out``: ``--resume`` from its newest
    whole checkpoint, or, when it stopped before saving one, a start again from its options."""
    if any(checkpoints.problem(c) is None for c in checkpoints.checkpoints(out)):
        return f"trl-env train --output-dir {out} --resume"
    return restart_command(out)


def finished(out: Path, max_steps: int) -> str | None:
    """What to tell a ``--resume`` of a run that has already trained ``max_steps`` steps (there
    is nothing to resume, and nothing is changed), or None when it has steps left."""
    steps = trained_steps(out)
    if max_steps <= 0 or steps < max_steps:
        return None
    model = out / "final"
    where = f"its model is in {model}" if model.is_dir() else f"see {checkpoints.path(out, steps)}"
    return (
        f"The run in {out} has already trained {steps} steps, of max_steps {max_steps} "
        f"({where}): nothing to resume, nothing changed. Train it further with --resume "
        f"--max-steps N (N > {steps}), or start it again with --overwrite."
    )


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
    if not is_run(out):
        raise UsageError(
            f"--overwrite refused: {out} ({shown}) was not written by a trl-env run (a run "
            f"leaves {MARKER} there first; runs of trl-env before it did not): remove what is "
            "there yourself, or choose another --output-dir."
        )


def is_run(out: Path) -> bool:
    """Whether ``out`` holds a run's marker (a plain file: a link proves nothing)."""
    try:
        return stat.S_ISREG(os.lstat(out / MARKER).st_mode)
    except OSError:
        return False


def claim(out: Path, kind: str) -> None:
    """Mark ``out`` as the directory of a run of ``kind`` (``train``, ``sft``), before the run
    writes anything else there; never through a link."""
    from ..discovery import version

    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(out / MARKER, flags, 0o644)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UsageError(f"--output-dir {out} cannot be marked as a run's: {reason}.") from exc
    with os.fdopen(fd, "w", encoding="utf-8") as marker:
        marker.write(json.dumps({"trl_env": version("trl-env"), "kind": kind}) + "\n")


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
    """Remove the previous run's files (``--overwrite``; :func:`check` vetted them). A link is
    removed as a link: what it points to, in or out of ``out``, stays."""
    for entry in out.iterdir():
        if not _is_run_entry(entry):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)  # it removes links inside as links too
        else:
            entry.unlink()

"""Checkpoints that are whole or absent: written aside then renamed, checked before a resume.

transformers writes ``checkpoint-N`` in place, file after file, so a run killed mid-save leaves
a directory that looks like the latest checkpoint and fails ``--resume`` with a traceback. Here
each checkpoint is written into a staging directory and renamed into place when complete (a
rename within one file system is atomic), and ``--resume`` checks the files of each candidate,
newest first, without loading them.
"""

from __future__ import annotations

import json
import re
import shutil
import zipfile
from pathlib import Path
from typing import Any

from ..errors import UsageError

_CHECKPOINT = re.compile(r"checkpoint-(\d+)")
STAGING_PREFIX = ".staging-"


def path(out: Path | str, step: int) -> Path:
    """Where the checkpoint of ``step`` lives in the run folder ``out``."""
    return Path(out) / f"checkpoint-{step}"


def checkpoints(out: Path) -> list[Path]:
    """``checkpoint-N`` directories of a run, newest (highest N) first."""
    if not out.is_dir():
        return []
    found = [p for p in out.iterdir() if p.is_dir() and _CHECKPOINT.fullmatch(p.name)]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]), reverse=True)


def step_of(checkpoint: Path) -> int:
    """The global step ``checkpoint`` was saved at (its trainer state, else its name)."""
    try:
        return int(json.loads((checkpoint / "trainer_state.json").read_text())["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return int(checkpoint.name.split("-")[1])


def problem(checkpoint: Path) -> str | None:
    """Why ``checkpoint`` cannot be resumed from, or None when its files are whole.

    Checks that trainer_state.json parses, that there are weights and each safetensors file is
    as long as its header says, and that each torch file (optimizer, scheduler, RNG states)
    has its zip directory, which sits at the end of the file and so is gone when it is cut.
    """
    state = checkpoint / "trainer_state.json"
    try:
        json.loads(state.read_text(encoding="utf-8"))["global_step"]
    except (OSError, ValueError, KeyError, TypeError):
        return "trainer_state.json is missing or unreadable"
    weights = sorted(checkpoint.glob("*.safetensors"))
    if not weights and not list(checkpoint.glob("*.bin")):
        return "it holds no model weights"
    for file in weights:
        short = _safetensors_problem(file)
        if short:
            return f"{file.name} {short}"
    for file in sorted([*checkpoint.glob("*.pt"), *checkpoint.glob("*.pth")]):
        try:
            with zipfile.ZipFile(file):
                pass
        except (OSError, zipfile.BadZipFile):
            return f"{file.name} is truncated or corrupt"
    return None


def _safetensors_problem(file: Path) -> str | None:
    try:
        with file.open("rb") as f:
            size = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(size))
        end = max(
            (int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"),
            default=0,
        )
    except (OSError, ValueError, KeyError, TypeError, MemoryError):
        return "has no readable header"
    actual = file.stat().st_size
    expected = 8 + size + end
    return None if actual >= expected else f"is truncated ({actual} of {expected} bytes)"


def pick(out: Path, restart: str) -> tuple[Path, list[str]]:
    """The newest usable checkpoint of ``out`` and a warning for each newer one skipped;
    ``restart`` is the command that starts the run again, for when there is none."""
    found = checkpoints(out)
    if not found:
        raise UsageError(
            f"--resume found no checkpoint in {out} (the run stopped before it saved one); "
            f"start it again with: {restart}"
        )
    skipped: list[str] = []
    for candidate in found:
        why = problem(candidate)
        if why is None:
            return candidate, [f"{s}; resuming from {candidate.name} instead." for s in skipped]
        skipped.append(f"{candidate.name} is not usable ({why})")
    raise UsageError(
        f"--resume found no usable checkpoint in {out}: {'; '.join(skipped)}; start the run "
        f"again with: {restart}"
    )


def atomic_trainer(base: Any) -> Any:
    """A subclass of the trainer class ``base`` whose checkpoints appear whole or not at all."""

    class AtomicCheckpoints(base):
        def _save_checkpoint(self, model: Any, trial: Any) -> None:
            from transformers.trainer_utils import rotate_checkpoints

            run_dir = Path(base._get_output_dir(self, trial=trial))
            name = path(run_dir, self.state.global_step).name
            staging = run_dir / f"{STAGING_PREFIX}{name}"
            main = self.args.should_save
            if main and staging.exists():  # left by a run killed while saving
                shutil.rmtree(staging)
            self.accelerator.wait_for_everyone()
            # Every rank writes its part (rank 0 the model, each rank its RNG state) into the
            # staging directory, which the base class takes for the run directory.
            self._get_output_dir = lambda trial=None: str(staging)
            try:
                super()._save_checkpoint(model, trial)
            finally:
                del self._get_output_dir
            self.accelerator.wait_for_everyone()
            if main:
                final = run_dir / name
                if final.exists():  # saved twice at one step (a signal at a save step)
                    shutil.rmtree(final)
                (staging / name).rename(final)
                shutil.rmtree(staging, ignore_errors=True)
                rotate_checkpoints(
                    output_dir=str(run_dir),
                    save_total_limit=self.args.save_total_limit,
                    best_model_checkpoint=self.state.best_model_checkpoint,
                )
            self.accelerator.wait_for_everyone()

    AtomicCheckpoints.__name__ = f"Atomic{base.__name__}"
    return AtomicCheckpoints

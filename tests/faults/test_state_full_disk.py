"""A full disk while `eval` writes its records or `train` writes its run is one sentence (exit 1),
not a traceback. Real ENOSPC: /dev/full for eval's --out, a 256 KiB tmpfs for a training run."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from trl_env.testing.fake_dist import error_line, run_cli

pytestmark = pytest.mark.timeout(300)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_eval_on_a_full_disk_is_one_sentence(tmp_path):
    result = run_cli("eval", "--env", "guess", "--processor", "qwen3", "--episodes", "2",
                     "--batch-size", "2", "--max-new-tokens", "2", "--out", "/dev/full",
                     cwd=tmp_path, timeout=240)  # fmt: skip
    line = error_line(result)
    assert "--out /dev/full" in line and "No space left on device" in line


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs (needs the right to mount, as root in a container has)."""
    where = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    where.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {made.stderr.strip()}")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def test_train_on_a_full_disk_is_one_sentence(small_disk: Path):
    result = run_cli("train", "--env", "guess", "--processor", "qwen3", "--model", "tiny",
                     "--processor-arg", "thinking=false", "--max-new-tokens", "2",
                     "--max-turns", "1", "--batch-size", "2", "--num-generations", "2",
                     "--train-seeds", "4", "--max-steps", "1", "--no-check",
                     "--output-dir", str(small_disk / "run"), timeout=240)  # fmt: skip
    line = error_line(result)
    assert f"Writing to the run in {small_disk / 'run'} failed" in line, line

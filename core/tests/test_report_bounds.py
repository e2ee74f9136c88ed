"""`trl-env view` reads a run's config.yaml as `--config` reads one: a "billion laughs" document
or an oversized file is refused in one sentence, in a separate process with a memory cap far
below what expanding it would take."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from trl_env.testing.timeouts import scaled

LAUGHS = "\n".join(
    ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]" for i in range(8)]
)  # 10**9 values once expanded, 700 bytes as text
MEMORY_CAP = 1 << 30  # bytes of address space for the view process: expansion needs far more


def _run_dir(root: Path, config: str | bytes) -> Path:
    run = root / "run"
    (run / "episodes").mkdir(parents=True)
    record = {"step": 1, "seed": "train-0", "reward": 1.0, "status": "done", "turns": 1}
    (run / "episodes" / "rank0.jsonl").write_text(json.dumps(record) + "\n")
    (run / "summary.json").write_text(json.dumps({"env": "guess", "steps": 1}))
    target = run / "config.yaml"
    target.write_bytes(config) if isinstance(config, bytes) else target.write_text(config)
    return run


def _view(run: Path) -> subprocess.CompletedProcess[str]:
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))

    return subprocess.run(
        [sys.executable, "-m", "trl_env", "view", str(run)],
        capture_output=True,
        text=True,
        timeout=scaled(120),
        preexec_fn=cap,
        check=False,
    )


@pytest.mark.parametrize(
    ("config", "said"),
    [
        (LAUGHS, "expands to more than 100000 values"),
        (b"# padding\n" * 120_000, "is over 1024 KiB"),
    ],
    ids=["billion-laughs", "oversized"],
)
def test_a_hostile_config_yaml_is_refused_in_one_sentence(tmp_path, config, said):
    result = _view(_run_dir(tmp_path, config))
    assert result.returncode == 2, result.stderr[-2000:]
    assert said in result.stderr and result.stderr.startswith("Error: ")
    assert result.stderr.strip().count("\n") == 0
    assert not (tmp_path / "run" / "report.html").exists()


def test_a_plain_config_yaml_still_describes_the_run(tmp_path):
    run = _run_dir(tmp_path, "model: tiny\ntemperature: 0.7\n")
    result = _view(run)
    assert result.returncode == 0, result.stderr[-2000:]
    html = (run / "report.html").read_text(encoding="utf-8")
    assert "temperature: 0.7" in html and ">tiny<" in html

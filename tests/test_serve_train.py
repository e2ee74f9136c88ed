"""Two trainer processes (accelerate, gloo on CPU) against `trl-env serve` env servers: through
`trl-env train`, and with generation on a vLLM server (the stand-in, `python -m
trl_env.testing.vllm_server`; TRL's weight sync is not involved, as it needs a GPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trl_env.testing.modules import load_path

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

HERE = Path(__file__).parent
LAUNCH = [
    sys.executable,
    "-m",
    "accelerate.commands.launch",
    *("--multi_gpu", "--num_processes", "2", "--num_machines", "1"),
    *("--mixed_precision", "no", "--dynamo_backend", "no"),
]


serving = load_path(
    HERE.parent / "plugins" / "openenv" / "tests" / "serving.py", "trl_env_serve_train_serving"
)


@pytest.fixture
def guess_servers():
    with serving.fleet(2, "--env", "guess", "--max-sessions", "4") as started:
        yield started


def launch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*LAUNCH, *args],
        capture_output=True,
        text=True,
        timeout=800,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def test_two_trainer_processes_play_on_env_servers(tmp_path, guess_servers):
    urls = [s.url for s in guess_servers]
    out = tmp_path / "run"
    result = launch(
        *("-m", "trl_env", "train", "--env", "guess", "--processor", "qwen3"),
        *("--env-server", urls[0], "--env-server", urls[1]),
        *("--max-new-tokens", "4", "--max-turns", "2", "--batch-size", "4"),
        *("--num-generations", "2", "--max-steps", "2", "--no-check"),
        *("--output-dir", str(out), "--json"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    used = set()
    for rank in (0, 1):
        played = [json.loads(line) for line in (out / "episodes" / f"rank{rank}.jsonl").open()]
        assert len(played) == 8  # each process plays its own rows: 4 a step, 2 steps
        assert all(r["error"] == "" and r["server"] in urls for r in played)
        used |= {r["server"] for r in played}
    assert used == set(urls)
    saved = (out / "config.yaml").read_text()
    assert urls[0] in saved  # the run's config keeps where its envs were played


def test_two_trainer_processes_generate_on_a_vllm_server(tmp_path, stand_in_server, guess_servers):
    urls = [s.url for s in guess_servers]
    result = launch(str(HERE / "serve_two_ranks.py"), str(tmp_path), stand_in_server.url, *urls)
    assert result.returncode == 0, result.stderr[-3000:]
    for rank in (0, 1):
        played = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert len(played) == 4
        assert all(r["error"] == "" and r["server"] in urls for r in played), played

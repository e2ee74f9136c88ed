"""`trl-env eval`: summary, one flushed JSON record per episode, nothing finished lost on a kill."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from trl_env.cli import cli
from trl_env.rollout import episode_fields

TRL_ENV = str(Path(sys.executable).parent / "trl-env")
ARGS = [
    "eval",
    "--env",
    "guess",
    "--processor",
    "qwen3",
    "--max-new-tokens",
    "4",
    "--env-arg",
    "max_turns=3",
]


def test_summary_and_records(tmp_path):
    out = tmp_path / "eval.jsonl"
    result = CliRunner().invoke(
        cli, [*ARGS, "--episodes", "5", "--batch-size", "2", "--out", str(out), "--json"]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert summary["episodes"] == len(records) == 5
    assert set(episode_fields()) <= set(records[0])
    assert summary["mean_reward"] == sum(r["reward"] for r in records) / 5
    assert sum(summary["status"].values()) == 5
    assert {r["seed"] for r in records} == {f"eval-{i}" for i in range(5)}  # the eval split


def test_an_interrupted_run_keeps_what_it_finished(tmp_path):
    out = tmp_path / "eval.jsonl"
    proc = subprocess.Popen(
        [TRL_ENV, *ARGS, "--episodes", "400", "--batch-size", "1", "--out", str(out), "--json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    while not (out.exists() and out.read_text().count("\n") >= 2):
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, "no episode finished in time"
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    proc.wait(60)
    assert proc.returncode != 0
    lines = out.read_text().splitlines()
    assert len(lines) >= 2
    assert all(json.loads(line)["status"] for line in lines)  # whole records only

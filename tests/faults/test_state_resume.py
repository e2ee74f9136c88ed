"""After `train --resume`, the steps played again after the checkpoint are logged once in
episodes/rankN.jsonl: what the interrupted run logged past its checkpoint is dropped first."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import pytest
from click.testing import CliRunner

from trl_env.cli import cli
from trl_env.training.run import EpisodeLog

pytestmark = pytest.mark.timeout(400)

QUICK = ["--env", "guess", "--processor", "qwen3", "--model", "tiny",
         "--processor-arg", "thinking=false", "--max-new-tokens", "2", "--max-turns", "1",
         "--batch-size", "2", "--num-generations", "2", "--train-seeds", "8", "--no-check",
         "--save-steps", "1"]  # fmt: skip


def records(run) -> list[dict]:
    return [
        json.loads(line) for line in (run / "episodes" / "rank0.jsonl").read_text().splitlines()
    ]


def test_a_resumed_run_logs_each_step_once(tmp_path):
    run = tmp_path / "run"
    first = CliRunner().invoke(cli, ["train", *QUICK, "--max-steps", "2", "--output-dir", str(run)])
    assert first.exit_code == 0, first.output
    per_step = Counter(r["step"] for r in records(run))
    assert sorted(per_step) == [0, 1] and len(set(per_step.values())) == 1
    # killed after step 2 logged its episodes, before its checkpoint was saved
    shutil.rmtree(run / "checkpoint-2")
    again = CliRunner().invoke(cli, ["train", "--output-dir", str(run), "--resume"])
    assert again.exit_code == 0, again.output
    assert Counter(r["step"] for r in records(run)) == per_step


def test_trim_keeps_what_came_before_the_checkpoint(tmp_path):
    log = EpisodeLog(tmp_path, 0)
    lines = [
        {"step": 0, "split": "train", "seed": "a"},
        {"step": 1, "split": "eval", "seed": "held"},  # evaluated before checkpoint-1 was saved
        {"step": 1, "split": "train", "seed": "b"},  # generated after it: played again
        {"step": 2, "split": "eval", "seed": "later"},
    ]
    log.path.write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"step": 2, "spl')
    log.trim(1)
    assert [r["seed"] for r in records_of(log)] == ["a", "held"]


def records_of(log: EpisodeLog) -> list[dict]:
    return [json.loads(line) for line in log.path.read_text().splitlines()]

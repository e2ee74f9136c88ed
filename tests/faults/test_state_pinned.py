"""Process-wide state a thread-isolated env shares with the trainer, pinned: an env that moves
the working directory and takes ``sys.stdout``/``sys.stderr`` (``contextlib.redirect_stdout``
entered on a worker thread and never left) changes neither where a run writes nor what the
command prints. Run as the user runs it: the real `trl-env` in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from trl_env.testing.fake_dist import (  # noqa: F401 - the fixture
    FakeDistributions,
    fake_distribution,
)

pytestmark = pytest.mark.timeout(400)

HERE = str(Path(__file__).resolve().parent)


@pytest.fixture
def cli(fake_distribution: FakeDistributions, tmp_path):  # noqa: F811
    """`trl-env` in ``tmp_path/work`` with the env `wanderer` registered; it wanders off to
    ``tmp_path/elsewhere``."""
    fake_distribution("trl-env-wanderer", envs={"wanderer": "hostile_envs:Wanderer"})
    env = fake_distribution.env(TRL_ENV_WANDER_TO=str(tmp_path / "elsewhere"))
    env["PYTHONPATH"] = os.pathsep.join([HERE, env["PYTHONPATH"]])
    env.pop("TRL_ENV_PLUGINS", None)
    (tmp_path / "work").mkdir()
    (tmp_path / "elsewhere").mkdir()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        from trl_env.testing.fake_dist import run_cli

        return run_cli(*args, env=env, cwd=tmp_path / "work", timeout=360)

    return run


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_eval_prints_its_json_and_writes_its_records_where_it_started(cli, tmp_path, mode):
    result = cli("eval", "--env", "wanderer", "--processor", "qwen3", "--episodes", "2",
                 "--batch-size", "2", "--max-new-tokens", "2", "--env-isolation", mode,
                 "--env-pass-env", "TRL_ENV_WANDER_TO",  # where it wanders, in a worker too
                 "--out", "records.jsonl", "--json")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["episodes"] == 2
    records = (tmp_path / "work" / "records.jsonl").read_text().splitlines()
    assert len(records) == 2 and summary["out"] == str(tmp_path / "work" / "records.jsonl")
    assert os.listdir(tmp_path / "elsewhere") == []


def test_train_writes_its_run_where_it_started_and_prints_its_summary(cli, tmp_path):
    result = cli("train", "--env", "wanderer", "--processor", "qwen3", "--model", "tiny",
                 "--processor-arg", "thinking=false", "--max-new-tokens", "2", "--max-turns", "1",
                 "--batch-size", "2", "--num-generations", "2", "--train-seeds", "4",
                 "--max-steps", "1", "--no-check", "--output-dir", "run", "--json")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    run = tmp_path / "work" / "run"
    assert summary["output_dir"] == str(run) and summary["steps"] == 1
    assert (run / "summary.json").is_file() and (run / "final").is_dir()
    assert list((run / "episodes").glob("rank0.jsonl"))
    assert list(run.rglob("events.out.tfevents.*")), "no TensorBoard logs under the run"
    assert os.listdir(tmp_path / "elsewhere") == []

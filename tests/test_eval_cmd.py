"""`trl-env eval`: summary, one flushed JSON record per episode, nothing finished lost on a kill."""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import subprocess

import pytest
from click.testing import CliRunner

from trl_env.cli import cli
from trl_env.registry import envs, register_env
from trl_env.rollout import episode_fields
from trl_env.testing.fake_dist import console_script
from trl_env.testing.processes import default_sigint, interrupt_when

TRL_ENV = console_script()
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


class SameSeed:
    """Every episode starts from the same state, whatever its seed."""

    def __init__(self):
        self.reward, self.alive = 0.0, True

    def reset(self, seed):
        return "Say anything."

    def step(self, action):
        self.alive = False
        return "Thanks."


@pytest.fixture(autouse=True)
def same_seed_env():
    register_env("same-seed", SameSeed, replace=True)
    yield
    envs.unregister("same-seed")


def run_eval(*args: str):
    return CliRunner().invoke(cli, [*ARGS, *args])


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_summary_and_records(tmp_path):
    out = tmp_path / "eval.jsonl"
    result = run_eval("--episodes", "5", "--batch-size", "2", "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    records = read(out)
    assert summary["episodes"] == len(records) == 5
    assert set(episode_fields()) <= set(records[0])
    assert summary["reward"] == pytest.approx(sum(r["reward"] for r in records) / 5)
    assert sum(summary["status"].values()) == 5
    assert {r["seed"] for r in records} == {f"eval-{i}" for i in range(5)}  # the eval split
    run = records[0]["run"]
    assert all(r["run"] == run and r["env"] == "guess" for r in records)
    assert run["model"] == "tiny" and run["processor"] == "qwen3" and run["env"] == "guess"
    assert run["env_args"] == {"max_turns": 3} and run["seed"] == 0
    assert run["sampling"]["temperature"] == 1.0 and run["limits"]["max_new_tokens"] == 4
    assert run["trl_env_version"] == importlib.metadata.version("trl-env")
    age = datetime.datetime.now(datetime.UTC) - datetime.datetime.fromisoformat(run["time"])
    assert datetime.timedelta(0) <= age < datetime.timedelta(minutes=10)


def test_out_refuses_an_existing_file_unless_append(tmp_path):
    out = tmp_path / "eval.jsonl"
    out.write_text('{"seed": "kept"}\n')
    refused = run_eval("--episodes", "1", "--out", str(out))
    assert refused.exit_code == 2 and "--append" in refused.output
    assert out.read_text() == '{"seed": "kept"}\n'
    added = run_eval("--episodes", "2", "--out", str(out), "--append", "--json")
    assert added.exit_code == 0, added.output
    assert [r["seed"] for r in read(out)] == ["kept", "eval-0", "eval-1"]


def test_one_random_stream_per_run(tmp_path):
    # Every seed the same: with one stream, batches differ; the same --seed replays them all.
    common = ["--episodes", "6", "--batch-size", "2", "--max-new-tokens", "8", "--json"]
    samples = []
    for name, seed in (("a", "5"), ("b", "5"), ("c", "6")):
        out = tmp_path / f"{name}.jsonl"
        result = CliRunner().invoke(
            cli,
            [
                "eval",
                "--env",
                "same-seed",
                "--processor",
                "qwen3",
                *common,
                "--seed",
                seed,
                "--out",
                str(out),
            ],
        )
        assert result.exit_code == 0, result.output
        samples.append([r["completion_ids"] for r in read(out)])
    a, b, c = samples
    assert a == b
    batches = [tuple(map(tuple, a[i : i + 2])) for i in range(0, 6, 2)]
    assert len(set(batches)) == 3, "two batches sampled the same episodes"
    assert a != c


def test_rollout_options_reach_the_run(tmp_path):
    out = tmp_path / "eval.jsonl"
    result = run_eval(
        "--episodes",
        "2",
        "--min-p",
        "0.1",
        "--repetition-penalty",
        "1.2",
        "--max-env-chars",
        "500",
        "--env-isolation",
        "process",
        "--out",
        str(out),
        "--json",
    )
    assert result.exit_code == 0, result.output
    run = read(out)[0]["run"]
    assert run["sampling"]["min_p"] == 0.1 and run["sampling"]["repetition_penalty"] == 1.2


def test_an_interrupted_run_keeps_what_it_finished(tmp_path):
    out = tmp_path / "eval.jsonl"
    proc = subprocess.Popen(
        [TRL_ENV, *ARGS, "--episodes", "400", "--batch-size", "1", "--out", str(out), "--json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )

    def two_done() -> bool:
        return out.exists() and out.read_text().count("\n") >= 2

    # whatever fails, the eval (400 episodes: many minutes) does not outlive the test
    interrupt_when(proc, two_done, "no episode finished in time")
    assert proc.returncode != 0
    lines = out.read_text().splitlines()
    assert len(lines) >= 2
    assert all(json.loads(line)["status"] for line in lines)  # whole records only


def test_backend_vllm_talks_to_the_server(tmp_path, stand_in_server):
    out = tmp_path / "eval.jsonl"
    before = stand_in_server.stats()["completions"]
    result = run_eval(
        "--episodes",
        "3",
        "--backend",
        "vllm",
        "--vllm-server-base-url",
        stand_in_server.url,
        "--out",
        str(out),
        "--json",
    )
    served = stand_in_server.stats()["completions"] - before
    assert result.exit_code == 0, result.output
    records = read(out)
    assert len(records) == 3 and all(r["status"] != "error" for r in records), records
    assert records[0]["run"]["backend"] == "vllm"
    # Every sampled turn came from the server: at least one completion per episode's turn.
    assert served >= sum(r["turns"] for r in records) > 0


def test_eval_is_a_library_function_the_cli_calls():
    """`trl-env eval` is trl_env.evaluation.evaluate behind flags: called without click, it
    plays and summarises the same run."""
    from trl_env.config import RolloutConfig
    from trl_env.evaluation import evaluate
    from trl_env.spec import EnvSpec

    records: list[dict] = []
    env = EnvSpec("guess", options={"max_turns": 3})
    config = RolloutConfig(max_new_tokens=4)
    summary = evaluate(env, "qwen3", episodes=2, config=config, on_record=records.append)
    shown = json.loads(run_eval("--episodes", "2", "--json").output)
    summary.pop("seconds"), shown.pop("seconds")
    assert {k: shown[k] for k in summary} == summary and summary["episodes"] == 2
    assert [r["seed"] for r in records] == ["eval-0", "eval-1"]
    assert all(r["run"]["env"] == "guess" and r["run"]["seed"] == 0 for r in records)

"""The TextWorld env through trl-env's commands, on the tiny qwen3 model: ``play``, ``eval`` on
held-out games, ``sft`` on walkthroughs (replayed by the engine, each wins) and one step of
``train``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from trl_env.cli import cli
from trl_env_textworld import TextWorldEnv

pytestmark = pytest.mark.slow
TINY = ["--env", "textworld", "--processor", "qwen3", "--processor-arg", "thinking=false"]


def invoke(*args: str, stdin: str | None = None) -> str:
    result = CliRunner().invoke(cli, list(args), input=stdin)
    assert result.exit_code == 0, result.output[-3000:]
    return result.output


def test_play_wins_with_the_walkthrough() -> None:
    walkthrough = TextWorldEnv().demonstrate("eval-0")
    assert walkthrough
    out = invoke("play", "--env", "textworld", "--seed", "eval-0", stdin="\n".join(walkthrough))
    assert "*** The End ***" in out


def test_eval_plays_held_out_games(tmp_path: Path) -> None:
    records = tmp_path / "eval.jsonl"
    invoke("eval", *TINY, "--env-arg", "max_turns=3", "--episodes", "2", "--max-new-tokens", "6",
           "--out", str(records))  # fmt: skip
    episodes = [json.loads(line) for line in records.read_text().splitlines()]
    assert sorted(e["seed"] for e in episodes) == ["eval-0", "eval-1"]
    for episode in episodes:
        assert episode["status"] in ("done", "max_turns", "budget"), episode.get("error")
        assert episode["messages"][0]["content"] == TextWorldEnv(max_turns=3).system_prompt


def test_sft_trains_on_walkthroughs_that_win(tmp_path: Path) -> None:
    out = tmp_path / "sft"
    invoke("sft", *TINY, "--episodes", "2", "--epochs", "1", "--batch-size", "2",
           "--output-dir", str(out), "--json")  # fmt: skip
    episodes = [json.loads(e) for e in (out / "episodes" / "rank0.jsonl").read_text().splitlines()]
    assert len(episodes) == 2 and all(e["success"] and e["reward"] == 1.0 for e in episodes)
    for episode in episodes:
        said = [m["content"] for m in episode["messages"] if m["role"] == "assistant"]
        assert said == TextWorldEnv().demonstrate(episode["seed"])


def test_train_one_step(tmp_path: Path) -> None:
    out = tmp_path / "train"
    invoke("train", *TINY, "--max-new-tokens", "4", "--max-turns", "2", "--batch-size", "2",
           "--num-generations", "2", "--train-seeds", "2", "--max-steps", "1", "--no-check",
           "--report-to", "none", "--output-dir", str(out))  # fmt: skip
    assert (out / "final").is_dir()

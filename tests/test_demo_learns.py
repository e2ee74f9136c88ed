"""A shorter `trl-env train --demo`: the tiny model's reward on `guess` must rise."""

from __future__ import annotations

import json

from click.testing import CliRunner

from trl_env.cli import cli


def test_reward_rises(tmp_path):
    result = CliRunner().invoke(
        cli, ["train", "--demo", "--max-steps", "14", "--output-dir", str(tmp_path), "--json"]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    history = [json.loads(line) for line in (tmp_path / "episodes" / "rank0.jsonl").open()]
    by_step: dict[int, list[float]] = {}
    for ep in history:
        by_step.setdefault(ep["step"], []).append(ep["reward"])
    means = [sum(v) / len(v) for _, v in sorted(by_step.items())]
    first, last = sum(means[:4]) / 4, sum(means[-4:]) / 4
    assert last > first + 0.05, f"reward did not rise: {means}"
    assert summary["reward_end"] > summary["reward_start"]

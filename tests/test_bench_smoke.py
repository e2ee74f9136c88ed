"""The rollout benchmark runs end to end at tiny sizes (no timing assertions here)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from trl_env.testing.modules import load_path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "rollout_bench.py"


def load_bench():
    return load_path(BENCH, "rollout_bench")


def test_bench_core_function_returns_every_figure(qwen3):
    bench = load_bench()
    stack = bench.Stack(qwen3.processor, qwen3.tokenizer, qwen3.model)
    result = bench.run(
        stack,
        episodes=3,
        turns=2,
        turn_tokens=3,
        short_turns=1,
        long_turns=2,
        delay=0.01,
        slow_step=0.05,
        sequential_episodes=1,
        repeats=1,
    )
    ratios = [
        "throughput_ratio",
        "throughput_ratio_cpu",
        "wordy_throughput_ratio",
        "backend_throughput_ratio",
        "turns16_over_turns8",
        "turns16_over_turns8_cpu",
        "batch_speedup",
        "batch_speedup_cpu",
        "slow_tail_ratio",
        "other_throughput_ratio",
        "other_over_default",
        "other_slow_tail_ratio",
    ]
    for key in [*ratios, "rollout_tokens_per_s", "generate_tokens_per_s"]:
        assert math.isfinite(result[key]) and result[key] > 0, key
    # A difference of two timings: 10 ms steps may hide in the noise of a loaded machine.
    assert math.isfinite(result["env_wait_over_step"])
    assert result["generate_tokens"] == 3 * 2 * 3
    assert 0 < result["rollout_tokens"] <= result["generate_tokens"]
    # The replay samples each turn's own length with no stops: the rollout's token count.
    assert result["per_repeat"]["tokens"]["backend"] == result["per_repeat"]["tokens"]["rollout"]
    assert result["replay_tokens"] == result["rollout_tokens"]
    assert math.isfinite(result["rollout_over_replay"]) and result["rollout_over_replay"] > 0
    assert set(result["median_wall_seconds"]) >= {
        "rollout", "generate", "backend", "wordy", "short", "long", "slow_envs", "sequential",
    }  # fmt: skip
    # After the first call, a row prefills only the text inserted since its last turn.
    calls = result["context"]
    assert len(calls) >= 2 and calls[0]["history_tokens"] == 0
    assert all(0 < c["prefilled_tokens"] < c["history_tokens"] for c in calls[1:])
    # the other engine's figures are its own: its tokens, next to the default's
    assert {result["engine"], result["other_engine"]} == {"calls", "continuous"}
    assert result["per_repeat"]["tokens"]["other"][0] > 0
    tokens, wall = result["per_repeat"]["tokens"], result["per_repeat"]["wall"]
    other_speed, speed = (
        tokens["other"][0] / wall["other"][0],
        tokens["rollout"][0] / wall["rollout"][0],
    )
    assert result["other_over_default"] == pytest.approx(other_speed / speed)
    assert set(bench.verdicts(result)) == set(bench.TARGETS)
    assert "PASS" in bench.report(result) or "FAIL" in bench.report(result)

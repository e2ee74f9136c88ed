"""bench/soak.py runs end to end at a tiny size (its figures are in docs/reliability.md)."""

from __future__ import annotations

from pathlib import Path

import hostile_envs as H
import pytest

from trl_env.testing.modules import load_path

SOAK = Path(__file__).resolve().parents[2] / "bench" / "soak.py"


@pytest.fixture(scope="module")
def soak_module():
    return load_path(SOAK, "soak_bench")


def test_one_seed_in_ten_is_hostile_and_crashes_only_under_process_isolation(soak_module):
    for mode in ("thread", "process"):
        seeds = soak_module.soak_seeds(400, mode)
        hostile = [s.split("-")[1] for s in seeds if s.startswith(H.BAD)]
        assert len(hostile) == 40
        kinds, process_only = soak_module.KINDS, soak_module.PROCESS_ONLY
        expected = set(kinds) - (set(process_only) if mode == "thread" else set())
        assert set(H.KINDS) - set(H.CRASHES) <= expected  # the catalogue, and more
        assert set(hostile) == expected


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_small_soak_loses_nothing(qwen3, soak_module, mode):
    result = soak_module.soak(qwen3, mode, episodes=30, batch=15, faults=True)
    assert (result.completed, result.lost, result.calm_harmed) == (30, 0, 0), result.errors
    assert result.statuses.get("error", 0) == 3  # raise, int, nan
    assert not result.pwned and result.leaked == 0 and result.left_running == 0
    assert result.peak_threads >= 1 and result.peak_memory_mb > 0 and result.throughput > 0


def test_the_overhead_figures_are_measured(qwen3, soak_module):
    figures = soak_module.overhead(qwen3, episodes=2, turns=3, repeats=1)
    assert figures["step_ms_process"] > 0 and figures["step_ms_thread"] > 0
    assert figures["worker_start_ms"] > 0 and figures["round_trip_us"] > 0
    assert "per env step" in soak_module.report(
        {"episodes": 30, "batch": 15, "modes": {}, "overhead": figures}
    )

"""bench/serve.py end to end at a tiny size: every episode has a record, the killed server's
episodes end in error naming it, the others match the in-process rewards (no timing asserted)."""

from __future__ import annotations

from pathlib import Path

from trl_env.testing.modules import load_path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "serve.py"


def test_serve_bench_loses_no_episode_when_a_server_is_killed():
    bench = load_path(BENCH, "serve_bench")
    result = bench.run(episodes=24, servers=2, sessions=3, workers=6, kill_at=0.3)
    assert result["records"] == 24 and result["lost"] == 0
    errors = result["statuses"].get("error", 0)
    assert result["errors_naming_the_killed_server"] == errors
    assert result["done_with_the_local_reward"] == result["statuses"]["done"]
    assert result["sessions_left_open"] == 0
    assert sum(result["spread"].values()) == 24
    assert result["servers_vs_in_process"] > 0

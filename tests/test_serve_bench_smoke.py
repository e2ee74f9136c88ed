"""bench/serve.py end to end at a tiny size: every episode has a record, the killed server's
episodes end in error naming it, the others match the in-process rewards (no timing asserted)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "serve.py"


def test_serve_bench_loses_no_episode_when_a_server_is_killed():
    spec = importlib.util.spec_from_file_location("serve_bench", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)
    result = bench.run(episodes=24, servers=2, sessions=3, workers=6, kill_at=0.3)
    assert result["records"] == 24 and result["lost"] == 0
    errors = result["statuses"].get("error", 0)
    assert result["errors_naming_the_killed_server"] == errors
    assert result["done_with_the_local_reward"] == result["statuses"]["done"]
    assert result["sessions_left_open"] == 0
    assert sum(result["spread"].values()) == 24
    assert result["servers_vs_in_process"] > 0

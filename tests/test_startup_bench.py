"""bench/startup.py runs and reports every figure it promises (no timing is asserted here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from trl_env.testing.modules import load_path
from trl_env.testing.timeouts import scaled

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "startup.py"


def load_bench():
    return load_path(SCRIPT, "startup_bench")


def test_the_floor_and_both_commands_are_timed_in_pairs():
    bench = load_bench()
    times = bench.measure(repeats=2)
    assert set(times) == {
        "python -c pass",
        "floor",
        "trl-env --help",
        "trl-env list",
        "trl-env <TAB>",
    }
    # CPU time comes in scheduler ticks, so a short run may read 0.
    assert all(len(ts) == 2 and all(w > 0 and c >= 0 for w, c in ts) for ts in times.values())
    summary = bench.summarize(times)
    assert summary["floor"]["ratio_to_floor"] == 1.0
    assert summary["python -c pass"]["ratio_to_floor"] < 1.0  # the floor does real work


def test_the_script_prints_a_verdict():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--repeats", "1", "--strict"],
        capture_output=True, text=True, timeout=scaled(300), check=False,
    )  # fmt: skip
    verdict = proc.stdout.strip().splitlines()[-1]
    assert verdict in {"PASS", "FAIL (target missed)"}, proc.stderr
    assert proc.returncode == (0 if verdict == "PASS" else 1)  # --strict: a miss is exit 1


def test_the_target_holds_wall_and_cpu_time_alike():
    within = load_bench().within_target
    assert within({"ratio_to_floor": 1.05, "cpu_ratio_to_floor": 1.08})
    assert not within({"ratio_to_floor": 1.05, "cpu_ratio_to_floor": 1.2})  # CPU counts too
    assert not within({"ratio_to_floor": 1.2, "cpu_ratio_to_floor": 1.0})


def test_the_completion_row_is_a_real_completion():
    # "trl-env <TAB>" runs what bash runs on TAB: it must answer with the command names.
    bench = load_bench()
    argv, env = bench.commands()["trl-env <TAB>"]
    environ = {**bench.ENVIRONMENT, **env}
    done = subprocess.run(
        argv, env=environ, capture_output=True, text=True, timeout=scaled(120), check=False
    )
    assert done.returncode == 0, done.stderr
    assert {"plain,list", "plain,train"} <= set(done.stdout.split())

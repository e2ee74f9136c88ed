"""bench/fidelity.py runs and reports float-rounding logprob errors on a small run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from trl_env.testing.timeouts import scaled

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "fidelity.py"


def test_fidelity_bench_reports_exact_logprobs():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--episodes", "2", "--families", "qwen3,gemma3", "--json"],
        capture_output=True, text=True, timeout=scaled(600), check=True,
    )  # fmt: skip
    results = json.loads(proc.stdout)
    assert set(results) == {"qwen3", "gemma3"}
    for r in results.values():
        assert r["tokens_checked"] > 0
        assert r["max_logprob_error"] < 1e-4
        assert abs(r["mean_on_policy_ratio"] - 1) < 1e-4  # temperature only: ratio 1

"""``bench/gpu.py`` runs end to end: ``--device cpu --quick`` (tiny shapes) in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "gpu.py"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_the_gpu_bench_runs_on_cpu_in_quick_mode_and_writes_every_section(tmp_path, qwen3):
    """The vLLM rows are measured against the stand-in server (no vllm here)."""
    from trl_env.testing.vllm_server import running

    out = tmp_path / "gpu.json"
    command = [sys.executable, str(BENCH), "--device", "cpu", "--quick", "--out", str(out)]
    command += ["--all", "--json"]  # every section: the one-command GPU run, on tiny shapes
    command += ["--threads", "1"]  # the tiny shapes gain nothing from more, on a busy machine
    with running(qwen3.path) as srv:
        command += ["--vllm-url", srv.url]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    assert json.loads(done.stdout) == results  # --json: stdout holds the JSON alone
    shape = results["shape"]
    rows = results["throughput"]
    assert [(r["episodes"], r["turns"]) for r in rows] == [
        (n, t) for n in shape["episodes"] for t in shape["turns"]
    ]
    for r in rows:  # every episode sampled its turns' tokens, and generate as many
        assert r["rollout_tokens"] <= r["episodes"] * r["turns"] * shape["tokens"]
        assert r["generate_tokens"] == r["episodes"] * r["turns"] * shape["tokens"]
        assert r["ratio"] == pytest.approx(r["rollout_tok_s"] / r["generate_tok_s"], rel=0.01)
        # the reported pair is the median of the pairs measured (alternating which goes first)
        assert len(r["pair_ratios"]) == shape["throughput_pairs"] and r["ratio"] in r["pair_ratios"]
        assert r["ratio_to_ragged"] == pytest.approx(
            r["rollout_tok_s"] / r["ragged_generate_tok_s"], rel=0.01
        )
    assert results["batching"]["speedup"] > 0
    slow = results["slow_envs"]
    assert slow["slow_episodes"] == 1 and slow["slow_done_s"] >= 2 * slow["slow_step_s"]
    step = results["grpo_step"]
    assert 0 < step["rollout_s"] < step["step_s"]
    assert step["update_s"] == pytest.approx(step["step_s"] - step["rollout_s"], abs=2e-3)
    (vllm,) = results["vllm"]
    assert vllm["episodes"] == shape["vllm"][0][0] and vllm["episodes_in_error"] == 0
    assert vllm["ratio"] == pytest.approx(vllm["rollout_tok_s"] / vllm["one_call_tok_s"], rel=0.01)
    # The replay sent the rollout's own requests: as many tokens came back as were sampled.
    assert vllm["replay_tokens"] == vllm["rollout_tokens"] > 0
    assert vllm["rollout_over_replay"] == pytest.approx(
        vllm["rollout_tok_s"] / vllm["replay_tok_s"], rel=0.01
    )
    summary = results["summary"]
    assert summary["rollout_over_replay_vllm"] == vllm["rollout_over_replay"]
    assert summary["rollout_over_generate"] == min(r["ratio"] for r in rows)
    assert results["async"].startswith("not measured")  # no CUDA: said, not skipped silently
    assert summary["async_over_sync_samples_per_s"] is None


def test_the_gpu_bench_says_in_one_line_when_there_is_no_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    done = subprocess.run([sys.executable, str(BENCH)], capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout.strip().count("\n") == 0
    assert "--device cpu --quick" in done.stdout

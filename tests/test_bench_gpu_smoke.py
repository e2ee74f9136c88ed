"""``bench/gpu.py`` runs end to end: ``--device cpu --quick`` (tiny shapes) in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "gpu.py"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_the_gpu_bench_runs_on_cpu_in_quick_mode_and_writes_every_section(
    tmp_path, stand_in_server
):
    """The vLLM rows are measured against the stand-in server (no vllm here)."""
    out = tmp_path / "gpu.json"
    command = [sys.executable, str(BENCH), "--device", "cpu", "--quick", "--out", str(out)]
    command += ["--all", "--json"]  # every section: the one-command GPU run, on tiny shapes
    command += ["--threads", "1"]  # the tiny shapes gain nothing from more, on a busy machine
    command += ["--vllm-url", stand_in_server.url]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    assert json.loads(done.stdout) == results  # --json: stdout holds the JSON alone
    shape = results["shape"]
    assert results["device"] and 0 < results["seconds"] < 600  # the run's own wall time
    rows = results["throughput"]
    assert [(r["engine"], r["episodes"], r["turns"]) for r in rows] == [
        (e, n, t)
        for n in shape["episodes"]
        for t in shape["turns"]
        for e in ("continuous", "calls")
    ]
    for r in rows:  # every episode sampled its turns' tokens, and generate as many
        assert r["rollout_tokens"] <= r["episodes"] * r["turns"] * shape["tokens"]
        assert r["generate_tokens"] == r["episodes"] * r["turns"] * shape["tokens"]
        assert r["ratio"] == pytest.approx(r["rollout_tok_s"] / r["generate_tok_s"], rel=0.01)
        # the reported pair is the median of the pairs measured (alternating which goes first)
        pairs = shape["throughput_pairs"] if r["engine"] == "continuous" else shape["calls_pairs"]
        assert len(r["pair_ratios"]) == pairs and r["ratio"] in r["pair_ratios"]
        assert r["ratio_to_ragged"] == pytest.approx(
            r["rollout_tok_s"] / r["ragged_generate_tok_s"], rel=0.01
        )
        # transformers' own continuous batching made the same requests' tokens
        assert r["generate_batch_tokens"] == r["generate_tokens"]
        assert r["ratio_to_continuous"] == pytest.approx(
            r["rollout_tok_s"] / r["generate_batch_tok_s"], rel=0.01
        )
        # the limit: weights once a step plus each row's cache, at the measured bandwidth
        assert r["bytes_per_step"] > r["weight_bytes"] > 0 and r["kv_bytes_per_token"] > 0
        assert r["share_of_limit"] == pytest.approx(r["rollout_tok_s"] / r["limit_tok_s"], rel=0.01)
        assert 0 < r["share_of_limit"] < 1
    state = next(r for r in rows if r["engine"] == "continuous")["engine_state"]
    assert state["graphs"] is False and state["failed"] is None  # a CPU: eager steps
    assert results["machine"]["memory_bandwidth_gb_s"] > 0
    assert results["batching"]["speedup"] > 0 and results["batching"]["engine"] == "continuous"
    assert [s["engine"] for s in results["slow_envs"]] == ["continuous", "calls"]
    for slow in results["slow_envs"]:
        assert slow["slow_episodes"] == 1 and slow["slow_done_s"] >= 2 * slow["slow_step_s"]
        assert len(slow["pair_ratios"]) == shape["slow_pairs"]
    step = results["grpo_step"]
    assert step["engine"] == "continuous" and 0 < step["rollout_s"] < step["step_s"]
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
    for engine in ("continuous", "calls"):
        mine = [r for r in rows if r["engine"] == engine]
        assert summary["rollout_over_generate"][engine] == min(r["ratio"] for r in mine)
        assert summary["rollout_over_generate_batch"][engine] == min(
            r["ratio_to_continuous"] for r in mine
        )
    assert summary["grpo_rollout_share"] == step["rollout_share"]
    assert results["async"].startswith("not measured")  # no CUDA: said, not skipped silently
    assert summary["async_over_sync_samples_per_s"] is None
    targets = results["targets"]
    assert (
        targets["continuous_over_generate"]["at"] == f"{max(shape['episodes'])} episodes x 2 turns"
    )
    assert targets["seconds"]["value"] == results["seconds"]


def test_the_gpu_bench_says_in_one_line_when_there_is_no_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    done = subprocess.run([sys.executable, str(BENCH)], capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout.strip().count("\n") == 0
    assert "--device cpu --quick" in done.stdout

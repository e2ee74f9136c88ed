"""The server backend against a real ``vllm serve``, where vllm and a CUDA GPU exist.

Skipped elsewhere (this project's CI machine has neither). The server runs the way
``trl vllm-serve`` runs it (``--logprobs-mode processed_logprobs``) on a qwen3-shaped model
saved to disk: the tiny tokenizer, with attention heads of 64 dimensions (vLLM's attention
kernels take no smaller ones) and float32 weights, so logprobs can be compared with a
recomputation on CPU.
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
import torch

from trl_env.backends.base import BackendContext, SamplingParams
from trl_env.backends.sampling import processed_logprobs
from trl_env.backends.vllm import make_backend

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None or not torch.cuda.is_available(),
        reason="needs vllm and a CUDA GPU",
    ),
    pytest.mark.slow,
    pytest.mark.timeout(900),
]


@pytest.fixture(scope="module")
def served(qwen3, tmp_path_factory):
    from transformers import AutoConfig, AutoModelForCausalLM

    path = tmp_path_factory.mktemp("vllm-model")
    config = AutoConfig.from_pretrained(qwen3.path)
    config.head_dim, config.num_attention_heads, config.num_key_value_heads = 64, 2, 1
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(path)
    qwen3.tokenizer.save_pretrained(path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(path)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--dtype", "float32"]
    command += ["--logprobs-mode", "processed_logprobs", "--max-model-len", "1024"]
    command += ["--gpu-memory-utilization", "0.3", "--enforce-eager", "--seed", "0"]
    proc = subprocess.Popen(command)
    try:
        deadline = time.monotonic() + 600
        while True:
            assert proc.poll() is None, "vllm serve exited while starting"
            try:
                with urllib.request.urlopen(url + "/health", timeout=5):
                    break
            except OSError:
                assert time.monotonic() < deadline, "vllm serve did not come up in 600 s"
                time.sleep(2)
        yield url, model.eval()
    finally:
        proc.terminate()
        proc.wait(60)


def test_a_real_vllm_server_reports_processed_logprobs_of_the_ids_it_sampled(served, qwen3):
    url, model = served
    params = SamplingParams(temperature=0.7, top_k=20, seed=5)
    session = make_backend(BackendContext(options={"vllm_server_base_url": url})).session(params)
    tok = qwen3.tokenizer
    rows = list(range(8))
    first = [tok(f"Episode {r} begins.", add_special_tokens=False)["input_ids"] for r in rows]
    samples = session.generate(rows, first, [12] * 8, frozenset())
    again = session.generate(rows, [[5, 6]] * 8, [12] * 8, frozenset())
    for r in rows:
        assert not samples[r].error and not again[r].error
        ids = first[r] + samples[r].ids + [5, 6] + again[r].ids
        got = samples[r].logprobs + again[r].logprobs
        sampled = [len(first[r]) + i for i in range(len(samples[r].ids))]
        sampled += [len(ids) - len(again[r].ids) + i for i in range(len(again[r].ids))]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0].float()
        expected = [
            float(processed_logprobs(logits[p - 1 : p], params)[0, ids[p]]) for p in sampled
        ]
        assert got == pytest.approx(expected, abs=5e-3)
    session.close()

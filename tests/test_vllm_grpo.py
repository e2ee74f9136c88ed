"""GRPO through the vllm backend in server mode, end to end.

The stand-in vLLM server (``python -m trl_env.testing.vllm_server``, a real subprocess on
127.0.0.1) serves the tiny qwen3 model from disk; the trainer holds the same weights, so TRL's
own recomputation of the rollout's logprobs must agree with what the server reported: the
on-policy importance ratio of every sampled token is 1.
"""

from __future__ import annotations

import copy

import pytest
import torch

from trl_env import make_rollout_func
from trl_env.testing.grpo import cpu_grpo_trainer
from trl_env.testing.toy_envs import WordEnv

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_grpo_through_a_vllm_server_is_on_policy_and_trains(qwen3, stand_in_server, tmp_path):
    srv = stand_in_server
    rollout = make_rollout_func(
        env=WordEnv,
        processor=qwen3.processor,
        backend="vllm",
        backend_options={"vllm_server_base_url": srv.url},
        max_new_tokens=8,
    )
    trainer = cpu_grpo_trainer(
        copy.deepcopy(qwen3.model),
        qwen3.tokenizer,
        rollout,
        [f"s{i}" for i in range(8)],
        str(tmp_path),
        num_generations=2,
        temperature=0.7,
    )
    out = rollout(["a", "a", "b", "b"], trainer)
    ratios: list[float] = []
    for prompt, completion, logprobs, mask in zip(
        out["prompt_ids"], out["completion_ids"], out["logprobs"], out["env_mask"], strict=True
    ):
        ids = torch.tensor([prompt + completion])
        with torch.no_grad():  # TRL's own: log_softmax(logits / temperature), whole vocabulary
            theirs, _, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model, ids, torch.ones_like(ids), len(completion)
            )
        keep = torch.tensor(mask, dtype=torch.bool)
        ratios += torch.exp(theirs[0][keep] - torch.tensor(logprobs)[keep]).tolist()
    assert all(status == "done" for status in out["env_status"])
    # The stand-in server scores rows batched in one forward pass; its fp32 sums differ from a
    # one-row recomputation by a few 1e-4 on a loaded machine (not a convention error: ~1 nat).
    assert len(ratios) > 20 and max(abs(r - 1) for r in ratios) < 1e-3
    before = srv.stats()["completions"]
    trainer.train()  # one GRPO step whose episodes the server generated
    assert srv.stats()["completions"] >= before + 4
    assert trainer.state.global_step == 1

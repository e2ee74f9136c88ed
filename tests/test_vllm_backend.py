"""The vLLM backend's turn logic (whole-history requests, cutting at stop and limit).

vLLM needs a GPU, which this machine lacks, so ``TRL's VLLMGeneration`` is replaced by a stand-in
with the same ``generate`` signature that samples with the tiny transformers model. The rollout
around it, the cutting and the history bookkeeping are the real code.
"""

from __future__ import annotations

import pytest

from trl_env.backends.base import SamplingParams
from trl_env.backends.transformers import TransformersBackend
from trl_env.backends.vllm import VLLMBackend, cut
from trl_env.rollout import batch_rollout


class StandInGeneration:
    """``generate(prompts, images, num_generations)`` as TRL's VLLMGeneration returns it."""

    def __init__(self, model, pad_id: int, max_completion_length: int) -> None:
        self.backend = TransformersBackend(model, pad_id)
        self.max_completion_length = max_completion_length
        self.prompts: list[list[list[int]]] = []

    def generate(self, prompts, images, num_generations):
        assert images is None and num_generations == 1
        self.prompts.append([list(p) for p in prompts])
        session = self.backend.session(SamplingParams(seed=len(self.prompts)))
        rows = list(range(len(prompts)))
        limits = [self.max_completion_length] * len(prompts)
        samples = session.generate(rows, prompts, limits, frozenset())  # vLLM stops on EOS only
        logprobs = [[[lp] for lp in s.logprobs] for s in samples]
        return prompts, [s.ids for s in samples], logprobs, None


@pytest.mark.parametrize(
    ("ids", "limit", "expected", "stopped"),
    [
        ([5, 6, 9, 7], 10, [5, 6, 9], True),  # cut after the stop token
        ([5, 6, 9, 7], 2, [5, 6], False),  # the row's limit comes first
        ([5, 6, 9], 3, [5, 6, 9], True),  # stop token exactly at the limit
        ([5, 6, 7], 10, [5, 6, 7], False),  # vLLM's own limit: a cut turn
    ],
)
def test_cut(ids, limit, expected, stopped):
    sample = cut(ids, [float(-i) for i in range(len(ids))], limit, frozenset({9}))
    assert sample.ids == expected and sample.stopped is stopped
    assert sample.logprobs == [float(-i) for i in range(len(expected))]


def test_rollout_through_the_vllm_backend_sends_whole_histories(qwen3, scripted_env):
    gen = StandInGeneration(qwen3.model, qwen3.tokenizer.pad_token_id, max_completion_length=12)
    episodes = batch_rollout(
        ["v1", "v2", "v3"],
        env=lambda: scripted_env(turns=3),
        processor=qwen3.processor,
        tokenizer=qwen3.tokenizer,
        backend=VLLMBackend(gen),
        max_new_tokens=5,
    )
    assert all(ep.status == "done" and ep.turns == 3 for ep in episodes)
    assert [len(batch) for batch in gen.prompts] == [3, 3, 3]
    for ep in episodes:
        assert ep.sampled_tokens <= 3 * 5
        # the last request of an episode is its whole history: prompt + everything but the last turn
        full = ep.prompt_ids + ep.completion_ids
        last = next(p for p in gen.prompts[-1] if full[: len(p)] == p)
        assert len(last) > len(ep.prompt_ids)
        assert all(lp <= 0 for lp, m in zip(ep.logprobs, ep.env_mask, strict=True) if m)

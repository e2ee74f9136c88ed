"""The vllm backend colocated: driving TRL's ``VLLMGeneration`` (``trainer.vllm_generation``).

vLLM needs a GPU, which this machine lacks, so TRL's ``VLLMGeneration`` is replaced by a
stand-in with its ``generate`` signature and the attributes TRL 1.16 reads at each call
(``max_completion_length``, ``generation_kwargs``, the sampling settings); it samples with the
tiny transformers model and, as vLLM would, stops at ``generation_kwargs["stop_token_ids"]``.
The session, the cutting and the rollout around it are the real code.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from trl_env.backends.base import BackendContext, SamplingParams
from trl_env.backends.transformers import TransformersBackend
from trl_env.backends.vllm import VLLMBackend, cut, make_backend
from trl_env.errors import UsageError
from trl_env.rollout import batch_rollout
from trl_env.testing.stacks import turns


class StandInGeneration:
    """``generate(prompts, images, num_generations)`` as TRL's VLLMGeneration answers it."""

    temperature, top_p, top_k, min_p, repetition_penalty = 1.0, 1.0, 0, None, 1.0
    mode, tensor_parallel_size = "colocate", 1

    def __init__(self, model, pad_id: int, max_completion_length: int, fail: bool = False) -> None:
        self.backend = TransformersBackend(model, pad_id)
        self.max_completion_length = max_completion_length
        self.generation_kwargs: dict = {"user_setting": 1}
        self.fail = fail
        self.calls: list[dict] = []

    def generate(self, prompts, images, num_generations):
        assert images is None and num_generations == 1
        self.calls.append(
            {
                "prompts": [list(p) for p in prompts],
                "max_tokens": self.max_completion_length,
                "kwargs": dict(self.generation_kwargs),
            }
        )
        if self.fail:
            raise RuntimeError("CUDA error: an illegal memory access was encountered\nat line 3")
        session = self.backend.session(SamplingParams(seed=len(self.calls)))
        rows = list(range(len(prompts)))
        limits = [self.max_completion_length] * len(prompts)
        stops = frozenset(self.generation_kwargs.get("stop_token_ids", []))
        samples = session.generate(turns(rows, prompts, limits), stops)
        logprobs = [[[lp] for lp in s.logprobs] for s in samples]
        token_ids = [[[t] for t in s.ids] for s in samples]
        return prompts, [s.ids for s in samples], logprobs, token_ids


@pytest.fixture
def gen(qwen3):
    return StandInGeneration(qwen3.model, qwen3.tokenizer.pad_token_id, max_completion_length=64)


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


def test_rollout_through_the_colocated_engine_sends_whole_histories(qwen3, scripted_env, gen):
    episodes = batch_rollout(
        ["v1", "v2", "v3"],
        env=lambda: scripted_env(turns=3),
        processor=qwen3.processor,
        tokenizer=qwen3.tokenizer,
        backend=VLLMBackend(gen),
        max_new_tokens=5,
    )
    assert all(ep.status == "done" and ep.turns == 3 for ep in episodes)
    assert sum(len(c["prompts"]) for c in gen.calls) == 9
    for ep in episodes:
        assert ep.sampled_tokens <= 3 * 5
        # the last request of an episode is its whole history: prompt + everything but the last turn
        full = ep.prompt_ids + ep.completion_ids
        sent = [p for c in gen.calls for p in c["prompts"] if full[: len(p)] == p]
        assert max(len(p) for p in sent) > len(ep.prompt_ids)
        assert all(lp <= 0 for lp, m in zip(ep.logprobs, ep.env_mask, strict=True) if m)


def test_a_call_asks_for_the_turn_s_limit_and_stops_and_puts_trl_s_settings_back(gen):
    session = VLLMBackend(gen).session(SamplingParams())
    stops = frozenset({11, 3, 7})
    samples = session.generate(turns([4, 2, 8], [[5, 6], [7, 8, 9], [1]], [6, 0, 3]), stops)
    (call,) = gen.calls
    assert call["max_tokens"] == 6 and len(call["prompts"]) == 2  # a zero limit is not sent
    assert call["kwargs"] == {"user_setting": 1, "stop_token_ids": [3, 7, 11], "ignore_eos": True}
    assert gen.max_completion_length == 64 and gen.generation_kwargs == {"user_setting": 1}
    assert samples[1].ids == [] and not samples[1].error
    for s, limit in ((samples[0], 6), (samples[2], 3)):
        assert len(s.ids) <= limit and len(s.logprobs) == len(s.ids)
        assert s.stopped == bool(s.ids and s.ids[-1] in stops)
    assert session.history[8] == [1, *samples[2].ids]
    session.release([8])
    assert set(session.history) == {4, 2}


def test_a_failing_engine_call_ends_its_rows_with_one_sentence_and_the_session_goes_on(gen):
    session = VLLMBackend(gen).session(SamplingParams())
    gen.fail = True
    failed = session.generate(turns([0, 1], [[5], [6]], [4, 4]), frozenset())
    assert all(
        s.error.startswith("vLLM generation failed: RuntimeError: CUDA error") for s in failed
    )
    assert all("\n" not in s.error and not s.ids for s in failed)
    assert gen.generation_kwargs == {"user_setting": 1}  # put back after the failure too
    gen.fail = False
    (ok,) = session.generate(turns([2], [[7]], [4]), frozenset())
    assert not ok.error and len(ok.ids) == 4


def test_the_sampled_token_s_logprob_is_found_at_its_rank():
    """With ``logprobs=N`` TRL ranks each position's candidates; the sampled one may be second."""
    ids = [5, 6]

    class Ranked:
        max_completion_length, generation_kwargs = 8, None

        def generate(self, prompts, images, num_generations):
            return prompts, [ids], [[[-0.1, -2.0], [-0.5, -0.9]]], [[[5, 8], [4, 6]]]

    (s,) = (
        VLLMBackend(Ranked())
        .session(SamplingParams())
        .generate(turns([0], [[1]], [8]), frozenset())
    )
    assert s.ids == ids and s.logprobs == [-0.1, -0.9]


def test_rollout_settings_that_differ_from_the_engine_s_are_refused(gen):
    gen.temperature, gen.top_k = 0.7, -1  # -1: vLLM's "no top-k", the same as trl-env's 0
    VLLMBackend(gen).session(SamplingParams(temperature=0.7))
    with pytest.raises(UsageError, match=r"temperature 1.0 \(engine: 0.7\)"):
        VLLMBackend(gen).session(SamplingParams(temperature=1.0))


def test_make_backend_uses_the_trainer_s_colocated_engine(gen):
    trainer = SimpleNamespace(vllm_generation=gen, args=SimpleNamespace())
    assert make_backend(BackendContext(trainer=trainer)).generation is gen
    gen.tensor_parallel_size = 2
    with pytest.raises(UsageError, match="tensor parallelism"):
        make_backend(BackendContext(trainer=trainer))
    with pytest.raises(UsageError, match="needs a server"):
        make_backend(BackendContext(trainer=SimpleNamespace(args=None)))


def test_a_bad_server_option_is_one_sentence():
    options = {"vllm_server_base_url": "http://127.0.0.1:1", "vllm_server_timeout": "soon"}
    with pytest.raises(UsageError, match="vllm_server_timeout must be a positive number, not 'so"):
        make_backend(BackendContext(options=options))

"""The continuous engine: rows join and leave a running decode loop, exactly.

The session tests every engine shares (rows joining, waiting, leaving, sliding windows, PEFT,
penalties) are in test_transformers_backend.py; these are the continuous engine's own: a turn
submitted while others decode, failures, the loop's end, the backend's names and options, and
a rollout re-scored by the model in the dtype it generated in.
"""

from __future__ import annotations

import copy
import random
import threading
import time

import pytest
import torch

from trl_env.backends import BackendContext, SamplingParams, Turn, build_backend
from trl_env.backends import continuous as continuous_module
from trl_env.backends.continuous import ContinuousBackend, ContinuousSession
from trl_env.backends.transformers import TransformersBackend, make_backend
from trl_env.errors import UsageError
from trl_env.testing.sessions import Transcript, random_ids, rescored_error
from trl_env.testing.stacks import turns


@pytest.fixture
def session(qwen3):
    made: list[ContinuousSession] = []

    def open_session(params=None, **options):
        backend = ContinuousBackend(qwen3.model, qwen3.tokenizer.pad_token_id, **options)
        made.append(backend.session(params or SamplingParams(seed=1)))
        return made[-1]

    yield open_session
    for s in made:
        s.close()


def test_a_turn_submitted_while_others_decode_joins_them_and_ends_first(qwen3, session):
    vocab = qwen3.model.config.vocab_size
    rng = random.Random(3)
    s = session()
    ended: list[int] = []
    long = s.submit(Turn(0, random_ids(rng, vocab, 20), 120), frozenset())
    long.add_done_callback(lambda _: ended.append(0))
    while s.steps < 3:  # row 0 is decoding
        time.sleep(0.005)
    short = s.submit(Turn(1, random_ids(rng, vocab, 9), 3), frozenset())
    short.add_done_callback(lambda _: ended.append(1))
    first, second = short.result(timeout=60), long.result(timeout=60)
    assert ended == [1, 0]  # no turn barrier: the short turn did not wait for the long one
    assert len(first.ids) == 3 and len(second.ids) == 120
    assert s.forward_calls < 120 + 3 + 2  # the short turn shared row 0's steps


def test_the_same_keys_draw_the_same_ids_as_the_call_based_session(qwen3, session):
    vocab = qwen3.model.config.vocab_size
    rng = random.Random(8)
    params = SamplingParams(temperature=0.8, top_k=50, seed=9)
    calls = [
        ([0, 1, 2], [random_ids(rng, vocab, n) for n in (6, 17, 3)], [9, 14, 5]),
        ([2, 0], [random_ids(rng, vocab, n) for n in (4, 11)], [12, 7]),
    ]
    stops = frozenset(random_ids(rng, vocab, 30))
    got = []
    for s in (TransformersBackend(qwen3.model, 0).session(params), session(params)):
        samples = [s.generate(turns(*call), stops) for call in calls]
        got.append(samples)
    for ours, theirs in zip(*got, strict=True):
        for a, b in zip(ours, theirs, strict=True):
            assert a.ids == b.ids and a.stopped == b.stopped
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("engine", ["calls", "continuous"])
def test_a_rollout_rescored_in_its_dtype_gives_its_logprobs(qwen3, dtype, engine):
    from trl_env.rollout import batch_rollout
    from trl_env.testing.toy_envs import FixedTurnsEnv

    model = copy.deepcopy(qwen3.model).to(dtype)
    with torch.no_grad():  # sharper distributions: a wrong context moves logprobs a lot
        model.get_output_embeddings().weight.mul_(8)
    backend = make_backend(
        BackendContext(tokenizer=qwen3.tokenizer, model=model, options={"engine": engine})
    )
    episodes = batch_rollout(
        [f"s{i}" for i in range(6)],
        env=lambda: FixedTurnsEnv(4),
        processor=qwen3.processor,
        tokenizer=qwen3.tokenizer,
        backend=backend,
        max_new_tokens=10,
        seed=3,
    )
    assert all(ep.turns == 4 for ep in episodes)
    bound = 1e-4 if dtype == torch.float32 else 2e-2  # bf16 rounds each layer's output
    assert rescored_error(model, episodes) < bound
    # the bound is tight enough to catch a context off by one token
    assert rescored_error(model, [_Shifted(ep) for ep in episodes]) > 10 * bound


class _Shifted:
    """An episode whose logprobs are each reported for the token after its own."""

    def __init__(self, ep) -> None:
        self.prompt_ids, self.completion_ids = ep.prompt_ids, ep.completion_ids
        self.logprobs = ep.logprobs[1:] + ep.logprobs[:1]
        self.env_mask = [*ep.env_mask[:-1], 0]


def test_a_failed_step_fails_its_turns_and_leaves_their_rows_as_they_were(
    qwen3, session, monkeypatch
):
    vocab = qwen3.model.config.vocab_size
    rng = random.Random(4)
    s = session()
    t = Transcript()
    t.generate(s, [0, 1], [random_ids(rng, vocab, 12), random_ids(rng, vocab, 5)], [5, 5])
    real, steps = continuous_module.decode_step, []

    def failing(*args):
        steps.append(1)
        if len(steps) == 2:
            raise RuntimeError("the device is gone")
        return real(*args)

    monkeypatch.setattr(continuous_module, "decode_step", failing)
    with pytest.raises(RuntimeError, match="the device is gone"):
        stale = turns([1, 0], [random_ids(rng, vocab, 3), random_ids(rng, vocab, 7)], [6, 6])
        s.generate(stale, frozenset())
    t.generate(s, [1, 0, 2], [random_ids(rng, vocab, n) for n in (4, 2, 8)], [5, 5, 5])
    assert t.worst_error(qwen3.model, SamplingParams()) < 1e-4


def test_close_fails_what_is_in_flight_and_ends_the_loop(qwen3, session):
    vocab = qwen3.model.config.vocab_size
    s = session()
    future = s.submit(Turn(0, random_ids(random.Random(1), vocab, 8), 5000), frozenset())
    while s.steps < 2:
        time.sleep(0.005)
    s.close()
    with pytest.raises(RuntimeError, match="closed"):
        future.result(timeout=30)
    assert not any(t.name == "trl-env-decode" and t.is_alive() for t in threading.enumerate())
    with pytest.raises(RuntimeError, match="closed"):
        s.submit(Turn(1, [3], 2), frozenset())


def test_an_idle_loop_ends_and_gives_the_model_its_mode_back(qwen3, session, monkeypatch):
    monkeypatch.setattr(continuous_module, "IDLE_EXIT", 0.05)
    model = qwen3.model
    model.train()
    try:
        s = session()
        (first,) = s.generate(turns([0], [[5, 6, 7]], [4]), frozenset())
        deadline = time.monotonic() + 30
        while s._thread is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert s._thread is None and s._ended is not None
        s._ended.join(timeout=30)
        assert model.training  # the loop ended and the model has its mode back
        (second,) = s.generate(turns([0], [[8]], [4]), frozenset())  # a new loop, same rows
        assert len(first.ids) == len(second.ids) == 4 and s.lengths[0] == 3 + 4 + 1 + 3
    finally:
        model.eval()


def test_the_engine_is_chosen_by_name_or_option_and_bad_choices_are_one_sentence(qwen3):
    by_name = build_backend("transformers-continuous", tokenizer=qwen3.tokenizer, model=qwen3.model)
    assert isinstance(by_name, ContinuousBackend) and not by_name.graphs  # a CPU: no graphs
    assert by_name.pad_token_id == qwen3.tokenizer.pad_token_id
    context = BackendContext(model=qwen3.model, options={"engine": "continuous"})
    assert isinstance(make_backend(context), ContinuousBackend)
    assert isinstance(make_backend(BackendContext(model=qwen3.model)), TransformersBackend)
    with pytest.raises(UsageError, match="Unknown transformers engine 'fast'"):
        make_backend(BackendContext(model=qwen3.model, options={"engine": "fast"}))
    with pytest.raises(UsageError, match=r"CUDA graphs .* need the model on a CUDA device"):
        build_backend("transformers-continuous", model=qwen3.model, options={"graphs": True})
    with pytest.raises(UsageError, match="needs a model or a trainer"):
        build_backend("transformers-continuous")


@pytest.mark.slow  # tracing the model takes a while
@pytest.mark.parametrize("compile", ["aot_eager", "no-such-backend"])
def test_compiled_steps_are_exact_or_fall_back(qwen3, session, compile):
    vocab = qwen3.model.config.vocab_size
    rng = random.Random(5)
    s = session(SamplingParams(seed=8), compile=compile)
    t = Transcript()
    t.generate(s, [0, 1, 2], [random_ids(rng, vocab, n) for n in (4, 20, 9)], [6, 6, 6])
    t.generate(s, [2, 0], [random_ids(rng, vocab, n) for n in (3, 11)], [7, 7])
    assert s.engine.static  # compiled steps take bucketed shapes
    # the second call's longer limit kept the slots: one shape, compiled once
    assert s.engine.buffers.slots == s.engine.cache.slots == continuous_module._bucket(3)
    assert ("no-such-backend" in s.engine.failed) == (compile == "no-such-backend")
    assert t.worst_error(qwen3.model, SamplingParams()) < 1e-4

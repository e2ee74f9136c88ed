"""The transformers backend: a batched session gives every row exactly what it would get alone.

Each test drives a real session (rows joining, waiting while others generate, leaving) and
recomputes every sampled token's logprob from one forward pass over that row's whole sequence,
filtered by a reference written independently of ``backends.sampling``
(``trl_env.testing.sessions``).
"""

from __future__ import annotations

import math
import random
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trl_env.backends import BackendContext, SamplingParams
from trl_env.backends.continuous import ContinuousBackend
from trl_env.backends.sampling import processed_logprobs
from trl_env.backends.transformers import TransformersBackend, TransformersSession, make_backend
from trl_env.errors import UsageError
from trl_env.testing.sessions import Transcript, random_ids, reference_logprob, rescored_error
from trl_env.testing.stacks import turns


# -- sampling ---------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    temperature=st.sampled_from([0.0, 0.5, 1.0, 1.7]),
    top_k=st.sampled_from([0, 1, 5, 40]),
    min_p=st.sampled_from([0.0, 0.02, 0.3]),
    top_p=st.sampled_from([1.0, 0.95, 0.5, 0.05]),
    penalty=st.sampled_from([1.0, 1.3, 0.8]),
)
def test_processed_logprobs_follow_vllm(seed, temperature, top_k, min_p, top_p, penalty):
    params = SamplingParams(temperature, top_p, top_k, min_p, penalty)
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 50, generator=gen) * 3
    seen = torch.rand(3, 50, generator=gen) < 0.3
    got = processed_logprobs(logits, params, seen)
    for b in range(3):
        history = seen[b].nonzero().flatten().tolist()
        for token in range(50):
            ref = reference_logprob(logits[b], token, history, params)
            if ref == -math.inf:
                assert got[b, token] == -math.inf
            else:
                assert got[b, token].item() == pytest.approx(ref, abs=1e-5)


# -- a session on the qwen3 tiny model ---------------------------------------------------------
# Every session test runs on each engine: the call-based session, the continuous one, and the
# continuous one with the bucketed step shapes CUDA graphs replay (eager here).
ENGINES = {
    "calls": TransformersBackend,
    "continuous": ContinuousBackend,
    "static": lambda model, pad: ContinuousBackend(model, pad, static=True),
}


@pytest.fixture(params=list(ENGINES))
def backend(request):
    """``backend(model, pad)`` of each engine; its sessions are closed after the test."""
    sessions = []

    def make(model, pad):
        made = ENGINES[request.param](model, pad)
        opened = made.session

        def session(params):
            sessions.append(opened(params))
            return sessions[-1]

        made.session = session
        return made

    yield make
    for session in sessions:
        session.close()


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(seed=1),
        SamplingParams(temperature=0.7, top_k=20, min_p=0.05, top_p=0.9, seed=2),
        SamplingParams(temperature=1.2, repetition_penalty=1.3, seed=3),
        SamplingParams(temperature=0.0, repetition_penalty=1.5, seed=4),
    ],
    ids=["plain", "filters", "penalty", "greedy-penalty"],
)
def test_rows_join_wait_and_leave_with_exact_logprobs(qwen3, params, backend):
    model, vocab = qwen3.model, qwen3.model.config.vocab_size
    rng = random.Random(0)
    stops = frozenset(random_ids(rng, vocab, 40))
    session = backend(model, qwen3.tokenizer.pad_token_id).session(params)
    t = Transcript()
    t.generate(
        session, [0, 1, 2], [random_ids(rng, vocab, n) for n in (5, 30, 12)], [8, 8, 8], stops
    )
    t.generate(session, [1, 3], [random_ids(rng, vocab, n) for n in (3, 25)], [6, 9], stops)
    t.generate(
        session, [3, 0, 2], [random_ids(rng, vocab, n) for n in (7, 1, 9)], [10, 4, 0], stops
    )
    session.release([1])
    t.generate(session, [4, 0], [random_ids(rng, vocab, n) for n in (40, 3)], [8, 8], stops)
    t.generate(session, [2, 3, 4, 0], [random_ids(rng, vocab, 3)] * 4, [12, 1, 7, 5], stops)
    assert t.worst_error(model, params) < 1e-4
    assert len(session.lengths) == 4  # row 4 took the slot row 1 left


def test_rows_move_down_when_most_slots_are_free(qwen3, backend):
    model, vocab = qwen3.model, qwen3.model.config.vocab_size
    rng = random.Random(2)
    params = SamplingParams(temperature=0.9, repetition_penalty=1.2, seed=3)
    session = backend(model, 0).session(params)
    t = Transcript()
    rows = list(range(20))
    t.generate(session, rows, [random_ids(rng, vocab, rng.randint(3, 30)) for _ in rows], [4] * 20)
    kept = [2, 9, 13, 19]  # the others end; 19 sat at the far end of the batch
    session.release([r for r in rows if r not in kept])
    t.generate(session, kept[1:], [random_ids(rng, vocab, 5) for _ in kept[1:]], [6, 6, 6])
    assert len(session.lengths) == len(kept)  # the four rows now use the four lowest slots
    t.generate(session, kept, [random_ids(rng, vocab, 2) for _ in kept], [5, 5, 5, 5])
    assert t.worst_error(model, params) < 1e-4


def test_a_row_limited_to_no_tokens_keeps_its_text(qwen3, backend):
    model, vocab = qwen3.model, qwen3.model.config.vocab_size
    rng = random.Random(1)
    session = backend(model, 0).session(SamplingParams(seed=0))
    t = Transcript()
    (first,) = t.generate(session, [7], [random_ids(rng, vocab, 9)], [0])
    assert first.ids == [] and not first.stopped
    t.generate(session, [7], [random_ids(rng, vocab, 4)], [6])
    assert len(t.ids[7]) == 9 + 4 + 6
    assert t.worst_error(model, SamplingParams()) < 1e-4


def test_a_failed_call_leaves_its_rows_as_they_were(qwen3, backend):
    model, vocab = qwen3.model, qwen3.model.config.vocab_size
    rng = random.Random(7)
    session = backend(model, 0).session(SamplingParams(seed=4))
    t = Transcript()
    t.generate(session, [0, 1], [random_ids(rng, vocab, 12), random_ids(rng, vocab, 5)], [5, 5])
    with pytest.raises(IndexError):  # an id past the vocabulary fails in the embedding
        session.generate(
            turns([1, 0], [[vocab + 5], random_ids(rng, vocab, 3)], [5, 5]), frozenset()
        )
    t.generate(session, [1, 0], [random_ids(rng, vocab, 4), random_ids(rng, vocab, 2)], [5, 5])
    assert t.worst_error(model, SamplingParams()) < 1e-4


def test_misuse_is_refused(qwen3, backend):
    session = backend(qwen3.model, 0).session(SamplingParams())
    with pytest.raises(ValueError, match="at least one new token"):
        session.generate(turns([0], [[]], [3]), frozenset())
    with pytest.raises(ValueError, match="only once"):
        session.generate(turns([0, 0], [[1], [2]], [3, 3]), frozenset())
    assert session.generate(turns([], [], []), frozenset()) == []
    session.release([12345])  # never seen: nothing to forget


def test_same_seed_same_tokens(qwen3, backend):
    def play():
        session = backend(qwen3.model, 0).session(SamplingParams(seed=11))
        return [
            s.ids for s in session.generate(turns([0, 1], [[5, 6, 7], [8]], [9, 9]), frozenset())
        ]

    assert play() == play()


# -- families with sliding windows and soft-capping ----------------------------------------------
FAMILIES = {
    # processor, model type (None: the family's), config overrides (windows shorter than the
    # episodes), attention
    "qwen3": ("qwen3", None, {"use_sliding_window": True, "sliding_window": 16,
                              "max_window_layers": 1}, "sdpa"),
    "llama3.2": ("llama3.2", None, {}, "sdpa"),
    "gemma2": ("gemma2", None, {"sliding_window": 16}, "eager"),  # soft-capping needs eager
    "gemma3": ("gemma3", None, {"sliding_window": 16,
                                "layer_types": ["sliding_attention", "full_attention"]}, "sdpa"),
    # no layer types: the window holds for every layer
    "mistral": ("llama3.2", "mistral", {"sliding_window": 16}, "sdpa"),
}  # fmt: skip


def family_model(name: str, attention: str | None = None, with_tokenizer: bool = False):
    """A small random fp32 model of ``name``'s family, sized by its tiny tokenizer."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from trl_env.registry import load_processor
    from trl_env.tiny import TINY_LAYERS, build_tokenizer

    processor, model_type, overrides, default_attention = FAMILIES[name]
    spec = load_processor(processor).tiny_spec
    tokenizer = build_tokenizer(spec)
    options = {
        "vocab_size": len(tokenizer),
        **TINY_LAYERS,
        "pad_token_id": tokenizer.pad_token_id,
        **spec.config,
        **overrides,
    }
    config = AutoConfig.for_model(model_type or spec.model_type, **options)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(
        config, attn_implementation=attention or default_attention, dtype=torch.float32
    )
    if with_tokenizer:
        return model.eval(), tokenizer
    return model.eval(), tokenizer.pad_token_id


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FAMILIES))
def test_batched_generation_is_exact_with_sliding_windows(name, backend):
    model, pad = family_model(name)
    config = model.config.get_text_config()
    if name == "gemma2":
        assert config.attn_logit_softcapping and config.final_logit_softcapping
    vocab = config.vocab_size
    rng = random.Random(name)
    session = backend(model, pad).session(SamplingParams(seed=5))
    t = Transcript()
    live: list[int] = []
    for turn in range(6):
        # Some live rows sit this turn out, new rows join (at most 32 rows a call), some leave.
        calling = [r for r in live if rng.random() < 0.7]
        joins = 16 if turn == 0 else min(rng.randrange(0, 9), 32 - len(calling))
        joining = list(range(len(t.ids), len(t.ids) + joins))
        calling += joining
        rng.shuffle(calling)
        new = [
            random_ids(rng, vocab, rng.randint(5, 60) if r in joining else rng.randint(1, 12))
            for r in calling
        ]
        limits = [rng.randint(1, 12) for _ in calling]
        t.generate(session, calling, new, limits, frozenset({rng.randrange(vocab)}))
        live += joining
        leaving = [r for r in live if rng.random() < 0.15]
        session.release(leaving)
        live = [r for r in live if r not in leaving]
    longest = max(len(seq) for seq in t.ids.values())
    assert longest > 3 * (getattr(config, "sliding_window", None) or 16)
    assert t.worst_error(model, SamplingParams()) < 1e-4


def test_a_model_on_other_kernels_generates_with_sdpa_and_gets_them_back(backend):
    model, pad = family_model("qwen3", attention="flex_attention")
    model.train()
    rng = random.Random(4)
    session = backend(model, pad).session(SamplingParams(seed=6))
    t = Transcript()
    t.generate(session, [0, 1], [random_ids(rng, 200, 20), random_ids(rng, 200, 7)], [9, 9])
    t.generate(session, [1, 0], [random_ids(rng, 200, 3), random_ids(rng, 200, 30)], [9, 9])
    session.close()  # a continuous session holds the model's mode while it runs
    assert model.config._attn_implementation == "flex_attention" and model.training
    model.eval()
    model.set_attn_implementation("sdpa")  # the recomputation, on a kernel that runs here
    assert t.worst_error(model, SamplingParams()) < 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gemma2", "gemma3"])
def test_a_batched_rollout_is_exact_past_the_window(name, scripted_env):
    from trl_env.registry import load_processor
    from trl_env.rollout import batch_rollout

    model, tokenizer = family_model(name, with_tokenizer=True)
    episodes = batch_rollout(
        [f"w-{i}" for i in range(12)],
        env=lambda: scripted_env(turns=4),
        processor=load_processor(name, tokenizer=tokenizer),
        tokenizer=tokenizer,
        model=model,
        max_new_tokens=12,
        seed=3,
    )
    window = model.config.get_text_config().sliding_window
    assert max(len(ep.prompt_ids) + len(ep.completion_ids) for ep in episodes) > 4 * window
    assert rescored_error(model, episodes) < 1e-4


def test_a_peft_model_generates_exactly_through_its_adapter(backend):
    from peft import LoraConfig, get_peft_model

    model, pad = family_model("qwen3")
    lora = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft_model = get_peft_model(model, lora)  # random adapter weights: outputs differ from base
    rng = random.Random(6)
    session = backend(peft_model, pad).session(SamplingParams(seed=2))
    t = Transcript()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*deprecated")  # the current cache argument
        t.generate(session, [0, 1], [random_ids(rng, 200, 30), random_ids(rng, 200, 9)], [8, 8])
        t.generate(session, [1, 0], [random_ids(rng, 200, 3), random_ids(rng, 200, 5)], [8, 8])
    assert t.worst_error(peft_model, SamplingParams()) < 1e-4


@pytest.mark.slow  # tracing the model takes ~10 s
@pytest.mark.parametrize("backend", ["aot_eager", "no-such-backend"])
def test_compiled_decode_steps_are_exact_or_fall_back(qwen3, backend):
    model, vocab = qwen3.model, qwen3.model.config.vocab_size
    rng = random.Random(5)
    compiled = TransformersBackend(model, 0, compile=backend)
    session = compiled.session(SamplingParams(seed=8))
    t = Transcript()
    t.generate(session, [0, 1, 2], [random_ids(rng, vocab, n) for n in (4, 20, 9)], [6, 6, 6])
    t.generate(session, [2, 0], [random_ids(rng, vocab, n) for n in (3, 11)], [7, 7])
    assert compiled.step is not None
    assert ("no-such-backend" in compiled.step.failed) == (backend == "no-such-backend")
    assert t.worst_error(model, SamplingParams()) < 1e-4


def test_make_backend_uses_the_context_model(qwen3):
    backend = make_backend(BackendContext(tokenizer=qwen3.tokenizer, model=qwen3.model))
    assert backend.model is qwen3.model and backend.pad_token_id == qwen3.tokenizer.pad_token_id
    assert isinstance(backend.session(SamplingParams()), TransformersSession)
    assert backend.step is None
    options = {"compile": "aot_eager"}
    compiled = make_backend(BackendContext(model=qwen3.model, options=options))
    assert compiled.step is not None and compiled.step.backend == "aot_eager"
    with pytest.raises(UsageError, match="needs a model or a trainer"):
        make_backend(BackendContext())


def test_random_numbers_hashed_ahead_in_blocks_are_those_of_each_step(qwen3, monkeypatch, backend):
    """Turns longer than a block, rows that stop early and rows that join late draw exactly the
    tokens of hashing each step's numbers on their own (a block of 1)."""
    from trl_env.backends import sampling as sampling_module

    def play() -> list[list[int]]:
        session = backend(qwen3.model, 0).session(SamplingParams(seed=4))
        session.streams({0: 1, 1: 2, 2: 3})
        stops = frozenset(range(40, 60))  # a twentieth of the ids: some rows stop early
        first = session.generate(turns([0, 1], [[5, 6], [7]], [70, 40]), stops)
        second = session.generate(turns([2, 0], [[8, 9, 10], [11]], [45, 33]), stops)
        return [s.ids for s in first + second]

    blocked = play()
    monkeypatch.setattr(sampling_module, "UNIFORM_BLOCK", 1)
    assert play() == blocked
    assert max(len(ids) for ids in blocked) > 32  # some turn crossed a block
    assert min(len(ids) for ids in blocked) < 32  # and some stopped inside one

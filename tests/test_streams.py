"""Random streams: a seed replays a run whatever the env timings; no two batches share a stream."""

from __future__ import annotations

import random
import time

import pytest
import torch

from trl_env import make_rollout_func
from trl_env.backends.base import SamplingParams
from trl_env.backends.continuous import ContinuousBackend
from trl_env.backends.sampling import uniforms
from trl_env.backends.transformers import TransformersBackend
from trl_env.testing.stacks import turns

pytestmark = pytest.mark.slow

SEEDS = ["a", "a", "b", "b", "c", "c"]  # GRPO groups of two


class SlowEnv:
    """Three turns that each take a random time (an unseeded clock-driven wait), so which
    episodes share a generation call changes from run to run. Top-level: worker processes
    import it."""

    def __init__(self, delay: float = 0.08) -> None:
        self.delay, self.n, self.reward, self.alive = delay, 0, 0.0, True
        self.rng = random.SystemRandom()

    def reset(self, seed: str) -> str:
        time.sleep(self.rng.uniform(0, self.delay))
        return f"Start {seed}."

    def step(self, action: str) -> str:
        time.sleep(self.rng.uniform(0, self.delay))
        self.n += 1
        self.reward, self.alive = len(action) / 10, self.n < 3
        return f"Got {len(action)} chars."


def fast_env() -> SlowEnv:
    return SlowEnv(delay=0.0)


def play(stack, backend, env, seed=7, **options):
    episodes = stack.play(SEEDS, env, backend=backend, max_new_tokens=6, seed=seed, **options)
    assert all(e.status == "done" for e in episodes), [e.error for e in episodes]
    return [e.completion_ids for e in episodes]


def test_uniforms_are_a_function_of_key_and_counter():
    keys = torch.tensor([3, 3, 2**62 + 5, 11])
    counters = torch.tensor([0, 1, 0, 7])
    u = uniforms(keys, counters)
    assert u.dtype == torch.float64 and ((u >= 0) & (u < 1)).all()
    # each row alone, in another order, gives the same number
    for i in reversed(range(4)):
        assert uniforms(keys[i : i + 1], counters[i : i + 1]).item() == u[i].item()
    assert len(set(u.tolist())) == 4
    # uniform enough that sampling follows the distribution: 20 bins over 100k draws
    many = uniforms(torch.full((100_000,), 12345), torch.arange(100_000))
    counts = torch.histc(many.float(), bins=20, min=0, max=1)
    chi2 = float(((counts - 5000) ** 2 / 5000).sum())
    assert chi2 < 60  # 19 degrees of freedom: p < 1e-5 beyond this


ENGINES = {"calls": TransformersBackend, "continuous": ContinuousBackend}


@pytest.mark.parametrize("engine", list(ENGINES))
def test_a_row_draws_the_same_whatever_shares_its_calls(qwen3, engine):
    """One row alone, or among others that join, wait and leave: the same tokens."""
    backend = ENGINES[engine](qwen3.model, 0)
    prompt = [5, 6, 7, 8]

    def alone() -> list[int]:
        session = backend.session(SamplingParams(seed=3))
        session.streams({0: 99})
        return session.generate(turns([0], [prompt], [12]), frozenset())[0].ids

    session = backend.session(SamplingParams(seed=3))
    session.streams({4: 99, 1: 5, 2: 6})
    first = session.generate(turns([1, 2], [[9, 9], [10]], [3, 5]), frozenset())
    (mine,) = session.generate(turns([4], [prompt], [12]), frozenset())
    assert mine.ids == alone()
    other = backend.session(SamplingParams(seed=3))
    other.streams({0: 5, 1: 6})
    assert [s.ids for s in other.generate(turns([0, 1], [[9, 9], [10]], [3, 5]), frozenset())] == [
        s.ids for s in first
    ]


# Both hosts' env timings on the call-based engine; the continuous engine under the thread
# host's random ones (worker processes would only change the arrival times again, at 15 s).
@pytest.mark.parametrize(
    ("isolation", "engine"), [("thread", "calls"), ("process", "calls"), ("thread", "continuous")]
)
def test_a_seed_replays_whatever_the_env_timings(qwen3, isolation, engine):
    backend = ENGINES[engine](qwen3.model, 0)
    reference = play(qwen3, backend, fast_env)
    again = play(qwen3, backend, SlowEnv, env_isolation=isolation)
    assert again == reference
    # the members of a group draw differently, and another seed draws otherwise
    assert any(reference[i] != reference[i + 1] for i in range(0, len(SEEDS), 2))
    assert play(qwen3, backend, fast_env, seed=8) != reference


def test_a_seed_replays_through_the_vllm_server(qwen3, stand_in_server):
    from trl_env.backends.base import BackendContext
    from trl_env.backends.vllm import make_backend

    options = {"vllm_server_base_url": stand_in_server.url}
    server = make_backend(BackendContext(options=options))
    reference = play(qwen3, server, fast_env)
    assert play(qwen3, server, SlowEnv) == reference
    assert play(qwen3, server, SlowEnv, env_isolation="process") == reference
    assert any(reference[i] != reference[i + 1] for i in range(0, len(SEEDS), 2))


@pytest.mark.parametrize("seed", [11, None])
def test_each_batch_of_a_seeded_run_draws_anew_and_a_run_replays(qwen3, grpo_trainer, seed):
    """Two calls on the same prompts and weights differ; a new run with the same seed (the
    rollout's, else the trainer's GRPOConfig.seed) replays both calls."""

    def run() -> list[list[list[int]]]:
        rollout = make_rollout_func(env=fast_env, processor=qwen3.processor, max_new_tokens=6)
        if seed is not None:
            rollout = make_rollout_func(
                env=fast_env, processor=qwen3.processor, max_new_tokens=6, seed=seed
            )
        trainer = grpo_trainer(rollout, ["a", "b"], num_generations=2, seed=3)
        return [rollout(SEEDS[:4], trainer)["completion_ids"] for _ in range(2)]

    first, second = run()
    assert first != second
    assert run() == [first, second]


def test_every_evaluation_of_a_seeded_run_draws_the_same_numbers(qwen3, grpo_trainer):
    """Held-out evaluations are paired by their randomness too: at a later step the same weights
    play the same held-out episodes token for token, while the batches of one evaluation (the
    same seeds twice) draw anew."""
    played: list[list[list[int]]] = []
    rollout = make_rollout_func(
        env=fast_env,
        processor=qwen3.processor,
        max_new_tokens=6,
        on_episodes=lambda eps: played.append([e.completion_ids for e in eps]),
    )
    trainer = grpo_trainer(
        rollout,
        ["a", "b"],
        eval_prompts=["x", "x"],
        num_generations=2,
        num_generations_eval=2,
        per_device_eval_batch_size=2,
        seed=3,
    )
    trainer.evaluate()
    first = played[:]
    assert len(first) == 2 and first[0] != first[1]  # one evaluation, two batches of seed x
    trainer.state.global_step = 7
    played.clear()
    trainer.evaluate()
    assert played == first

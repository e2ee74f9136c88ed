"""Fixtures for cross-distribution tests: the qwen3 processor on its tiny offline model."""

from __future__ import annotations

import os
import random
import threading
import time
from typing import Any

import pytest

from trl_env.testing.stacks import Stack, load_stack

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


@pytest.fixture(scope="session")
def qwen3() -> Stack:
    return load_stack("qwen3")


@pytest.fixture(scope="session")
def stand_in_server(qwen3: Stack) -> Any:
    """The stand-in vLLM server (:mod:`trl_env.testing.vllm_server`) on the tiny qwen3 model,
    started once per test process: each module starting its own paid a model load apiece. A
    test that sets its faults sets them back, one that reads ``/stats`` compares before and
    after; a test that needs start-up options or kills its server starts its own."""
    from trl_env.testing.vllm_server import running

    with running(qwen3.path) as srv:
        yield srv


def _fingerprint(model: Any) -> float:
    import torch

    with torch.no_grad():
        return float(sum(p.double().abs().sum() for p in model.parameters()))


@pytest.fixture(autouse=True)
def _shared_model_is_not_trained(request: pytest.FixtureRequest):
    """The session's qwen3 model is shared by every test of a worker (and a stand-in server
    loads the same weights from disk): a test that trains it must train a copy."""
    if "qwen3" not in request.fixturenames:
        yield
        return
    model = request.getfixturevalue("qwen3").model
    before = _fingerprint(model)
    yield
    assert _fingerprint(model) == before, "this test changed the shared qwen3 model's weights"


@pytest.fixture
def grpo_trainer(qwen3: Stack, tmp_path: Any) -> Any:
    """``make(rollout, prompts, **grpo)``: a CPU ``GRPOTrainer`` over a copy of qwen3's tiny
    model with ``env_reward``; ``grpo`` goes over the tests' GRPOConfig defaults."""

    def make(
        rollout: Any, prompts: list[str], eval_prompts: Any = None, trainer: Any = None, **grpo: Any
    ) -> Any:
        import copy

        from trl_env.testing.grpo import cpu_grpo_trainer

        return cpu_grpo_trainer(
            copy.deepcopy(qwen3.model),  # the session's model is shared: train a copy
            qwen3.tokenizer,
            rollout,
            prompts,
            str(tmp_path),
            eval_prompts,
            trainer,
            **{"logging_steps": 1, "gradient_checkpointing": False, **grpo},
        )

    return make


@pytest.fixture(scope="session")
def stack_of():
    cache: dict[str, Stack] = {}

    def get(name: str) -> Stack:
        if name not in cache:
            cache[name] = load_stack(name)
        return cache[name]

    return get


class ScriptedEnv:
    """A test env whose replies and length follow its seed; it can misbehave on purpose.

    ``fault`` is one of None, "raise", "hang", "garbage", "reset-raise", "bad-reward", and
    applies from turn ``fault_turn`` on.
    """

    in_flight = 0
    peak = 0
    lock = threading.Lock()

    def __init__(
        self, turns: int = 3, fault: str | None = None, fault_turn: int = 1, delay: float = 0.0
    ) -> None:
        self.turns, self.fault, self.fault_turn, self.delay = turns, fault, fault_turn, delay
        self.reward, self.alive, self.n, self.closed = 0.0, True, 0, False
        self.rng = random.Random(0)

    def reset(self, seed: str) -> str:
        if self.fault == "reset-raise":
            raise RuntimeError("reset exploded")
        self.rng = random.Random(seed)
        return f"Episode {seed}. " + "word " * self.rng.randint(0, 12) + "Go."

    def step(self, action: str) -> Any:
        with ScriptedEnv.lock:
            ScriptedEnv.in_flight += 1
            ScriptedEnv.peak = max(ScriptedEnv.peak, ScriptedEnv.in_flight)
        try:
            if self.delay:
                time.sleep(self.delay)
            self.n += 1
            if self.fault and self.n >= self.fault_turn:
                if self.fault == "raise":
                    raise ValueError("step exploded")
                if self.fault == "hang":
                    time.sleep(30)
                if self.fault == "garbage":
                    return 42
                if self.fault == "bad-reward":
                    self.reward = float("nan")
            else:
                self.reward = self.n / self.turns
            if self.n >= self.turns:
                self.alive = False
            lines = "\n".join(
                f"line {i}: {self.rng.randint(0, 999)}" for i in range(self.rng.randint(0, 6))
            )
            return f"Turn {self.n}, you said {len(action)} chars.\n{lines}"
        finally:
            with ScriptedEnv.lock:
                ScriptedEnv.in_flight -= 1

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def scripted_env() -> type[ScriptedEnv]:
    return ScriptedEnv

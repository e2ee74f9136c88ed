"""Episodes failed by the infrastructure leave the gradient and their group's baseline; the
policy's own failures (output that cannot be parsed) are trained on with ``error_reward``."""

from __future__ import annotations

import copy
import statistics
import threading
import time
from typing import ClassVar

import pytest
import torch

from trl_env import make_rollout_func
from trl_env.rollout import batch_rollout

pytestmark = pytest.mark.slow

PROMPTS = ["x"] * 4 + ["y"] * 4  # two GRPO groups of four; one member of group x crashes


class FlakyEnv:
    """Three turns, rewarded by the action's length; the first episode of a seed starting with
    "x" crashes on its second step (a lost connection: nothing the policy did)."""

    lock = threading.Lock()
    crashed: ClassVar[set[str]] = set()

    def __init__(self) -> None:
        self.n, self.reward, self.alive, self.crash = 0, 0.0, True, False

    def reset(self, seed: str) -> str:
        with self.lock:
            self.crash = seed.startswith("x") and seed not in self.crashed
            self.crashed.add(seed)
        return f"Start {seed}."

    def step(self, action: str) -> str:
        self.n += 1
        if self.crash and self.n == 2:
            raise ConnectionError("the env's backend went away")
        self.reward = float(len(action) % 5)
        self.alive = self.n < 3
        return f"Got {len(action)} chars."


class HangingEnv(FlakyEnv):
    def step(self, action: str) -> str:
        time.sleep(3)
        return "late"


def _scored(qwen3, grpo_trainer, **options):
    """TRL's own scoring of one generation batch, and the episodes behind it."""
    FlakyEnv.crashed = set()
    episodes: list = []
    rollout = make_rollout_func(
        env=FlakyEnv,
        processor=qwen3.processor,
        max_new_tokens=6,
        on_episodes=episodes.extend,
        **options,
    )
    trainer = grpo_trainer(rollout, PROMPTS, per_device_train_batch_size=8, seed=5)
    trainer.model.train()  # as trainer.train() has it: metrics go to "train"
    out = trainer._generate_and_score_completions([{"prompt": p} for p in PROMPTS])
    return trainer, out, episodes


def _advantages(rewards: list[float]) -> torch.Tensor:
    """GRPO's group advantages, computed here: (r - mean) / (std + 1e-4), unbiased std."""
    r = torch.tensor(rewards)
    return (r - r.mean()) / (r.std() + 1e-4)


def test_an_infrastructure_failure_is_masked_and_out_of_its_groups_baseline(qwen3, grpo_trainer):
    trainer, out, episodes = _scored(qwen3, grpo_trainer)
    failed = [i for i, e in enumerate(episodes) if e.status == "error"]
    assert len(failed) == 1 and failed[0] < 4
    (bad,) = failed
    ep = episodes[bad]
    assert ep.masked and ep.fault == "infrastructure" and "went away" in ep.error
    assert ep.sampled_tokens > 0  # the record keeps what was sampled
    mask = out["completion_mask"] * out["tool_mask"]  # TRL's loss mask
    assert int(mask[bad].sum()) == 0  # nothing of it is trained on
    assert all(int(mask[i].sum()) > 0 for i in range(8) if i != bad)
    advantages = out["advantages"]
    assert float(advantages[bad]) == 0.0
    rewards = [e.reward for e in episodes]
    others = [i for i in range(4) if i != bad]
    want_x = _advantages([rewards[i] for i in others])
    assert torch.allclose(advantages[others], want_x, atol=1e-5)
    assert torch.allclose(advantages[4:], _advantages(rewards[4:]), atol=1e-5)
    metrics = trainer._metrics["train"]  # per-episode values, averaged by TRL when it logs
    assert statistics.fmean(metrics["rollout/masked_episodes"]) == pytest.approx(1 / 8)
    # the logged reward is over the episodes trained on
    trained = [r for i, r in enumerate(rewards) if i != bad]
    assert statistics.fmean(metrics["rollout/env_reward"]) == pytest.approx(
        statistics.fmean(trained)
    )


def test_penalize_trains_on_a_failure_with_the_error_reward(qwen3, grpo_trainer):
    _, out, episodes = _scored(qwen3, grpo_trainer, failed_episodes="penalize", error_reward=-1.0)
    (bad,) = [i for i, e in enumerate(episodes) if e.status == "error"]
    assert not episodes[bad].masked and episodes[bad].reward == -1.0
    mask = out["completion_mask"] * out["tool_mask"]
    assert int(mask[bad].sum()) == episodes[bad].sampled_tokens > 0
    rewards = [e.reward for e in episodes]
    assert torch.allclose(out["advantages"][:4], _advantages(rewards[:4]), atol=1e-5)
    assert float(out["advantages"][bad]) < 0


def test_which_failures_are_the_policys(qwen3):
    """Unparsable output is the policy's (trained on, error_reward); a timeout is not."""
    processor = copy.copy(qwen3.processor)

    def unparsable(text: str) -> tuple[str, str]:
        raise ValueError("no action in the output")

    processor.parse_agent_output = unparsable  # type: ignore[method-assign]
    common = {"tokenizer": qwen3.tokenizer, "model": qwen3.model, "max_new_tokens": 4, "seed": 1}
    parsed = batch_rollout(
        ["p0", "p1"], env=FlakyEnv, processor=processor, error_reward=-2.0, **common
    )
    assert all(e.status == "error" and e.fault == "policy" and not e.masked for e in parsed)
    assert all(e.reward == -2.0 for e in parsed)
    hung = batch_rollout(
        ["h0"], env=HangingEnv, processor=qwen3.processor, step_timeout=0.5, **common
    )
    assert hung[0].status == "timeout" and hung[0].fault == "infrastructure" and hung[0].masked
    slow = copy.copy(qwen3.processor)

    def backtracking(text: str) -> tuple[str, str]:
        while True:  # a regex that never ends on the model's text: the processor's bug
            time.sleep(0.01)

    slow.parse_agent_output = backtracking  # type: ignore[method-assign]
    stuck = batch_rollout(["s0"], env=FlakyEnv, processor=slow, step_timeout=0.5, **common)
    assert stuck[0].status == "error" and stuck[0].fault == "infrastructure"
    assert stuck[0].masked
    done = batch_rollout(["d0"], env=FlakyEnv, processor=qwen3.processor, **common)
    assert done[0].status == "done" and done[0].fault == "" and not done[0].masked

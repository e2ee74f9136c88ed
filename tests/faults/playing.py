"""The fault tests' one way to play a batch: the tiny model, greedy, short turns."""

from __future__ import annotations

from typing import Any

from trl_env import batch_rollout
from trl_env.episode import Episode


def play_tiny(
    stack: Any, env: Any, seeds: list[str], isolation: str, **options: Any
) -> list[Episode]:
    """``batch_rollout`` of ``seeds`` on ``stack``'s tiny model; ``options`` (the processor
    included) override the defaults."""
    settings = {
        "processor": stack.processor,
        "max_new_tokens": 3,
        "max_episode_tokens": 512,
        "temperature": 0.0,
        "env_isolation": isolation,
        **options,
    }
    return batch_rollout(seeds, env=env, tokenizer=stack.tokenizer, model=stack.model, **settings)

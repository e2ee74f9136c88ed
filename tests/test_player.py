"""One player for eval, training and the async worker: a Player needs no trainer, plays rows of a
mixture at each env's curriculum stage, keeps one env host per env and stage, and its greedy
episodes equal batch_rollout's."""

from __future__ import annotations

import pytest

from trl_env import EnvSpec, Mixture, RolloutConfig
from trl_env.backends import build_backend
from trl_env.errors import UsageError
from trl_env.player import Player
from trl_env.rollout import batch_rollout
from trl_env.wire import model_eos_ids


def test_a_player_plays_rows_without_a_trainer(qwen3):
    config = RolloutConfig(max_new_tokens=4, max_turns=2, temperature=0.0)
    mixture = Mixture([EnvSpec("guess"), EnvSpec("wordle", options={"max_turns": 1})])
    player = Player(mixture, qwen3.processor, config)
    with pytest.raises(UsageError, match="only once bound"):
        player.play(["guess/train-0"])
    backend = build_backend("transformers", tokenizer=qwen3.tokenizer, model=qwen3.model)
    player.bind(qwen3.tokenizer, model_eos_ids(qwen3.model), backend)
    episodes = player.play(["guess/train-0", "wordle/train-1", "guess/train-2"])
    assert [(e.env, e.seed) for e in episodes] == [
        ("guess", "train-0"),
        ("wordle", "train-1"),
        ("guess", "train-2"),
    ]
    alone = batch_rollout(
        ["train-0", "train-2"],
        env="guess",
        processor=qwen3.processor,
        tokenizer=qwen3.tokenizer,
        model=qwen3.model,
        config=config,
    )
    played = [e for e in episodes if e.env == "guess"]
    assert [e.completion_ids for e in played] == [e.completion_ids for e in alone]
    guess = mixture.envs["guess"]
    assert player.binding(guess) is player.binding(guess)  # made once per stage
    player.close()


def test_a_player_keeps_one_process_host_per_env_and_stage(qwen3):
    config = RolloutConfig(max_new_tokens=4, max_turns=1, env_isolation="process", env_workers=2)
    player = Player("guess", qwen3.processor, config)
    backend = build_backend("transformers", tokenizer=qwen3.tokenizer, model=qwen3.model)
    player.bind(qwen3.tokenizer, model_eos_ids(qwen3.model), backend)
    first = player.play(["a", "b"])
    second = player.play(["c", "d"])
    assert all(e.error == "" for e in first + second)
    ((key, host),) = player.hosts.items()
    assert key == ("guess", None) and host.pool.workers_started <= 2  # reused across batches
    player.close()
    assert host.pool.live_workers == 0 and player.hosts == {}

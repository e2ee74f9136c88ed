"""Mixtures and curricula through ``make_rollout_func`` in a real ``GRPOTrainer`` (tiny qwen3).

Each GRPO group must come from one env and one seed, every env keeps its own options, processor
options and ``max_turns``, metrics come per env, a curriculum moves when its rule says so, and
TRL's own evaluation loop plays held-out seeds without moving it.
"""

from __future__ import annotations

from collections import Counter

import pytest
from datasets import Dataset

from trl_env import Curriculum, EnvSpec, Mixture, make_rollout_func
from trl_env.mixture import as_mixture, held_out_rows, train_rows
from trl_env.registry import load_processor
from trl_env.wire import Wire

pytestmark = pytest.mark.slow


class LevelEnv:
    """One turn; the reward is 1 at level 0 and 0 above, so a reward curriculum must move once."""

    def __init__(self, level: int = 0) -> None:
        self.level, self.reward, self.alive = level, 0.0, True

    def reset(self, seed: str) -> str:
        return f"Level {self.level}, seed {seed}. Say something."

    def step(self, action: str) -> str:
        self.reward = 1.0 if self.level == 0 else 0.0
        self.alive = False
        return "Thanks."

    @property
    def success(self) -> bool:
        return self.reward > 0


def _trainer(grpo_trainer, rollout, rows, **grpo):
    return grpo_trainer(rollout, rows, **{"per_device_train_batch_size": 8, "max_steps": 4, **grpo})


def _recording_rollout(env):
    """``make_rollout_func`` over ``env`` (qwen3, 4 new tokens), and the batches it plays."""
    seen: list = []
    rollout = make_rollout_func(
        env=env, processor="qwen3", max_new_tokens=4, on_episodes=seen.append
    )
    return rollout, seen


def _train_on(grpo_trainer, env, rows, steps):
    """``(rollout, trainer, batches played)`` after ``steps`` steps on ``env``; each GRPO group
    was one env and one seed."""
    rollout, seen = _recording_rollout(env)
    trainer = _trainer(grpo_trainer, rollout, rows, max_steps=steps)
    trainer.train()
    for batch in seen:
        for g in range(0, len(batch), 4):
            group = batch[g : g + 4]
            assert len({(ep.env, ep.seed) for ep in group}) == 1, "a group mixes envs or seeds"
    return rollout, trainer, seen


def test_a_mixture_trains_with_one_env_and_seed_per_group_and_each_env_its_settings(
    qwen3, grpo_trainer
):
    mixture = Mixture(
        [
            EnvSpec("guess", weight=1, options={"high": 20}),
            EnvSpec("wordle", weight=2, max_turns=2),
            EnvSpec("guess", name="guess-nothink", processor_options={"thinking": False}),
        ]
    )
    rows = train_rows(mixture, 64, seed=1)
    assert Counter(r.split("/")[0] for r in rows) == {
        "guess": 16,
        "wordle": 32,
        "guess-nothink": 16,
    }
    _, trainer, seen = _train_on(grpo_trainer, mixture, rows, steps=5)
    episodes = [ep for batch in seen for ep in batch]
    assert len(episodes) == 5 * 8
    labels = {ep.env for ep in episodes}
    assert labels <= set(mixture.labels) and len(labels) >= 2
    for ep in episodes:
        assert ep.status != "error", ep.error
        if ep.env == "wordle":
            assert ep.turns <= 2  # its own max_turns, not the env's 6
        if ep.env == "guess":
            assert "20" in ep.messages[1]["content"]  # its options reached the env
    # each env's first prompt is rendered by its own processor options
    tokenizer = qwen3.tokenizer
    for ep in episodes:
        thinking = ep.env != "guess-nothink"
        processor = load_processor("qwen3", tokenizer=tokenizer, thinking=thinking)
        wire = Wire.bind(processor, tokenizer)
        expected = wire.encode(
            [wire.first_prompt_text(ep.messages[0]["content"], ep.messages[1]["content"])]
        )[0]
        assert ep.prompt_ids == expected
    logged = {k for h in trainer.state.log_history for k in h}
    for label in labels:
        assert {f"rollout/{label}/env_reward", f"rollout/{label}/turns"} <= logged
    assert "rollout/env_reward" in logged
    # the per-env means are the means of that env's episodes of the step
    first = next(h for h in trainer.state.log_history if "rollout/env_reward" in h)
    step_eps = seen[0]
    for label in {ep.env for ep in step_eps}:
        mine = [ep.reward for ep in step_eps if ep.env == label]
        assert first[f"rollout/{label}/env_reward"] == pytest.approx(sum(mine) / len(mine))


@pytest.mark.parametrize(
    ("env", "shares"),
    [({"guess": 1, "wordle": 2}, {"guess": 4, "wordle": 8}), (["guess", "wordle"], None)],
    ids=["weights", "names"],
)
def test_a_mapping_or_a_list_of_names_is_a_mixture(grpo_trainer, env, shares):
    """The natural ways to ask for two envs train as the Mixture they stand for."""
    rows = train_rows(as_mixture(env), 12, seed=2)
    assert Counter(r.split("/")[0] for r in rows) == (shares or {"guess": 6, "wordle": 6})
    rollout, trainer, seen = _train_on(grpo_trainer, env, rows, steps=2)
    episodes = [ep for batch in seen for ep in batch]
    assert len(episodes) == 2 * 8 and rollout.labels == ["guess", "wordle"]
    assert {ep.env for ep in episodes} <= {"guess", "wordle"}
    assert all(ep.status != "error" for ep in episodes), [ep.error for ep in episodes]
    logged = {k for h in trainer.state.log_history for k in h}
    assert {f"rollout/{ep.env}/env_reward" for ep in episodes} <= logged


def test_a_reward_curriculum_moves_on_the_threshold_and_held_out_eval_does_not_move_it(
    grpo_trainer,
):
    curriculum = Curriculum(
        stages=({"level": 0}, {"level": 1}), by="reward", threshold=0.9, window=8
    )
    mixture = Mixture([EnvSpec(LevelEnv, name="level", curriculum=curriculum), EnvSpec("guess")])
    rollout, seen = _recording_rollout(mixture)
    rows = [mixture.row("level", f"s{i}") for i in range(16)]
    eval_rows = held_out_rows(mixture, 2)
    assert len(eval_rows) == 4 and len(set(eval_rows)) == 4
    trainer = _trainer(grpo_trainer, rollout, rows, max_steps=3)
    trainer.eval_dataset = Dataset.from_dict({"prompt": eval_rows})
    metrics = trainer.evaluate()  # TRL's own loop, model in eval mode: the stage stays
    assert rollout.progress.stage("level") == 0
    assert "eval_rollout/level/env_reward" in metrics and "eval_rollout/guess/turns" in metrics
    seen.clear()
    trainer.train()
    stages = [[ep.stage for ep in batch] for batch in seen]
    # 8 level-0 episodes of reward 1 fill the window: the next batch plays level 1
    assert stages[0] == [0] * 8 and all(s == [1] * 8 for s in stages[1:])
    assert all(ep.stage_options == {"level": ep.stage} for batch in seen for ep in batch)
    assert [ep.success for ep in seen[1]] == [False] * 8
    assert rollout.progress.history == [{"step": 0, "env": "level", "stage": 1}]
    logged = [
        h["rollout/level/stage"] for h in trainer.state.log_history if "rollout/level/stage" in h
    ]
    assert logged[0] == 1.0 and logged[-1] == 1.0  # logged after the batch that moved it


def test_a_step_curriculum_follows_the_global_step(grpo_trainer):
    curriculum = Curriculum(stages=({"high": 10}, {"high": 30}), by="step", steps=(2,))
    mixture = Mixture([EnvSpec("guess", curriculum=curriculum)])
    rollout, seen = _recording_rollout(mixture)
    rows = train_rows(mixture, 16)
    trainer = _trainer(grpo_trainer, rollout, rows, per_device_train_batch_size=4, max_steps=4)
    trainer.train()
    assert [batch[0].stage for batch in seen] == [0, 0, 1, 1]
    for batch in seen:
        high = 10 if batch[0].stage == 0 else 30
        assert all(str(high) in ep.messages[1]["content"] for ep in batch)


def test_process_isolation_keeps_one_pool_across_stages(grpo_trainer):
    """One host per env for the run: the next stage's episodes open on the same workers, made
    with that stage's options."""
    curriculum = Curriculum(stages=({"high": 10}, {"high": 30}), by="step", steps=(1,))
    mixture = Mixture([EnvSpec("guess", curriculum=curriculum, options={"max_turns": 1})])
    rollout = make_rollout_func(
        env=mixture, processor="qwen3", max_new_tokens=4, env_isolation="process", env_workers=2
    )
    rows = rollout.player.train_rows(8)
    trainer = _trainer(grpo_trainer, rollout, rows, per_device_train_batch_size=4)
    trainer.model.train()  # as in trainer.train(): a curriculum moves on training batches only
    trainer.state.global_step = 0
    first = rollout(rows[:2] * 2, trainer)
    ((key, host),) = rollout.hosts.items()
    trainer.state.global_step = 1  # the step at which stage 1 begins
    second = rollout(rows[2:4] * 2, trainer)
    assert set(first["env_status"] + second["env_status"]) <= {"done", "max_turns"}
    assert key == "guess" and rollout.hosts == {"guess": host}
    assert 0 < host.pool.workers_started <= 2  # the same workers played both stages
    rollout.close()
    assert host.pool.live_workers == 0

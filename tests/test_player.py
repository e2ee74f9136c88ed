"""One player for eval, sft, training and the async worker: a Player needs no trainer, plays rows
of a mixture at each env's curriculum stage, keeps one env host per env for the whole run (its
start-up checks and every batch and stage), owns the schedule (stages, batch seeds), and its
greedy episodes equal batch_rollout's."""

from __future__ import annotations

import pytest

from trl_env import Curriculum, EnvSpec, Mixture, RolloutConfig
from trl_env.backends import build_backend
from trl_env.errors import UsageError
from trl_env.player import Player
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
    alone = qwen3.play(["train-0", "train-2"], "guess", config=config)
    played = [e for e in episodes if e.env == "guess"]
    assert [e.completion_ids for e in played] == [e.completion_ids for e in alone]
    guess = mixture.envs["guess"]
    assert player.binding(guess) is player.binding(guess)  # made once per stage
    player.close()


def test_a_player_keeps_one_process_host_per_env_from_start_up_to_the_last_batch(qwen3):
    """Seeds, the first prompt, every stage's check and every batch of every stage open their
    envs on the env's one host: a run with 2 env workers starts at most 2 worker processes."""
    stages = ({"high": 10}, {"high": 30}, {"high": 50})
    curriculum = Curriculum(stages=stages, by="step", steps=(1, 2))
    mixture = Mixture(
        [
            EnvSpec("guess", curriculum=curriculum, options={"max_turns": 1}),
            EnvSpec("guess", name="guess2", curriculum=curriculum, options={"max_turns": 1}),
        ]
    )
    config = RolloutConfig(max_new_tokens=4, max_turns=1, env_isolation="process", env_workers=2)
    with Player(mixture, qwen3.processor, config) as player:
        assert set(player.hosts) == {"guess", "guess2"}  # one host per env, not per stage
        rows = player.train_rows(4, seed=1) + player.held_out_rows(1)
        player.check_stages()
        assert "30" in player.first_prompt(mixture.envs["guess"], qwen3.processor, {"high": 30})
        backend = build_backend("transformers", tokenizer=qwen3.tokenizer, model=qwen3.model)
        player.bind(qwen3.tokenizer, model_eos_ids(qwen3.model), backend)
        played = []
        for step in range(3):  # every stage of both envs
            played += player.play_rows(rows[:4], training=True, step=step)
        assert [e.stage for e in played] == [0] * 4 + [1] * 4 + [2] * 4
        assert all(e.error == "" for e in played)
        # each stage's options reached the worker: its episodes say their own range
        for ep in played:
            assert str(curriculum.stages[ep.stage]["high"]) in ep.messages[1]["content"]
        pools = [host.pool for host in player.hosts.values()]
        assert all(0 < pool.workers_started <= 2 for pool in pools)
    assert all(pool.live_workers == 0 for pool in pools) and player.hosts == {}


def test_the_player_owns_the_schedule_of_batch_seeds():
    """Training batches each draw a new stream (step, batches at the step, rank); an
    evaluation's batches start again from its first after evaluation_ended."""
    with Player("guess", "qwen3", RolloutConfig(seed=7)) as player:
        first = [player.batch_seed(True, 3), player.batch_seed(True, 3), player.batch_seed(True, 4)]
        assert len(set(first)) == 3
        evaluation = [player.batch_seed(False), player.batch_seed(False)]
        player.evaluation_ended()
        assert [player.batch_seed(False), player.batch_seed(False)] == evaluation
        assert player.batch_seed(True, 3, rank=1) not in first
    with Player("guess", "qwen3", RolloutConfig()) as unseeded:
        assert unseeded.batch_seed(True, 0) is None


def test_the_glue_leaves_the_schedule_to_the_player():
    """No curriculum or batch-seed bookkeeping is left in TRL's glue."""
    import inspect

    import trl_env.trl_integration as glue

    source = inspect.getsource(glue)
    for name in ("at_step", "observe", "stream_key", "train_batches", "eval_batches"):
        assert name not in source, name


def test_the_budget_check_renders_each_env_s_prompt_with_its_own_processor_options(qwen3):
    """An env whose processor options lengthen its first prompt (Qwen3 with thinking off: an
    empty reasoning block) is held to the budget with that prompt, not the run's."""
    from trl_env.errors import UsageError
    from trl_env.training.config import TrainConfig
    from trl_env.training.run import _check_envs
    from trl_env.wire import Wire

    own = EnvSpec("guess", processor_options={"thinking": False})
    with Player(own, "qwen3", RolloutConfig()) as player:
        run_wire = Wire.bind(qwen3.processor, qwen3.tokenizer)  # the run's: thinking on
        own_wire = Wire.bind(
            type(qwen3.processor)(qwen3.tokenizer, thinking=False), qwen3.tokenizer
        )
        on, off = (
            len(w.encode([player.first_prompt(own, w.processor)])[0]) for w in (run_wire, own_wire)
        )
    assert off > on
    budget = on + len(run_wire.close_ids) + 1  # the run's prompt fits, the env's own does not
    refused = pytest.raises(UsageError, match=f"The first prompt of guess has {off} tokens")
    with Player(own, "qwen3", RolloutConfig(max_episode_tokens=budget)) as player, refused:
        _check_envs(TrainConfig(processor="qwen3", check=False), player, qwen3)


def test_an_env_of_the_wrong_type_is_one_sentence(qwen3):
    from trl_env import make_rollout_func

    for env in (42, [object()], None):
        with pytest.raises(
            UsageError, match=r"^env= takes a registered name, an EnvSpec, .*, not "
        ):
            make_rollout_func(env=env, processor="qwen3")
    for env in (42, None):
        with pytest.raises(UsageError, match=r"^env= takes .*, not "):
            qwen3.play(["a"], env)

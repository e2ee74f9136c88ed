"""Mixture specs, weights and rows; curriculum rules and their saved progress (no model)."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from trl_env import Curriculum, Mixture, MixtureEnv
from trl_env.curriculum import Progress
from trl_env.errors import UsageError


def test_specs_parse_names_and_weights():
    mixture = Mixture.parse(["sokoban", "wordle:2", "guess:0.5"])
    assert [(e.label, e.weight) for e in mixture] == [("sokoban", 1), ("wordle", 2), ("guess", 0.5)]


@pytest.mark.parametrize(
    ("specs", "words"),
    [
        (["wordle:x"], "NAME:WEIGHT"),
        (["wordle:0"], "positive"),
        (["wordle:-1"], "positive"),
        (["a:1:2"], "NAME:WEIGHT"),
        (["wordle", "wordle:2"], "twice"),
        ([], "at least one env"),
    ],
)
def test_bad_specs_get_one_sentence(specs, words):
    with pytest.raises(UsageError, match=words):
        Mixture.parse(specs)


@pytest.mark.parametrize("seed", range(5))
def test_counts_follow_the_weights_and_sum_to_the_total(seed):
    rng = random.Random(seed)
    weights = [rng.uniform(0.1, 5) for _ in range(rng.randint(1, 5))]
    mixture = Mixture([MixtureEnv(f"e{i}", weight=w) for i, w in enumerate(weights)])
    total = rng.randint(len(weights), 500)
    counts = mixture.counts(total)
    assert sum(counts.values()) == total
    for n, w in zip(counts.values(), weights, strict=True):
        assert n >= 1
        assert abs(n - total * w / sum(weights)) < 1 + 1e-9 or n == 1


def test_draw_gives_each_env_its_own_seeds_in_random_order():
    mixture = Mixture([MixtureEnv("a", weight=3), MixtureEnv("b")])
    rows = mixture.draw(40, lambda e, n: [f"{e.label}-seed-{i}" for i in range(n)], seed=3)
    assert Counter(r.split("/")[0] for r in rows) == {"a": 30, "b": 10}
    assert all(r.split("/", 1)[1].startswith(r.split("/")[0]) for r in rows)
    assert rows != sorted(rows)
    assert rows == mixture.draw(40, lambda e, n: [f"{e.label}-seed-{i}" for i in range(n)], seed=3)


def test_split_reads_rows_and_names_the_known_envs():
    mixture = Mixture(["a", "b"])
    entry, seed = mixture.split("b/x/y")
    assert (entry.label, seed) == ("b", "x/y")  # seeds may hold the separator
    with pytest.raises(UsageError, match="LABEL one of a, b"):
        mixture.split("c/1")
    single = Mixture(["a"])
    assert single.split("plain-seed")[1] == "plain-seed"


def test_one_env_twice_needs_names_and_a_factory_needs_one():
    Mixture([MixtureEnv("a"), MixtureEnv("a", name="a-hard", options={"k": 1})])
    with pytest.raises(UsageError, match="needs a name"):
        MixtureEnv(dict)
    with pytest.raises(UsageError, match="without /"):
        MixtureEnv("a", name="x/y")


def test_curriculum_checks_its_rule():
    with pytest.raises(UsageError, match="at least two stages"):
        Curriculum(stages=({"k": 1},))
    with pytest.raises(UsageError, match="1 steps for 2 stages, not 0"):
        Curriculum(stages=({"k": 1}, {"k": 2}), by="step")
    with pytest.raises(UsageError, match="increasing"):
        Curriculum(stages=({"k": 1}, {"k": 2}, {"k": 3}), by="step", steps=(5, 5))
    with pytest.raises(UsageError, match="choose 'step' or 'reward'"):
        Curriculum(stages=({"k": 1}, {"k": 2}), by="time")
    with pytest.raises(UsageError, match="Unknown curriculum key 'stage'"):
        Curriculum.from_dict({"stage": []}, "env sokoban")
    c = Curriculum.from_dict({"stages": [{"k": 1}, {"k": 2}], "by": "step", "steps": [3]}, "x")
    assert Curriculum.from_dict(c.to_dict(), "x") == c


def test_reward_progress_moves_when_the_window_mean_reaches_the_threshold():
    c = Curriculum(stages=({"k": 1}, {"k": 2}, {"k": 3}), threshold=0.5, window=4)
    progress = Progress({"a": c})
    assert progress.observe([("a", 0, 1.0)] * 3, step=1) == []  # the window is not full yet
    assert progress.observe([("a", 0, 0.0)], step=2) == ["a"]  # full, mean 0.75
    progress = Progress({"a": c})
    assert progress.observe([("a", 0, 0.4)] * 4, step=1) == []  # full, mean below
    assert progress.observe([("a", 0, 0.6)] * 2, step=2) == ["a"]  # mean of the last 4: 0.5
    assert progress.options("a") == {"k": 2}
    # rewards of the stage just left do not count towards the next one
    assert progress.observe([("a", 0, 1.0)] * 10, step=3) == []
    assert progress.observe([("b", None, 1.0)], step=3) == []  # an env without a curriculum
    assert progress.observe([("a", 1, 1.0)] * 4, step=4) == ["a"]
    assert progress.observe([("a", 2, 1.0)] * 10, step=5) == []  # the last stage stays
    assert [h["stage"] for h in progress.history] == [1, 2]


def test_step_progress_and_a_saved_state_restore_where_it_was():
    progress = Progress(
        {
            "s": Curriculum(stages=({"k": 1}, {"k": 2}, {"k": 3}), by="step", steps=(10, 20)),
            "r": Curriculum(stages=({"k": 1}, {"k": 2}), window=3),
        }
    )
    assert progress.at_step(0) == [] and progress.at_step(9) == []
    assert progress.at_step(10) == ["s"] and progress.stage("s") == 1
    assert progress.at_step(25) == ["s"] and progress.stage("s") == 2
    progress.observe([("r", 0, 0.1), ("r", 0, 0.2)], step=25)
    saved = json.loads(json.dumps(progress.state()))
    again = Progress(
        {
            "s": Curriculum(stages=({"k": 1}, {"k": 2}, {"k": 3}), by="step", steps=(10, 20)),
            "r": Curriculum(stages=({"k": 1}, {"k": 2}), window=3),
        }
    )
    again.restore(saved)
    assert again.state() == progress.state()
    assert again.observe([("r", 0, 1.0)], step=26) == []  # mean of .1 .2 1.0 < .5
    assert progress.observe([("r", 0, 1.0)], step=26) == []

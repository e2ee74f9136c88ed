"""Mixture specs, weights and rows; curriculum rules and their saved progress (no model)."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from trl_env import Curriculum, EnvSpec, Mixture, MixtureEnv
from trl_env.curriculum import Progress
from trl_env.errors import UsageError
from trl_env.mixture import as_mixture, config_mixture


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
    mixture = Mixture([EnvSpec(f"e{i}", weight=w) for i, w in enumerate(weights)])
    total = rng.randint(len(weights), 500)
    counts = mixture.counts(total)
    assert sum(counts.values()) == total
    for n, w in zip(counts.values(), weights, strict=True):
        assert n >= 1
        assert abs(n - total * w / sum(weights)) < 1 + 1e-9 or n == 1


def test_draw_gives_each_env_its_own_seeds_in_random_order():
    mixture = Mixture([EnvSpec("a", weight=3), EnvSpec("b")])
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
    Mixture([EnvSpec("a"), EnvSpec("a", name="a-hard", options={"k": 1})])
    with pytest.raises(UsageError, match="needs a name"):
        EnvSpec(dict)
    with pytest.raises(UsageError, match="without /"):
        EnvSpec("a", name="x/y")


def test_every_public_env_form_of_a_mixture_reads_as_one():
    def weights(env):
        return [(e.label, e.weight) for e in as_mixture(env)]

    assert MixtureEnv is EnvSpec  # the old name stays
    assert weights("guess") == [("guess", 1)]
    assert weights(EnvSpec("guess", weight=3)) == [("guess", 3)]
    assert weights({"guess": 1, "wordle": 2}) == [("guess", 1), ("wordle", 2)]
    assert weights(["guess", EnvSpec("wordle", weight=2)]) == [("guess", 1), ("wordle", 2)]
    mixture = Mixture(["a"])
    assert as_mixture(mixture) is mixture

    def count_env():
        raise AssertionError("not called: reading a mixture builds no env")

    assert weights(count_env) == [("count_env", 1)]  # a factory: one env, named by its name
    for wrong in ([object(), object()], [], 3):  # env instances, nothing, a number
        with pytest.raises(UsageError, match=f"not {type(wrong).__name__}"):
            as_mixture(wrong)


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"guess": "heavy"}, "must be numbers"),
        ({"guess": 0}, "positive"),
        ({1: 2}, "name: weight"),
        (["guess", "guess"], "twice"),
        ([EnvSpec("a"), "a b"], "without / or spaces"),
    ],
)
def test_a_bad_mixture_gets_one_sentence(env, words):
    with pytest.raises(UsageError, match=words):
        as_mixture(env)


def test_a_spec_from_a_config_entry_keeps_every_setting():
    entry = {
        "env": "guess",
        "name": "hard",
        "weight": 2.0,
        "options": {"high": 50},
        "processor_args": {"thinking": False},
        "max_turns": 3,
        "curriculum": {"stages": [{"high": 10}, {"high": 50}], "by": "step", "steps": [4]},
    }
    spec = EnvSpec.from_dict(entry)
    assert (spec.label, spec.weight, dict(spec.options)) == ("hard", 2.0, {"high": 50})
    assert (spec.processor_options, spec.max_turns) == ({"thinking": False}, 3)
    assert spec.curriculum == Curriculum.from_dict(entry["curriculum"], "guess")
    plain = config_mixture([], "guess", {"high": 5})
    assert [(e.label, dict(e.options)) for e in plain] == [("guess", {"high": 5})]
    assert config_mixture([entry], "ignored").labels == ["hard"]


def test_a_spec_factory_makes_fresh_envs_with_stage_options_over_its_own():
    class Tally:
        def __init__(self, start=0, step=1):
            self.start, self.step = start, step

    spec = EnvSpec(Tally, name="tally", options={"start": 5, "step": 2})
    make = spec.factory({"step": 3})
    first, second = make(), make()
    assert first is not second and (first.start, first.step) == (5, 3)
    assert EnvSpec(Tally, name="plain").factory() is Tally  # nothing to bind


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

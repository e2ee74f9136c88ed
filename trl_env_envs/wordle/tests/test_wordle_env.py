"""Wordle rules, word splits, episodes and conformance."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trl_env import load_env
from trl_env.testing.env_tests import EnvTests
from trl_env.testing.envs import check_hash_independent
from trl_env_wordle import WordleEnv, marks, read_guess
from trl_env_wordle.env import target_for
from trl_env_wordle.rules import Knowledge
from trl_env_wordle.words import all_words, split_of, targets


class TestWordleEnvKit(EnvTests):
    env = WordleEnv
    module = "trl_env_wordle"
    options = ({}, {"max_turns": 3, "strict": True}, {"reveal": 4})
    undemonstrable = ({"max_turns": 3, "strict": True},)  # some words need up to six guesses
    actions = ("crane", "SLOTH", "my guess: pious", "cloud", "xx", "abcdefg")
    bad_options = (
        ({"max_turns": 0}, ValueError),
        ({"max_turns": 2.5}, TypeError),
        ({"partial_credit": 0.8}, ValueError),
        ({"turn_cost": "0.1"}, TypeError),
        ({"strict": 1}, TypeError),
    )
    readme = Path(__file__).parents[1] / "README.md"
    readme_seed = "eval-5"
    readme_actions = ("Let me start with a common word.", "crane", "below", "hotel")

    def readme_reply(self, text: str, env: WordleEnv) -> str:
        return "env:   " + text.replace("\n", "\n       ")


# -- rules ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("guess", "target", "expected"),
    [
        ("crane", "crane", "GGGGG"),
        ("crane", "sloth", "_____"),
        ("eerie", "there", "Y_Y_G"),  # one spare e: the second guessed e is grey
        ("speed", "abide", "__Y_Y"),
        ("apple", "paper", "YYG_Y"),
        ("geese", "those", "___GG"),  # the only e of "those" is taken by the green
    ],
)
def test_marks(guess: str, target: str, expected: str) -> None:
    assert "".join(marks(guess, target)) == expected


def test_knowledge_collects_fixed_present_and_absent_letters() -> None:
    knowledge = Knowledge()
    knowledge.add("sloth", marks("sloth", "cloud"))
    knowledge.add("house", marks("house", "cloud"))
    assert knowledge.fixed == ["_", "l", "o", "_", "_"]
    assert knowledge.present == {"l", "o", "u"}
    assert knowledge.absent == {"s", "t", "h", "e"}
    assert knowledge.render() == "Known: _ L O _ _ | also in the word: U | not in the word: E H S T"


def test_a_grey_copy_of_a_present_letter_is_not_absent() -> None:
    knowledge = Knowledge()
    knowledge.add("eerie", marks("eerie", "there"))
    assert "e" not in knowledge.absent and knowledge.absent == {"i"}


@pytest.mark.parametrize(
    ("text", "word"),
    [
        ("crane", "crane"),
        ("CRANE", "crane"),
        ("  crane.\n", "crane"),
        ("my guess: crane", "crane"),
        ("I think CRANE is right", "crane"),
        ("guess slate", "slate"),
        ("first: audio, then crane", "crane"),
    ],
)
def test_read_guess_finds_the_word(text: str, word: str) -> None:
    assert read_guess(text) == (word, "")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "no word"),
        ("12345 !!", "no word"),
        ("cranes", "6 letters"),
        ("a" * 1000, "1000 letters"),
        ("I do not know", "no 5-letter word"),
    ],
)
def test_read_guess_explains_what_is_wrong(text: str, problem: str) -> None:
    word, why = read_guess(text)
    assert word is None and problem in why and len(why) < 100


# -- words ----------------------------------------------------------------------------------
def test_word_list_is_a_few_hundred_five_letter_words() -> None:
    words = all_words()
    assert len(words) >= 300
    assert all(len(w) == 5 and w.isascii() and w.isalpha() and w.islower() for w in words)


def test_train_and_eval_words_are_disjoint_and_cover_the_list() -> None:
    train, evals = set(targets("train")), set(targets("eval"))
    assert not train & evals and train | evals == set(all_words())
    assert 0.1 < len(evals) / len(all_words()) < 0.35
    assert all(split_of(w) == "eval" for w in evals)


def test_eval_seeds_visit_every_eval_word_once() -> None:
    env = WordleEnv()
    n = len(targets("eval"))
    assert sorted(target_for(s) for s in env.seeds("eval", n)) == sorted(targets("eval"))
    trained = {target_for(s) for s in env.seeds("train", 600)} | {target_for("any seed")}
    assert not trained & set(targets("eval"))


def test_targets_do_not_depend_on_hash_randomization() -> None:
    seeds = ["train-0", "eval-3", "other"]
    check_hash_independent("trl_env_wordle:WordleEnv", seeds, actions=["crane", "sloth"])


# -- episodes -------------------------------------------------------------------------------
def play(seed: str = "train-0", **options: object) -> WordleEnv:
    env = WordleEnv(**options)  # type: ignore[arg-type]
    env.reset(seed)
    return env


def test_solving_gives_full_reward_and_ends() -> None:
    env = play()
    wrong = next(w for w in targets("train") if not set(w) & set(env.target))
    reply = env.step(wrong)
    assert "_ _ _ _ _" in reply and env.alive and env.reward == 0.0
    reply = env.step(env.target.upper())
    assert "G G G G G" in reply and "Solved in 2 turns" in reply
    assert not env.alive and env.reward == 1.0


def test_partial_credit_uses_the_best_guess() -> None:
    env = play(partial_credit=0.4)
    target = env.target
    near = target[:3] + ("zz" if "z" not in target else "qq")  # three greens, two greys
    env.step(near)
    assert env.reward == pytest.approx(0.4 * 3 / 5)
    env.step("qqqqq" if "q" not in target else "zzzzz")
    assert env.reward == pytest.approx(0.4 * 3 / 5)  # a worse guess does not lower it


def test_turn_cost_lowers_the_solve_reward() -> None:
    env = play(turn_cost=0.1)
    env.step("?")
    env.step("zzzzz")
    env.step(env.target)
    assert env.reward == pytest.approx(0.7)


def test_invalid_reply_uses_a_turn_and_says_what_is_expected() -> None:
    env = play(max_turns=2)
    reply = env.step("I do not know")
    assert "5-letter" in reply and "1 turn left" in reply and env.turns == 1
    reply = env.step("xyz")
    assert "3 letters" in reply and f"The word was {env.target.upper()}" in reply
    assert not env.alive and env.reward == 0.0


def test_strict_mode_refuses_words_not_in_the_list() -> None:
    env = play(strict=True)
    assert "not in my word list" in env.step("zzzzz")
    assert "not in my word list" not in env.step(all_words()[0])


def test_after_the_end_nothing_changes() -> None:
    env = play(max_turns=1)
    env.step(env.target)
    assert "over (you found it)" in env.step("crane") and env.reward == 1.0 and not env.alive
    assert "reset" in WordleEnv().step("crane")


def test_entry_point_and_prompt() -> None:
    env = load_env("wordle", max_turns=4, strict=True)
    assert isinstance(env, WordleEnv) and env.strict and env.max_turns == 4
    assert "4 turns" in env.system_prompt and "G (right letter" in env.system_prompt


# -- success and curricula --------------------------------------------------------------------
def play_by_elimination(env: WordleEnv, seed: str) -> None:
    """Guess the first listed word that fits everything the env has said so far."""
    text = env.reset(seed)
    shown = re.search(r"Letters in place: ([A-Z_ ]+)\.", text)
    fixed = shown.group(1).lower().split() if shown else ["_"] * 5
    words = [w for w in all_words() if all(f in ("_", c) for f, c in zip(fixed, w, strict=True))]
    while env.alive:
        guess = words[0]
        reply = env.step(guess)
        observed = reply.splitlines()[2].split()  # the marks line, "G _ Y _ _"
        words = [w for w in words if marks(guess, w) == observed]


@pytest.mark.parametrize("seed", ["train-0", "train-5", "eval-2"])
def test_success_is_true_exactly_when_the_word_is_found(seed: str) -> None:
    env = WordleEnv(max_turns=2)
    env.reset(seed)
    assert env.success is False
    wrong = "zzzzz"
    env.step(wrong)
    assert env.alive and env.success is False
    env.step(env.target)  # the env's own answer
    assert env.success is True and env.reward == 1.0 and not env.alive

    env.reset(seed)
    env.step(wrong)
    env.step(wrong)
    assert not env.alive and env.success is False


# The easiest and the hardest settings the options accept, with the most and fewest turns.
EXTREMES = [{"reveal": 4, "max_turns": 100}, {"reveal": 0, "max_turns": 100}]


@pytest.mark.parametrize("options", EXTREMES, ids=lambda o: f"reveal{o['reveal']}")
def test_every_setting_a_curriculum_can_set_plays(options: dict) -> None:
    env = load_env("wordle", **options)
    for seed in ["train-0", "train-1", "train-2", "eval-0", "eval-1"]:
        play_by_elimination(env, seed)  # reads only what the env says
        assert env.success is True and env.reward == 1.0


def test_revealed_letters_are_the_words_and_depend_on_the_seed_only() -> None:
    shown = {}
    for seed in ["train-0", "train-1", "eval-3"]:
        env, again = WordleEnv(reveal=2), WordleEnv(reveal=2, max_turns=3)
        text = env.reset(seed)
        assert text == again.reset(seed).replace("3 turns", "6 turns")
        letters = re.search(r"Letters in place: ([A-Z_ ]+)\.", text).group(1).lower().split()
        assert sum(c != "_" for c in letters) == 2
        assert all(c in ("_", t) for c, t in zip(letters, env.target, strict=True))
        shown[seed] = letters
    assert len({tuple(v) for v in shown.values()}) > 1
    assert "Letters in place" not in WordleEnv().reset("train-0")


def test_fewest_turns_still_plays() -> None:
    env = load_env("wordle", max_turns=1, reveal=0)
    env.reset("eval-4")
    env.step("crane")
    assert not env.alive and env.success is (env.target == "crane")

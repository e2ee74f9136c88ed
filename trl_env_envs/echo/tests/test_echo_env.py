"""Rules, word splits, rendering and conformance of the echo environment."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from trl_env import load_env
from trl_env.testing.env_tests import EnvTests
from trl_env.testing.envs import check_hash_independent
from trl_env_echo import EchoEnv, judge
from trl_env_echo.env import Verdict, held_out, pool, words


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [
        ("fan", Verdict.EXACT),
        ("  Fan.\n", Verdict.EXACT),
        ('"FAN"', Verdict.EXACT),
        ("**fan**!", Verdict.EXACT),
        ("The word is fan", Verdict.CONTAINS),
        ("fan, fan", Verdict.CONTAINS),
        ("Fan-shaped", Verdict.CONTAINS),  # a hyphen ends a word
        ("fans", Verdict.WRONG),  # another word, not a copy
        ("infant", Verdict.WRONG),
        ("f a n", Verdict.WRONG),
        ("", Verdict.WRONG),
    ],
)
def test_judge_reads_the_word_alone_or_among_others(reply: str, verdict: Verdict) -> None:
    assert judge(reply, "fan") is verdict


def _play(env: EchoEnv, seed: str, reply: Callable[[str], str]) -> list[str]:
    env.reset(seed)
    return [env.step(reply(word)) for word in list(env.words)]


def test_reward_is_the_mean_turn_score() -> None:
    env = EchoEnv(max_turns=4, partial=0.25)
    env.reset("train-2")
    shown = list(env.words)
    env.step(shown[0])
    assert env.reward == pytest.approx(1 / 4) and env.alive
    among = f"I say {shown[1]} now"
    env.step(among)
    partial = 0.25 * len(shown[1]) / len(among)
    assert env.reward == pytest.approx((1 + partial) / 4)
    env.step("nothing")
    assert env.reward == pytest.approx((1 + partial) / 4)
    last = env.step(shown[3].upper())
    assert not env.alive and env.reward == pytest.approx((2 + partial) / 4)
    assert "2 of 4 copied exactly" in last and env.success is False


def test_a_shorter_reply_holding_the_word_scores_more() -> None:
    scores = []
    for reply in ("The word you showed me is: fan", "The word is fan", "fan fan"):
        env = EchoEnv(max_turns=1)
        env.reset("train-0")
        env.step(reply.replace("fan", env.words[0]))
        scores.append(env.reward)
    assert 0.0 < scores[0] < scores[1] < scores[2] < 0.5  # never as much as the word alone


def test_replies_show_the_next_word_and_name_a_missed_one() -> None:
    env = EchoEnv(max_turns=3)
    first = env.reset("eval-1")
    shown = list(env.words)
    assert first.endswith(shown[0])
    missed = env.step("no idea")
    assert f'"{shown[0]}"' in missed and missed.endswith(f"Next word: {shown[1]}")
    almost = env.step(f"the word {shown[1]}")
    assert "alone" in almost and almost.endswith(shown[2])


def test_success_needs_every_word_exactly() -> None:
    env = EchoEnv(max_turns=5)
    assert env.success is False  # before any episode
    _play(env, "train-7", lambda w: w)
    assert env.success is True and env.reward == 1.0
    assert "over" in env.step("again") and env.reward == 1.0  # the episode stays over
    env.reset("train-7")  # a new episode forgets the old one's outcome
    assert env.success is False and env.reward == 0.0


def test_eval_seeds_draw_only_held_out_words_and_train_seeds_never() -> None:
    held, rest = set(pool("eval")), set(pool("train"))
    assert held and rest and not held & rest and held | rest == set(words())
    assert held == {w for w in words() if held_out(w)}
    env = EchoEnv(max_turns=10)
    for i in range(40):
        env.reset(f"eval-{i}")
        assert set(env.words) <= held
        env.reset(f"train-{i}")
        assert set(env.words) <= rest
    env.reset("any other seed")
    assert set(env.words) <= rest


def test_more_turns_than_held_out_words_still_plays() -> None:
    env = EchoEnv(max_turns=100)
    replies = _play(env, "eval-0", lambda w: w)
    assert len(replies) == 100 and env.success and set(env.words) <= set(pool("eval"))


def test_step_before_reset_is_handled() -> None:
    env = EchoEnv()
    assert "reset" in env.step("fan") and not env.alive and env.reward == 0.0


class TestEchoKit(EnvTests):
    env = EchoEnv
    module = "trl_env_echo"
    options = ({}, {"max_turns": 1, "partial": 0.0}, {"max_turns": 12})
    actions = ("fan", "apple", "The word is tree", "Sure!", "moon.")
    bad_options = (
        ({"max_turns": 0}, ValueError),
        ({"max_turns": 101}, ValueError),
        ({"partial": 1.5}, ValueError),
        ({"partial": "half"}, TypeError),
        ({"max_turns": True}, TypeError),
    )
    # every kind of reply: the word among other text, a miss, the word with its case and a dot
    readme = Path(__file__).parents[1] / "README.md"
    readme_seed = "eval-3"
    readme_actions = ('Sure! The word is "world".', "hello", "Candy.")
    readme_solved = False

    def readme_reply(self, text: str, env: EchoEnv) -> str:
        return f"env:   {text}   [reward {env.reward:.3f}]"


def test_entry_point_loads_with_options() -> None:
    env = load_env("echo", max_turns=2, partial=0.0)
    assert isinstance(env, EchoEnv) and (env.max_turns, env.partial) == (2, 0.0)


def test_words_do_not_depend_on_hash_randomization() -> None:
    seeds = [f"train-{i}" for i in range(3)] + ["eval-0", "eval-1"]
    check_hash_independent("trl_env_echo:EchoEnv", seeds, actions=["fan", "tree"])

"""Values checked at the boundary: rewards are real finite numbers, ``alive`` a real bool, a
broken ``success`` costs nothing, text is measured as a real ``str``, and error messages are
repaired and cut like env text. The jobs alone, then whole batches in both isolation modes."""

from __future__ import annotations

import functools
import re
from decimal import Decimal
from fractions import Fraction
from typing import Any

import hostile_envs as H
import numpy as np
import pytest
from playing import play_tiny

from trl_env.boundary import (
    MAX_MESSAGE_CHARS,
    EnvHandle,
    clean_text,
    describe,
    real_number,
    reward_job,
    step_job,
)
from trl_env.errors import EnvMisbehaved

pytestmark = pytest.mark.timeout(180)


@pytest.mark.parametrize(
    ("value", "number"),
    [
        (1, 1.0),
        (0.25, 0.25),
        (Fraction(1, 4), 0.25),
        (Decimal("0.75"), 0.75),
        (np.float32(0.5), 0.5),
        (np.int64(3), 3.0),
        (np.array(2.0), 2.0),  # a 0-d array, by its item()
    ],
)
def test_real_numbers_are_rewards(value, number):
    assert real_number(value) == number


@pytest.mark.parametrize(
    "value",
    [
        "0.5",
        b"1",
        True,
        np.bool_(True),
        float("nan"),
        float("-inf"),
        np.float64("inf"),
        None,
        object(),
        [1.0],
        np.array([1.0, 2.0]),
    ],
)
def test_everything_else_is_not_a_reward(value):
    assert real_number(value) is None


def handle(env: Any) -> EnvHandle:
    return EnvHandle(env, "the test's env")


def stepped(env: H.Calm, seed: str = "bad-1") -> H.Calm:
    env.reset(seed)
    return env


def test_a_numeric_string_reward_is_refused_in_one_sentence():
    with pytest.raises(EnvMisbehaved, match=r"BadReward\.reward is not a finite number: '0\.5'"):
        reward_job(handle(stepped(H.BadReward(value="0.5"))))()


@pytest.mark.parametrize("value", ["false", "", 0, 1, None, np.array([True, False])])
def test_alive_must_be_a_bool(value):
    env = H.AliveIs(value=value)
    with pytest.raises(EnvMisbehaved, match=r"AliveIs\.alive is .*not a bool"):
        step_job(handle(stepped(env)), "word", 1000)()


@pytest.mark.parametrize(("value", "alive"), [(np.bool_(False), False), (np.bool_(True), True)])
def test_numpy_bools_are_welcome_as_alive(value, alive):
    _, got = step_job(handle(stepped(H.AliveIs(value=value))), "word", 1000)()
    assert got is alive


@pytest.mark.parametrize("kind", ["raise", "str"])
def test_a_broken_success_keeps_the_reward(kind):
    env = stepped(H.BadSuccess(kind=kind), "s1")
    env.step("a")
    assert reward_job(handle(env))() == (0.5, None)


def test_text_is_measured_on_a_real_str():
    lying = H.LyingStr("y" * 5000)
    assert len(lying) == 3
    text = clean_text(lying, 300)
    assert type(text.text) is str and len(text.text) == 300 and text.capped > 4700


def test_error_messages_are_repaired_and_cut():
    message = describe(H.OddError("surrogate"))
    message.encode("utf-8")  # no lone surrogate left
    assert message.startswith("OddError: broken \ufffd pipe") and len(message) <= MAX_MESSAGE_CHARS
    assert describe(H.OddError("unprintable")) == "OddError: (its message could not be read)"


MODES = ("thread", "process")


def play(stack: Any, env: Any, mode: str, **kw: Any):
    seeds = ["s0", "bad-1", "s2"]
    return play_tiny(stack, env, seeds, mode, seed=11, step_timeout=5.0, error_reward=-1.0, **kw)


@pytest.mark.parametrize("mode", MODES)
def test_alive_false_as_a_string_ends_that_episode(qwen3, no_leaks, mode):
    episodes = play(qwen3, functools.partial(H.AliveIs, value="false"), mode)
    assert [ep.status for ep in episodes] == ["done", "error", "done"]
    assert re.search(r"alive is str 'false', not a bool", episodes[1].error), episodes[1].error


@pytest.mark.parametrize("mode", MODES)
def test_a_numeric_string_reward_ends_that_episode(qwen3, no_leaks, mode):
    episodes = play(qwen3, functools.partial(H.BadReward, value="1.0"), mode)
    assert [ep.status for ep in episodes] == ["done", "error", "done"]
    assert episodes[1].reward == -1.0 and "not a finite number" in episodes[1].error


@pytest.mark.parametrize("mode", MODES)
def test_a_broken_success_does_not_cost_the_reward(qwen3, no_leaks, mode):
    episodes = play(qwen3, functools.partial(H.BadSuccess, kind="raise"), mode)
    assert [ep.status for ep in episodes] == ["done"] * 3
    assert [ep.reward for ep in episodes] == [1.0] * 3
    assert [ep.success for ep in episodes] == [None] * 3


@pytest.mark.parametrize("mode", MODES)
def test_a_reply_whose_len_lies_is_capped(qwen3, no_leaks, mode):
    episodes = play(qwen3, H.LyingReply, mode, max_env_chars=300)
    assert episodes[1].capped_chars > 2 * 4700 and "characters cut" in episodes[1].text
    assert [ep.capped_chars for i, ep in enumerate(episodes) if i != 1] == [0, 0]


@pytest.mark.parametrize("mode", MODES)
def test_an_error_message_with_a_lone_surrogate_is_repaired(qwen3, no_leaks, mode):
    episodes = play(qwen3, functools.partial(H.OddErrorStep, kind="surrogate"), mode)
    bad = episodes[1]
    assert bad.status == "error" and "broken \ufffd pipe" in bad.error
    bad.error.encode("utf-8")
    assert len(bad.error) <= MAX_MESSAGE_CHARS and "\n" not in bad.error


def test_an_exception_whose_str_raises_ends_only_its_episode(qwen3, no_leaks):
    episodes = play(qwen3, functools.partial(H.OddErrorStep, kind="unprintable"), "thread")
    assert [ep.status for ep in episodes] == ["done", "error", "done"]
    assert "OddError" in episodes[1].error

"""Rules, rendering and conformance of the guess environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from trl_env import load_env
from trl_env.testing.env_tests import EnvTests
from trl_env.testing.envs import check_hash_independent
from trl_env_guess import GuessEnv, parse_guess
from trl_env_guess.env import RANGE_LIMIT, target_for


class TestGuessEnvKit(EnvTests):
    env = GuessEnv
    module = "trl_env_guess"
    options = (
        {},
        {"low": 1, "high": 3, "max_turns": 2, "shaped": False},
        {"low": -RANGE_LIMIT, "high": RANGE_LIMIT, "max_turns": 50},
    )
    actions = ("50", "guess: 25", "I think 75", "1", "100", "higher?")
    bad_options = (
        ({"low": 5, "high": 4}, ValueError),
        ({"max_turns": 0}, ValueError),
        ({"low": "1"}, TypeError),
        ({"high": 2.5}, TypeError),
        ({"shaped": "yes"}, TypeError),
        ({"turn_cost": -0.1}, ValueError),
        ({"max_turns": True}, TypeError),
    )
    readme = Path(__file__).parents[1] / "README.md"
    readme_seed = "eval-3"
    readme_actions = ("Let me think.", "50", "I think 25", "12", "6", "I think 9", "I think 7")

    def readme_reply(self, text: str, env: GuessEnv) -> str:
        return f"env:   {text}   [reward {env.reward:.3f}]"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("50", 50),
        ("guess: 50", 50),
        ("I think 50", 50),
        ("  7\n", 7),
        ("-3", -3),
        ("between 10 and 20: 15", 10),
        ("0042", 42),
        ("no digits here", None),
        ("", None),
        ("٣", None),  # only ASCII digits count
    ],
)
def test_parse_guess_takes_first_integer(text: str, expected: int | None) -> None:
    assert parse_guess(text) == expected


def test_parse_guess_clamps_huge_numbers() -> None:
    assert parse_guess("9" * 10_000) == 10**18
    assert parse_guess("-" + "9" * 10_000) == -(10**18)


def test_target_is_in_range_and_depends_on_seed() -> None:
    targets = {target_for(f"train-{i}", 3, 9) for i in range(200)}
    assert targets == set(range(3, 10))
    assert target_for("s", 1, 1) == 1


def _play_to(env: GuessEnv, seed: str) -> int:
    env.reset(seed)
    return env.target


def test_higher_lower_replies_and_binary_search_solves() -> None:
    env = GuessEnv(low=1, high=100, max_turns=7)
    target = _play_to(env, "train-5")
    low, high = 1, 100
    while env.alive:
        guess = (low + high) // 2
        reply = env.step(f"guess: {guess}")
        if guess < target:
            assert "too low" in reply and "higher" in reply
            low = guess + 1
        elif guess > target:
            assert "too high" in reply and "lower" in reply
            high = guess - 1
        else:
            assert "correct" in reply
    assert env.solved and env.reward == 1.0
    assert env.turns <= 7


def test_out_of_range_and_no_number_replies() -> None:
    env = GuessEnv(low=10, high=20)
    env.reset("train-0")
    assert "outside 10 to 20" in env.step("500") and "lower" in env.step("500")
    reply = env.step("no idea")
    assert "no number" in reply and "between 10 and 20" in reply
    assert "outside" in env.step("9" * 6000) and "9999" not in env.step("9" * 6000)


def test_shaped_reward_rises_with_closeness() -> None:
    env = GuessEnv(low=1, high=101, max_turns=10)
    target = _play_to(env, "train-3")
    far = 1 if target > 51 else 101
    env.step(str(far))
    r_far = env.reward
    env.step(str(target - 1 if target > 1 else target + 1))
    r_near = env.reward
    assert 0.0 < r_far < r_near < 0.3  # closeness is worth 0.3 at most
    env.step("no number")
    assert env.reward == r_near  # a reply without a number adds nothing
    env.step(str(far))
    assert env.reward == r_near  # the best guess so far counts
    assert env.closeness() == pytest.approx(1 - 1 / 100)


def test_sparse_reward_only_for_solving() -> None:
    env = GuessEnv(shaped=False)
    target = _play_to(env, "eval-1")
    env.step(str(target + 1 if target < 100 else target - 1))
    assert env.reward == 0.0
    env.step(str(target))
    assert env.reward == 1.0 and not env.alive


def test_turn_cost_lowers_reward_per_turn() -> None:
    env = GuessEnv(turn_cost=0.05)
    target = _play_to(env, "train-9")
    env.step("nothing")
    env.step(str(target))
    assert env.reward == pytest.approx(1.0 - 2 * 0.05)


def test_out_of_turns_reveals_number_and_ends() -> None:
    env = GuessEnv(low=1, high=100, max_turns=2)
    target = _play_to(env, "train-1")
    wrong = 1 if target != 1 else 2
    assert env.step(str(wrong)).endswith("1 turn left.")
    reply = env.step(str(wrong))
    assert f"the number was {target}" in reply and not env.alive
    final = env.reward
    assert "over" in env.step(str(target)) and env.reward == final and not env.alive


def test_step_before_reset_is_handled() -> None:
    env = GuessEnv()
    assert "reset" in env.step("50") and not env.alive and env.reward == 0.0


def test_entry_point_loads_with_cli_options() -> None:
    env = load_env("guess", low=0, high=3, shaped=False)
    assert isinstance(env, GuessEnv) and (env.low, env.high, env.shaped) == (0, 3, False)


def test_system_prompt_states_range_and_format() -> None:
    prompt = GuessEnv(low=5, high=15, max_turns=4).system_prompt
    assert "between 5 and 15" in prompt and "4 turns" in prompt and "10" in prompt


def test_targets_do_not_depend_on_hash_randomization() -> None:
    seeds = [f"train-{i}" for i in range(5)]
    check_hash_independent("trl_env_guess:GuessEnv", seeds, actions=["50", "25", "75"])


def _binary_search(env: GuessEnv, seed: str) -> None:
    """Play ``seed`` with a binary search over the env's range, reading only its replies."""
    env.reset(seed)
    low, high = env.low, env.high
    while env.alive:
        guess = (low + high) // 2
        reply = env.step(str(guess))
        if "higher" in reply:
            low = guess + 1
        elif "lower" in reply:
            high = guess - 1


@pytest.mark.parametrize("seed", ["train-0", "train-1", "eval-0", "eval-7"])
def test_success_is_true_exactly_when_the_number_is_found(seed: str) -> None:
    env = GuessEnv(max_turns=7)
    env.reset(seed)
    assert env.success is False  # not yet
    _binary_search(env, seed)
    assert env.success is True and env.reward == 1.0

    miss = GuessEnv(max_turns=3)
    miss.reset(seed)
    wrong = miss.low if miss.target != miss.low else miss.high
    while miss.alive:
        miss.step(str(wrong))
    assert miss.success is False and miss.closeness() < 1.0
    miss.reset(seed)  # a new episode forgets the old one's outcome
    assert miss.success is False


# The easiest range (one possible number) and the hardest the options accept.
EXTREMES = [(1, 1), (-RANGE_LIMIT, RANGE_LIMIT)]


@pytest.mark.parametrize(("low", "high"), EXTREMES)
def test_every_range_a_curriculum_can_set_plays(low: int, high: int) -> None:
    # 2 * RANGE_LIMIT + 1 numbers need at most 21 halvings.
    env = load_env("guess", low=low, high=high, max_turns=21)
    for seed in ["train-0", "train-3", "eval-1", "eval-9"]:
        _binary_search(env, seed)
        assert low <= env.target <= high
        assert env.success is True and env.turns <= 21
    wider = {"low": -RANGE_LIMIT - 1} if low < 0 else {"high": RANGE_LIMIT + 1}
    with pytest.raises(ValueError, match="from -1000000 to 1000000"):
        GuessEnv(**wider)


def test_options_declare_their_bounds() -> None:
    for name in ("low", "high", "max_turns"):
        option = GuessEnv.options_declared[name]
        assert option.min is not None and option.max is not None, name

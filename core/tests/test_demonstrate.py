"""The ``demonstrate`` extra: how it is read, and the env kit's check of it."""

from __future__ import annotations

from typing import Any

import pytest

from trl_env import extras
from trl_env.envkit import EnvKit
from trl_env.testing.envs import EnvCheckError, check_demonstrations


class Pick(EnvKit):
    """Say the seed's number; a wrong one ends the episode."""

    env_name = "pick"
    answer_shift = 0  # a wrong demonstration when not 0

    def reset(self, seed: str) -> str:
        self.number = self.seed_int(seed) % 10
        self.alive, self.reward, self.won = True, 0.0, False
        return "Say the number."

    def step(self, action: str) -> str:
        self.won = action == str(self.number)
        self.alive, self.reward = False, 1.0 if self.won else 0.0
        return "Right." if self.won else "Wrong."

    @property
    def success(self) -> bool:
        return self.won

    def demonstrate(self, seed: str) -> Any:
        return [str(self.seed_int(seed) % 10 + self.answer_shift)]


def test_a_winning_demonstration_passes_the_kit() -> None:
    assert check_demonstrations(Pick, ["train-0", "train-1", "eval-0"], best=1.0) == 3


def test_an_env_without_demonstrate_is_not_checked() -> None:
    class Plain(Pick):
        demonstrate = None  # type: ignore[assignment]

    assert extras.demonstrate(Plain(), "train-0") is None
    assert check_demonstrations(Plain, ["train-0"]) == 0


@pytest.mark.parametrize(
    ("shift", "returned", "message"),
    [
        (1, None, "success is False"),
        (0, [], "returned no actions"),
        (0, ["1", "2"], "ended after 1 of its actions"),
    ],
)
def test_the_kit_refuses_a_demonstration_that_does_not_win(
    shift: int, returned: list[str] | None, message: str
) -> None:
    class Bad(Pick):
        answer_shift = shift

        def demonstrate(self, seed: str) -> Any:
            return returned if returned is not None else super().demonstrate(seed)

    with pytest.raises(EnvCheckError, match=message):
        check_demonstrations(Bad, ["train-0"])


def test_a_reward_below_the_best_is_refused() -> None:
    class Half(Pick):
        def step(self, action: str) -> str:
            text = super().step(action)
            self.reward /= 2
            return text

    with pytest.raises(EnvCheckError, match="not the best"):
        check_demonstrations(Half, ["train-0"], best=1.0)


@pytest.mark.parametrize(("value", "shown"), [("12", "str"), ([1], "int")])
def test_a_demonstration_that_is_not_a_list_of_strings_is_one_sentence(
    value: object, shown: str
) -> None:
    class Odd(Pick):
        def demonstrate(self, seed: str) -> Any:
            return value

    with pytest.raises(ValueError, match=shown):
        extras.demonstrate(Odd(), "train-0")


def test_list_says_whether_an_env_demonstrates() -> None:
    from click.testing import CliRunner

    from trl_env.cli.main import cli
    from trl_env.registry import register_env

    class Plain(Pick):
        demonstrate = None  # type: ignore[assignment]

    register_env("demo-pick", Pick)
    register_env("demo-plain", Plain)
    said = CliRunner().invoke(cli, ["list", "--env", "demo-pick"])
    assert said.exit_code == 0, said.output
    assert "demo-pick demonstrates" in said.output
    plain = CliRunner().invoke(cli, ["list", "--env", "demo-plain"]).output
    assert "demo-plain gives no demonstrations" in plain

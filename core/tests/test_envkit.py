"""The env kit (trl_env.envkit): options declared once, validated in one sentence, listed."""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import subprocess
import sys

import pytest

from trl_env import Env
from trl_env.envkit import (
    EnvKit,
    Option,
    OptionError,
    OptionSpec,
    OptionTypeError,
    option_specs,
    stable_int,
)
from trl_env.testing.envs import check_env, check_light_import


class Maze(EnvKit):
    """A corridor of ``length`` cells; reach the end within ``max_turns`` steps."""

    env_name = "maze"
    prompt_template = "Walk right {length} times within {max_turns} turns."
    length = Option(5, "cells in the corridor", min=2, max=50)
    max_turns = Option(10, "steps per episode", min=1)
    style = Option("ascii", "how the corridor is drawn", choices=("ascii", "unicode"))
    slip = Option(0.0, "chance a step goes nowhere", min=0.0, above=None, max=0.5)
    hints = Option(True, "say how far the end is")
    limit = Option(None, "optional cap on the reward", type=float, above=0.0)

    def __init__(self, **options: object) -> None:
        super().__init__(**options)
        self.position = 0
        self.turns = 0

    def reset(self, seed: str) -> str:
        self.position, self.turns, self.alive, self.reward = 0, 0, True, 0.0
        return f"Corridor of {self.length} cells; start {self.rng(seed).randint(0, 9)}."

    def step(self, action: str) -> str:
        if not self.alive:
            return "Over."
        self.turns += 1
        if isinstance(action, str) and action.strip() == "right":
            self.position += 1
        if self.position >= self.length - 1:
            self.alive, self.reward = False, 1.0
            return "Out!"
        if self.turns >= self.max_turns:
            self.alive = False
            return "Out of turns."
        return f"{self.length - 1 - self.position} to go." if self.hints else "Go on."


def test_options_take_defaults_and_given_values() -> None:
    env = Maze(length=7, slip=0, limit=2)
    assert (env.length, env.max_turns, env.style, env.hints) == (7, 10, "ascii", True)
    assert env.slip == 0.0 and isinstance(env.slip, float) and env.limit == 2.0
    assert env.options == {
        "length": 7,
        "max_turns": 10,
        "style": "ascii",
        "slip": 0.0,
        "hints": True,
        "limit": 2.0,
    }
    assert Maze().limit is None and isinstance(Maze(), Env)
    assert str(inspect.signature(Maze)) == (
        "(*, length=5, max_turns=10, style='ascii', slip=0.0, hints=True, limit=None)"
    )


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"length": "7"}, OptionTypeError, "Option length of maze must be an integer from 2 to 50, "
         "not '7'."),
        ({"length": 7.0}, OptionTypeError, "must be an integer from 2 to 50, not 7.0."),
        ({"length": True}, OptionTypeError, "must be an integer from 2 to 50, not True."),
        ({"length": 51}, OptionError, "must be an integer from 2 to 50, not 51."),
        ({"max_turns": 0}, OptionError, "Option max_turns of maze must be an integer of at least "
         "1, not 0."),
        ({"style": "fancy"}, OptionError, "must be one of ascii, unicode, not 'fancy'."),
        ({"style": "Unicod"}, OptionError, "must be one of ascii, unicode, not 'Unicod' (did you "
         "mean unicode?)."),
        ({"slip": float("nan")}, OptionError, "must be a number from 0 to 0.5, not nan."),
        ({"hints": 1}, OptionTypeError, "Option hints of maze must be true or false, not 1."),
        ({"limit": 0}, OptionError, "must be a number above 0 (or none), not 0.0."),
        ({"lenght": 3}, OptionTypeError, "maze has no option 'lenght' (did you mean length?); its "
         "options are length, max_turns, style, slip, hints, limit."),
    ],
)  # fmt: skip
def test_bad_values_get_one_sentence(options: dict, error: type, message: str) -> None:
    with pytest.raises(error) as caught:
        Maze(**options)
    assert str(caught.value).endswith(message)
    # Callers may catch the built-in kinds, and the CLI prints a TrlEnvError without a traceback.
    assert isinstance(caught.value, ValueError)


GAMES = ("Pong", "Sudoku", "TowerOfHanoi", "Wordle", "Mastermind", "Minesweeper", "Hangman")


class Arcade(EnvKit):
    """A kit of many games, as TextArena's and reasoning-gym's are."""

    env_name = "arcade"
    game = Option("Pong-v0", "the game", choices=[f"{g}-v{v}" for g in GAMES for v in (0, 1)])

    def reset(self, seed: str) -> str:
        return self.game

    def step(self, action: str) -> str:
        return ""


def test_a_value_of_many_choices_gets_the_close_one_and_where_the_list_is() -> None:
    """Before: every accepted value, 1,200 characters for TextArena's games, and no match."""
    with pytest.raises(OptionError) as caught:
        Arcade(game="towerofhanoi")
    assert str(caught.value) == (
        "Option game of arcade takes no 'towerofhanoi' (did you mean TowerOfHanoi-v0?); its "
        f"{2 * len(GAMES)} values: trl-env list --env arcade."
    )
    with pytest.raises(OptionError) as caught:
        Arcade(game="Chess")
    assert str(caught.value) == (
        f"Option game of arcade takes no 'Chess'; its {2 * len(GAMES)} values: trl-env list "
        "--env arcade."
    )


def test_specs_are_what_the_cli_renders() -> None:
    specs = option_specs(Maze)
    assert specs[2] == OptionSpec(
        "style",
        "str",
        "ascii",
        "how the corridor is drawn",
        ("ascii", "unicode"),
        "one of ascii, unicode",
    )
    assert [(s.name, s.type, s.default) for s in specs] == [
        ("length", "int", 5),
        ("max_turns", "int", 10),
        ("style", "str", "ascii"),
        ("slip", "float", 0.0),
        ("hints", "bool", True),
        ("limit", "float | None", None),
    ]

    def factory() -> Maze:
        return Maze()

    class Plain:
        def __init__(self, size: int = 3) -> None:
            self.size = size

    assert option_specs(factory) == [] and option_specs(Plain) == [] and option_specs(Maze()) == []


def test_subclasses_inherit_and_redeclare_options() -> None:
    class LongMaze(Maze):
        length = Option(20, "cells in the corridor", min=2, max=50)
        max_turns = 40  # no longer an option: a constant of this env

    assert [s.name for s in option_specs(LongMaze)] == ["length", "style", "slip", "hints", "limit"]
    assert LongMaze().length == 20 and LongMaze().max_turns == 40
    with pytest.raises(OptionError, match="has no option 'max_turns'"):
        LongMaze(max_turns=3)


def test_a_bad_declaration_fails_when_the_class_is_made() -> None:
    with pytest.raises(
        OptionError, match="Option size of Broken must be an integer of at least 1, not 0"
    ):

        class Broken(EnvKit):
            size = Option(0, "cells", min=1)

    with pytest.raises(TypeError, match="must be bool, int, float or str"):
        Option([1], "a list")  # type: ignore[arg-type]


def test_splits_prompt_and_refuse() -> None:
    env = Maze(length=3)
    assert env.seeds("train", 3) == ["train-0", "train-1", "train-2"]
    assert not set(env.seeds("train", 50)) & set(env.seeds("eval", 50))
    assert (env.split_of("eval-4"), env.split_of("train-0"), env.split_of("other")) == (
        "eval",
        "train",
        None,
    )
    with pytest.raises(ValueError, match="split must be one of"):
        env.seeds("test", 3)
    assert env.system_prompt == "Walk right 3 times within 10 turns."
    env.system_prompt = "Fixed."
    assert env.system_prompt == "Fixed."
    with pytest.raises(OptionError, match=r"^Option length of maze must be odd, not 4\.$"):
        raise Maze(length=4).refuse("length", "odd")


def test_seeding_is_stable_across_processes() -> None:
    digest = hashlib.sha256(b"maze:train-3").digest()
    assert stable_int("maze:train-3") == int.from_bytes(digest[:8], "big")
    script = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); from test_envkit import Maze\n"
        "env = Maze()\n"
        "print(json.dumps([env.seed_int('train-3'), env.reset('train-3')]))\n"
    )
    outs = []
    for hash_seed in ("1", "2"):
        proc = subprocess.run(
            [sys.executable, "-c", script, os.path.dirname(__file__)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            check=True,
        )
        outs.append(json.loads(proc.stdout))
    env = Maze()
    assert outs[0] == outs[1] == [env.seed_int("train-3"), env.reset("train-3")]
    assert env.seed_int("train-3") == stable_int("maze:train-3")


def test_a_kit_env_passes_the_conformance_kit() -> None:
    check_env(Maze, actions=["right", "left"], reward_range=(0.0, 1.0), episodes=4, examples=5)


def test_the_kit_is_light() -> None:
    check_light_import("trl_env.envkit")

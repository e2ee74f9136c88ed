"""The conformance kit (trl_env.testing.envs) passes a good env and catches broken ones.

It lives here because the guess env is the smallest real env to test it against.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trl_env.envkit import OptionError
from trl_env.testing.envs import (
    EnvCheckError,
    check_env,
    check_hash_independent,
    check_light_import,
    check_options,
    check_reset,
    check_seeds,
)
from trl_env_guess import GuessEnv


class _Broken(GuessEnv):
    """GuessEnv with one rule broken per subclass."""


class NeverEnds(_Broken):
    def step(self, action: str) -> str:
        reply = super().step(action)
        self.alive, self.solved = True, False
        return reply


class RaisesOnUnicode(_Broken):
    def step(self, action: str) -> str:
        action.encode("ascii")
        return super().step(action)


class RaisesOnEmpty(_Broken):
    def step(self, action: str) -> str:
        if not action:
            raise ValueError("empty")
        return super().step(action)


class ResurrectsAfterEnd(_Broken):
    def step(self, action: str) -> str:
        if not self.alive:
            self.alive = True
            return "again"
        return super().step(action)


class NanReward(_Broken):
    def step(self, action: str) -> str:
        reply = super().step(action)
        self.reward = float("nan")
        return reply


class RandomReset(_Broken):
    counter = 0

    def reset(self, seed: str) -> str:
        RandomReset.counter += 1
        return f"{super().reset(seed)} ({RandomReset.counter})"


class OverlappingSeeds(_Broken):
    def seeds(self, split: str, count: int) -> list[str]:
        return [f"s-{i}" for i in range(count)]


class RewardAboveOne(_Broken):
    def step(self, action: str) -> str:
        reply = super().step(action)
        self.reward += 2.0
        return reply


ACTIONS = ["50", "25", "75"]


def test_good_env_passes() -> None:
    check_env(GuessEnv, actions=ACTIONS, reward_range=(0.0, 1.0), episodes=5, examples=10)


@pytest.mark.parametrize(
    ("env_class", "message"),
    [
        (NeverEnds, "still alive"),
        (RaisesOnUnicode, "raised UnicodeEncodeError"),
        (RaisesOnEmpty, "raised ValueError"),
        (ResurrectsAfterEnd, "alive again"),
        (NanReward, "finite"),
        (RandomReset, "different text"),
        (OverlappingSeeds, "overlap"),
        (RewardAboveOne, "outside"),
    ],
)
def test_broken_env_is_caught(env_class: type[GuessEnv], message: str) -> None:
    with pytest.raises(EnvCheckError, match=message):
        check_env(env_class, actions=ACTIONS, reward_range=(0.0, 1.0), episodes=5, examples=10)


def test_seed_and_reset_checks_return_and_name_the_seed() -> None:
    seeds = check_seeds(GuessEnv, count=4)
    assert seeds["train"] == [f"train-{i}" for i in range(4)]
    assert seeds["eval"] == [f"eval-{i}" for i in range(4)]
    with pytest.raises(EnvCheckError, match="'x'"):
        check_reset(RandomReset, ["x"])


def test_hash_dependence_is_caught(tmp_path, monkeypatch) -> None:
    (tmp_path / "hashy_env.py").write_text(
        "from trl_env_guess import GuessEnv\n"
        "class HashyEnv(GuessEnv):\n"
        "    def reset(self, seed):\n"
        "        return super().reset(seed) + str(hash(seed))\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    with pytest.raises(EnvCheckError, match="PYTHONHASHSEED"):
        check_hash_independent("hashy_env:HashyEnv", ["a"])


def test_heavy_import_is_caught(tmp_path, monkeypatch) -> None:
    (tmp_path / "heavy_env.py").write_text("import json\nimport email.mime.text\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    check_light_import("heavy_env", forbidden=("torch",))
    with pytest.raises(EnvCheckError, match="also imports email"):
        check_light_import("heavy_env", forbidden=("email",))


# -- env-kit options -------------------------------------------------------------------------
class SwallowsBadOptions(GuessEnv):
    """Falls back to defaults instead of refusing a bad value: the kit must notice."""

    def __init__(self, **options: object) -> None:
        try:
            super().__init__(**options)
        except OptionError:
            super().__init__()


class VagueRefusal(GuessEnv):
    def __init__(self, **options: object) -> None:
        try:
            super().__init__(**options)
        except OptionError:
            raise OptionError("Bad option.") from None


class WrongDefault(GuessEnv):
    """Declares high=100 but plays 1..50."""

    def __init__(self, **options: object) -> None:
        super().__init__(**options)
        self.__dict__["high"] = 50


def test_kit_options_are_checked() -> None:
    specs = check_options(GuessEnv)
    assert [s.name for s in specs] == ["low", "high", "max_turns", "shaped", "turn_cost"]
    assert check_options(lambda: GuessEnv()) == []  # a plain factory declares nothing


@pytest.mark.parametrize(
    ("env_class", "message"),
    [
        (SwallowsBadOptions, "option low accepted"),
        (VagueRefusal, "the message must name it"),
        (WrongDefault, "option high defaults to 100, but the env holds 50"),
    ],
)
def test_broken_option_handling_is_caught(env_class: type[GuessEnv], message: str) -> None:
    with pytest.raises(EnvCheckError, match=message):
        check_env(env_class, actions=ACTIONS, episodes=2, examples=2)


ENV_PACKAGES = ("guess", "sokoban", "wordle", "calculator", "python", "textworld")


@pytest.mark.parametrize("name", ENV_PACKAGES)
def test_packaged_envs_declare_their_options_once(name: str) -> None:
    """Each env is a kit class: its options are checked, and its README's table lists them."""
    from trl_env.envkit import option_specs
    from trl_env.registry import envs

    factory = envs.factory(name)  # the registered object itself: the env class
    specs = check_options(factory)
    assert specs == option_specs(factory) and specs
    readme = (Path(__file__).parents[1] / "trl_env_envs" / name / "README.md").read_text()
    rows = {}
    for line in readme.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) >= 3:
            names = re.findall(r"`(\w+)`", cells[0])
            defaults = [d.strip('`"') for d in cells[1].split("/")]
            if len(defaults) == 1:
                defaults *= len(names)
            rows.update(zip(names, defaults, strict=True))
    for spec in specs:
        assert spec.name in rows, f"{name}'s README does not list option {spec.name}"
        shown = str(spec.default).lower() if isinstance(spec.default, bool) else str(spec.default)
        assert rows[spec.name] == shown, f"{name}'s README gives {spec.name} another default"

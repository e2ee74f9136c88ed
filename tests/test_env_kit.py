"""The conformance kit (trl_env.testing.envs) passes a good env and catches broken ones.

It lives here because the guess env is the smallest real env to test it against.
"""

from __future__ import annotations

import pytest

from trl_env.testing.envs import (
    EnvCheckError,
    check_env,
    check_hash_independent,
    check_light_import,
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
